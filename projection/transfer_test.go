package projection

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
)

// States encoded by earlier versions decode to the state they were:
// version 3 (before the via section) with no MessageIds remembered for
// entities forwarding here, version 2 (before the transfer dead-letter
// subqueue: two queues) with that subqueue empty too.
func TestDecodesStateOfVersion2(t *testing.T) {
	h := newHistory(3, modelConfigs["ttl-dedup-dlq"], t.Fatalf)
	for len(h.events) < 300 || h.e.Queue(event.DeadLetterQueue).Counts().Total == 0 {
		h.step()
	}
	e := replay(t, h.events)
	if len(e.via) == 0 {
		t.Fatal("the history remembers no MessageIds for entities on the way: the test shows nothing")
	}
	// Forget those, as any older state has none.
	e.via = map[string]*index.Dedup{}
	v3 := encodeV4(e)
	var queues []byte
	for _, q := range e.queues[:2] {
		queues = q.encode(queues, nil)
	}
	last := e.queues[2].encode(nil, nil)
	header := v3[:len(v3)-len(queues)-len(last)-1]
	if v3[0] != 4 || header[len(header)-1] != 0 || v3[len(header)] != 3 {
		t.Fatalf("version %d, %d vias, %d queues", v3[0], header[len(header)-1], v3[len(header)])
	}
	header = header[:len(header)-1] // without the via section, and the version
	v3[0] = 3
	v3 = append(v3[:len(header)], v3[len(header)+1:]...)
	got, err := Decode(v3)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Encode(nil), e.Encode(nil)) {
		t.Fatal("a version 3 state decodes to another state")
	}

	// Empty the transfer dead-letter queue, as it is in any older state.
	e.queues[event.TransferDeadLetterQueue] = newQueue(event.TransferDeadLetterQueue, false, &e.cfg)
	full := e.Encode(nil)
	old := append([]byte{2}, header[1:]...)
	old = binary.AppendUvarint(old, 2)
	old = append(old, queues...)
	got, err = Decode(old)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Encode(nil), full) {
		t.Fatal("a version 2 state decodes to another state")
	}
	if _, err := Decode(append(append([]byte{3}, header[1:]...), append([]byte{2}, queues...)...)); err == nil {
		t.Fatal("a version 3 state with two queues decoded")
	}
}

// encodeV4 is e (not a topic) as version 4 encoded it: version 5 without
// its topic section, which for a queue is five zero bytes.
func encodeV4(e *Entity) []byte {
	b, _ := e.encode(5, nil, nil)
	if b[0] != 5 || !bytes.Equal(b[len(b)-5:], make([]byte, 5)) {
		panic("not a version 5 queue state")
	}
	b = b[:len(b)-5]
	b[0] = 4
	return b
}

// A source that crashed after its run arrived sends it again, longer by
// what became durable meanwhile: the repeated messages are dropped one
// by one and the new ones arrive, each once.
func TestArrivalRepeatedInALongerRun(t *testing.T) {
	e := New()
	var index uint64
	run := func(cmd Command) []event.Event {
		t.Helper()
		evs, err := e.Decide(cmd, 1_700_000_000_000_000_000)
		if err != nil {
			t.Fatal(err)
		}
		for i := range evs {
			index++
			evs[i].Index = index
			if err := e.Apply(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		return evs
	}
	run(Configure{Name: "out", Config: DefaultConfig()})
	msgs := func(ids ...string) []Message {
		var out []Message
		for _, id := range ids {
			out = append(out, Message{MessageID: id, Body: []byte(id)})
		}
		return out
	}
	sent := func(evs []event.Event) (ids []string) {
		for _, ev := range evs {
			if ev.Type == event.Enqueued {
				ids = append(ids, ev.MessageID)
			}
		}
		return ids
	}
	if got := sent(run(Send{Queue: event.MainQueue, Messages: msgs("a", "b"), Arrival: &Arrival{Source: 9, Seqs: []uint64{10, 12}}})); len(got) != 2 {
		t.Fatalf("first arrival sent %v", got)
	}
	got := sent(run(Send{Queue: event.MainQueue, Messages: msgs("a", "b", "c"), Arrival: &Arrival{Source: 9, Seqs: []uint64{10, 12, 14}}}))
	if len(got) != 1 || got[0] != "c" {
		t.Fatalf("the longer repeat sent %v, want [c]", got)
	}
	if evs := run(Send{Queue: event.MainQueue, Messages: msgs("c"), Arrival: &Arrival{Source: 9, Seqs: []uint64{14}}}); len(evs) != 0 {
		t.Fatalf("a whole repeat appended %v", evs)
	}
	if c := e.Queue(event.MainQueue).Counts(); c.Total != 3 {
		t.Fatalf("the destination holds %d messages, want 3", c.Total)
	}
	for _, bad := range []*Arrival{{Source: 9, Seqs: []uint64{20}}, {Source: 9, Seqs: []uint64{21, 20}}} {
		if _, err := e.Decide(Send{Queue: event.MainQueue, Messages: msgs("x", "y"), Arrival: bad}, 0); !errors.Is(err, ErrInvalid) {
			t.Fatalf("arrival %v of two messages: %v", bad.Seqs, err)
		}
	}
}
