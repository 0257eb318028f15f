package projection

import (
	"bytes"
	"encoding/binary"
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
