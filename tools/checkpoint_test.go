package tools

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// The checkpoints an idle queue writes (broker Options.IdleCheckpoint)
// replay as queue-less events, and a data directory cut behind them
// verifies clean and rebuilds to the state the broker had.
func TestCheckpointsInReplayAndVerify(t *testing.T) {
	dir := t.TempDir()
	var snapshots atomic.Int32
	s := newSceneWith(t, broker.Options{Dir: dir, SegmentSize: 4 << 10, IdleCheckpoint: 50 * time.Millisecond,
		OnSnapshot: func(broker.SnapshotStats) { snapshots.Add(1) }})
	e := s.queue("orders", projection.DefaultConfig())
	rc := s.receiver(e, event.MainQueue, "r", broker.PeekLock)
	for i := range 60 {
		s.send(e, msg(fmt.Sprint("m", i), strings.Repeat("x", 200)))
		rc.settle(rc.take(), projection.Complete, "")
	}
	s.send(e, msg("left", "still queued"))
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if snapshots.Load() >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the idle queue wrote no two checkpoints")
		}
	}
	s.close()

	var out bytes.Buffer
	if err := Replay(&out, dir, ReplayOptions{Entity: "orders"}); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, " checkpoint ") {
			lines = append(lines, line)
		}
	}
	if len(lines) < 2 || !strings.HasSuffix(strings.Join(strings.Fields(lines[0]), " "), "checkpoint - -") {
		t.Fatalf("checkpoint lines %q in\n%s", lines, out.String())
	}
	if n, first := countCheckpoints(t, dir); n < 2 || first <= 2 {
		t.Fatalf("%d checkpoints, log starts at %d: want two or more, and the settled messages cut", n, first)
	}
	findings, err := Verify(dir)
	if err != nil || len(findings) != 0 {
		t.Fatalf("verify: %v %v", findings, err)
	}
	st, err := State(dir, "orders", StateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := st.Queues[0]; q.Total != 1 || q.Oldest == nil || q.Oldest.MessageID != "left" {
		t.Fatalf("state after the cut: %+v", q)
	}
}

// countCheckpoints replays the entity log as JSON and returns how many
// checkpoint events it holds and the index it starts at.
func countCheckpoints(t *testing.T, dir string) (n int, first uint64) {
	t.Helper()
	var out bytes.Buffer
	if err := Replay(&out, dir, ReplayOptions{Entity: "orders", JSON: true}); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r EventRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if first == 0 {
			first = r.Index
		}
		if r.Type == "checkpoint" {
			if r.Queue != "" || r.Seq != 0 {
				t.Fatalf("a checkpoint with queue %q seq %d", r.Queue, r.Seq)
			}
			n++
		}
	}
	return n, first
}
