package projection

import (
	"bytes"
	"testing"

	"github.com/walbus/walbus/log/event"
)

// testLog decides commands on an entity and applies what they produce,
// keeping the events for a replay.
type testLog struct {
	t      *testing.T
	e      *Entity
	events []event.Event
}

func (l *testLog) run(cmd Command, at int64) []event.Event {
	l.t.Helper()
	evs, err := l.e.Decide(cmd, at)
	if err != nil {
		l.t.Fatalf("%T: %v", cmd, err)
	}
	for i := range evs {
		evs[i].Index = l.e.LastIndex() + 1
		if err := l.e.Apply(&evs[i]); err != nil {
			l.t.Fatal(err)
		}
		l.events = append(l.events, evs[i])
	}
	return evs
}

// lock locks the one available message of queue no and returns its token.
func (l *testLog) lock(no uint32, at int64) event.LockToken {
	l.t.Helper()
	evs := l.run(Lock{Queue: no, Receiver: "r", Max: 1, Limit: ^uint64(0), Nonce: uint64(at)}, at)
	if len(evs) != 1 || evs[0].Type != event.Locked {
		l.t.Fatalf("lock in queue %d: %v", no, eventKeys(evs))
	}
	return evs[0].Token
}

func (l *testLog) deliveries(no uint32, seq uint64) uint16 {
	l.t.Helper()
	m, ok := l.e.Queue(no).Message(seq)
	if !ok {
		l.t.Fatalf("no message %d in queue %d", seq, no)
	}
	return m.Deliveries
}

// A dead-letter queue counts no failed deliveries: a message keeps the
// count it was dead-lettered with through abandons and lock expiries there,
// as in Service Bus (the Go SDK's messageSettler_test.go
// TestMessageSettlementUsingReceiver), and MaxDeliveryCount never moves it.
// A replay of the events gives the same counts: they are derived, not
// recorded.
func TestDeadLetterQueueCountsNoDeliveries(t *testing.T) {
	l := &testLog{t: t, e: New()}
	cfg := DefaultConfig()
	cfg.MaxDeliveryCount = 2
	now := int64(1_700_000_000_000_000_000)
	l.run(Configure{Name: "q", Config: cfg}, now)
	seq := l.run(Send{Queue: event.MainQueue, Messages: []Message{{Body: []byte("m")}}}, now)[0].Index

	// In the queue an abandon counts, and the second reaches MaxDeliveryCount.
	for want := uint16(1); want <= 2; want++ {
		token := l.lock(event.MainQueue, now)
		evs := l.run(Settle{Queue: event.MainQueue, Token: token, Outcome: Abandon}, now)
		if want == 1 && l.deliveries(event.MainQueue, seq) != 1 {
			t.Fatalf("after an abandon in the queue: %d deliveries", l.deliveries(event.MainQueue, seq))
		}
		if want == 2 && (len(evs) != 2 || evs[1].Type != event.DeadLettered) {
			t.Fatalf("the abandon reaching MaxDeliveryCount: %v", eventKeys(evs))
		}
	}
	if got := l.deliveries(event.DeadLetterQueue, seq); got != 2 {
		t.Fatalf("dead-lettered with %d deliveries, want 2", got)
	}

	// In the dead-letter queue neither an abandon nor a lock expiry counts,
	// however often: the message stays there, available.
	for range 3 {
		token := l.lock(event.DeadLetterQueue, now)
		if evs := l.run(Settle{Queue: event.DeadLetterQueue, Token: token, Outcome: Abandon}, now); len(evs) != 1 {
			t.Fatalf("abandon in the dead-letter queue: %v", eventKeys(evs))
		}
		l.lock(event.DeadLetterQueue, now)
		now += int64(cfg.LockDuration) + 1
		if evs := l.run(Tick{}, now); len(evs) != 1 || evs[0].Type != event.LockExpired {
			t.Fatalf("lock expiry in the dead-letter queue: %v", eventKeys(evs))
		}
	}
	if got := l.deliveries(event.DeadLetterQueue, seq); got != 2 {
		t.Fatalf("after abandons and lock expiries in the dead-letter queue: %d deliveries, want 2", got)
	}
	if c := l.e.Queue(event.DeadLetterQueue).Counts(); c.Available != 1 || c.Total != 1 {
		t.Fatalf("dead-letter queue counts %+v", c)
	}

	// The transfer dead-letter queue counts none either.
	restored := l.run(Restore{Queue: event.TransferDeadLetterQueue,
		Messages: []Restored{{Seq: 99, Body: []byte("t"), Deliveries: 3}}}, now)[0].Index
	token := l.lock(event.TransferDeadLetterQueue, now)
	l.run(Settle{Queue: event.TransferDeadLetterQueue, Token: token, Outcome: Abandon}, now)
	if got := l.deliveries(event.TransferDeadLetterQueue, restored); got != 3 {
		t.Fatalf("after an abandon in the transfer dead-letter queue: %d deliveries, want 3", got)
	}

	if !bytes.Equal(replay(t, l.events).Encode(nil), l.e.Encode(nil)) {
		t.Fatal("replaying the events gives another state")
	}
}
