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

// viaPair creates the via-entity "in", holding one locked message, and
// the destination "out"; it returns them and the lock.
func viaPair(t *testing.T, b *Broker) (in, out *Entity, lock Delivery) {
	t.Helper()
	out, err := b.CreateQueue("out", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	in, err = b.CreateQueue("in", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	sendSync(t, in, projection.Message{MessageID: "request", Body: []byte("request")})
	got := make(chan Delivery, 1)
	r, err := in.Attach(ReceiverOptions{Name: "r", Deliver: func(d Delivery) { got <- d }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Detach(nil) })
	r.SetLimit(1)
	return in, out, nextDelivery(t, got)
}

// receiveProcessSend is the transaction of the pattern send-via serves:
// complete the request, send the replies through its queue to "out".
func receiveProcessSend(lock Delivery, replies ...projection.Message) Transaction {
	return Transaction{ID: []byte("rps"),
		Settles:   []TxSettle{{Queue: event.MainQueue, Settlement: Settlement{Token: lock.Token, Outcome: projection.Complete}}},
		Transfers: []TxTransfer{{To: "out", Messages: replies}}}
}

// A transaction that completes a request and sends its replies through
// the request's queue commits as one group on that queue's log; the
// replies then reach their destination, in order, each once, keeping
// their time to live and schedule, and stay there alone across restarts.
func TestSendViaCommitsThenDelivers(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Dir: dir, IdleCheckpoint: -1, FinalSnapshotMin: 1}
	b := openBroker(t, opts)
	in, out, lock := viaPair(t, b)
	later := time.Now().Add(time.Hour).UnixNano()
	before := in.log.LastIndex()
	tx := receiveProcessSend(lock,
		projection.Message{MessageID: "reply-1", Body: []byte("one"), TTL: time.Hour},
		projection.Message{MessageID: "reply-2", Body: []byte("two")},
		projection.Message{MessageID: "reply-3", Body: []byte("three"), ScheduledAt: later})
	if err := commitSync(in, tx); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, out, event.MainQueue, func(c projection.Counts) bool { return c.Available == 2 && c.Scheduled == 1 })
	waitCounts(t, in, event.TransferQueue, func(c projection.Counts) bool { return c.Total == 0 })
	if c, _ := in.Counts(event.MainQueue); c.Total != 0 {
		t.Fatalf("the request is still in its queue: %+v", c)
	}
	check := func(when string, out *Entity) {
		t.Helper()
		ds, err := out.Peek(event.MainQueue, 0, 10, "")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, d := range ds {
			ids = append(ids, d.MessageID)
		}
		if fmt.Sprint(ids) != "[reply-1 reply-2 reply-3]" {
			t.Fatalf("%s: the destination holds %v", when, ids)
		}
		if exp := ds[0].ExpiresAt - ds[0].EnqueuedAt; exp != int64(time.Hour) {
			t.Fatalf("%s: reply-1 lives %v, want an hour", when, time.Duration(exp))
		}
		if ds[2].ScheduledAt != later {
			t.Fatalf("%s: reply-3 scheduled for %d, want %d", when, ds[2].ScheduledAt, later)
		}
	}
	check("at first", out)

	// The via's log holds the transaction: the settlement, the transfers
	// and the commit, as one group.
	var group []event.Type
	done := false
	if err := in.log.Scan(before+1, func(ev *event.Event) error {
		if !done {
			group = append(group, ev.Type)
			if continued := ev.Flags&event.FlagContinued != 0; continued != (ev.Type != event.Committed) {
				t.Errorf("%s event %d: continued %v", ev.Type, ev.Index, continued)
			}
		}
		done = done || ev.Type == event.Committed
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(group) != "[transfer transfer transfer completed committed]" {
		t.Fatalf("the transaction's group: %v", group)
	}

	for _, graceful := range []bool{false, true} {
		if err := b.shutdown(graceful); err != nil {
			t.Fatal(err)
		}
		b = openBroker(t, opts)
		out, _ = b.Entity("out")
		in, _ = b.Entity("in")
		if err := in.Sync(); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("after a restart (graceful %v)", graceful), out)
		if c, _ := in.Counts(event.TransferQueue); c.Total != 0 {
			t.Fatalf("transfer queue after a restart: %+v", c)
		}
	}
	b.Close()
}

// The destination's fsync fails after it wrote a transfer: the via hears
// of a failure and sends it again once the destination has recovered,
// which drops the repeat. Sent outside a transaction, it is the same.
func TestSendViaExactlyOnceAcrossAFailure(t *testing.T) {
	var armed atomic.Bool
	b := openBroker(t, Options{Dir: t.TempDir(), Fault: func(entity, op string) error {
		if entity == "out" && op == "sync" && armed.CompareAndSwap(true, false) {
			return errors.New("injected fsync failure")
		}
		return nil
	}})
	defer b.Close()
	in, out, lock := viaPair(t, b)
	armed.Store(true)
	if err := commitSync(in, receiveProcessSend(lock, projection.Message{MessageID: "m1", Body: []byte("1")})); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, in, event.TransferQueue, func(c projection.Counts) bool { return c.Total == 0 })
	if armed.Load() {
		t.Fatal("the injected failure never happened")
	}
	done := make(chan error, 1)
	in.SendVia("out", []projection.Message{{MessageID: "m2", Body: []byte("2")}}, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitCounts(t, in, event.TransferQueue, func(c projection.Counts) bool { return c.Total == 0 })
	if err := out.Sync(); err != nil {
		t.Fatal(err)
	}
	if ids := peekIDs(t, out, event.MainQueue); fmt.Sprint(ids) != "[m1 m2]" {
		t.Fatalf("the destination holds %v, want each message once", ids)
	}
}

// What cannot reach its destination (deleted meanwhile) goes to the
// via's transfer dead-letter queue, saying why; what can is refused at
// the commit, not after it; and a topic is no via-entity.
func TestSendViaRefusals(t *testing.T) {
	var block atomic.Bool
	b := openBroker(t, Options{Dir: t.TempDir(), Fault: func(entity, op string) error {
		if entity == "out" && op == "write" && block.Load() {
			return errors.New("destination unavailable")
		}
		return nil
	}})
	defer b.Close()
	in, out, lock := viaPair(t, b)

	small, err := b.CreateQueue("small", func() projection.Config { c := projection.DefaultConfig(); c.MaxMessageSize = 10; return c }())
	if err != nil {
		t.Fatal(err)
	}
	_ = small
	sessions, err := b.CreateQueue("sessions", sessionConfig())
	if err != nil {
		t.Fatal(err)
	}
	_ = sessions
	topic, err := b.CreateTopic("topic", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		to   string
		m    projection.Message
		want error
	}{
		{"small", projection.Message{Body: make([]byte, 11)}, projection.ErrMessageTooLarge},
		{"sessions", projection.Message{Body: []byte("x")}, projection.ErrSessionIDRequired},
		{"missing", projection.Message{Body: []byte("x")}, ErrEntityNotFound},
	} {
		tx := Transaction{Transfers: []TxTransfer{{To: c.to, Messages: []projection.Message{c.m}}}}
		if err := commitSync(in, tx); !errors.Is(err, c.want) {
			t.Errorf("send via in to %s: %v, want %v", c.to, err, c.want)
		}
	}
	done := make(chan error, 1)
	topic.SendVia("out", []projection.Message{{Body: []byte("x")}}, func(err error) { done <- err })
	if err := <-done; !errors.Is(err, ErrTransferTopic) {
		t.Errorf("send via a topic: %v", err)
	}
	if c, _ := in.Counts(event.MainQueue); c.Locked != 1 {
		t.Fatalf("refused commits settled the request: %+v", c)
	}

	// Three bound for a destination that goes: the run of three is
	// refused, then each message alone, in order.
	block.Store(true)
	orphans := receiveProcessSend(lock, projection.Message{MessageID: "orphan-1", Body: []byte("o")},
		projection.Message{MessageID: "orphan-2", Body: []byte("o")}, projection.Message{MessageID: "orphan-3", Body: []byte("o")})
	if err := commitSync(in, orphans); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := b.DeleteEntity(out.Name()); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, in, event.TransferDeadLetterQueue, func(c projection.Counts) bool { return c.Total == 3 })
	ds, err := in.Peek(event.TransferDeadLetterQueue, 0, 10, "")
	if err != nil || len(ds) != 3 {
		t.Fatalf("transfer dead-letter queue: %d messages (%v)", len(ds), err)
	}
	for i, d := range ds {
		ov := d.Overlays
		if d.MessageID != fmt.Sprint("orphan-", i+1) || len(ov) != 1 || ov[0].Reason != ReasonDestinationNotFound ||
			!strings.Contains(ov[0].Description, "out") {
			t.Fatalf("transfer dead-letter %q with overlays %+v", d.MessageID, ov)
		}
	}
	if c, _ := in.Counts(event.TransferQueue); c.Total != 0 {
		t.Fatalf("transfer queue %+v", c)
	}
}
