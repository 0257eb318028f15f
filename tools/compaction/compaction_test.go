package compaction_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/tools/compaction"
)

// The test: a million messages, 99% completed and 1% deferred.
// Compaction shrinks the entity by 90% or more and every deferred message is
// still received by its SequenceNumber, with its body and its properties.
func TestCompactMillionMessagesOnePercentDeferred(t *testing.T) {
	const total, batch = 1_000_000 / raceScale, 1000
	h := newHistory(t, projection.DefaultConfig(), (8<<20)/raceScale, 1)
	var deferred []uint64
	for sent := 0; sent < total; sent += batch {
		msgs := make([]projection.Message, batch)
		for i := range msgs {
			msgs[i] = message(uint64(sent+i), 100)
		}
		h.do(projection.Send{Queue: event.MainQueue, Messages: msgs})
		locked := h.do(projection.Lock{Queue: event.MainQueue, Receiver: "r", Max: batch, Limit: ^uint64(0), Nonce: uint64(sent)})
		if len(locked) != batch {
			t.Fatalf("locked %d of %d", len(locked), batch)
		}
		for i, ev := range locked {
			s := projection.Settle{Queue: event.MainQueue, Token: ev.Token, Outcome: projection.Complete}
			if (sent+i)%100 == 0 {
				s.Outcome, s.Props = projection.Defer, props("kept")
				deferred = append(deferred, ev.Seq)
			}
			h.do(s)
		}
		h.advance(time.Millisecond)
	}
	h.close()
	before := dirBytes(t, h.dir)

	reports, err := compaction.Compact(h.data, compaction.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 1 {
		t.Fatalf("reports: %+v", reports)
	}
	rep := reports[0]
	after := dirBytes(t, h.dir)
	t.Logf("%d messages, %d deferred: %d bytes before, %d after (%.1f%%); %d records archived, %d dropped",
		total, len(deferred), before, after, 100*float64(after)/float64(before), rep.Archived, rep.Dropped)
	if rep.BytesBefore != before || rep.BytesAfter != after {
		t.Fatalf("report says %d -> %d bytes, the directory %d -> %d", rep.BytesBefore, rep.BytesAfter, before, after)
	}
	if after*10 > before {
		t.Fatalf("compaction kept %d of %d bytes: more than 10%%", after, before)
	}

	b, _, err := broker.Open(broker.Options{Dir: h.data, Clock: broker.NewFakeClock(time.Unix(0, h.now))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e, err := b.Entity("q")
	if err != nil {
		t.Fatal(err)
	}
	counts, err := e.Counts(event.MainQueue)
	if err != nil || counts.Deferred != uint64(len(deferred)) || counts.Total != uint64(len(deferred)) {
		t.Fatalf("counts after compaction %+v (%v), want %d deferred", counts, err, len(deferred))
	}
	for chunk := range slices.Chunk(deferred, 500) {
		ch := make(chan []broker.Delivery, 1)
		e.ReceiveDeferred(event.MainQueue, "after", "", chunk, broker.PeekLock, func(ds []broker.Delivery, err error) {
			if err != nil {
				t.Errorf("receive deferred %d..: %v", chunk[0], err)
			}
			ch <- ds
		})
		ds := <-ch
		if len(ds) != len(chunk) {
			t.Fatalf("received %d of %d deferred messages", len(ds), len(chunk))
		}
		for i, d := range ds {
			// Message n went out in order, so its SequenceNumber tells
			// which body it must have.
			n := uint64(slices.Index(deferred, chunk[i])) * 100
			if d.Seq != chunk[i] || !bytes.Equal(d.Message, message(n, 100).Body) || d.MessageID != message(n, 100).MessageID {
				t.Fatalf("deferred %d came back as %d %q", chunk[i], d.Seq, d.MessageID)
			}
			if len(d.Overlays) != 1 || !bytes.Equal(d.Overlays[0].Props, props("kept")) {
				t.Fatalf("deferred %d lost the properties set when deferring: %+v", d.Seq, d.Overlays)
			}
			if d.State != index.Locked || !d.Deferred {
				t.Fatalf("deferred %d received in state %v (deferred %v)", d.Seq, d.State, d.Deferred)
			}
			settled := make(chan error, 1)
			e.Settle(event.MainQueue, broker.Settlement{Token: d.Token, Outcome: projection.Complete}, func(err error) { settled <- err })
			if err := <-settled; err != nil {
				t.Fatalf("complete deferred %d: %v", d.Seq, err)
			}
		}
	}
	if counts, _ := e.Counts(event.MainQueue); counts.Total != 0 {
		t.Fatalf("after completing every deferred message: %+v", counts)
	}
}

// random drives a random history of the whole queue lifecycle: sends,
// schedules and cancels, locks and every settlement, renewals, receives by
// SequenceNumber and and-delete, lock and message expiry, the dead-letter
// queue.
type random struct {
	*history
	tokens map[uint64]event.LockToken // seq -> token of locks we hold
	nextID uint64
}

// try decides and appends cmd, accepting that it may fail (a lock that
// expired meanwhile); that is part of a random history too.
func (r *random) try(cmd projection.Command) []event.Event {
	evs, err := r.st.Decide(cmd, r.now)
	if err != nil || len(evs) == 0 {
		return nil
	}
	return r.do(cmd)
}

func (r *random) seqs(queue uint32, state index.State, deferred bool) []uint64 {
	q := r.st.Queue(queue)
	var out []uint64
	for _, seq := range q.Peek(0, 1<<30, ^uint64(0)) {
		if m, _ := q.Message(seq); m.State == state && (!deferred || m.Flags&index.FlagDeferred != 0) {
			out = append(out, seq)
		}
	}
	return out
}

func (r *random) pick(s []uint64) (uint64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	return s[r.rng.IntN(len(s))], true
}

func (r *random) held() (uint64, event.LockToken, bool) {
	var seqs []uint64
	for seq := range r.tokens {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	seq, ok := r.pick(seqs)
	return seq, r.tokens[seq], ok
}

func (r *random) lockedEvents(evs []event.Event) {
	for _, ev := range evs {
		if ev.Type == event.Locked {
			r.tokens[ev.Seq] = ev.Token
		}
	}
}

func (r *random) step() {
	rng := r.rng
	switch n := rng.IntN(100); {
	case n < 25: // send, some scheduled, some with a short time to live
		msgs := make([]projection.Message, 1+rng.IntN(4))
		for i := range msgs {
			r.nextID++
			msgs[i] = message(r.nextID, 20+rng.IntN(400))
			switch rng.IntN(6) {
			case 0:
				msgs[i].ScheduledAt = r.now + int64(time.Duration(1+rng.IntN(60))*time.Second)
			case 1:
				msgs[i].TTL = time.Duration(5+rng.IntN(60)) * time.Second
			}
		}
		r.do(projection.Send{Queue: event.MainQueue, Messages: msgs})
	case n < 45:
		queue := event.MainQueue
		if rng.IntN(5) == 0 {
			queue = event.DeadLetterQueue
		}
		r.lockedEvents(r.try(projection.Lock{Queue: queue, Receiver: "r", Max: 1 + rng.IntN(4), Limit: ^uint64(0), Nonce: rng.Uint64()}))
	case n < 75:
		seq, token, ok := r.held()
		if !ok {
			return
		}
		delete(r.tokens, seq)
		queue := event.MainQueue
		if r.lockedIn(event.DeadLetterQueue, seq) {
			queue = event.DeadLetterQueue
		}
		s := projection.Settle{Queue: queue, Token: token, Outcome: projection.Outcome(1 + rng.IntN(5))}
		if rng.IntN(2) == 0 && s.Outcome != projection.Complete && s.Outcome != projection.Release {
			s.Props = props(string(rune('a' + rng.IntN(26))))
		}
		if s.Outcome == projection.DeadLetter {
			s.Reason, s.Description = "Poison", "rejected by the test"
		}
		r.try(s)
	case n < 80:
		if seq, token, ok := r.held(); ok {
			if r.try(projection.Renew{Queue: event.MainQueue, Token: token}) == nil {
				delete(r.tokens, seq)
			}
		}
	case n < 85:
		if seq, ok := r.pick(r.seqs(event.MainQueue, index.Deferred, false)); ok {
			r.lockedEvents(r.try(projection.LockBySeq{Queue: event.MainQueue, Receiver: "r", Seqs: []uint64{seq},
				PeekLock: rng.IntN(3) > 0, Nonce: rng.Uint64()}))
		}
	case n < 88:
		r.try(projection.ReceiveAndDelete{Queue: event.MainQueue, Receiver: "r", Max: 1 + rng.IntN(2), Limit: ^uint64(0)})
	case n < 91:
		if seq, ok := r.pick(r.seqs(event.MainQueue, index.Scheduled, false)); ok {
			r.try(projection.Cancel{Queue: event.MainQueue, Seqs: []uint64{seq}})
		}
	default: // time passes: activations, lock and message expiry
		r.advance(time.Duration(rng.IntN(20_000)) * time.Millisecond)
		for _, seq := range r.st.DueScheduled(event.MainQueue, r.now) {
			if rec, ok := r.scheduled[seq]; ok {
				r.try(projection.Activate{Queue: rec.Queue, Seq: seq, Record: rec})
			}
		}
		r.try(projection.Tick{})
	}
}

func (r *random) lockedIn(queue uint32, seq uint64) bool {
	m, ok := r.st.Queue(queue).Message(seq)
	return ok && m.State == index.Locked
}

func randomConfig() projection.Config {
	cfg := projection.DefaultConfig()
	cfg.LockDuration = 30 * time.Second
	cfg.MaxDeliveryCount = 3
	cfg.DeadLetterOnExpiry = true
	return cfg
}

// Property: over random histories, each compacted several times as it goes
// on (so archives are compacted again), every live message stays exactly as
// a client sees it: same SequenceNumber, body, state, delivery count, lock,
// overlays, in both queues.
func TestCompactPreservesEveryLiveMessage(t *testing.T) {
	for seed := range uint64(8) {
		r := &random{history: newHistory(t, randomConfig(), 8<<10, seed), tokens: map[uint64]event.LockToken{}}
		for round := range 6 {
			for range 300 + r.rng.IntN(300) {
				r.step()
			}
			r.close()
			want := peekAll(t, r.data, r.now)
			reports, err := compaction.Compact(r.data, compaction.Options{})
			if err != nil {
				t.Fatalf("seed %d round %d: %v", seed, round, err)
			}
			got := peekAll(t, r.data, r.now)
			sameView(t, "after compaction", want, got)
			rep := reports[0]
			if round > 0 && rep.Cut == 0 {
				t.Fatalf("seed %d round %d: nothing compacted: %+v", seed, round, rep)
			}
			if rep.Archived > 0 {
				arcs, _ := filepath.Glob(filepath.Join(r.dir, "archive", "*.wba"))
				if len(arcs) != 1 {
					t.Fatalf("seed %d round %d: archives %v, want the one new archive", seed, round, arcs)
				}
			}
			r.open()
		}
		r.close()
	}
}

// With --retain, nothing is lost: the retained history, the archives and
// the log together hold every record ever written, byte for byte.
func TestRetainKeepsTheWholeHistory(t *testing.T) {
	r := &random{history: newHistory(t, randomConfig(), 8<<10, 42), tokens: map[uint64]event.LockToken{}}
	r.all = map[uint64][]byte{}
	err := r.l.Scan(r.l.FirstIndex(), func(ev *event.Event) error {
		r.all[ev.Index] = event.AppendRecord(nil, ev)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	retain := t.TempDir()
	var histories []string
	for range 4 {
		for range 500 {
			r.step()
		}
		r.close()
		reports, err := compaction.Compact(r.data, compaction.Options{Retain: retain})
		if err != nil {
			t.Fatal(err)
		}
		if reports[0].Retained == "" {
			t.Fatalf("nothing retained: %+v", reports[0])
		}
		histories = append(histories, reports[0].Retained)
		r.open()
	}
	if name, err := os.ReadFile(filepath.Join(filepath.Dir(histories[0]), "entity-name")); err != nil || string(name) != "q\n" {
		t.Fatalf("entity-name: %q %v", name, err)
	}

	seen := map[uint64][]byte{}
	add := func(where string, idx uint64, rec []byte) {
		if old, ok := seen[idx]; ok && !bytes.Equal(old, rec) {
			t.Fatalf("%s: record %d differs from another copy", where, idx)
		}
		seen[idx] = rec
	}
	paths, _ := filepath.Glob(filepath.Join(r.dir, "archive", "*.wba"))
	for _, p := range append(histories, paths...) {
		a, err := log.OpenArchive(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, idx := range a.Indexes() {
			ev, err := a.Read(idx)
			if err != nil {
				t.Fatal(err)
			}
			add(p, idx, event.AppendRecord(nil, &ev))
		}
		a.Close()
	}
	err = r.l.Scan(r.l.FirstIndex(), func(ev *event.Event) error {
		if ev.Index == r.l.FirstIndex() {
			return nil // its position is stale after the truncation; the archive has it if needed
		}
		add("log", ev.Index, event.AppendRecord(nil, ev))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r.close()
	for idx, rec := range r.all {
		if got, ok := seen[idx]; !ok || !bytes.Equal(got, rec) {
			t.Fatalf("record %d of %d lost (found %v)", idx, len(r.all), ok)
		}
	}
}

// A compaction killed at any moment (kill -9 of a real process) leaves the
// directory as it was or as it would be after: every live message reads
// back the same, the broker starts, and compacting again finishes the job.
func TestCompactSurvivesKill(t *testing.T) {
	r := &random{history: newHistory(t, randomConfig(), 8<<10, 7), tokens: map[uint64]event.LockToken{}}
	for range 3000 {
		r.step()
	}
	r.close()
	want := peekAll(t, r.data, r.now)
	pristine := t.TempDir()
	copyDir(t, r.data, pristine)

	// How long an uninterrupted run takes, to spread the kills over it.
	probe := t.TempDir()
	copyDir(t, pristine, probe)
	began := time.Now()
	if out, err := compactProcess(probe).CombinedOutput(); err != nil {
		t.Fatalf("compaction process: %v\n%s", err, out)
	}
	took := time.Since(began)
	sameView(t, "uninterrupted", want, peekAll(t, probe, r.now))

	killed := 0
	for i := range 20 {
		dir := t.TempDir()
		copyDir(t, pristine, dir)
		cmd := compactProcess(dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(took * time.Duration(i) / 20)
		cmd.Process.Kill()
		if err := cmd.Wait(); err != nil {
			killed++
		}
		sameView(t, "after a kill", want, peekAll(t, dir, r.now))
		if _, err := compaction.Compact(dir, compaction.Options{}); err != nil {
			t.Fatalf("compaction after a kill: %v", err)
		}
		sameView(t, "compacted again after a kill", want, peekAll(t, dir, r.now))
		if tmps, _ := filepath.Glob(filepath.Join(dir, "entities", "*", "archive", "*.tmp")); len(tmps) > 0 {
			t.Fatalf("left behind: %v", tmps)
		}
	}
	t.Logf("an uninterrupted compaction takes %v; %d of 20 runs were killed before finishing", took, killed)
	if killed == 0 {
		t.Fatal("no run was killed before it finished: the test did not test anything")
	}
}

// TestMain doubles as the compaction process the kill test runs.
func TestMain(m *testing.M) {
	if dir := os.Getenv("WALBUS_TEST_COMPACT_DIR"); dir != "" {
		if _, err := compaction.Compact(dir, compaction.Options{}); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(3)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func compactProcess(dir string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "WALBUS_TEST_COMPACT_DIR="+dir)
	return cmd
}

func copyDir(t testing.TB, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o750)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o640)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// After a compaction the server's own front truncation is no longer pinned
// by the archived messages: it moves on as new traffic is settled, while
// the archived messages stay receivable.
func TestServerTruncatesPastArchivedMessages(t *testing.T) {
	h := newHistory(t, projection.DefaultConfig(), 8<<10, 3)
	var deferred []uint64
	for i := range 200 {
		h.do(projection.Send{Queue: event.MainQueue, Messages: []projection.Message{message(uint64(i), 100)}})
		ev := h.do(projection.Lock{Queue: event.MainQueue, Receiver: "r", Max: 1, Limit: ^uint64(0), Nonce: uint64(i)})[0]
		outcome := projection.Complete
		if i%50 == 0 {
			outcome = projection.Defer
			deferred = append(deferred, ev.Seq)
		}
		h.do(projection.Settle{Queue: event.MainQueue, Token: ev.Token, Outcome: outcome})
	}
	h.close()
	if _, err := compaction.Compact(h.data, compaction.Options{}); err != nil {
		t.Fatal(err)
	}

	b, _, err := broker.Open(broker.Options{Dir: h.data, Sync: log.SyncNone, SegmentSize: 8 << 10, SnapshotEvery: 500,
		Clock: broker.NewFakeClock(time.Unix(0, h.now))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e, err := b.Entity("q")
	if err != nil {
		t.Fatal(err)
	}
	startBytes := e.Bytes()
	got := make(chan broker.Delivery, 100)
	r, err := e.Attach(broker.ReceiverOptions{Name: "rad", Mode: broker.ReceiveAndDelete, Deliver: func(d broker.Delivery) { got <- d }})
	if err != nil {
		t.Fatal(err)
	}
	const traffic = 5000
	for i := range traffic {
		sent := make(chan error, 1)
		e.Send(event.MainQueue, []projection.Message{message(uint64(1000+i), 100)}, func(err error) { sent <- err })
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		r.SetLimit(uint64(i + 1))
		if d := <-got; d.MessageID != message(uint64(1000+i), 100).MessageID {
			t.Fatalf("received %q", d.MessageID)
		}
	}
	if err := e.Sync(); err != nil {
		t.Fatal(err)
	}
	// Settled traffic of ~5000 * 150 bytes went through; what is left is
	// about a snapshot interval's worth, not all of it.
	if left := e.Bytes(); left > startBytes+traffic*150/2 {
		t.Fatalf("the log holds %d bytes after %d settled messages (it started at %d): truncation is pinned", left, traffic, startBytes)
	}
	ch := make(chan []broker.Delivery, 1)
	e.ReceiveDeferred(event.MainQueue, "after", "", deferred, broker.ReceiveAndDelete, func(ds []broker.Delivery, err error) {
		if err != nil {
			t.Error(err)
		}
		ch <- ds
	})
	if ds := <-ch; len(ds) != len(deferred) {
		t.Fatalf("received %d of %d deferred messages", len(ds), len(deferred))
	}
}

// A log that ended exactly at a segment's size has an empty last segment.
// The cut is then the start of the segment before it: the log keeps its
// records from the cut on (and the one record before it), and what the
// report counts as dropped is what left the directory.
func TestCompactLogEndingOnASegmentBoundary(t *testing.T) {
	h := newHistory(t, projection.DefaultConfig(), 8<<10, 9)
	logDir := filepath.Join(h.dir, "log")
	lastEmpty := func() (bool, int) {
		files, err := os.ReadDir(logDir)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := files[len(files)-1].Info()
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size() == 0, len(files)
	}
	// An early deferred message pins the front.
	h.do(projection.Send{Queue: event.MainQueue, Messages: []projection.Message{message(0, 100)}})
	ev := h.do(projection.Lock{Queue: event.MainQueue, Receiver: "r", Max: 1, Limit: ^uint64(0)})[0]
	h.do(projection.Settle{Queue: event.MainQueue, Token: ev.Token, Outcome: projection.Defer})
	for i := uint64(1); ; i++ {
		h.do(projection.Send{Queue: event.MainQueue, Messages: []projection.Message{message(i, 300)}})
		ev := h.do(projection.Lock{Queue: event.MainQueue, Receiver: "r", Max: 1, Limit: ^uint64(0)})[0]
		h.do(projection.Settle{Queue: event.MainQueue, Token: ev.Token, Outcome: projection.Complete})
		h.sync()
		if empty, files := lastEmpty(); empty && files >= 4 {
			break
		}
	}
	last := h.l.LastIndex()
	h.close()
	if empty, _ := lastEmpty(); !empty {
		t.Fatal("the log does not end on a segment boundary")
	}
	want := peekAll(t, h.data, h.now)
	reports, err := compaction.Compact(h.data, compaction.Options{Retain: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	rep := reports[0]
	if rep.Cut == 0 || rep.Cut > last {
		t.Fatalf("cut %d past the last record %d", rep.Cut, last)
	}
	sameView(t, "after compaction", want, peekAll(t, h.data, h.now))
	ro, err := log.OpenReadOnly(logDir)
	if err != nil {
		t.Fatal(err)
	}
	first := ro.Segments()[0].First
	ro.Close()
	if first != rep.Cut-1 {
		t.Fatalf("the log starts at %d after a cut at %d", first, rep.Cut)
	}
	hist, err := log.OpenArchive(rep.Retained)
	if err != nil {
		t.Fatal(err)
	}
	defer hist.Close()
	// The log keeps the record before the cut (tidwall's truncation needs
	// one); dead, it is in the history too.
	if hist.Last() >= rep.Cut || hist.Len() != rep.Dropped {
		t.Fatalf("history holds %d records up to %d, the report says %d dropped, the log starts at %d",
			hist.Len(), hist.Last(), rep.Dropped, first)
	}
}

// segments counts the log's segment files and says whether one starts at
// index at.
func segments(t *testing.T, logDir string, at uint64) (int, bool) {
	t.Helper()
	files, err := os.ReadDir(logDir)
	if err != nil {
		t.Fatal(err)
	}
	starts := false
	for _, f := range files {
		if f.Name() == log.SegmentName(at) {
			starts = true
		}
	}
	return len(files), starts
}

func (h *history) filler(id uint64) {
	h.do(projection.Send{Queue: event.MainQueue, Messages: []projection.Message{message(id, 300)}})
	ev := h.do(projection.Lock{Queue: event.MainQueue, Receiver: "r", Max: 1, Limit: ^uint64(0), Nonce: id})[0]
	h.do(projection.Settle{Queue: event.MainQueue, Token: ev.Token, Outcome: projection.Complete})
	h.sync()
}

// Two compactions with --retain can drop the same index range: A archives a
// live (deferred) message M at the cut, B retains the rest of that range,
// M is completed, and C, at the same cut, drops M. C's history must not
// replace B's: every record B retained is still in the retained history.
func TestRetainNeverReplacesAnEarlierHistory(t *testing.T) {
	h := newHistory(t, projection.DefaultConfig(), 8<<10, 11)
	h.all = map[uint64][]byte{}
	logDir := filepath.Join(h.dir, "log")
	retain := t.TempDir()

	// A live (deferred) message M whose record is the last of a segment.
	var m uint64
	for id := uint64(1); m == 0; id++ {
		ev := h.do(projection.Send{Queue: event.MainQueue, Messages: []projection.Message{message(id, 300)}})[0]
		lk := h.do(projection.Lock{Queue: event.MainQueue, Receiver: "r", Max: 1, Limit: ^uint64(0), Nonce: id})[0]
		h.sync()
		outcome := projection.Complete
		if _, starts := segments(t, logDir, lk.Index); starts {
			m, outcome = ev.Index, projection.Defer
		}
		h.do(projection.Settle{Queue: event.MainQueue, Token: lk.Token, Outcome: outcome})
		h.sync()
	}
	h.filler(1000) // the last segment holds records: the cut is M+1
	h.close()
	repA, err := compaction.Compact(h.data, compaction.Options{Retain: retain})
	if err != nil {
		t.Fatal(err)
	}
	if repA[0].Cut != m+1 {
		t.Fatalf("A cut at %d, want %d", repA[0].Cut, m+1)
	}

	// More traffic: two more segments; stop just after one begins.
	h.open()
	n0, _ := segments(t, logDir, 0)
	for id := uint64(2000); ; id++ {
		h.filler(id)
		if n, _ := segments(t, logDir, 0); n >= n0+2 {
			break
		}
	}
	h.close()
	repB, err := compaction.Compact(h.data, compaction.Options{Retain: retain})
	if err != nil {
		t.Fatal(err)
	}
	keptB := map[uint64][]byte{}
	archiveRecords(t, repB[0].Retained, keptB)

	// M is completed; no new segment.
	h.open()
	lk := h.do(projection.LockBySeq{Queue: event.MainQueue, Receiver: "r", Seqs: []uint64{m}, PeekLock: true, Nonce: 1})
	if len(lk) != 1 || lk[0].Seq != m {
		t.Fatalf("locked %+v, want message %d", lk, m)
	}
	h.do(projection.Settle{Queue: event.MainQueue, Token: lk[0].Token, Outcome: projection.Complete})
	h.close()
	repC, err := compaction.Compact(h.data, compaction.Options{Retain: retain})
	if err != nil {
		t.Fatal(err)
	}
	if repC[0].Cut != repB[0].Cut {
		t.Fatalf("scenario not reached: C cut at %d, B at %d", repC[0].Cut, repB[0].Cut)
	}

	// Every record history B kept is still kept somewhere under retain.
	seen := map[uint64][]byte{}
	paths, _ := filepath.Glob(filepath.Join(retain, "*", compaction.RetainedGlob))
	for _, p := range paths {
		archiveRecords(t, p, seen)
	}
	lost := 0
	for idx, rec := range keptB {
		if got, ok := seen[idx]; !ok || !bytes.Equal(got, rec) {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of the %d records compaction B retained in %s are no longer in the retained history (compaction C wrote %s)",
			lost, len(keptB), filepath.Base(repB[0].Retained), filepath.Base(repC[0].Retained))
	}
}

// archiveRecords adds the records of the archive at path to into, by index.
func archiveRecords(t *testing.T, path string, into map[uint64][]byte) {
	t.Helper()
	a, err := log.OpenArchive(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for _, idx := range a.Indexes() {
		ev, err := a.Read(idx)
		if err != nil {
			t.Fatal(err)
		}
		into[idx] = event.AppendRecord(nil, &ev)
	}
}
