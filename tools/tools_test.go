package tools

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

func stepTypes(l *Life) []string {
	var out []string
	for _, s := range l.Steps {
		out = append(out, s.Type)
	}
	return out
}

// m-2 of the golden scenario: abandoned twice, then its third lock ran
// out, which with MaxDeliveryCount 3 dead-letters it.
func TestAuditAbandonedTwiceThenDeadLettered(t *testing.T) {
	lives, err := Audit(goldenDir(t), "orders", AuditOptions{Seq: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(lives) != 1 {
		t.Fatalf("%d lives", len(lives))
	}
	l := lives[0]
	want := []string{"enqueued", "locked", "abandoned", "locked", "abandoned", "locked", "lock-expired", "dead-lettered"}
	if got := stepTypes(l); !slices.Equal(got, want) {
		t.Fatalf("steps %v, want %v", got, want)
	}
	if l.Outcome != "dead-lettered" || l.Deliveries != 3 || l.MessageID != "m-2" || !strings.HasPrefix(l.State, "available in dlq") {
		t.Fatalf("outcome %q, state %q, deliveries %d, id %q", l.Outcome, l.State, l.Deliveries, l.MessageID)
	}
	if !strings.Contains(l.Steps[7].What, "MaxDeliveryCountExceeded") || l.Steps[6].SincePrevious != "30s" {
		t.Fatalf("steps: %+v", l.Steps[6:])
	}
	// The same message by any route: its MessageId.
	byID, err := Audit(goldenDir(t), "orders", AuditOptions{MessageID: "m-2"})
	if err != nil || len(byID) != 1 || !slices.Equal(stepTypes(byID[0]), want) {
		t.Fatalf("by message id: %v %v", byID, err)
	}
}

// Three explicit abandons with MaxDeliveryCount 3: the third dead-letters
// in the same atomic group. Two messages share a MessageId: both audited.
func TestAuditExplicitAbandonsAndSharedMessageID(t *testing.T) {
	data := t.TempDir()
	s := newScene(t, data, 0)
	cfg := projection.DefaultConfig()
	cfg.MaxDeliveryCount = 3
	q := s.queue("q", cfg)
	s.send(q, msg("dup", "one"))
	s.send(q, msg("dup", "two"))
	r := s.receiver(q, event.MainQueue, "r", broker.PeekLock)
	for range 3 {
		s.advance(time.Second)
		d := r.take()
		if d.Seq != 2 {
			t.Fatalf("delivered seq %d", d.Seq)
		}
		r.settle(d, projection.Abandon, "")
	}
	d := r.take()
	r.settle(d, projection.Complete, "")
	s.close()

	lives, err := Audit(data, "q", AuditOptions{MessageID: "dup"})
	if err != nil {
		t.Fatal(err)
	}
	if len(lives) != 2 {
		t.Fatalf("%d lives", len(lives))
	}
	want := []string{"enqueued", "locked", "abandoned", "locked", "abandoned", "locked", "abandoned", "dead-lettered"}
	if got := stepTypes(lives[0]); !slices.Equal(got, want) || lives[0].Outcome != "dead-lettered" {
		t.Fatalf("first: %v %s", got, lives[0].Outcome)
	}
	if got := stepTypes(lives[1]); !slices.Equal(got, []string{"enqueued", "locked", "completed"}) || lives[1].Outcome != "completed" {
		t.Fatalf("second: %v %s", got, lives[1].Outcome)
	}
	if _, err := Audit(data, "q", AuditOptions{MessageID: "nope"}); err == nil {
		t.Fatal("audit of an unknown id succeeded")
	}
}

// Abandons and lock expiries in the dead-letter queue count no failed
// delivery, as the projection counts them: the audit keeps the count the
// message was dead-lettered with and agrees with the entity's state.
func TestAuditCountsNoDeliveriesInTheDeadLetterQueue(t *testing.T) {
	data := t.TempDir()
	s := newScene(t, data, 0)
	cfg := projection.DefaultConfig()
	cfg.LockDuration = 30 * time.Second
	q := s.queue("q", cfg)
	s.send(q, msg("m", "body"))
	r := s.receiver(q, event.MainQueue, "r", broker.PeekLock)
	r.settle(r.take(), projection.Abandon, "")
	r.settle(r.take(), projection.DeadLetter, "bad")
	dlq := s.receiver(q, event.DeadLetterQueue, "d", broker.PeekLock)
	dlq.settle(dlq.take(), projection.Abandon, "")
	dlq.take()
	s.advance(time.Minute) // its lock runs out
	d := dlq.take()
	if d.Deliveries != 1 {
		t.Fatalf("delivered from the dead-letter queue with %d failed deliveries, want 1", d.Deliveries)
	}
	s.close()

	lives, err := Audit(data, "q", AuditOptions{MessageID: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if l := lives[0]; l.Deliveries != 1 || len(l.Notes) != 0 {
		t.Fatalf("audit: %d failed deliveries, notes %q", l.Deliveries, l.Notes)
	}
}

func TestStateAtEarlierPoint(t *testing.T) {
	data := goldenDir(t)
	end, err := State(data, "orders", StateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	then, err := State(data, "orders", StateOptions{At: Point{Index: 12}})
	if err != nil {
		t.Fatal(err)
	}
	m, dlq := end.Queues[0], end.Queues[1]
	if m.Total != 1 || m.Deferred != 1 || dlq.Total != 1 || end.Index != 23 || end.Snapshot != 23 {
		t.Fatalf("at the end: %+v %+v", end, m)
	}
	m, dlq = then.Queues[0], then.Queues[1]
	if m.Available != 2 || m.Locked != 1 || m.Scheduled != 1 || m.Total != 4 || dlq.Total != 0 || then.Index != 12 ||
		then.Snapshot != 0 || m.LockCount != 1 || m.Locks[0].Seq != 3 || m.Oldest.Seq != 3 {
		t.Fatalf("at 12: %+v %+v", then, m)
	}
	// A time names the same point: event 12 happened at +23s, 13 at +25s.
	at24, err := State(data, "orders", StateOptions{At: Point{Time: sceneEpoch.Add(24 * time.Second).UnixNano()}})
	if err != nil {
		t.Fatal(err)
	}
	if at24.Index != 12 || at24.Queues[0].Locked != 1 {
		t.Fatalf("at +24s: index %d", at24.Index)
	}
}

// snapshotData writes a data directory whose queue "q" was snapshotted
// every few events, with its log truncated in front behind the snapshots.
func snapshotData(t *testing.T) string {
	data := t.TempDir()
	// A stop snapshots even a few events, as these tests were made for.
	s := newSceneWith(t, broker.Options{Dir: data, SegmentSize: 256, SnapshotEvery: 7, FinalSnapshotMin: 1})
	cfg := projection.DefaultConfig()
	cfg.MaxDeliveryCount = 2
	q := s.queue("q", cfg)
	r := s.receiver(q, event.MainQueue, "r", broker.PeekLock)
	for i := range 30 {
		s.send(q, msg(fmt.Sprint("m", i), "body"))
		s.advance(time.Second)
		if i%2 == 1 {
			d := r.take()
			outcome := projection.Complete
			if i%3 == 0 {
				outcome = projection.Abandon
			}
			r.settle(d, outcome, "")
		}
	}
	s.close()
	return data
}

// With frequent snapshots (and the log truncated in front behind them), a
// point-in-time state from the newest snapshot before the point plus the
// log equals the replay from the oldest snapshot, at every point. Snapshots
// are taken in the background, so now and then the last periodic one lands
// on the last event and the close's own snapshot right after it: then
// every point after the oldest snapshot the log continues uses one
// snapshot, which proves little, and the data is made again.
func TestStateFromSnapshotsEqualsReplay(t *testing.T) {
	for attempt := 1; ; attempt++ {
		used := stateFromSnapshotsEqualsReplay(t, snapshotData(t))
		if len(used) >= 2 {
			return
		}
		if attempt == 5 {
			t.Fatalf("rebuilds used snapshots %v in five data directories: the test proves little", used)
		}
	}
}

// stateFromSnapshotsEqualsReplay checks the rebuild at every point of data
// against the replay and returns the snapshots the rebuilds used.
func stateFromSnapshotsEqualsReplay(t *testing.T, data string) map[uint64]bool {
	t.Helper()
	if f := verifyUnchanged(t, data); len(f) != 0 {
		t.Fatalf("findings:\n%s", sprintLines(f))
	}
	end, err := Rebuild(data, "q", Point{})
	if err != nil {
		t.Fatal(err)
	}
	defer end.Close()
	if end.Snapshot == 0 {
		t.Fatal("the rebuild used no snapshot")
	}
	// The oracle: the oldest snapshot the log continues, then every event.
	e := entityDirOf(t, data, "q")
	ro, err := log.OpenReadOnly(e.LogDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	oracle, _ := trackingBase(e.SnapshotDir(), max(firstIndex(ro), 1)-1, Point{})
	if oracle == nil {
		t.Fatal("no base for the oracle")
	}
	base := oracle.LastIndex()
	used := map[uint64]bool{}
	_, err = readLog(ro, base+1, 0, func(ev *event.Event, _ string) error {
		if err := oracle.Apply(ev); err != nil {
			return err
		}
		r, err := Rebuild(data, "q", Point{Index: ev.Index})
		if err != nil {
			return err
		}
		defer r.Close()
		used[r.Snapshot] = true
		if !bytes.Equal(r.State.Encode(nil), oracle.Encode(nil)) {
			return fmt.Errorf("at %d: the rebuild from snapshot %d differs from the replay", ev.Index, r.Snapshot)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return used
}

func TestDumpShowsSegments(t *testing.T) {
	rep, err := Dump(goldenDir(t), DumpOptions{Entity: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Logs) != 1 {
		t.Fatalf("%d logs", len(rep.Logs))
	}
	l := rep.Logs[0]
	var got []string
	for _, s := range l.Segments {
		got = append(got, fmt.Sprintf("%s %d-%d %d", s.Name, s.First, s.Last, s.Records))
	}
	want := []string{"00000000000000000001 1-7 7", "00000000000000000008 8-19 12", "00000000000000000020 20-23 4"}
	if !slices.Equal(got, want) {
		t.Fatalf("segments %q, want %q", got, want)
	}
	if l.Records != 23 || len(l.Snapshots) != 1 || l.Snapshots[0].Index != 23 || l.Snapshots[0].RawSize == 0 || l.Snapshots[0].Problem != "" {
		t.Fatalf("dump: %+v", l)
	}
	counts := map[string]int{}
	for _, s := range l.Segments {
		for _, tc := range s.Types {
			counts[tc.Type] += tc.Count
		}
	}
	if counts["locked"] != 6 || counts["abandoned"] != 2 || counts["enqueued"] != 4 {
		t.Fatalf("counts by type: %v", counts)
	}
}

func TestReplayJSONAndDamage(t *testing.T) {
	var out bytes.Buffer
	if err := Replay(&out, goldenDir(t), ReplayOptions{JSON: true}); err != nil {
		t.Fatal(err)
	}
	n := 0
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var r EventRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		n++
	}
	if n != 3+23 {
		t.Fatalf("%d events, want 26", n)
	}

	data := copyTree(t, goldenDir(t))
	e := entityDirOf(t, data, "orders")
	mutate(t, segPath(e, 20), func(b []byte) []byte { return b[:len(b)-3] })
	before := treeSums(t, data)
	out.Reset()
	var diag bytes.Buffer
	err := Replay(&out, data, ReplayOptions{Entity: "orders", Diag: &diag})
	var dmg *log.Damage
	if !errors.As(err, &dmg) || !dmg.Tail || dmg.Index != 23 {
		t.Fatalf("replay of a torn log: %v", err)
	}
	if !strings.Contains(out.String(), "\n22 ") || strings.Contains(out.String(), "\n23 ") {
		t.Fatalf("output:\n%s", out.String())
	}
	if !strings.Contains(diag.String(), "reads only up to index 22") {
		t.Fatalf("diag: %s", diag.String())
	}
	if !sameTree(before, treeSums(t, data)) {
		t.Fatal("replay changed the data directory")
	}
}

func TestParsePoint(t *testing.T) {
	for in, want := range map[string]Point{
		"42":                             {Index: 42},
		"2026-01-01T00:00:00Z":           {Time: sceneEpoch.UnixNano()},
		"2026-01-01T01:00:00.5+01:00":    {Time: sceneEpoch.Add(500 * time.Millisecond).UnixNano()},
		"2026-01-01T00:00:00.000000001Z": {Time: sceneEpoch.UnixNano() + 1},
	} {
		if got, err := ParsePoint(in); err != nil || got != want {
			t.Errorf("ParsePoint(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-1", "yesterday", "2026-01-01"} {
		if _, err := ParsePoint(bad); err == nil {
			t.Errorf("ParsePoint(%q) succeeded", bad)
		}
	}
}

func TestPreviewBody(t *testing.T) {
	for _, c := range []struct {
		body string
		max  int
		want string
	}{
		{"hello", 64, `"hello"`},
		{"hello", 3, `"hel"...(5 bytes)`},
		{"h\u00e9llo", 2, `"h"...(6 bytes)`}, // a cut character is left out
		{"\x00Su", 64, "hex:005375"},
		{"\x00Suxyz", 2, "hex:0053...(6 bytes)"},
	} {
		if got := previewBody([]byte(c.body), c.max).text(len(c.body)); got != c.want {
			t.Errorf("preview %q/%d = %s, want %s", c.body, c.max, got, c.want)
		}
	}
}

// A replay that starts late starts from a snapshot, and says the same as
// the whole replay from there on, delivery counts included.
func TestReplayFromSnapshot(t *testing.T) {
	data := snapshotData(t)
	var full bytes.Buffer
	if err := Replay(&full, data, ReplayOptions{Entity: "q"}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(full.String()), "\n")[2:] // after the headers
	last, _ := strconv.ParseUint(strings.Fields(lines[len(lines)-1])[0], 10, 64)
	for _, from := range []uint64{1, last / 2, last * 3 / 4, last} {
		var part bytes.Buffer
		if err := Replay(&part, data, ReplayOptions{Entity: "q", From: Point{Index: from}}); err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, l := range lines {
			if n, _ := strconv.ParseUint(strings.Fields(l)[0], 10, 64); n >= from {
				want = append(want, l)
			}
		}
		got := strings.Split(strings.TrimSpace(part.String()), "\n")
		if len(got) < 2 || !slices.Equal(got[2:], want) {
			t.Fatalf("from %d:\n%s\nwant:\n%s", from, part.String(), strings.Join(want, "\n"))
		}
	}
	if !strings.Contains(full.String(), "deliveries=1") {
		t.Fatal("no delivery counts in the replay")
	}
	e := entityDirOf(t, data, "q")
	ro, err := log.OpenReadOnly(e.LogDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if st, before := trackingBase(e.SnapshotDir(), max(firstIndex(ro), 1)-1, Point{Index: last}); st == nil || !before || st.LastIndex() < last/2 {
		t.Fatal("a replay of the end of the log does not start from a recent snapshot")
	}
}

func TestStateSessions(t *testing.T) {
	base, _ := fuzzBaseDir(t)
	rep, err := State(base, "sessions", StateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q := rep.Queues[0]
	if q.SessionCount != 2 || len(q.Sessions) != 2 || q.LockCount != 1 || q.Locks[0].Seq != 4 {
		t.Fatalf("sessions queue: %+v", q)
	}
	a, b := q.Sessions[0], q.Sessions[1]
	if a.ID != "a" || a.Owner == "" || a.StateSize != len("state of a") || a.Messages != 1 ||
		b.ID != "b" || b.Owner != "" || b.Messages != 1 {
		t.Fatalf("sessions: %+v", q.Sessions)
	}
	if rep.Queues[1].SessionCount != -1 {
		t.Fatalf("the dead-letter queue has sessions: %+v", rep.Queues[1])
	}
}
