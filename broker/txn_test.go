package broker

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// commitSync commits tx on e and waits for the outcome.
func commitSync(e *Entity, tx Transaction) error {
	done := make(chan error, 1)
	e.Commit(tx, func(err error) { done <- err })
	return <-done
}

// lockTwo sends two messages to e and locks both for one receiver.
func lockTwo(t *testing.T, e *Entity) []Delivery {
	t.Helper()
	sendSync(t, e, projection.Message{MessageID: "in-1", Body: []byte("one")}, projection.Message{MessageID: "in-2", Body: []byte("two")})
	got := make(chan Delivery, 2)
	r, err := e.Attach(ReceiverOptions{Name: "r", Deliver: func(d Delivery) { got <- d }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Detach(nil) })
	r.SetLimit(2)
	return []Delivery{nextDelivery(t, got), nextDelivery(t, got)}
}

// A transaction's sends and settlements happen together, in one atomic
// group of the log closed by a committed event that names it, and last
// across a restart; a commit whose work cannot all be done does none of
// it, and the locks it would have settled stay held.
func TestCommitIsAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, Options{Dir: dir, IdleCheckpoint: -1})
	e, err := b.CreateQueue("q", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ds := lockTwo(t, e)
	out := []projection.Message{{MessageID: "out-1", Body: []byte("reply")}}

	// One settlement names a lock that is not there: nothing happens.
	bad := Transaction{ID: []byte("tx-bad"),
		Sends: []TxSend{{Queue: event.MainQueue, Messages: out}},
		Settles: []TxSettle{
			{Queue: event.MainQueue, Settlement: Settlement{Token: ds[0].Token, Outcome: projection.Complete}},
			{Queue: event.MainQueue, Settlement: Settlement{Token: event.LockToken{1, 2, 3}, Outcome: projection.Complete}},
		}}
	if err := commitSync(e, bad); !errors.Is(err, ErrLockLost) {
		t.Fatalf("a commit settling an unknown lock: %v, want lock lost", err)
	}
	if c, _ := e.Counts(event.MainQueue); c.Total != 2 || c.Locked != 2 {
		t.Fatalf("after a refused commit: %+v, want the two messages, still locked", c)
	}
	twice := Transaction{ID: []byte("tx-twice"), Settles: []TxSettle{
		{Queue: event.MainQueue, Settlement: Settlement{Token: ds[0].Token, Outcome: projection.Complete}},
		{Queue: event.MainQueue, Settlement: Settlement{Token: ds[0].Token, Outcome: projection.Abandon}},
	}}
	if err := commitSync(e, twice); !errors.Is(err, ErrLockLost) {
		t.Fatalf("a lock settled twice in one transaction: %v", err)
	}
	var many Transaction
	for i := range MaxTxOps + 1 {
		many.Sends = append(many.Sends, TxSend{Messages: []projection.Message{{MessageID: fmt.Sprint(i), Body: []byte("x")}}})
	}
	if err := commitSync(e, many); !errors.Is(err, ErrTxTooLarge) {
		t.Fatalf("%d operations: %v", MaxTxOps+1, err)
	}

	// The same work without the bad settlement commits.
	good := Transaction{ID: []byte("tx-good"),
		Sends: []TxSend{{Queue: event.MainQueue, Messages: out}},
		Settles: []TxSettle{
			{Queue: event.MainQueue, Settlement: Settlement{Token: ds[0].Token, Outcome: projection.Complete}},
			{Queue: event.MainQueue, Settlement: Settlement{Token: ds[1].Token, Outcome: projection.DeadLetter, Reason: "bad"}},
		}}
	before := e.log.LastIndex()
	if err := commitSync(e, good); err != nil {
		t.Fatal(err)
	}
	var group []event.Event
	if err := e.log.Scan(before+1, func(ev *event.Event) error {
		group = append(group, *ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var types []string
	for i, ev := range group {
		types = append(types, ev.Type.String())
		if continued := ev.Flags&event.FlagContinued != 0; continued != (i < len(group)-1) {
			t.Fatalf("event %d of the commit continued=%v: the commit is not one atomic group", i, continued)
		}
	}
	if fmt.Sprint(types) != "[enqueued completed dead-lettered committed]" || !bytes.Equal(group[3].State, []byte("tx-good")) {
		t.Fatalf("the commit wrote %v (id %q)", types, group[len(group)-1].State)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	b = openBroker(t, Options{Dir: dir, IdleCheckpoint: -1})
	defer b.Close()
	e, _ = b.Entity("q")
	if ids := peekIDs(t, e, event.MainQueue); fmt.Sprint(ids) != "[out-1]" {
		t.Fatalf("after a restart the queue holds %v, want the committed send alone", ids)
	}
	if ids := peekIDs(t, e, event.DeadLetterQueue); fmt.Sprint(ids) != "[in-2]" {
		t.Fatalf("after a restart the dead-letter queue holds %v", ids)
	}
}

// A lock that runs out before the commit fails it, with nothing done.
func TestCommitAfterTheLockRanOut(t *testing.T) {
	clock := NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := openBroker(t, Options{Dir: t.TempDir(), Clock: clock, IdleCheckpoint: -1})
	defer b.Close()
	e, err := b.CreateQueue("q", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ds := lockTwo(t, e)
	clock.Advance(2 * time.Minute) // the default lock lasts one
	tx := Transaction{ID: []byte("late"),
		Sends:   []TxSend{{Messages: []projection.Message{{MessageID: "reply", Body: []byte("r")}}}},
		Settles: []TxSettle{{Settlement: Settlement{Token: ds[0].Token, Outcome: projection.Complete}}}}
	if err := commitSync(e, tx); !errors.Is(err, ErrLockLost) {
		t.Fatalf("commit after the lock ran out: %v", err)
	}
	if ids := peekIDs(t, e, event.MainQueue); fmt.Sprint(ids) != "[in-1 in-2]" {
		t.Fatalf("the queue holds %v after a failed commit", ids)
	}
}

// A commit whose write fails is refused, and once the entity has
// recovered none of its work is there.
func TestCommitWriteFailureLeavesNothing(t *testing.T) {
	e, arm := queueFailingOnce(t, "write")
	ds := lockTwo(t, e)
	if err := e.Sync(); err != nil { // the locks are durable
		t.Fatal(err)
	}
	arm()
	tx := Transaction{ID: []byte("lost"),
		Sends:   []TxSend{{Messages: []projection.Message{{MessageID: "reply", Body: []byte("r")}}}},
		Settles: []TxSettle{{Settlement: Settlement{Token: ds[0].Token, Outcome: projection.Complete}}}}
	if err := commitSync(e, tx); err == nil {
		t.Fatal("the commit succeeded despite the failed write")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ids, err := e.Peek(event.MainQueue, 1, 10, ""); err == nil {
			var got []string
			for _, m := range ids {
				got = append(got, m.MessageID)
			}
			if fmt.Sprint(got) == "[in-1 in-2]" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after recovery the queue holds %v, want the two messages alone", got)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}
