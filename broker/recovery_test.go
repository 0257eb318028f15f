package broker

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

func sessionConfig() projection.Config {
	cfg := projection.DefaultConfig()
	cfg.RequiresSession = true
	return cfg
}

// An accept-next-session waiting with a deadline is answered when the
// entity fails, also while its recovery keeps failing (here the snapshot
// directory cannot be read, as on a failing device): no timer runs while
// the entity is failed, so before it waited until a recovery succeeded.
func TestSessionWaiterAnsweredWhileFailed(t *testing.T) {
	var full atomic.Bool
	b := openBroker(t, Options{Dir: t.TempDir(), IdleCheckpoint: -1, Fault: func(entity, op string) error {
		if entity == "q" && full.Load() {
			return errors.New("injected: device failing")
		}
		return nil
	}})
	defer b.Close()
	e, err := b.CreateQueue("q", sessionConfig())
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.Attach(ReceiverOptions{Name: "r", Sessions: true, Deliver: func(Delivery) {}})
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	r.AcceptSession("", 300*time.Millisecond, func(_ SessionLock, err error) { answered <- err })
	if err := e.Sync(); err != nil { // the waiter is queued
		t.Fatal(err)
	}
	// The device fails: writes, and (for the reopen) reads of the entity's
	// snapshot directory.
	snaps := layout.SnapshotDir(e.dir)
	if err := os.RemoveAll(snaps); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(snaps, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	// A scheduled message makes no session available, so the waiter is
	// still waiting when the entity fails.
	sent := make(chan error, 1)
	e.Send(event.MainQueue, []projection.Message{{Body: []byte("x"), SessionID: "s", ScheduledAt: time.Now().Add(time.Hour).UnixNano()}},
		func(err error) { sent <- err })
	if err := <-sent; err == nil {
		t.Fatal("send succeeded on a failing device")
	}
	select {
	case err := <-answered:
		if err == nil {
			t.Fatal("the waiter was given a session by a failed entity")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an accept-next-session with a 300 ms wait is still unanswered 5 s later: the entity failed, its recovery keeps failing, and the waiter is neither timed out nor told")
	}
}

// Entity.Bytes (admin's /metrics calls it from HTTP goroutines) while the
// actor's recovery replaces the entity's log: no data race (run with -race).
func TestBytesDuringRecovery(t *testing.T) {
	e, arm := queueFailingOnce(t, "write")
	arm()
	sent := make(chan error, 1)
	e.Send(event.MainQueue, []projection.Message{{Body: []byte("x")}}, func(err error) { sent <- err })
	if err := <-sent; err == nil {
		t.Fatal("send succeeded despite the injected failure")
	}
	// A metrics scraper, meanwhile.
	stop := make(chan struct{})
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = e.Bytes()
			time.Sleep(100 * time.Microsecond)
		}
	}()
	sendUntilRecovered(t, e) // the recovery replaces the log meanwhile
	close(stop)
	<-scraped
}

// A receive-and-delete whose fsync fails: the receiver is not given the
// message (its removal is not durable), and the recovery cuts the log back
// to what was durable, so the message is still there. Replaying the
// written but refused ReceivedAndDeleted removed it, never delivered.
func TestReceiveAndDeleteKeptOnFsyncFailure(t *testing.T) {
	e, arm := queueFailingOnce(t, "sync")
	sendSync(t, e, projection.Message{Body: []byte("m"), MessageID: "m"}) // acknowledged: durable
	got := make(chan Delivery, 1)
	lost := make(chan error, 1)
	r, err := e.Attach(ReceiverOptions{Name: "r", Mode: ReceiveAndDelete,
		Deliver: func(d Delivery) { got <- d }, Lost: func(err error) { lost <- err }})
	if err != nil {
		t.Fatal(err)
	}
	arm()
	r.SetLimit(1)
	select {
	case <-lost:
	case d := <-got:
		t.Fatalf("delivered %d although its removal failed", d.Seq)
	case <-time.After(5 * time.Second):
		t.Fatal("the receiver was neither served nor told")
	}
	sendUntilRecovered(t, e)
	if ids := peekIDs(t, e, event.MainQueue); len(ids) != 2 {
		t.Fatalf("after recovery the queue holds %v: message m, acknowledged, was never delivered (its receive-and-delete failed) and is gone", ids)
	}
}

// Each answer of the dead-letter forwarder finishes only its own send: an
// answer for an earlier one (a recovery starts the message on its way
// again, so two can be in flight) must not complete the message on its
// way now before it has reached the target. Before, the first answer
// completed whatever the forwarder held at that moment, and a message
// whose own forward then failed was gone from both queues.
func TestForwardIgnoresAStaleAnswer(t *testing.T) {
	var hold atomic.Bool
	gate, blocked := make(chan struct{}), make(chan struct{}, 1)
	b := openBroker(t, Options{Dir: t.TempDir(), IdleCheckpoint: -1, Fault: func(entity, op string) error {
		if entity == "dst" && op == "write" && hold.CompareAndSwap(true, false) {
			blocked <- struct{}{}
			<-gate // a slow disk
		}
		return nil
	}})
	defer b.Close()
	dst, src := forwardingPair(t, b)
	hold.Store(true)
	deadLetterOne(t, src, "y")
	<-blocked // y's forward is on its way
	answered := make(chan struct{})
	src.post(func(e *Entity) { e.forwarded(event.DeadLetterQueue, e.fwd.gen-1, nil); close(answered) })
	<-answered
	if c, _ := src.Counts(event.DeadLetterQueue); c.Total != 1 {
		close(gate)
		t.Fatalf("an answer for another send completed y at the source before y reached the target (dead-letter queue %+v)", c)
	}
	close(gate)
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, _ := src.Counts(event.DeadLetterQueue)
		d, _ := dst.Counts(event.MainQueue)
		if s.Total == 0 && d.Total == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("y not forwarded: source dead-letter queue %+v, target %+v", s, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// CreateQueue records the entity in the namespace log first; when the new
// entity's own log then fails (openEntity: configure), the refused create
// leaves no entity: a retry creates one, a delete removes it, and after a
// restart it stays deleted (with the refused one's record left, the
// delete removed one of two and the queue came back).
func TestRefusedCreateLeavesNoEntity(t *testing.T) {
	var armed atomic.Bool
	dir := t.TempDir()
	b := openBroker(t, Options{Dir: dir, IdleCheckpoint: -1, Fault: func(entity, op string) error {
		if entity == "q" && op == "write" && armed.CompareAndSwap(true, false) {
			return errors.New("injected write failure")
		}
		return nil
	}})
	armed.Store(true)
	if _, err := b.CreateQueue("q", projection.DefaultConfig()); err == nil {
		t.Fatal("create succeeded despite the injected failure")
	}
	e, err := b.CreateQueue("q", projection.DefaultConfig()) // the client retries
	if err != nil {
		t.Fatal(err)
	}
	sendSync(t, e, projection.Message{Body: []byte("m"), MessageID: "m"})
	if err := b.DeleteEntity("q"); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, Options{Dir: dir, IdleCheckpoint: -1})
	defer b.Close()
	if e, err := b.Entity("q"); err == nil {
		c, _ := e.Counts(event.MainQueue)
		t.Fatalf("queue q was deleted (and its first create refused), yet after a restart it exists again, holding %+v", c)
	}
}

// sendUntilRecovered sends a message "probe" to a failed entity until one
// is acknowledged: the entity has recovered (its first retry is after
// 500 ms).
func sendUntilRecovered(t *testing.T, e *Entity) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ch := make(chan error, 1)
		e.Send(event.MainQueue, []projection.Message{{Body: []byte("probe"), MessageID: "probe"}}, func(err error) { ch <- err })
		if <-ch == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the entity did not recover")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// queueFailingOnce opens a broker with queue q whose next op ("write" or
// "sync") fails once, after arm.
func queueFailingOnce(t *testing.T, op string) (e *Entity, arm func()) {
	t.Helper()
	var armed atomic.Bool
	b := openBroker(t, Options{Dir: t.TempDir(), IdleCheckpoint: -1, Fault: func(entity, o string) error {
		if entity == "q" && o == op && armed.CompareAndSwap(true, false) {
			return fmt.Errorf("injected %s failure", op)
		}
		return nil
	}})
	t.Cleanup(func() { b.Close() })
	e, err := b.CreateQueue("q", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return e, func() { armed.Store(true) }
}
