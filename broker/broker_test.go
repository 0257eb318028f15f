package broker

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

func openBroker(t *testing.T, opts Options) *Broker {
	t.Helper()
	b, _, err := Open(opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return b
}

// settleSync settles d with s (its token filled in) and waits for the
// outcome to be durable.
func settleSync(t *testing.T, e *Entity, d Delivery, s Settlement) {
	t.Helper()
	s.Token = d.Token
	ch := make(chan error, 1)
	e.Settle(d.Queue, s, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		t.Fatalf("settle %d: %v", d.Seq, err)
	}
}

// nextDelivery waits for the next delivery on ch.
func nextDelivery(t *testing.T, ch <-chan Delivery) Delivery {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery")
		return Delivery{}
	}
}

// takeOne receives one message from queue q of e in receive-and-delete
// mode and detaches, leaving the delivery to be handed back or not.
func takeOne(t *testing.T, e *Entity, q uint32) Delivery {
	t.Helper()
	got := make(chan Delivery, 1)
	rd, err := e.Attach(ReceiverOptions{Name: "rd", Queue: q, Mode: ReceiveAndDelete, Deliver: func(d Delivery) { got <- d }})
	if err != nil {
		t.Fatal(err)
	}
	rd.SetLimit(1)
	d := nextDelivery(t, got)
	rd.Detach(nil)
	return d
}

// restoreSync hands d back to e (its link closed before it left) and
// waits for the restore to be durable.
func restoreSync(t *testing.T, e *Entity, d Delivery) {
	t.Helper()
	done := make(chan error, 1)
	e.Restore([]Delivery{d}, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatalf("restore %d: %v", d.Seq, err)
	}
}

func sendSync(t *testing.T, e *Entity, msgs ...projection.Message) {
	t.Helper()
	ch := make(chan error, 1)
	e.Send(event.MainQueue, msgs, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		t.Fatalf("send: %v", err)
	}
}

// Concurrent senders and receivers: every message is delivered and
// completed exactly once, with the race detector watching.
func TestConcurrentSendReceiveComplete(t *testing.T) {
	b := openBroker(t, Options{Dir: t.TempDir()})
	defer b.Close()
	e, err := b.CreateQueue("work", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	const senders, perSender, receivers = 4, 300, 3
	total := senders * perSender

	var mu sync.Mutex
	completed := map[string]int{}
	done := make(chan struct{})
	for i := range receivers {
		var r *Receiver
		deliveries := make(chan Delivery, 1024)
		r, err := e.Attach(ReceiverOptions{Name: fmt.Sprint("r", i), Deliver: func(d Delivery) { deliveries <- d }})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			limit := uint64(50)
			r.SetLimit(limit)
			for {
				select {
				case d := <-deliveries:
					ch := make(chan error, 1)
					e.Settle(event.MainQueue, Settlement{Token: d.Token, Outcome: projection.Complete}, func(err error) { ch <- err })
					if err := <-ch; err != nil {
						t.Errorf("complete %d: %v", d.Seq, err)
					}
					limit++
					r.SetLimit(limit)
					mu.Lock()
					completed[d.MessageID]++
					if len(completed) == total {
						close(done)
					}
					mu.Unlock()
				case <-done:
					return
				}
			}
		}()
	}
	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perSender {
				ch := make(chan error, 1)
				e.Send(event.MainQueue, []projection.Message{{MessageID: fmt.Sprintf("%d-%d", s, i), Body: []byte("x")}},
					func(err error) { ch <- err })
				if err := <-ch; err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("only %d of %d completed", len(completed), total)
	}
	for id, n := range completed {
		if n != 1 {
			t.Errorf("%s completed %d times", id, n)
		}
	}
	c, _ := e.Counts(event.MainQueue)
	if c.Total != 0 {
		t.Fatalf("left over: %+v", c)
	}
}

// A backlog larger than the record cache is delivered from the log, in
// order and byte for byte, with the properties an abandon added.
func TestBacklogReadFromTheLog(t *testing.T) {
	b := openBroker(t, Options{Dir: t.TempDir(), SegmentSize: 64 << 10, CacheBytes: 1})
	defer b.Close()
	e, err := b.CreateQueue("backlog", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	const n = 600
	bodyOf := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 200+i%300) }
	for i := range n {
		sendSync(t, e, projection.Message{MessageID: fmt.Sprint(i), Body: bodyOf(i)})
	}
	deliveries := make(chan Delivery, n)
	r, err := e.Attach(ReceiverOptions{Name: "r", Deliver: func(d Delivery) { deliveries <- d }})
	if err != nil {
		t.Fatal(err)
	}
	settle := func(d Delivery, s Settlement) { t.Helper(); settleSync(t, e, d, s) }
	next := func() Delivery { t.Helper(); return nextDelivery(t, deliveries) }
	r.SetLimit(n + 1)
	props := []byte{0xc1, 0x01, 0x00} // an empty AMQP map: the broker keeps it as it is
	for i := range n {
		d := next()
		if d.MessageID != fmt.Sprint(i) || !bytes.Equal(d.Message, bodyOf(i)) {
			t.Fatalf("delivery %d: message %s, %d bytes", i, d.MessageID, len(d.Message))
		}
		if i == n/2 {
			settle(d, Settlement{Outcome: projection.Abandon, Props: props})
			continue
		}
		settle(d, Settlement{Outcome: projection.Complete})
	}
	d := next() // the abandoned one, again
	if d.MessageID != fmt.Sprint(n/2) || !bytes.Equal(d.Message, bodyOf(n/2)) ||
		len(d.Overlays) != 1 || !bytes.Equal(d.Overlays[0].Props, props) {
		t.Fatalf("redelivery: message %s, overlays %+v", d.MessageID, d.Overlays)
	}
}

// Once snapshots cover them, segments holding only settled messages are
// truncated, so disk use follows the live backlog; a deferred message pins
// the front until it is settled.
func TestLogFollowsBacklog(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, Options{Dir: dir, SegmentSize: 8 << 10, SnapshotEvery: 200})
	e, err := b.CreateQueue("q", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	deliveries := make(chan Delivery, 4096)
	r, _ := e.Attach(ReceiverOptions{Name: "r", Deliver: func(d Delivery) { deliveries <- d }})
	r.SetLimit(1 << 40)
	settle := func(d Delivery, o projection.Outcome) { t.Helper(); settleSync(t, e, d, Settlement{Outcome: o}) }
	round := func(n int, firstOutcome projection.Outcome) {
		for i := range n {
			sendSync(t, e, projection.Message{Body: make([]byte, 200), MessageID: fmt.Sprint(i)})
			d := <-deliveries
			o := projection.Complete
			if i == 0 {
				o = firstOutcome
			}
			settle(d, o)
		}
	}
	round(2000, projection.Defer) // the first message is deferred: it pins the log
	e.Sync()
	pinned := e.Bytes()
	first := e.log.FirstIndex()
	if first > 2 {
		t.Fatalf("log truncated past a deferred message: first index %d", first)
	}
	if pinned < 300_000 {
		t.Fatalf("expected the pinned log to keep everything, %d bytes", pinned)
	}

	// Settle the deferred message: now everything before the live backlog
	// is dead and goes at the next snapshots.
	ch := make(chan []Delivery, 1)
	e.ReceiveDeferred(event.MainQueue, "mgmt", "", []uint64{2}, PeekLock, func(ds []Delivery, err error) {
		if err != nil {
			t.Error(err)
		}
		ch <- ds
	})
	settle((<-ch)[0], projection.Complete)
	round(600, projection.Complete)
	e.Sync()
	// Snapshots are written in the background; wait for the truncation.
	deadline := time.Now().Add(10 * time.Second)
	for e.Bytes() > pinned/4 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		e.Sync()
	}
	if e.Bytes() > pinned/4 {
		t.Fatalf("log still %d bytes (was %d) with an empty queue", e.Bytes(), pinned)
	}

	// The truncated log plus snapshots recovers.
	sendSync(t, e, projection.Message{Body: []byte("after"), MessageID: "after"})
	b.Close()
	b = openBroker(t, Options{Dir: dir, SegmentSize: 8 << 10, SnapshotEvery: 200})
	defer b.Close()
	e, _ = b.Entity("q")
	ds, err := e.Peek(event.MainQueue, 1, 10, "")
	if err != nil || len(ds) != 1 || string(ds[0].Message) != "after" {
		t.Fatalf("after recovery: %v %v", ds, err)
	}
}

func TestEntityLifecycle(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, Options{Dir: dir})
	if _, err := b.CreateQueue("Orders", projection.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateQueue("orders", projection.DefaultConfig()); !errors.Is(err, ErrEntityExists) {
		t.Fatalf("second create: %v", err)
	}
	for _, bad := range []string{"", "-x", "a b", "x/", "a//b", "$x"} {
		if _, err := b.CreateQueue(bad, projection.DefaultConfig()); !errors.Is(err, ErrBadName) {
			t.Errorf("name %q accepted: %v", bad, err)
		}
	}
	e, err := b.Entity("ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	sendSync(t, e, projection.Message{Body: []byte("1")})
	cfg := projection.DefaultConfig()
	cfg.MaxDeliveryCount = 3
	if err := b.UpdateQueue("orders", cfg); err != nil {
		t.Fatal(err)
	}
	cfg.RequiresSession = true
	if err := b.UpdateQueue("orders", cfg); !errors.Is(err, projection.ErrNotAllowed) {
		t.Fatalf("enabling sessions after creation: %v", err)
	}
	if _, err := b.CreateQueue("gone", projection.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteEntity("gone"); err != nil {
		t.Fatal(err)
	}
	b.Close()

	// Everything, including the update and the deletion, is in the
	// namespace log.
	b = openBroker(t, Options{Dir: dir})
	defer b.Close()
	if _, err := b.Entity("gone"); !errors.Is(err, ErrEntityNotFound) {
		t.Fatalf("deleted entity back: %v", err)
	}
	e, err = b.Entity("orders")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := e.Config(); got.MaxDeliveryCount != 3 {
		t.Fatalf("config after restart: %+v", got)
	}
	if c, _ := e.Counts(event.MainQueue); c.Total != 1 {
		t.Fatalf("counts after restart: %+v", c)
	}
	if names := b.Entities(); len(names) != 1 || names[0].Name() != "Orders" {
		t.Fatalf("entities: %v", names)
	}
}

// Two brokers never share a data directory: the second is refused with the
// first one's pid, and the directory is free again once the first closes.
func TestDataDirectoryIsLocked(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, Options{Dir: dir})
	_, _, err := Open(Options{Dir: dir})
	if !errors.Is(err, log.ErrLocked) || !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Fatalf("second broker on %s: %v", dir, err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, Options{Dir: dir})
	b.Close()
}

// On start the broker removes the directory of an entity the namespace no
// longer lists (a crash between recording the deletion and removing the
// files), and nothing else it finds under entities/.
func TestOrphanedEntityFilesRemoved(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, Options{Dir: dir})
	if _, err := b.CreateQueue("kept", projection.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	b.Close()
	orphan := layout.EntityDir(dir, 999)
	stray := filepath.Join(layout.EntitiesDir(dir), "999")
	for _, d := range []string{layout.LogDir(orphan), stray} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	b = openBroker(t, Options{Dir: dir})
	defer b.Close()
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphaned entity directory: %v, want it removed", err)
	}
	if _, err := os.Stat(stray); err != nil {
		t.Errorf("a directory the broker did not make was touched: %v", err)
	}
	if _, err := b.Entity("kept"); err != nil {
		t.Errorf("the live queue: %v", err)
	}
}

// Deliveries of durable messages cost no fsync of their own: their lock
// events ride on the next fsync someone waits for (here the completion's),
// which makes them durable too.
func TestDeliveriesRideOnTheNextFsync(t *testing.T) {
	var mu sync.Mutex
	var fsyncs, records int
	b := openBroker(t, Options{Dir: t.TempDir(), SyncInterval: time.Hour,
		OnCommit: func(entity string, s log.CommitStats) {
			mu.Lock()
			defer mu.Unlock()
			if entity != "q" {
				return
			}
			records += s.Records
			if s.Synced && s.Sync > 0 {
				fsyncs++
			}
		}})
	defer b.Close()
	count := func() int { mu.Lock(); defer mu.Unlock(); return fsyncs }
	e, err := b.CreateQueue("q", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		sendSync(t, e, projection.Message{MessageID: fmt.Sprint(i), Body: []byte("x")})
	}
	// A send is acknowledged before its commit is reported: wait for the
	// reports of every record so far.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		all := uint64(records) >= e.log.LastIndex()-e.log.FirstIndex()+1
		mu.Unlock()
		if all {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("commits of the sends never reported")
		}
	}
	before := count()
	deliveries := make(chan Delivery, 20)
	r, err := e.Attach(ReceiverOptions{Name: "r", Deliver: func(d Delivery) { deliveries <- d }})
	if err != nil {
		t.Fatal(err)
	}
	var got []Delivery
	for len(got) < 20 {
		r.SetLimit(uint64(len(got) + 1)) // one delivery, and one lock group, at a time
		select {
		case d := <-deliveries:
			got = append(got, d)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 20 delivered", len(got))
		}
	}
	if n := count() - before; n != 0 {
		t.Fatalf("20 deliveries cost %d fsyncs", n)
	}
	locked := e.log.LastIndex()
	if e.log.DurableIndex() >= locked {
		t.Fatalf("the lock events are durable (%d of %d) without an fsync", e.log.DurableIndex(), locked)
	}
	settleSync(t, e, got[0], Settlement{Outcome: projection.Complete})
	for deadline := time.Now().Add(10 * time.Second); count() == before && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // the commit is reported after the acknowledgement
	}
	if n := count() - before; n != 1 || e.log.DurableIndex() <= locked {
		t.Fatalf("the completion cost %d fsyncs and left durable at %d (locks up to %d)", n, e.log.DurableIndex(), locked)
	}
}

// A commit's done waits for both its durability and its apply, in either
// order, and reports the log's result: whoever done wakes sees the state
// the events made (TestForwardingValidated reads configs right after).
func TestCommitDoneAfterDurableAndApplied(t *testing.T) {
	for _, durableFirst := range []bool{true, false} {
		var calls []error
		w := &afterApply{done: func(err error) { calls = append(calls, err) }}
		w.left.Store(2)
		logErr := errors.New("fsync failed")
		if durableFirst {
			w.finish(logErr)
		} else {
			w.finish(nil) // applied
		}
		if len(calls) != 0 {
			t.Fatalf("durable first %v: done ran after one of the two", durableFirst)
		}
		if durableFirst {
			w.finish(nil)
		} else {
			w.finish(logErr)
		}
		if len(calls) != 1 || calls[0] != logErr {
			t.Fatalf("durable first %v: done ran %d times with %v", durableFirst, len(calls), calls)
		}
	}
}

// TestFirstDeliveryWait: OnFirstDelivery gets each message's time in the
// queue (from its due time if it was scheduled) at its first delivery
// only; redeliveries and the dead-letter queue are not counted.
func TestFirstDeliveryWait(t *testing.T) {
	clock := NewFakeClock(scriptEpoch)
	var mu sync.Mutex
	var waits []time.Duration
	b := openBroker(t, Options{Dir: t.TempDir(), Clock: clock, OnFirstDelivery: func(entity string, wait time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if entity != "q" {
			t.Errorf("wait reported for entity %q", entity)
		}
		waits = append(waits, wait)
	}})
	defer b.Close()
	e, err := b.CreateQueue("q", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	deliveries := make(chan Delivery, 4)
	attach := func(queue uint32) *Receiver {
		r, err := e.Attach(ReceiverOptions{Queue: queue, Name: fmt.Sprint(queue), Deliver: func(d Delivery) { deliveries <- d }})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	next := func() Delivery { t.Helper(); return nextDelivery(t, deliveries) }
	settle := func(d Delivery, outcome projection.Outcome) {
		t.Helper()
		settleSync(t, e, d, Settlement{Outcome: outcome, Reason: "r"})
	}
	recorded := func(want ...time.Duration) {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(waits, want) {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}

	sendSync(t, e, projection.Message{MessageID: "a", Body: []byte("a")})
	clock.Advance(3 * time.Second)
	r := attach(event.MainQueue)
	r.SetLimit(1)
	settle(next(), projection.Abandon)
	r.SetLimit(2)
	settle(next(), projection.Complete) // the redelivery adds nothing
	recorded(3 * time.Second)

	// Scheduled at +3 s for +10 s and received at +12 s: it waited 2 s.
	scheduled := make(chan error, 1)
	e.Schedule(event.MainQueue, []projection.Message{{MessageID: "s", Body: []byte("s"),
		ScheduledAt: scriptEpoch.Add(10 * time.Second).UnixNano()}}, func(_ []uint64, err error) { scheduled <- err })
	if err := <-scheduled; err != nil {
		t.Fatal(err)
	}
	clock.Advance(7 * time.Second) // due: the timer tells the actor
	if err := e.Sync(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	r.SetLimit(3)
	settle(next(), projection.DeadLetter)
	recorded(3*time.Second, 2*time.Second)

	// Its receive from the dead-letter queue is not a wait in a queue.
	attach(event.DeadLetterQueue).SetLimit(1)
	if d := next(); d.Queue != event.DeadLetterQueue {
		t.Fatalf("delivery from queue %d", d.Queue)
	}
	recorded(3*time.Second, 2*time.Second)
}

// peekIDs is the MessageIds of the first 100 messages of e's queue, in order.
func peekIDs(t *testing.T, e *Entity, queue uint32) []string {
	t.Helper()
	ds, err := e.Peek(queue, 1, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range ds {
		ids = append(ids, d.MessageID)
	}
	return ids
}

// forwardingPair creates dst and src, whose dead-lettered messages go to dst.
func forwardingPair(t *testing.T, b *Broker) (dst, src *Entity) {
	t.Helper()
	dst, err := b.CreateQueue("dst", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	src, err = b.CreateQueue("src", deadLettersTo("dst"))
	if err != nil {
		t.Fatal(err)
	}
	return dst, src
}
