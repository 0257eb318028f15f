package broker

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/projection"
)

func forwardingTo(target string) projection.Config {
	cfg := projection.DefaultConfig()
	cfg.ForwardDeadLetteredMessagesTo = target
	return cfg
}

// deadLetterOne sends one message to e and dead-letters it through a
// receiver.
func deadLetterOne(t *testing.T, e *Entity, body string) {
	t.Helper()
	sendSync(t, e, projection.Message{Body: []byte(body), MessageID: body})
	got := make(chan Delivery, 1)
	r, err := e.Attach(ReceiverOptions{Name: "r", Deliver: func(d Delivery) { got <- d }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Detach(nil)
	r.SetLimit(1)
	d := <-got
	done := make(chan error, 1)
	e.Settle(log.MainQueue, Settlement{Token: d.Token, Outcome: projection.DeadLetter, Reason: "poison"}, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
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
	dst, err := b.CreateQueue("dst", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	src, err := b.CreateQueue("src", forwardingTo("dst"))
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	deadLetterOne(t, src, "m1")

	waitCounts(t, src, log.DeadLetterQueue, func(c projection.Counts) bool { return c.Total == 0 })
	if armed.Load() {
		t.Fatal("the injected failure never happened")
	}
	deadLetterOne(t, src, "m2") // and forwarding carries on after the recovery
	waitCounts(t, src, log.DeadLetterQueue, func(c projection.Counts) bool { return c.Total == 0 })
	if err := dst.Sync(); err != nil {
		t.Fatal(err)
	}
	got, err := dst.Peek(log.MainQueue, 0, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range got {
		ids = append(ids, d.MessageID)
		if len(d.Overlays) != 1 || d.Overlays[0].Type != log.Forwarded || d.Overlays[0].Source != "src" || d.Overlays[0].Reason != "poison" {
			t.Fatalf("forwarded message %s: overlays %+v", d.MessageID, d.Overlays)
		}
	}
	if fmt.Sprint(ids) != "[m1 m2]" {
		t.Fatalf("the target holds %v, want each message once", ids)
	}
}

// A broker stopped with a forward under way resumes it when it starts.
func TestForwardResumesAfterRestart(t *testing.T) {
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
	src, err := b.CreateQueue("src", forwardingTo("dst"))
	if err != nil {
		t.Fatal(err)
	}
	block.Store(true) // the target fails every write: the message stays put
	deadLetterOne(t, src, "m1")
	time.Sleep(50 * time.Millisecond)
	if c, _ := src.Counts(log.DeadLetterQueue); c.Total != 1 {
		t.Fatalf("source dead-letter queue %+v while the target is failing", c)
	}
	b.Close()

	b = openBroker(t, Options{Dir: dir})
	defer b.Close()
	src, _ = b.Entity("src")
	dst, _ := b.Entity("dst")
	waitCounts(t, src, log.DeadLetterQueue, func(c projection.Counts) bool { return c.Total == 0 })
	waitCounts(t, dst, log.MainQueue, func(c projection.Counts) bool { return c.Total == 1 })
}

// Forwarding settings that cannot work are refused: a missing target,
// the entity itself, a chain that comes back, a chain too long.
func TestForwardingValidated(t *testing.T) {
	b := openBroker(t, Options{Dir: t.TempDir()})
	defer b.Close()
	to := func(name string) projection.Config {
		cfg := projection.DefaultConfig()
		cfg.ForwardTo = name
		return cfg
	}
	for _, c := range []struct {
		name string
		cfg  projection.Config
	}{{"a", to("missing")}, {"a", to("a")}, {"a", forwardingTo("missing")}} {
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
