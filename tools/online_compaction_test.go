package tools

import (
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// The tools read a data directory the server compacted by itself (a
// dead-lettered message pinned the log's front, and filler went through)
// as they read one `walbus compact` wrote: verify finds nothing, state
// reads the message from the archive, replay and audit go through.
func TestToolsOnOnlineCompaction(t *testing.T) {
	data := t.TempDir()
	s := newSceneWith(t, broker.Options{Dir: data, SegmentSize: 8 << 10, SnapshotEvery: 200,
		CompactBytes: 16 << 10, IdleCheckpoint: 10 * time.Millisecond})
	orders := s.queue("orders", projection.DefaultConfig())
	r := s.receiver(orders, event.MainQueue, "r", broker.PeekLock)
	s.send(orders, msg("d-0", "poison"))
	d := r.take()
	expectID(t, d, "d-0")
	r.settleProps(d, projection.DeadLetter, "Poison", nil)
	filler(s, orders, r, "f", 600)
	arcDir := layout.ArchiveDir(entityDirOf(t, data, "orders").Dir)
	deadline := time.Now().Add(20 * time.Second)
	for {
		arcs, _ := filepath.Glob(filepath.Join(arcDir, "*.wba"))
		if len(arcs) == 1 && orders.Bytes() < 64<<10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no compaction: archives %v, %d bytes", arcs, orders.Bytes())
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.close()

	if f := verifyUnchanged(t, data); len(f) != 0 {
		t.Fatal(sprintLines(f))
	}
	rep, err := State(data, "orders", StateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dlq := rep.Queues[1].Oldest; dlq == nil || dlq.MessageID != "d-0" || dlq.Archive == "" || dlq.Problem != "" {
		t.Fatalf("the dead-lettered message: %+v", dlq)
	}
	if err := Replay(io.Discard, data, ReplayOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Audit(data, "orders", AuditOptions{Seq: d.Seq}); err != nil {
		t.Fatal(err)
	}
}
