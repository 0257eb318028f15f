package projection

import (
	"bytes"
	"slices"
	"testing"
)

// A frozen copy encodes as its original did when it was taken, whatever
// the original does after: queues of every model configuration, and a
// topic.
func TestFrozenEncodesAsTaken(t *testing.T) {
	for _, name := range slices.Sorted(mapsKeys(modelConfigs)) {
		h := newHistory(9, modelConfigs[name], t.Fatalf)
		for len(h.events) < 300 {
			h.step()
		}
		want := h.e.Encode(nil)
		f := h.e.Frozen()
		for range 300 {
			h.step()
		}
		if !bytes.Equal(f.Encode(nil), want) {
			t.Fatalf("%s: the frozen copy encodes otherwise after the original moved on", name)
		}
	}
	l := newTopicLog(t)
	e := topicSeed(t)
	want := e.Encode(nil)
	f := e.Frozen()
	l.e = e
	all := e.Subscription("all").Queue()
	lk := l.must(Lock{Queue: all, Receiver: "r2", Max: 10, Limit: 1 << 62, Nonce: 9})
	for _, ev := range lk {
		l.must(Settle{Queue: all, Token: ev.Token, Outcome: Complete})
	}
	l.must(AddRule{Queue: all, Rule: sqlRule("more", "1=1", "")})
	l.must(DeleteSubscription{Name: "copies"})
	l.must(Send{Messages: []Message{{Body: []byte("late"), MessageID: "late", SessionID: "s"}}})
	if !bytes.Equal(f.Encode(nil), want) {
		t.Fatal("the topic's frozen copy encodes otherwise after the original moved on")
	}
	if bytes.Equal(e.Encode(nil), want) {
		t.Fatal("the original did not move: the test shows nothing")
	}
}
