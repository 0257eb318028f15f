package broker

import (
	"bytes"
	"testing"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// A receive-and-delete delivery handed back (its link closed before it
// left) is a message again, under a new SequenceNumber, with what it had:
// body, MessageId, failed deliveries, the properties an abandon set, and in
// the dead-letter queue its reason. It stays so across a restart.
func TestRestoredMessageKeepsWhatItHad(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, Options{Dir: dir})
	e, err := b.CreateQueue("q", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	sendSync(t, e, projection.Message{Body: []byte("body-a"), MessageID: "a"},
		projection.Message{Body: []byte("body-b"), MessageID: "b"})
	locked := make(chan Delivery, 2)
	pl, _ := e.Attach(ReceiverOptions{Name: "pl", Deliver: func(d Delivery) { locked <- d }})
	pl.SetLimit(2)
	props := []byte{0xc1, 0x01, 0x00}
	settleSync(t, e, nextDelivery(t, locked), Settlement{Outcome: projection.Abandon, Props: props})
	settleSync(t, e, nextDelivery(t, locked), Settlement{Outcome: projection.DeadLetter, Reason: "why", Description: "because"})
	pl.Detach(nil)

	// Receive-and-delete a from the queue and b from its dead-letter
	// queue, and hand both back.
	for _, q := range []uint32{event.MainQueue, event.DeadLetterQueue} {
		d := takeOne(t, e, q)
		if ids := peekIDs(t, e, q); len(ids) != 0 {
			t.Fatalf("queue %d holds %v after its only message was received and deleted", q, ids)
		}
		restoreSync(t, e, d)
	}

	check := func(when string) {
		t.Helper()
		main, err := e.Peek(event.MainQueue, 1, 10, "")
		if err != nil || len(main) != 1 {
			t.Fatalf("%s: queue holds %d messages (%v), want a", when, len(main), err)
		}
		a := main[0]
		if a.MessageID != "a" || !bytes.Equal(a.Message, []byte("body-a")) || a.Seq <= 2 || a.Deliveries != 1 ||
			len(a.Overlays) != 1 || !bytes.Equal(a.Overlays[0].Props, props) {
			t.Fatalf("%s: restored a is seq %d id %q body %q deliveries %d overlays %+v", when, a.Seq, a.MessageID, a.Message, a.Deliveries, a.Overlays)
		}
		dlq, err := e.Peek(event.DeadLetterQueue, 1, 10, "")
		if err != nil || len(dlq) != 1 {
			t.Fatalf("%s: dead-letter queue holds %d messages (%v), want b", when, len(dlq), err)
		}
		bd := dlq[0]
		if bd.MessageID != "b" || len(bd.Overlays) != 1 || bd.Overlays[0].Type != event.DeadLettered ||
			bd.Overlays[0].Reason != "why" || bd.Overlays[0].Description != "because" {
			t.Fatalf("%s: restored b is id %q overlays %+v", when, bd.MessageID, bd.Overlays)
		}
	}
	check("restored")
	b.Close()
	b = openBroker(t, Options{Dir: dir})
	defer b.Close()
	e, err = b.Entity("q")
	if err != nil {
		t.Fatal(err)
	}
	check("after a restart")
}

// A message forwarded from another entity's dead-letter queue keeps, once
// restored, what its arrival said: where it came from and why it was
// dead-lettered there.
func TestRestoredForwardedMessageKeepsItsSource(t *testing.T) {
	b := openBroker(t, Options{Dir: t.TempDir()})
	defer b.Close()
	dst, src := forwardingPair(t, b)
	deadLetterOne(t, src, "f")
	waitCounts(t, dst, event.MainQueue, func(c projection.Counts) bool { return c.Total == 1 })
	restoreSync(t, dst, takeOne(t, dst, event.MainQueue))
	peek, err := dst.Peek(event.MainQueue, 1, 10, "")
	if err != nil || len(peek) != 1 {
		t.Fatalf("after the restore the queue holds %d messages (%v)", len(peek), err)
	}
	if ov := peek[0].Overlays; len(ov) != 1 || ov[0].Type != event.Forwarded || ov[0].Source != "src" || ov[0].Reason != "poison" {
		t.Fatalf("restored forwarded message: overlays %+v, want its arrival from src with reason poison", ov)
	}
}

// A rule action's copy restored keeps what made it a copy (its rule and
// the action's changes), in a subscription and in its dead-letter queue
// (where it went on arrival, with its reason), across a restart.
func TestRestoredCopyKeepsItsRule(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, Options{Dir: dir})
	news, err := b.CreateTopic("news", DefaultTopicConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultSubscriptionConfig()
	cfg.RequiresSession = true
	for _, s := range []struct {
		name string
		cfg  Config
	}{{"tagged", DefaultSubscriptionConfig()}, {"sessions", cfg}} {
		if err := news.CreateSubscription(s.name, s.cfg, []RuleSpec{{Name: "red",
			Filter: FilterSpec{Kind: FilterSQL, SQL: "color = 'red'"}, Action: "SET sys.Label = 'hot'; REMOVE color"}}); err != nil {
			t.Fatal(err)
		}
	}
	sendSync(t, news, colored("a", "red"))
	tagged, _ := news.SubscriptionQueue("tagged")
	sessions, _ := news.SubscriptionQueue("sessions")
	// No SessionId: the session subscription's copy is dead-lettered on
	// arrival.
	dead := event.SubqueueOf(sessions, event.KindDeadLetter)
	for _, q := range []uint32{tagged, dead} {
		restoreSync(t, news, takeOne(t, news, q))
	}
	check := func(when string) {
		t.Helper()
		for _, q := range []uint32{tagged, dead} {
			ds, err := news.Peek(q, 1, 10, "")
			if err != nil || len(ds) != 1 {
				t.Fatalf("%s: queue %d holds %d messages (%v)", when, q, len(ds), err)
			}
			d := ds[0]
			var rule string
			var changes []RuleChange
			reason := ""
			for _, ov := range d.Overlays {
				if ov.Rule != "" {
					rule, changes = ov.Rule, ov.Changes
				}
				if ov.Reason != "" {
					reason = ov.Reason
				}
			}
			if string(d.Message) != "a" || rule != "red" || len(changes) != 2 || changes[0].Sys != SysLabel ||
				changes[0].Value.Text() != "hot" || !changes[1].Remove {
				t.Fatalf("%s: restored copy in queue %d: %q overlays %+v", when, q, d.Message, d.Overlays)
			}
			if q == dead && reason == "" {
				t.Fatalf("%s: the restored dead-lettered copy lost its reason: %+v", when, d.Overlays)
			}
		}
	}
	check("restored")
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, Options{Dir: dir})
	defer b.Close()
	if news, err = b.Entity("news"); err != nil {
		t.Fatal(err)
	}
	check("after a restart")
}
