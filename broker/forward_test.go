package broker

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// deadLettersTo forwards dead-lettered messages to target.
func deadLettersTo(target string) projection.Config {
	cfg := projection.DefaultConfig()
	cfg.ForwardDeadLetteredMessagesTo = target
	return cfg
}

// deadLetterOne sends one message to e and dead-letters it through a
// receiver.
func deadLetterOne(t *testing.T, e *Entity, body string) {
	t.Helper()
	deadLetterMessage(t, e, projection.Message{Body: []byte(body), MessageID: body})
}

// deadLetterMessage sends m to e and dead-letters it through a receiver,
// with reason "poison".
func deadLetterMessage(t *testing.T, e *Entity, m projection.Message) {
	t.Helper()
	sendSync(t, e, m)
	deadLetterHead(t, e)
}

// deadLetterHead receives the message at the head of e's queue and
// dead-letters it with reason "poison".
func deadLetterHead(t *testing.T, e *Entity) {
	t.Helper()
	got := make(chan Delivery, 1)
	r, err := e.Attach(ReceiverOptions{Name: "r", Deliver: func(d Delivery) { got <- d }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Detach(nil)
	r.SetLimit(1)
	settleSync(t, e, nextDelivery(t, got), Settlement{Outcome: projection.DeadLetter, Reason: "poison"})
}

func waitCounts(t *testing.T, e *Entity, queue uint32, want func(projection.Counts) bool) projection.Counts {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := e.Counts(queue)
		if err == nil && want(c) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s queue %d: counts %+v (%v)", e.Name(), queue, c, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The target's fsync fails after it wrote a forwarded message: the source
// hears of a failure although the record is in the target's log, where it
// is found when the target recovers. The source forwards the message again
// and the target drops the repeat: the message arrives exactly once.
func TestForwardExactlyOnceAcrossAFailure(t *testing.T) {
	var armed atomic.Bool
	b := openBroker(t, Options{Dir: t.TempDir(),
		Fault: func(entity, op string) error {
			if entity == "dst" && op == "sync" && armed.CompareAndSwap(true, false) {
				return errors.New("injected fsync failure")
			}
			return nil
		},
	})
	defer b.Close()
	dst, src := forwardingPair(t, b)
	armed.Store(true)
	deadLetterOne(t, src, "m1")

	waitCounts(t, src, event.DeadLetterQueue, func(c projection.Counts) bool { return c.Total == 0 })
	if armed.Load() {
		t.Fatal("the injected failure never happened")
	}
	deadLetterOne(t, src, "m2") // and forwarding carries on after the recovery
	waitCounts(t, src, event.DeadLetterQueue, func(c projection.Counts) bool { return c.Total == 0 })
	if err := dst.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := dst.Peek(event.MainQueue, 0, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range got {
		ids = append(ids, d.MessageID)
		if len(d.Overlays) != 1 || d.Overlays[0].Type != event.Forwarded || d.Overlays[0].Source != "src" || d.Overlays[0].Reason != "poison" {
			t.Fatalf("forwarded message %s: overlays %+v", d.MessageID, d.Overlays)
		}
	}
	if fmt.Sprint(ids) != "[m1 m2]" {
		t.Fatalf("the target holds %v, want each message once", ids)
	}
}

// A broker stopped with a forward under way resumes it when it starts: a
// dead-letter forward, and a send-via's transfer.
func TestForwardResumesAfterRestart(t *testing.T) {
	for _, c := range []struct {
		name string
		// start begins moving one message from "src" to "dst" and says
		// from which queue of src.
		start func(t *testing.T, b *Broker) uint32
	}{
		{"dead-letter forward", func(t *testing.T, b *Broker) uint32 {
			src, err := b.CreateQueue("src", deadLettersTo("dst"))
			if err != nil {
				t.Fatal(err)
			}
			deadLetterOne(t, src, "m1")
			return event.DeadLetterQueue
		}},
		{"send-via", func(t *testing.T, b *Broker) uint32 {
			src, err := b.CreateQueue("src", projection.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			src.SendVia("dst", []projection.Message{{MessageID: "m1", Body: []byte("1")}}, func(err error) { done <- err })
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			return event.TransferQueue
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			var block atomic.Bool
			b := openBroker(t, Options{Dir: dir, Fault: func(entity, op string) error {
				if entity == "dst" && op == "write" && block.Load() {
					return errors.New("target unavailable")
				}
				return nil
			}})
			if _, err := b.CreateQueue("dst", projection.DefaultConfig()); err != nil {
				t.Fatal(err)
			}
			block.Store(true) // the target fails every write: the message stays put
			queue := c.start(t, b)
			src, _ := b.Entity("src")
			time.Sleep(50 * time.Millisecond)
			if n, _ := src.Counts(queue); n.Total != 1 {
				t.Fatalf("source queue %d holds %+v while the target is failing", queue, n)
			}
			b.Close()

			b = openBroker(t, Options{Dir: dir})
			defer b.Close()
			src, _ = b.Entity("src")
			dst, _ := b.Entity("dst")
			waitCounts(t, src, queue, func(c projection.Counts) bool { return c.Total == 0 })
			waitCounts(t, dst, event.MainQueue, func(c projection.Counts) bool { return c.Total == 1 })
		})
	}
}

// Forwarding settings that cannot work are refused: a missing target,
// the entity itself, a chain that comes back, a chain too long.
func TestForwardingValidated(t *testing.T) {
	b := openBroker(t, Options{Dir: t.TempDir()})
	defer b.Close()
	to := forwardTo
	for _, c := range []struct {
		name string
		cfg  projection.Config
	}{{"a", to("missing")}, {"a", to("a")}, {"a", deadLettersTo("missing")}} {
		if _, err := b.CreateQueue(c.name, c.cfg); !errors.Is(err, ErrForwarding) {
			t.Fatalf("create %s with %+v: %v", c.name, c.cfg, err)
		}
	}
	// q1 <- q2 <- q3 <- q4 <- q5: four hops are fine, a fifth is not.
	if _, err := b.CreateQueue("q1", projection.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 5; i++ {
		if _, err := b.CreateQueue(fmt.Sprint("q", i), to(fmt.Sprint("q", i-1))); err != nil {
			t.Fatalf("q%d: %v", i, err)
		}
	}
	if _, err := b.CreateQueue("q6", to("q5")); !errors.Is(err, ErrForwarding) {
		t.Fatalf("a five-hop chain: %v", err)
	}
	if err := b.UpdateQueue("q1", to("q4")); !errors.Is(err, ErrForwarding) {
		t.Fatalf("a cycle: %v", err)
	}
}

// A dead-lettered message is forwarded (ForwardDeadLetteredMessagesTo)
// only once its dead-lettering is durable: here that write is held (a slow
// disk) and then fails, the client is told the dead-letter failed, and the
// recovered source has the message in its queue again, so the target must
// not have it too.
func TestDeadLetterForwardWaitsForDurability(t *testing.T) {
	var armed atomic.Bool
	var dstReady atomic.Pointer[Entity]
	b := openBroker(t, Options{Dir: t.TempDir(),
		Fault: func(entity, op string) error {
			if entity != "src" || op != "write" || !armed.CompareAndSwap(true, false) {
				return nil
			}
			// Hold the source's write of the DeadLettered record a while (a
			// slow disk), then fail it; a forward that does not wait for it
			// shows up in dst meanwhile.
			deadline := time.Now().Add(time.Second)
			for time.Now().Before(deadline) {
				if d := dstReady.Load(); d != nil {
					if c, err := d.Counts(event.MainQueue); err == nil && c.Total > 0 {
						break
					}
				}
				time.Sleep(5 * time.Millisecond)
			}
			return errors.New("injected write failure")
		},
	})
	defer b.Close()
	dst, err := b.CreateQueue("dst", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	dstReady.Store(dst)
	src, err := b.CreateQueue("src", deadLettersTo("dst"))
	if err != nil {
		t.Fatal(err)
	}
	sendSync(t, src, projection.Message{Body: []byte("m1"), MessageID: "m1"})
	got := make(chan Delivery, 1)
	r, err := src.Attach(ReceiverOptions{Name: "r", Deliver: func(d Delivery) { got <- d }})
	if err != nil {
		t.Fatal(err)
	}
	r.SetLimit(1)
	d := <-got
	armed.Store(true)
	done := make(chan error, 1)
	src.Settle(event.MainQueue, Settlement{Token: d.Token, Outcome: projection.DeadLetter, Reason: "poison"}, func(err error) { done <- err })
	settleErr := <-done
	if settleErr == nil {
		t.Fatal("the dead-letter succeeded despite the failed write")
	}
	// The source recovers by itself (it reopens and replays).
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := src.Sync(); err == nil {
			if ds, err := src.Peek(event.MainQueue, 1, 10, ""); err == nil && len(ds) > 0 && ds[0].MessageID == "m1" {
				break
			}
		}
		if time.Now().After(deadline) {
			c, _ := src.Counts(event.MainQueue)
			cdl, _ := src.Counts(event.DeadLetterQueue)
			cd, _ := dst.Counts(event.MainQueue)
			t.Fatalf("source did not recover with its message: %+v dlq %+v dst %+v sync %v", c, cdl, cd, src.Sync())
		}
		time.Sleep(20 * time.Millisecond)
	}
	dst.Sync()
	cd, _ := dst.Counts(event.MainQueue)
	if cd.Total != 0 {
		t.Fatalf("the dead-letter failed (client told %q) and m1 is back in src's queue, yet dst received it by dead-letter forwarding (dst holds %d)", settleErr, cd.Total)
	}
}

// The hop limit holds for every chain through the entity whose forwarding
// changes, not only the one starting there: q5 -> q4 -> q3 -> q2 -> q1 is
// four hops, and then q1 -> q0 would make it five.
func TestForwardingHopsCountedFromEveryStart(t *testing.T) {
	b := openBroker(t, Options{Dir: t.TempDir()})
	defer b.Close()
	for _, name := range []string{"q0", "q1"} {
		if _, err := b.CreateQueue(name, projection.DefaultConfig()); err != nil {
			t.Fatal(err)
		}
	}
	for i := 2; i <= 5; i++ {
		if _, err := b.CreateQueue(fmt.Sprint("q", i), forwardTo(fmt.Sprint("q", i-1))); err != nil {
			t.Fatal(err)
		}
	}
	err := b.UpdateQueue("q1", forwardTo("q0"))
	if !errors.Is(err, ErrForwarding) || !strings.Contains(err.Error(), "q5") {
		t.Fatalf("q1 -> q0 making q5's chain five hops: %v", err)
	}
	// One hop shorter is fine, and a send follows it to the end.
	if err := b.UpdateQueue("q5", projection.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	if err := b.UpdateQueue("q1", forwardTo("q0")); err != nil {
		t.Fatal(err)
	}
	q4, _ := b.Entity("q4")
	q0, _ := b.Entity("q0")
	sendSync(t, q4, projection.Message{Body: []byte("x"), MessageID: "m"})
	if c, _ := q0.Counts(event.MainQueue); c.Total != 1 {
		t.Fatalf("q0 holds %d messages after a send to q4, want 1", c.Total)
	}
}

// Each entity a message passes through accepts it first, so a source's
// smaller maximum message size refuses what its target would take.
func TestForwardToKeepsSourceMaxMessageSize(t *testing.T) {
	b := openBroker(t, Options{Dir: t.TempDir()})
	defer b.Close()
	dst, err := b.CreateQueue("dst", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := forwardTo("dst")
	cfg.MaxMessageSize = 100
	src, err := b.CreateQueue("src", cfg)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan error, 1)
	src.Send(event.MainQueue, []projection.Message{{Body: make([]byte, 1000)}}, func(err error) { ch <- err })
	if err := <-ch; !errors.Is(err, projection.ErrMessageTooLarge) {
		t.Fatalf("a 1000-byte send to src (limit 100 bytes): %v", err)
	}
	src.Schedule(event.MainQueue, []projection.Message{{Body: make([]byte, 1000)}}, func(_ []uint64, err error) { ch <- err })
	if err := <-ch; !errors.Is(err, projection.ErrMessageTooLarge) {
		t.Fatalf("a 1000-byte schedule through src: %v", err)
	}
	sendSync(t, src, projection.Message{Body: make([]byte, 100)})
	if c, _ := dst.Counts(event.MainQueue); c.Total != 1 {
		t.Fatalf("dst holds %d messages, want the one within the limit", c.Total)
	}
}

// forwardTo forwards every message sent to target.
func forwardTo(target string) projection.Config {
	cfg := projection.DefaultConfig()
	cfg.ForwardTo = target
	return cfg
}

// A session queue whose stored config names a ForwardTo (written before
// checkForwarding refused that, or by hand) opens, and keeps what is sent
// to it: Service Bus has no forwarding from a session queue.
func TestStoredSessionQueueForwardToIgnored(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, Options{Dir: dir})
	if _, err := b.CreateQueue("dst", projection.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	cfg := projection.DefaultConfig()
	cfg.RequiresSession = true
	sess, err := b.CreateQueue("sess", cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ForwardTo = "dst"
	if err := b.UpdateQueue("sess", cfg); !errors.Is(err, ErrForwarding) {
		t.Fatalf("UpdateQueue to a forwarding session queue: %v, want ErrForwarding", err)
	}
	// Past the broker's check, as an old data directory would have it.
	if err := sess.configure(cfg); err != nil {
		t.Fatal(err)
	}
	b.Close()

	b = openBroker(t, Options{Dir: dir})
	defer b.Close()
	sess, err = b.Entity("sess")
	if err != nil {
		t.Fatal(err)
	}
	dst, err := b.Entity("dst")
	if err != nil {
		t.Fatal(err)
	}
	if got := sess.cfg.Load().ForwardTo; got != "dst" {
		t.Fatalf("stored ForwardTo %q, want the one written past the check", got)
	}
	sendSync(t, sess, projection.Message{Body: []byte("m"), SessionID: "s1"})
	if c, _ := sess.Counts(event.MainQueue); c.Total != 1 {
		t.Fatalf("sess holds %d messages, want the one sent to it", c.Total)
	}
	if c, _ := dst.Counts(event.MainQueue); c.Total != 0 {
		t.Fatalf("dst holds %d messages, want none forwarded from a session queue", c.Total)
	}
}
