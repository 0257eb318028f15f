package projection

import (
	"bytes"
	"errors"
	"testing"

	"github.com/walbus/walbus/log/event"
)

func TestSessionIDOf(t *testing.T) {
	for _, c := range []struct{ text, id string }{
		{"", EmptySessionID},
		{"s", "s"},
		{"é", "é"},
		// Text that is not UTF-8 never becomes EmptySessionID.
		{EmptySessionID, "\uFFFD"},
		{"a\xff\xfeb", "a\uFFFDb"},
	} {
		if got := SessionIDOf(c.text); got != c.id {
			t.Errorf("SessionIDOf(%q) = %q, want %q", c.text, got, c.id)
		}
	}
	if ClientSessionID(EmptySessionID) != "" || ClientSessionID("s") != "s" || ClientSessionID("") != "" {
		t.Error("ClientSessionID does not undo SessionIDOf")
	}
}

// The session "" (EmptySessionID) is a session like any other, taken by
// an accept of the next available one; "" is still no session.
func TestEmptySessionIsASession(t *testing.T) {
	l := &testLog{t: t, e: New()}
	cfg := DefaultConfig()
	cfg.RequiresSession = true
	now := int64(1_700_000_000_000_000_000)
	l.run(Configure{Name: "q", Config: cfg}, now)
	if _, err := l.e.Decide(Send{Queue: event.MainQueue, Messages: []Message{{Body: []byte("none")}}}, now); !errors.Is(err, ErrSessionIDRequired) {
		t.Fatalf("a message without a session: %v", err)
	}
	l.run(Send{Queue: event.MainQueue, Messages: []Message{{Body: []byte("m"), SessionID: EmptySessionID}}}, now)
	evs := l.run(AcceptSession{Queue: event.MainQueue, Receiver: "r"}, now)
	if len(evs) != 1 || evs[0].Type != event.SessionLocked || evs[0].SessionID != EmptySessionID {
		t.Fatalf("accept next: %v", eventKeys(evs))
	}
	evs = l.run(Lock{Queue: event.MainQueue, Receiver: "r", Session: EmptySessionID, Max: 1, Limit: ^uint64(0), Nonce: 1}, now)
	if len(evs) != 1 || evs[0].Type != event.Locked {
		t.Fatalf("lock in session \"\": %v", eventKeys(evs))
	}
	// The id survives a snapshot and a replay like any other.
	enc := l.e.Encode(nil)
	restored, err := Decode(enc)
	if err != nil || !bytes.Equal(restored.Encode(nil), enc) || !bytes.Equal(replay(t, l.events).Encode(nil), enc) {
		t.Fatalf("snapshot or replay of a state with session \"\": %v", err)
	}
	if s := restored.Queue(event.MainQueue).Sessions().Get(EmptySessionID); s == nil || s.Owner != "r" {
		t.Fatalf("restored session \"\": %+v", s)
	}
}

// A rule action that sets SessionId to the empty string gives its copy the
// session "", as a client's empty group-id does; one that removes it
// leaves none, and a subscription that requires sessions dead-letters that
// copy.
func TestActionSetsTheEmptySession(t *testing.T) {
	l := newTopicLog(t)
	cfg := DefaultSubscriptionConfig()
	cfg.RequiresSession = true
	l.must(CreateSubscription{Name: "blank", Config: cfg, Rules: []RuleSpec{sqlRule("r", "1=1", "SET sys.SessionId = ''")}})
	l.must(CreateSubscription{Name: "removed", Config: cfg, Rules: []RuleSpec{sqlRule("r", "1=1", "REMOVE sys.SessionId")}})
	l.must(Send{Messages: []Message{{Body: []byte("m"), MessageID: "m", SessionID: "s"}}})
	blank := l.e.Queue(l.e.Subscription("blank").Queue())
	if s := blank.Sessions().Get(EmptySessionID); blank.Counts().Available != 1 || s == nil || s.Messages != 1 {
		t.Fatalf("subscription blank: %+v, session \"\" %+v", blank.Counts(), s)
	}
	removed := l.e.Subscription("removed").Queue()
	if l.e.Queue(removed).Counts().Total != 0 || l.e.Queue(event.SubqueueOf(removed, event.KindDeadLetter)).Counts().Total != 1 {
		t.Fatal("a copy whose SessionId was removed did not go to the dead-letter queue")
	}
}
