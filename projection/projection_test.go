package projection

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/walbus/walbus/log/event"
)

// TestAgainstModel runs thousands of random operation sequences against the
// projection and the naive model; they must agree on every decision and on
// the observable state after every step.
func TestAgainstModel(t *testing.T) {
	steps := 2000
	if testing.Short() {
		steps = 500
	}
	seen := map[event.Type]int{}
	defer func() {
		// Every event type must have come up, or the test proves little.
		for _, typ := range event.Types() {
			// The model knows queues; topics' events are tested in
			// topic_test.go. A commit's closing event is the broker's
			// (broker/txn.go) and a marker Raft's storage's
			// (broker/replica), not decisions of the projection, and the
			// namespace log's events never reach an entity's.
			namespace := typ == event.EntityDeleted || typ == event.ClockAdvanced || typ == event.NodeAddress
			if !namespace && typ != event.Committed && typ != event.Marker && !topicEvent(typ) && seen[typ] == 0 {
				t.Errorf("no %s event in any history", typ)
			}
		}
		t.Logf("event types: %v", seen)
	}()
	for _, name := range slices.Sorted(mapsKeys(modelConfigs)) {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/seed%d", name, seed), func(t *testing.T) {
				failed := false
				h := newHistory(seed, modelConfigs[name], func(f string, a ...any) {
					if !failed {
						failed = true
						t.Errorf(f, a...)
					}
				})
				h.sendVia = true
				for i := 0; i < steps && !failed; i++ {
					h.step()
				}
				for _, ev := range h.events {
					seen[ev.Type]++
				}
				if !failed && len(h.events) < steps/4 {
					t.Errorf("only %d events from %d steps: the generator is not exercising much", len(h.events), steps)
				}
			})
		}
	}
}

// TestReplayEquivalence: the state after all events equals the state from a
// snapshot (encode, decode) at every k plus the events after k, byte for byte.
func TestReplayEquivalence(t *testing.T) {
	for _, name := range slices.Sorted(mapsKeys(modelConfigs)) {
		t.Run(name, func(t *testing.T) {
			h := newHistory(11, modelConfigs[name], t.Fatalf)
			h.sendVia = true
			for len(h.events) < 1000 {
				h.step()
			}
			full := h.e.Encode(nil)
			if !bytes.Equal(replay(t, h.events).Encode(nil), full) {
				t.Fatal("replaying the log does not give the state that produced it")
			}
			for k := 0; k <= len(h.events); k++ {
				e := replay(t, h.events[:k])
				snap := e.Encode(nil)
				restored, err := Decode(snap)
				if err != nil {
					t.Fatalf("k=%d: decode: %v", k, err)
				}
				if again := restored.Encode(nil); !bytes.Equal(again, snap) {
					t.Fatalf("k=%d: decode(encode(state)) re-encodes differently", k)
				}
				for i := k; i < len(h.events); i++ {
					if err := restored.Apply(&h.events[i]); err != nil {
						t.Fatalf("k=%d: apply %d: %v", k, i, err)
					}
				}
				if !bytes.Equal(restored.Encode(nil), full) {
					t.Fatalf("k=%d: snapshot plus tail differs from the full replay", k)
				}
				// The restored state must also decide the same way.
				if k%97 == 0 {
					for _, cmd := range []Command{Tick{}, Lock{Receiver: "x", Max: 5, Limit: ^uint64(0), Nonce: 1,
						Session: firstSession(restored)}} {
						a, errA := restored.Decide(cmd, h.now+int64(1e12))
						b, errB := h.e.Decide(cmd, h.now+int64(1e12))
						if fmt.Sprint(eventKeys(a), errA) != fmt.Sprint(eventKeys(b), errB) {
							t.Fatalf("k=%d: restored state decides %v/%v, original %v/%v", k, eventKeys(a), errA, eventKeys(b), errB)
						}
					}
				}
			}
		})
	}
}

func firstSession(e *Entity) string {
	if s := e.queues[0].sessions; s != nil {
		for _, s := range s.Sorted() {
			return s.ID
		}
	}
	return ""
}

func replay(t *testing.T, evs []event.Event) *Entity {
	t.Helper()
	e := New()
	for i := range evs {
		if err := e.Apply(&evs[i]); err != nil {
			t.Fatalf("apply %d: %v", i, err)
		}
	}
	return e
}

func FuzzDecode(f *testing.F) {
	for _, name := range slices.Sorted(mapsKeys(modelConfigs)) {
		h := newHistory(5, modelConfigs[name], f.Fatalf)
		h.sendVia = true
		for len(h.events) < 200 {
			h.step()
		}
		f.Add(h.e.Encode(nil))
	}
	f.Add(New().Encode(nil))
	f.Add(topicSeed(f).Encode(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Decode(b)
		if err != nil {
			return
		}
		// Whatever decodes is a usable state: it re-encodes canonically and
		// can decide and apply.
		enc := e.Encode(nil)
		e2, err := Decode(enc)
		if err != nil {
			t.Fatalf("canonical encoding does not decode: %v", err)
		}
		if !bytes.Equal(e2.Encode(nil), enc) {
			t.Fatal("encoding is not stable")
		}
		e.NextDeadline()
		e.FirstNeeded()
		if evs, err := e.Decide(Tick{}, e.LastTime()+int64(1e15)); err == nil {
			for i := range evs {
				evs[i].Index = e.LastIndex() + 1
				e.Apply(&evs[i])
			}
		}
	})
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// Settling a session's message after the session's lock ran out, before
// any timer released the session, reports the session's lock as lost: it
// is what held the message (Service Bus says SessionLockLost there).
func TestSettleAfterTheSessionLockRanOut(t *testing.T) {
	e := New()
	var index uint64
	run := func(cmd Command, at int64) ([]event.Event, error) {
		t.Helper()
		evs, err := e.Decide(cmd, at)
		for i := range evs {
			index++
			evs[i].Index = index
			if err := e.Apply(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		return evs, err
	}
	cfg := DefaultConfig()
	cfg.RequiresSession = true
	const start = int64(1_700_000_000_000_000_000)
	if _, err := run(Configure{Name: "q", Config: cfg}, start); err != nil {
		t.Fatal(err)
	}
	if _, err := run(Send{Queue: event.MainQueue, Messages: []Message{{Body: []byte("m"), SessionID: "s"}}}, start); err != nil {
		t.Fatal(err)
	}
	if _, err := run(AcceptSession{Queue: event.MainQueue, SessionID: "s", Receiver: "r"}, start); err != nil {
		t.Fatal(err)
	}
	evs, err := run(Lock{Queue: event.MainQueue, Receiver: "r", Session: "s", Max: 1, Limit: index, Nonce: 7}, start)
	if err != nil || len(evs) != 1 || evs[0].Type != event.Locked {
		t.Fatalf("lock: %v %v", evs, err)
	}
	later := start + int64(cfg.LockDuration) + 1
	if _, err := run(Settle{Queue: event.MainQueue, Token: evs[0].Token, Outcome: Complete}, later); !errors.Is(err, ErrSessionLockLost) {
		t.Fatalf("complete after the session lock ran out: %v", err)
	}
}

// A snapshot whose session numbering claims more numbers issued than it
// has sessions and free numbers (here next = 2^32-1) is refused: decoded,
// the next sessions would wrap to 0 and to a number in use, and ordinary
// events would then panic.
func TestSnapshotWithDamagedSessionNumberingRefused(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RequiresSession = true
	e := New()
	idx := uint64(0)
	now := int64(1_700_000_000_000_000_000)
	apply := func(ev event.Event) {
		t.Helper()
		idx++
		ev.Index, ev.Time = idx, now
		if err := e.Apply(&ev); err != nil {
			t.Fatal(err)
		}
	}
	apply(event.Event{Type: event.EntityCreated, Name: "q", Props: cfg.Encode()})
	apply(event.Event{Type: event.Enqueued, SessionID: "a"}) // seq 2, session number 1
	// The hostile part: the same state with next = 2^32-1.
	raw := e.Encode(nil)
	mark := []byte{1, 1, 0, 1} // has-sessions, next=1, no free numbers, 1 session
	i := bytes.Index(raw, mark)
	if i < 0 {
		t.Fatal("session table not found in encoding")
	}
	hostile := append(append(append([]byte{}, raw[:i+1]...), 0xff, 0xff, 0xff, 0xff, 0x0f), raw[i+2:]...)
	if _, err := Decode(hostile); err == nil {
		t.Fatal("a snapshot whose session numbering is at 2^32-1 with one session decoded; new sessions would wrap onto numbers in use")
	}
	if _, err := Decode(raw); err != nil {
		t.Fatalf("the undamaged snapshot: %v", err)
	}
}

func topicEvent(t event.Type) bool {
	switch t {
	case event.Published, event.Copied, event.RestoredCopy, event.SubscriptionCreated, event.SubscriptionUpdated,
		event.SubscriptionDeleted, event.RuleAdded, event.RuleRemoved:
		return true
	}
	return false
}
