package projection

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/walbus/walbus/log"
)

// A state encoded before the transfer dead-letter subqueue (version 2:
// two queues) decodes, with that subqueue empty, to the state it was.
func TestDecodesStateOfVersion2(t *testing.T) {
	h := newHistory(3, modelConfigs["ttl-dedup-dlq"], t.Fatalf)
	for len(h.events) < 300 || h.e.Queue(log.DeadLetterQueue).Counts().Total == 0 {
		h.step()
	}
	e := replay(t, h.events)
	// Empty the transfer dead-letter queue, as it is in any older state.
	e.queues[log.TransferDeadLetterQueue] = newQueue(log.TransferDeadLetterQueue, false)
	full := e.Encode(nil)
	var queues []byte
	for _, q := range e.queues[:2] {
		queues = q.encode(queues)
	}
	last := e.queues[2].encode(nil)
	header := full[:len(full)-len(queues)-len(last)-1]
	if full[0] != 3 || full[len(header)] != 3 {
		t.Fatalf("version %d with %d queues", full[0], full[len(header)])
	}
	old := append([]byte{2}, header[1:]...)
	old = binary.AppendUvarint(old, 2)
	old = append(old, queues...)
	got, err := Decode(old)
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
