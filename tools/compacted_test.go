package tools

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/tools/compaction"
)

// The compacted scenario: queue "orders" on logs of 8 KiB segments, written
// by a real broker and compacted twice by walbus compact --retain.
//
// Phase 1, before the first compaction:
//
//	seq 2  d-0  dead-lettered (reason Poison): it pins the log's front
//	seq 5  d-1  abandoned with properties, then deferred with properties
//	       f-*  filler, each completed at once: several segments of it
//	       p-1  the last message sent, deferred: in the log's last segment,
//	            it keeps the server from truncating the log by itself later
//
// Phase 2, after the first compaction: d-1 is received by its
// SequenceNumber (read from the archive) and completed, and more filler
// goes through; then the second compaction.
//
// The same phase 2 also runs on a copy never compacted: the oracle of
// what the whole history was.
type compactedScene struct {
	plain    string // data directory never compacted, with phase 1 and 2
	mid      string // compacted once, then phase 2: before the second compaction
	data     string // compacted twice
	retained string // the history both compactions dropped
	midRet   string // the history the first compaction dropped (for mid)
	cut1     uint64 // the first compaction's cut
	cut2     uint64
	d1, p1   uint64 // SequenceNumbers of d-1 and p-1
}

var compacted struct {
	once  sync.Once
	scene compactedScene
	root  string
	err   error
}

const compactedFiller = 60

// compactedFixture builds the compacted scenario once per test binary.
// Tests must not change its directories: they copy them first.
func compactedFixture(t testing.TB) compactedScene {
	t.Helper()
	compacted.once.Do(func() {
		compacted.scene, compacted.err = buildCompacted(t)
	})
	if compacted.err != nil {
		t.Fatal(compacted.err)
	}
	return compacted.scene
}

func buildCompacted(t testing.TB) (compactedScene, error) {
	var cs compactedScene
	root, err := os.MkdirTemp("", "walbus-tools-compacted-")
	if err != nil {
		return cs, err
	}
	compacted.root = root
	cs.plain = filepath.Join(root, "plain")
	cs.mid = filepath.Join(root, "mid")
	cs.data = filepath.Join(root, "data")
	cs.retained = filepath.Join(root, "retained")
	cs.midRet = filepath.Join(root, "mid-retained")
	opts := broker.Options{Dir: cs.plain, SegmentSize: 8 << 10}

	s := newSceneWith(t, opts)
	cfg := projection.DefaultConfig()
	cfg.LockDuration = 30 * time.Second
	orders := s.queue("orders", cfg)
	r := s.receiver(orders, event.MainQueue, "r", broker.PeekLock)
	s.send(orders, msg("d-0", "poison"))
	s.advance(time.Second)
	d := r.take()
	expectID(t, d, "d-0")
	r.settleProps(d, projection.DeadLetter, "Poison", nil)
	s.send(orders, msg("d-1", "deferred before the compaction"))
	s.advance(time.Second)
	d = r.take()
	expectID(t, d, "d-1")
	cs.d1 = d.Seq
	r.settleProps(d, projection.Abandon, "", amqpProps("try", "again"))
	s.advance(time.Second)
	d = r.take()
	expectID(t, d, "d-1")
	r.settleProps(d, projection.Defer, "", amqpProps("kept", "yes"))
	filler(s, orders, r, "f", compactedFiller)
	s.send(orders, msg("p-1", "pinned"))
	s.advance(time.Second)
	d = r.take()
	expectID(t, d, "p-1")
	r.settleProps(d, projection.Defer, "", nil)
	cs.p1 = d.Seq
	s.advance(time.Second)
	at := s.clock.Now()
	s.close()

	copyDir(t, cs.plain, cs.mid)
	reps, err := compaction.Compact(cs.mid, compaction.Options{Retain: cs.midRet})
	if err != nil {
		return cs, err
	}
	if len(reps) != 1 || reps[0].Cut == 0 {
		return cs, fmt.Errorf("first compaction: %+v", reps)
	}
	cs.cut1 = reps[0].Cut
	copyDir(t, cs.midRet, cs.retained)

	for _, dir := range []string{cs.plain, cs.mid} {
		phase2(t, dir, at, cs.d1)
	}
	copyDir(t, cs.mid, cs.data)
	reps, err = compaction.Compact(cs.data, compaction.Options{Retain: cs.retained})
	if err != nil {
		return cs, err
	}
	if len(reps) != 1 || reps[0].Cut <= cs.cut1 {
		return cs, fmt.Errorf("second compaction: %+v", reps)
	}
	cs.cut2 = reps[0].Cut
	return cs, nil
}

// phase2 reopens the broker on dir at time at: d-1 is received by its
// SequenceNumber and completed, then more filler goes through.
func phase2(t testing.TB, dir string, at time.Time, d1 uint64) {
	s := &scene{t: t, dir: dir, clock: broker.NewFakeClock(at)}
	b, _, err := broker.Open(broker.Options{Dir: dir, SegmentSize: 8 << 10, Clock: s.clock, Seed: 1})
	if err != nil {
		t.Fatalf("reopen %s: %v", dir, err)
	}
	s.b = b
	orders, err := b.Entity("orders")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan []broker.Delivery, 1)
	orders.ReceiveDeferred(event.MainQueue, "late", "", []uint64{d1}, broker.PeekLock, func(ds []broker.Delivery, err error) {
		if err != nil {
			t.Errorf("receive deferred: %v", err)
		}
		ch <- ds
	})
	ds := <-ch
	if len(ds) != 1 || ds[0].MessageID != "d-1" {
		t.Fatalf("received %+v", ds)
	}
	s.advance(time.Second)
	s.settle(orders, event.MainQueue, ds[0], projection.Complete, "")
	r := s.receiver(orders, event.MainQueue, "r2", broker.PeekLock)
	filler(s, orders, r, "g", compactedFiller)
	s.close()
}

// filler sends n messages and completes each.
func filler(s *scene, e *broker.Entity, r *receiver, prefix string, n int) {
	body := strings.Repeat("x", 120)
	for i := range n {
		s.send(e, msg(fmt.Sprintf("%s-%d", prefix, i), body))
		s.advance(100 * time.Millisecond)
		d := r.take()
		r.settle(d, projection.Complete, "")
	}
}

func (rc *receiver) settleProps(d broker.Delivery, outcome projection.Outcome, reason string, props []byte) {
	rc.s.t.Helper()
	ch := make(chan error, 1)
	rc.e.Settle(rc.queue, broker.Settlement{Token: d.Token, Outcome: outcome, Reason: reason, Props: props}, func(err error) { ch <- err })
	if err := <-ch; err != nil {
		rc.s.t.Fatalf("settle %d %s: %v", d.Seq, outcome, err)
	}
}

// amqpProps is an encoded AMQP map {k: v} of two short strings.
func amqpProps(k, v string) []byte {
	return append(append([]byte{0xc1, byte(1 + 2 + len(k) + 2 + len(v)), 2, 0xa1, byte(len(k))}, k...), append([]byte{0xa1, byte(len(v))}, v...)...)
}

// replayJSON replays entity (all logs for "") of data as JSON records.
func replayJSON(t *testing.T, data string, opts ReplayOptions) ([]EventRecord, string) {
	t.Helper()
	var out, diag bytes.Buffer
	opts.JSON, opts.Diag = true, &diag
	if err := Replay(&out, data, opts); err != nil {
		t.Fatalf("replay %s: %v\n%s", data, err, diag.String())
	}
	var recs []EventRecord
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r EventRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs, diag.String()
}

// Without --retained, replay shows the archived records first, in index
// order and marked, then the log; what compaction dropped is missing, and
// it says so once instead of showing wrong delivery counts.
func TestReplayCompactedShowsArchived(t *testing.T) {
	cs := compactedFixture(t)
	before := treeSums(t, cs.data)
	recs, diag := replayJSON(t, cs.data, ReplayOptions{Entity: "orders"})
	var archived []uint64
	prev := uint64(0)
	for _, r := range recs {
		if r.Index <= prev {
			t.Fatalf("index %d after %d", r.Index, prev)
		}
		prev = r.Index
		switch {
		case r.Source == SourceArchive:
			archived = append(archived, r.Index)
		case r.Source != SourceLog:
			t.Fatalf("record %d from %q", r.Index, r.Source)
		case r.Index < cs.cut2-1:
			t.Fatalf("log record %d before the log's first index %d", r.Index, cs.cut2-1)
		}
		if r.Deliveries != nil {
			t.Fatalf("record %d has a delivery count across a gap in history", r.Index)
		}
	}
	if want := []uint64{2, 4, cs.p1}; !slices.Equal(archived, want) {
		t.Fatalf("archived records %v, want %v", archived, want)
	}
	if recs[3].Index != cs.cut2-1 || recs[len(recs)-1].Index != 374 {
		t.Fatalf("log records %d..%d", recs[3].Index, recs[len(recs)-1].Index)
	}
	if strings.Count(diag, "compacted away") != 1 || !strings.Contains(diag, "--retained") {
		t.Fatalf("diag: %q", diag)
	}

	// Filters apply to archived records as to the log's.
	recs, _ = replayJSON(t, cs.data, ReplayOptions{Entity: "orders", From: Point{Index: 3}, To: Point{Index: 320},
		Types: []event.Type{event.Enqueued}})
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%d/%s/%s", r.Index, r.Type, r.Source))
	}
	if want := []string{"190/enqueued/archive", "318/enqueued/log"}; !slices.Equal(got, want) {
		t.Fatalf("filtered: %v, want %v", got, want)
	}
	var text bytes.Buffer
	if err := Replay(&text, cs.data, ReplayOptions{Entity: "orders", To: Point{Index: 4}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "reason=Poison source=archive\n") {
		t.Fatalf("text:\n%s", text.String())
	}
	if !sameTree(before, treeSums(t, cs.data)) {
		t.Fatal("replay changed the data directory")
	}
}

// With the history both compactions retained, replay reads as the replay
// of the same directory never compacted: the same events in the same
// order, delivery counts included, whatever the filters.
func TestReplayRetainedEqualsUncompacted(t *testing.T) {
	cs := compactedFixture(t)
	for _, c := range []struct {
		name string
		opts ReplayOptions
	}{
		{"all", ReplayOptions{}},
		{"orders", ReplayOptions{Entity: "orders", Bodies: true}},
		{"range", ReplayOptions{Entity: "orders", From: Point{Index: 3}, To: Point{Index: 330}}},
		{"late", ReplayOptions{Entity: "orders", From: Point{Index: 250}}},
		{"types", ReplayOptions{Entity: "orders", Types: []event.Type{event.Locked, event.Abandoned, event.Deferred, event.DeadLettered}}},
		{"time", ReplayOptions{Entity: "orders", From: Point{Time: sceneEpoch.Add(9 * time.Second).UnixNano()},
			To: Point{Time: sceneEpoch.Add(12 * time.Second).UnixNano()}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, wantDiag := replayJSON(t, cs.plain, c.opts)
			for _, run := range []struct{ data, retained string }{{cs.data, cs.retained}, {cs.mid, cs.midRet}} {
				opts := c.opts
				opts.Retained = run.retained
				got, diag := replayJSON(t, run.data, opts)
				sources := map[string]int{}
				for i := range got {
					sources[got[i].Source]++
					got[i].Source = SourceLog
				}
				if len(got) != len(want) {
					t.Fatalf("%s: %d records, want %d", filepath.Base(run.data), len(got), len(want))
				}
				for i := range want {
					if !reflect.DeepEqual(got[i], want[i]) {
						t.Fatalf("%s: record %d:\n got %+v\nwant %+v", filepath.Base(run.data), i, got[i], want[i])
					}
				}
				if diag != wantDiag {
					t.Fatalf("diag %q, want %q", diag, wantDiag)
				}
				if c.name == "all" && (sources[SourceArchive] == 0 || sources[SourceRetained] == 0 || sources[SourceLog] == 0) {
					t.Fatalf("%s: sources %v", filepath.Base(run.data), sources)
				}
			}
		})
	}
	// The text table too, but for the marks.
	var plain, data bytes.Buffer
	if err := Replay(&plain, cs.plain, ReplayOptions{Entity: "orders"}); err != nil {
		t.Fatal(err)
	}
	if err := Replay(&data, cs.data, ReplayOptions{Entity: "orders", Retained: cs.retained}); err != nil {
		t.Fatal(err)
	}
	unmarked := strings.NewReplacer(" source=archive", "", " source=retained", "").Replace(data.String())
	if unmarked != plain.String() {
		t.Fatalf("text differs:\n%s\nwant:\n%s", unmarked, plain.String())
	}
}

// Retained history of another data directory's entity is refused.
func TestReplayRetainedOfAnotherEntity(t *testing.T) {
	cs := compactedFixture(t)
	retained := copyTree(t, cs.retained)
	if err := os.WriteFile(filepath.Join(compaction.RetainedDir(retained, 1), "entity-name"), []byte("payments\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	err := Replay(io.Discard, cs.data, ReplayOptions{Entity: "orders", Retained: retained})
	if err == nil || !strings.Contains(err.Error(), `is for entity "payments", not "orders"`) {
		t.Fatalf("replay: %v", err)
	}
	if _, err := Audit(cs.data, "orders", AuditOptions{Seq: 5, Retained: retained}); err == nil {
		t.Fatal("audit accepted another entity's history")
	}
}

// A damaged archive: replay says which records it could not read, goes
// on with the log, and fails.
func TestReplayDamagedArchive(t *testing.T) {
	cs := compactedFixture(t)
	data := copyTree(t, cs.data)
	flipInBlock(t, archivePath(t, data))
	var out, diag bytes.Buffer
	err := Replay(&out, data, ReplayOptions{Entity: "orders", Diag: &diag})
	if err == nil || !strings.Contains(err.Error(), "3 archived records do not read back") {
		t.Fatalf("replay: %v", err)
	}
	if !strings.Contains(diag.String(), "record 2 in arc-00000000000000000319.wba does not read back") ||
		!strings.Contains(out.String(), "\n374 ") {
		t.Fatalf("diag:\n%s\nout:\n%s", diag.String(), out.String())
	}
}

func stepsOf(l *Life) []string {
	var out []string
	for _, s := range l.Steps {
		out = append(out, fmt.Sprintf("%d %s %s", s.Index, s.Type, s.Source))
	}
	return out
}

// d-1 was deferred before the first compaction and completed after it.
// Without the retained history its audit shows its archived records and
// the log's, and says what was compacted away between them; with it, the
// whole life, as on the directory never compacted.
func TestAuditDeferredBeforeCompactionCompletedAfter(t *testing.T) {
	cs := compactedFixture(t)
	lives, err := Audit(cs.mid, "orders", AuditOptions{Seq: cs.d1})
	if err != nil {
		t.Fatal(err)
	}
	l := lives[0]
	want := []string{"5 enqueued archive", "7 abandoned archive", "9 deferred archive", "193 locked log", "194 completed log"}
	if got := stepsOf(l); !slices.Equal(got, want) {
		t.Fatalf("steps %q, want %q", got, want)
	}
	if l.Outcome != "completed" || l.Deliveries != 1 || len(l.Notes) != 1 ||
		!strings.Contains(l.Notes[0], "history between index 6 and 105 was compacted away (98 records)") {
		t.Fatalf("life: %s, %d deliveries, notes %q", l.Outcome, l.Deliveries, l.Notes)
	}

	plain, err := Audit(cs.plain, "orders", AuditOptions{Seq: cs.d1})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []struct{ data, retained string }{{cs.mid, cs.midRet}, {cs.data, cs.retained}} {
		lives, err := Audit(run.data, "orders", AuditOptions{Seq: cs.d1, Retained: run.retained})
		if err != nil {
			t.Fatal(err)
		}
		got := lives[0]
		for i := range got.Steps {
			got.Steps[i].Source = SourceLog
		}
		gotJSON, _ := json.Marshal(got)
		wantJSON, _ := json.Marshal(plain[0])
		if !bytes.Equal(gotJSON, wantJSON) {
			t.Fatalf("%s: with retained history:\n%s\nwant\n%s", filepath.Base(run.data), gotJSON, wantJSON)
		}
	}
	// After the second compaction d-1 is gone from the archive and the log.
	if _, err := Audit(cs.data, "orders", AuditOptions{Seq: cs.d1}); err == nil || !strings.Contains(err.Error(), "compacted away") {
		t.Fatalf("audit of a message compacted away: %v", err)
	}
}

// p-1 was deferred in records compaction dropped: where it stands comes
// from the state, not from the steps kept.
func TestAuditArchivedMessageStandsAsStateSays(t *testing.T) {
	cs := compactedFixture(t)
	lives, err := Audit(cs.data, "orders", AuditOptions{Seq: cs.p1})
	if err != nil {
		t.Fatal(err)
	}
	l := lives[0]
	if got := stepsOf(l); !slices.Equal(got, []string{fmt.Sprintf("%d enqueued archive", cs.p1)}) || l.Outcome != "pending" ||
		l.State != "deferred in main (from the entity's state)" {
		t.Fatalf("steps %q, outcome %s, state %q", got, l.Outcome, l.State)
	}
	lives, err = Audit(cs.data, "orders", AuditOptions{Seq: cs.p1, Retained: cs.retained})
	if err != nil {
		t.Fatal(err)
	}
	if l := lives[0]; len(l.Steps) != 3 || l.Steps[2].Type != "deferred" || l.Steps[2].Source != SourceRetained || len(l.Notes) != 0 ||
		!strings.HasPrefix(l.State, "deferred in main;") {
		t.Fatalf("with retained history: %q, %q, notes %q", stepsOf(l), l.State, l.Notes)
	}
}

func TestStateReadsArchivedRecords(t *testing.T) {
	cs := compactedFixture(t)
	rep, err := State(cs.data, "orders", StateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, dlq := rep.Queues[0].Oldest, rep.Queues[1].Oldest
	if m == nil || m.Seq != cs.p1 || m.MessageID != "p-1" || m.Archive != "arc-00000000000000000319.wba" || m.Problem != "" ||
		dlq == nil || dlq.Seq != 2 || dlq.MessageID != "d-0" || dlq.Problem != "" || len(rep.Notes) != 0 {
		t.Fatalf("state: %+v %+v %+v", rep, m, dlq)
	}
	// Without the archive the record is missing, as the server would find.
	data := copyTree(t, cs.data)
	if err := os.Remove(archivePath(t, data)); err != nil {
		t.Fatal(err)
	}
	rep, err = State(data, "orders", StateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if m := rep.Queues[0].Oldest; m.Problem != "record 190 is before the log (which starts at 318) and in no archive" {
		t.Fatalf("oldest: %+v", m)
	}
}

func TestDumpListsArchives(t *testing.T) {
	cs := compactedFixture(t)
	rep, err := Dump(cs.data, DumpOptions{Entity: "orders", Retained: cs.retained})
	if err != nil {
		t.Fatal(err)
	}
	l := rep.Logs[0]
	if len(l.Archives) != 1 {
		t.Fatalf("archives: %+v", l.Archives)
	}
	a := l.Archives[0]
	fi, err := os.Stat(archivePath(t, cs.data))
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "arc-00000000000000000319.wba" || a.Records != 3 || a.First != 2 || a.Last != cs.p1 || a.Size != fi.Size() ||
		a.RawSize == 0 || a.Ratio != float64(a.RawSize)/float64(a.Size) || a.Problem != "" ||
		!reflect.DeepEqual(a.Types, []TypeCount{{"enqueued", 2}, {"dead-lettered", 1}}) {
		t.Fatalf("archive: %+v", a)
	}
	var names []string
	for _, h := range l.Retained {
		names = append(names, fmt.Sprintf("%s %d-%d %d", h.Name, h.First, h.Last, h.Records))
	}
	want := []string{"history-00000000000000000001-00000000000000000106.wba 1-106 101",
		"history-00000000000000000005-00000000000000000318.wba 5-318 215"}
	if !slices.Equal(names, want) || rep.Archives != 1 || rep.ArchiveBytes != a.Size || rep.Retained != 2 {
		t.Fatalf("retained %q, report %+v", names, rep)
	}
	// Without --retained the history is not listed.
	if rep, err := Dump(cs.data, DumpOptions{}); err != nil || len(rep.Logs[1].Retained) != 0 || rep.Archives != 1 {
		t.Fatalf("dump: %+v %v", rep, err)
	}
}

// archivePath is the one archive of "orders" in data.
func archivePath(t testing.TB, data string) string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(layout.ArchiveDir(entityDirOf(t, data, "orders").Dir), "*.wba"))
	if err != nil || len(paths) != 1 {
		t.Fatalf("archives: %v %v", paths, err)
	}
	return paths[0]
}

// flipInBlock flips a bit in the middle of an archive's compressed blocks
// (between the magic and the index the footer points to).
func flipInBlock(t *testing.T, path string) {
	t.Helper()
	mutate(t, path, func(b []byte) []byte {
		foot := b[len(b)-28:]
		indexOff := binary.BigEndian.Uint64(foot)
		b[(8+indexOff)/2] ^= 0x04
		return b
	})
}

func wantExactly(t *testing.T, findings []Finding, want ...string) {
	t.Helper()
	if got := sprintLines(findings); got != strings.Join(want, "\n")+"\n" {
		t.Fatalf("findings:\n%swant:\n%s", got, strings.Join(want, "\n")+"\n")
	}
}

// A compacted directory verifies clean, with the server's lock held:
// the offline tools neither take nor need it, and the LOCK file is no
// entity or segment of theirs.
func TestVerifyCompactedClean(t *testing.T) {
	cs := compactedFixture(t)
	for _, dir := range []string{cs.mid, cs.data} {
		if f := verifyUnchanged(t, dir); len(f) != 0 {
			t.Fatalf("%s:\n%s", filepath.Base(dir), sprintLines(f))
		}
	}
	data := copyTree(t, cs.data)
	lock, err := log.LockDir(data)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	before := treeSums(t, data)
	if f, err := Verify(data); err != nil || len(f) != 0 {
		t.Fatalf("verify of a locked directory: %v\n%s", err, sprintLines(f))
	}
	if err := Replay(io.Discard, data, ReplayOptions{Retained: cs.retained}); err != nil {
		t.Fatal(err)
	}
	if _, err := State(data, "orders", StateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Audit(data, "orders", AuditOptions{Seq: 2}); err != nil {
		t.Fatal(err)
	}
	if rep, err := Dump(data, DumpOptions{}); err != nil || len(rep.Logs) != 2 {
		t.Fatalf("dump: %+v %v", rep, err)
	}
	if !sameTree(before, treeSums(t, data)) {
		t.Fatal("the tools changed a locked directory")
	}
}

// The archive of the compacted scenario holds seq 2 (d-0, dead-lettered),
// its dead-letter record at 4, and seq 190 (p-1, deferred); the log starts
// at 318.

func TestVerifyArchiveBitFlip(t *testing.T) {
	data := copyTree(t, compactedFixture(t).data)
	flipInBlock(t, archivePath(t, data))
	wantExactly(t, verifyUnchanged(t, data),
		"orders/arc-00000000000000000319.wba/2: archived record does not read back: archive block: CRC check failed (and 2 more records after it)",
		"orders/arc-00000000000000000319.wba/190: queue main: message 190 needs its own record at index 190, in the archive, which does not read back: archive block: CRC check failed",
		"orders/arc-00000000000000000319.wba/2: queue dlq: message 2 needs its own record at index 2, in the archive, which does not read back: archive block: CRC check failed",
		"orders/arc-00000000000000000319.wba/4: queue dlq: message 2 needs an overlay at index 4, in the archive, which does not read back: archive block: CRC check failed")
}

func TestVerifyArchiveTruncated(t *testing.T) {
	data := copyTree(t, compactedFixture(t).data)
	mutate(t, archivePath(t, data), func(b []byte) []byte { return b[:len(b)-10] })
	wantExactly(t, verifyUnchanged(t, data),
		"orders/arc-00000000000000000319.wba/-: archive unreadable: archive: bad magic (the server does not open the entity)",
		"orders/-/190: queue main: message 190 needs its own record at index 190, but the log starts at 318 and no archive that opens holds it",
		"orders/-/2: queue dlq: message 2 needs its own record at index 2, but the log starts at 318 and no archive that opens holds it",
		"orders/-/4: queue dlq: message 2 needs an overlay at index 4, but the log starts at 318 and no archive that opens holds it")
}

func TestVerifyArchiveDeleted(t *testing.T) {
	data := copyTree(t, compactedFixture(t).data)
	if err := os.Remove(archivePath(t, data)); err != nil {
		t.Fatal(err)
	}
	wantExactly(t, verifyUnchanged(t, data),
		"orders/-/190: queue main: message 190 needs its own record at index 190, but the log starts at 318 and no archive holds it",
		"orders/-/2: queue dlq: message 2 needs its own record at index 2, but the log starts at 318 and no archive holds it",
		"orders/-/4: queue dlq: message 2 needs an overlay at index 4, but the log starts at 318 and no archive holds it")
}

func TestVerifyArchiveLeftoverTemp(t *testing.T) {
	data := copyTree(t, compactedFixture(t).data)
	if err := os.WriteFile(archivePath(t, data)+".tmp", []byte("half"), 0o640); err != nil {
		t.Fatal(err)
	}
	wantExactly(t, verifyUnchanged(t, data),
		"orders/arc-00000000000000000319.wba.tmp/-: an archive an interrupted compaction left unfinished (the server ignores it; walbus compact removes it)")
}

// An archive holding records past the log's first index that the log does
// not hold, or holds differently, cannot come from a compaction.
func TestVerifyArchivePastLogStart(t *testing.T) {
	data := copyTree(t, compactedFixture(t).data)
	e := entityDirOf(t, data, "orders")
	a, err := log.OpenArchive(archivePath(t, data))
	if err != nil {
		t.Fatal(err)
	}
	two, err := a.Read(2)
	a.Close()
	if err != nil {
		t.Fatal(err)
	}
	ro, err := log.OpenReadOnly(e.LogDir())
	if err != nil {
		t.Fatal(err)
	}
	var same, other []byte
	ro.Scan(320, 330, func(ev *event.Event) error {
		switch ev.Index {
		case 320:
			same = event.AppendRecord(nil, ev)
		case 330:
			ev.Time++
			other = event.AppendRecord(nil, ev)
		}
		return nil
	})
	ro.Close()
	beyond := event.Event{Type: event.Enqueued, Index: 400, Time: sceneEpoch.UnixNano() + 100e9, MessageID: "x"}
	if err := log.WriteArchive(filepath.Join(layout.ArchiveDir(e.Dir), "arc-00000000000000000400.wba"),
		[][]byte{event.AppendRecord(nil, &two), same, other, event.AppendRecord(nil, &beyond)}); err != nil {
		t.Fatal(err)
	}
	wantExactly(t, verifyUnchanged(t, data),
		"orders/arc-00000000000000000400.wba/400: archive holds 1 record past the log's first index 318 that the log does not hold (the first at 400): a compaction archives only records before the log's start",
		"orders/arc-00000000000000000400.wba/330: archive holds 1 record the log holds too (the first at 330), and the copies differ")
}

// allLiveData compacts a queue whose every message is still there: the
// archive holds every record below the cut, the log's first record too,
// whose position in the log the state holds is stale after the truncation
// rewrote its segment.
func allLiveData(t *testing.T, n int) (data string, cut uint64) {
	data = t.TempDir()
	s := newScene(t, data, 1<<10)
	q := s.queue("q", projection.DefaultConfig())
	for i := range n {
		s.send(q, msg(fmt.Sprint("m-", i), strings.Repeat("b", 100)))
		s.advance(time.Second)
	}
	s.close()
	reps, err := compaction.Compact(data, compaction.Options{})
	if err != nil || len(reps) != 1 || reps[0].Cut < 10 {
		t.Fatalf("compact: %+v %v", reps, err)
	}
	return data, reps[0].Cut
}

// The log's first record after a compaction is read from the archive, as
// the server reads it: its position in the log is stale.
func TestVerifyKeptRecordFromArchive(t *testing.T) {
	data, cut := allLiveData(t, 31)
	first := cut - 1
	if f := verifyUnchanged(t, data); len(f) != 0 {
		t.Fatalf("findings:\n%s", sprintLines(f))
	}
	r, err := Rebuild(data, "q", Point{})
	if err != nil {
		t.Fatal(err)
	}
	m, ok := r.State.Queue(event.MainQueue).Message(first)
	if !ok || r.recs.first != first {
		t.Fatalf("message %d: %v; the log starts at %d", first, ok, r.recs.first)
	}
	if _, err := r.recs.ro.ReadAt(first, m.Pos); err == nil {
		t.Log("the log's first record still reads at its old position")
	}
	ev, from, err := r.recs.read(first, m.Pos)
	if err != nil || from == nil || ev.Index != first || ev.MessageID != fmt.Sprint("m-", first-2) {
		t.Fatalf("read %d: %+v from %v: %v", first, ev, from, err)
	}
	r.Close()

	// Make the archive's copy another record: verify reads it there, not
	// in the log.
	arc := filepath.Join(layout.ArchiveDir(entityDirOf(t, data, "q").Dir), fmt.Sprintf("arc-%020d.wba", cut))
	a, err := log.OpenArchive(arc)
	if err != nil {
		t.Fatal(err)
	}
	var recs [][]byte
	for _, idx := range a.Indexes() {
		ev, err := a.Read(idx)
		if err != nil {
			t.Fatal(err)
		}
		if idx == first {
			ev.Type, ev.Seq = event.Completed, first
		}
		recs = append(recs, event.AppendRecord(nil, &ev))
	}
	a.Close()
	if err := log.WriteArchive(arc, recs); err != nil {
		t.Fatal(err)
	}
	wantExactly(t, verifyUnchanged(t, data),
		fmt.Sprintf("q/arc-%020d.wba/%d: queue main: message %d needs its own record at index %d, but that record is completed", cut, first, first, first))
}
