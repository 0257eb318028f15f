package log

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbus/walbus/log/event"
)

func openT(t *testing.T, dir string, opts Options) (*Log, OpenReport) {
	t.Helper()
	l, rep, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l, rep
}

func body(index uint64, size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(index*31 + uint64(i))
	}
	return b
}

func enq(size int) event.Event {
	return event.Event{Type: event.Enqueued, Time: 1, MessageID: "m", Message: make([]byte, size)}
}

// appendWait appends evs as one group and waits until it is durable.
func appendWait(t *testing.T, l *Log, evs []event.Event) uint64 {
	t.Helper()
	done := make(chan error, 1)
	first, err := l.Append(evs, func(err error) { done <- err })
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("commit: %v", err)
	}
	return first
}

// fill appends n single-record groups with bodies derived from their index,
// waits until all are durable, and returns the events (with positions) keyed
// by index.
func fill(t *testing.T, l *Log, n int, rng *rand.Rand) map[uint64]event.Event {
	t.Helper()
	out := make(map[uint64]event.Event, n)
	for range n {
		e := enq(0)
		e.Message = body(l.LastIndex()+1, 1+rng.IntN(700))
		evs := []event.Event{e}
		if _, err := l.Append(evs, nil); err != nil {
			t.Fatal(err)
		}
		out[evs[0].Index] = evs[0]
	}
	appendWait(t, l, nil)
	return out
}

func checkAll(t *testing.T, l *Log, want map[uint64]event.Event) {
	t.Helper()
	var buf []byte
	for idx, w := range want {
		got, b, err := l.ReadAt(idx, w.Pos, buf)
		buf = b
		if err != nil {
			t.Fatalf("ReadAt(%d, %+v): %v", idx, w.Pos, err)
		}
		if !bytes.Equal(got.Message, w.Message) {
			t.Fatalf("ReadAt(%d): wrong message", idx)
		}
	}
}

// checkScan scans l whole: it must hold exactly want's records, at the
// positions Append gave them.
func checkScan(t *testing.T, l *Log, want map[uint64]event.Event) {
	t.Helper()
	n := 0
	err := l.Scan(1, func(e *event.Event) error {
		if e.Pos != want[e.Index].Pos {
			return fmt.Errorf("index %d: scan position %+v, append position %+v", e.Index, e.Pos, want[e.Index].Pos)
		}
		n++
		return nil
	})
	if err != nil || n != len(want) {
		t.Fatalf("scan: %d records of %d, %v", n, len(want), err)
	}
}

func TestAppendReadScanAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 4096}
	l, _ := openT(t, dir, opts)
	rng := rand.New(rand.NewPCG(1, 2))
	want := fill(t, l, 300, rng)
	if segs, _ := listSegments(dir); len(segs) < 10 {
		t.Fatalf("expected many segments, got %d", len(segs))
	}
	checkAll(t, l, want)

	checkScan(t, l, want)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// After reopening, positions still hold and appends continue at 301,
	// including when the reopened tail is exactly or more than full.
	l, rep := openT(t, dir, opts)
	if rep.LastIndex != 300 || rep.Repair.Bytes != 0 {
		t.Fatalf("reopen report %+v", rep)
	}
	checkAll(t, l, want)
	for k, v := range fill(t, l, 100, rng) {
		want[k] = v
	}
	checkAll(t, l, want)
	l.Close()

	// A smaller segment size after reopening makes the tail oversize; the
	// position mirror must follow tidwall's extra cycle.
	l, _ = openT(t, dir, Options{SegmentSize: 512})
	for k, v := range fill(t, l, 50, rng) {
		want[k] = v
	}
	checkAll(t, l, want)
	l.Close()
}

func TestConcurrentGroupCommit(t *testing.T) {
	l, _ := openT(t, t.TempDir(), Options{SegmentSize: 64 << 10})
	defer l.Close()
	const producers, each = 16, 100
	var commits sync.Map
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				evs := []event.Event{enq(100), enq(50)}
				done := make(chan error, 1)
				first, err := l.Append(evs, func(err error) { done <- err })
				if err != nil {
					t.Error(err)
					return
				}
				if err := <-done; err != nil {
					t.Error(err)
					return
				}
				if l.DurableIndex() < first+1 {
					t.Errorf("acknowledged before durable: durable %d < %d", l.DurableIndex(), first+1)
				}
				mu.Lock()
				for _, e := range evs {
					if seen[e.Index] {
						t.Errorf("index %d assigned twice", e.Index)
					}
					seen[e.Index] = true
				}
				mu.Unlock()
				commits.Store(fmt.Sprint(p, i), true)
			}
		}()
	}
	wg.Wait()
	if len(seen) != producers*each*2 || l.LastIndex() != producers*each*2 {
		t.Fatalf("%d indexes, last %d", len(seen), l.LastIndex())
	}
	// Groups keep their records adjacent with FlagContinued on all but the last.
	var prev *event.Event
	err := l.Scan(1, func(e *event.Event) error {
		if prev != nil && prev.Flags&event.FlagContinued != 0 && e.Flags&event.FlagContinued != 0 {
			return fmt.Errorf("group longer than two at %d", e.Index)
		}
		c := *e
		prev = &c
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestSyncPolicies(t *testing.T) {
	for _, p := range []SyncPolicy{SyncAlways, SyncInterval, SyncNone} {
		t.Run(p.String(), func(t *testing.T) {
			var syncs int
			var mu sync.Mutex
			l, _ := openT(t, t.TempDir(), Options{Sync: p, SyncInterval: 20 * time.Millisecond,
				OnCommit: func(s CommitStats) {
					mu.Lock()
					if s.Synced {
						syncs++
					}
					mu.Unlock()
				}})
			for range 5 {
				first := appendWait(t, l, []event.Event{enq(10)})
				if p != SyncNone && l.DurableIndex() < first {
					t.Fatalf("acknowledged %d before durable (durable %d)", first, l.DurableIndex())
				}
			}
			l.Close()
			mu.Lock()
			defer mu.Unlock()
			switch p {
			case SyncAlways:
				if syncs != 5 {
					t.Fatalf("always: %d fsyncs for 5 commits", syncs)
				}
			case SyncNone:
				if syncs > 1 { // Close may sync once
					t.Fatalf("none: %d fsyncs", syncs)
				}
			}
		})
	}
	if _, err := ParseSyncPolicy("sometimes"); err == nil {
		t.Fatal("bad policy accepted")
	}
}

func TestWriteErrorIsSticky(t *testing.T) {
	for _, stage := range []string{"write", "sync"} {
		t.Run(stage, func(t *testing.T) {
			dir := t.TempDir()
			l, _ := openT(t, dir, Options{})
			appendWait(t, l, []event.Event{enq(10)})
			boom := errors.New("injected " + stage + " failure")
			l.opts.Fault = func(s string) error {
				if s == stage {
					return boom
				}
				return nil
			}
			done := make(chan error, 1)
			if _, err := l.Append([]event.Event{enq(10)}, func(err error) { done <- err }); err != nil {
				t.Fatal(err)
			}
			if err := <-done; !errors.Is(err, boom) || !errors.Is(err, ErrFailed) {
				t.Fatalf("waiter got %v", err)
			}
			l.opts.Fault = nil
			// Every later write fails with the same error, even though the
			// fault is gone.
			if _, err := l.Append([]event.Event{enq(10)}, nil); !errors.Is(err, ErrFailed) {
				t.Fatalf("append after failure: %v", err)
			}
			if err := l.Close(); !errors.Is(err, ErrFailed) {
				t.Fatalf("close after failure: %v", err)
			}
			// Recovery is reopen: the acknowledged record is there.
			l, rep := openT(t, dir, Options{})
			defer l.Close()
			if rep.LastIndex < 1 {
				t.Fatalf("lost the acknowledged record: %+v", rep)
			}
			appendWait(t, l, []event.Event{enq(10)})
		})
	}
}

func TestTruncateFront(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 2048}
	l, _ := openT(t, dir, opts)
	rng := rand.New(rand.NewPCG(3, 4))
	want := fill(t, l, 200, rng)
	before := l.Bytes()
	segsBefore, _ := listSegments(dir)

	first, err := l.TruncateFront(150)
	if err != nil {
		t.Fatal(err)
	}
	if first >= 150 || first <= 1 {
		t.Fatalf("new first index %d", first)
	}
	segsAfter, _ := listSegments(dir)
	if len(segsAfter) >= len(segsBefore) || l.Bytes() >= before {
		t.Fatalf("nothing reclaimed: segments %d→%d bytes %d→%d", len(segsBefore), len(segsAfter), before, l.Bytes())
	}
	var onDisk int64
	for _, s := range segsAfter {
		fi, _ := os.Stat(segmentPath(dir, s))
		onDisk += fi.Size()
	}
	if onDisk != l.Bytes() {
		t.Fatalf("Bytes() = %d, files hold %d", l.Bytes(), onDisk)
	}
	for idx := range want {
		if idx <= first {
			delete(want, idx) // first is the kept dead record, rewritten at a new position
		}
	}
	checkAll(t, l, want)
	if _, _, err := l.ReadAt(first-1, event.Position{}, nil); err == nil {
		t.Fatal("read of a truncated index succeeded")
	}
	// Appends, scans and reopening still work.
	for k, v := range fill(t, l, 20, rng) {
		want[k] = v
	}
	l.Close()
	l, rep := openT(t, dir, opts)
	defer l.Close()
	if rep.FirstIndex != first || rep.LastIndex != 220 {
		t.Fatalf("reopened %+v, want first %d last 220", rep, first)
	}
	checkAll(t, l, want)
	n := 0
	if err := l.Scan(0, func(*event.Event) error { n++; return nil }); err != nil || n != int(220-first+1) {
		t.Fatalf("scan after truncation: %d records, %v", n, err)
	}
}

// Reclaimable says what TruncateFront would free: nothing where it would
// drop nothing, and otherwise the segments it drops (the last of which it
// rewrites to one record), counting a record not yet written at the next
// index as if it were.
func TestReclaimable(t *testing.T) {
	l, _ := openT(t, t.TempDir(), Options{SegmentSize: 2048})
	defer l.Close()
	rng := rand.New(rand.NewPCG(5, 6))
	fill(t, l, 200, rng)
	segs := l.segs.list()
	if got := l.Reclaimable(segs[1] - 1); got != 0 {
		t.Fatalf("Reclaimable inside the first segment = %d, want 0", got)
	}
	for _, upTo := range []uint64{segs[1], segs[2], 150, 201} {
		upTo := max(upTo, l.FirstIndex())
		got, before := l.Reclaimable(upTo), l.Bytes()
		if got == 0 {
			t.Fatalf("Reclaimable(%d) = 0 with segments %v", upTo, l.segs.list())
		}
		if upTo > 200 {
			fill(t, l, 1, rng) // the record Reclaimable counted on
		}
		if _, err := l.TruncateFront(upTo); err != nil {
			t.Fatal(err)
		}
		freed := before - l.Bytes()
		if freed <= 0 || freed > got || got-freed > 1024 {
			t.Fatalf("Reclaimable(%d) = %d, TruncateFront freed %d", upTo, got, freed)
		}
		if again := l.Reclaimable(upTo); again != 0 {
			t.Fatalf("Reclaimable(%d) after the cut = %d, want 0", upTo, again)
		}
	}
	if got := l.Reclaimable(1000); got != 0 {
		t.Fatalf("Reclaimable past the end with only the tail and one record before it = %d", got)
	}
}

func TestAppendAfterCloseFails(t *testing.T) {
	l, _ := openT(t, t.TempDir(), Options{})
	l.Close()
	if _, err := l.Append([]event.Event{enq(1)}, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
}

// Lazy records under SyncAlways: they wait for a carrier. The next
// ordinary group commit writes and fsyncs them with its own records; with
// none, a timer does within SyncInterval; Close does it for what is left.
func TestAppendLazy(t *testing.T) {
	var mu sync.Mutex
	var fsyncs int
	commits := make(chan CommitStats, 100)
	interval := 50 * time.Millisecond
	l, _ := openT(t, t.TempDir(), Options{Sync: SyncAlways, SyncInterval: interval,
		Fault: func(op string) error {
			if op == "sync" {
				mu.Lock()
				fsyncs++
				mu.Unlock()
			}
			return nil
		},
		OnCommit: func(s CommitStats) { commits <- s }})
	count := func() int { mu.Lock(); defer mu.Unlock(); return fsyncs }

	// A lazy group then an ordinary one: one commit of both, one fsync.
	lazy, err := l.AppendLazy([]event.Event{enq(10)})
	if err != nil {
		t.Fatal(err)
	}
	next := appendWait(t, l, []event.Event{enq(10)})
	if d := l.DurableIndex(); d < next || d < lazy {
		t.Fatalf("durable %d after the commit of %d (lazy %d)", d, next, lazy)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d fsyncs for one lazy and one ordinary group, want 1", n)
	}
	if s := <-commits; s.Records != 2 || !s.Synced {
		t.Fatalf("the ordinary commit carried %d records (synced %v), want both", s.Records, s.Synced)
	}

	// A lazy group alone: written and synced once, by the timer.
	lazy, err = l.AppendLazy([]event.Event{enq(10), enq(20)})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-commits:
		if s.Records != 2 || !s.Synced {
			t.Fatalf("the timer's commit: %+v", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("lazy records %d-%d were never committed", lazy, lazy+1)
	}
	if d := l.DurableIndex(); d != lazy+1 {
		t.Fatalf("durable %d after the timer's commit of %d-%d", d, lazy, lazy+1)
	}
	if n := count(); n != 2 {
		t.Fatalf("%d fsyncs in all, want 2", n)
	}

	// Close commits lazy records that are still waiting.
	last, err := l.AppendLazy([]event.Event{enq(10)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 3 || l.DurableIndex() != last {
		t.Fatalf("close: %d fsyncs in all (want 3), durable %d of %d", n, l.DurableIndex(), last)
	}
}

// Lazy records that fill a batch do not wait for the timer.
func TestAppendLazyFullBatch(t *testing.T) {
	l, _ := openT(t, t.TempDir(), Options{Sync: SyncAlways, SyncInterval: time.Hour})
	defer l.Close()
	var last uint64
	for written := 0; written < lazyBatchBytes; written += 4096 {
		var err error
		if last, err = l.AppendLazy([]event.Event{enq(4096)}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.DurableIndex() < last {
		if time.Now().After(deadline) {
			t.Fatalf("a full batch of lazy records waited: durable %d of %d", l.DurableIndex(), last)
		}
		time.Sleep(time.Millisecond)
	}
}

// A log read all over keeps at most maxOpenSegments segment files open,
// and readers racing with the handles being closed to make room still get
// every record right.
func TestReadHandlesBounded(t *testing.T) {
	l, _ := openT(t, t.TempDir(), Options{SegmentSize: 4 << 10})
	rng := rand.New(rand.NewPCG(5, 6))
	want := fill(t, l, 2000, rng)
	if n := len(l.segs.list()); n < 4*maxOpenSegments {
		t.Fatalf("%d segments; the test needs many more than %d", n, maxOpenSegments)
	}
	open := func() int {
		l.segs.mu.RLock()
		defer l.segs.mu.RUnlock()
		return len(l.segs.files)
	}
	var w Window
	for idx := uint64(1); idx <= l.LastIndex(); idx++ {
		got, err := l.ReadAhead(idx, want[idx].Pos, &w)
		if err != nil || !bytes.Equal(got.Message, want[idx].Message) {
			t.Fatalf("ReadAhead(%d): %v", idx, err)
		}
	}
	if n := open(); n > maxOpenSegments {
		t.Fatalf("%d segment files open after reading through, want at most %d", n, maxOpenSegments)
	}

	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			var buf []byte
			var w Window
			for range 3000 {
				idx := 1 + uint64(rng.IntN(int(l.LastIndex())))
				var got event.Event
				var err error
				if rng.IntN(2) == 0 {
					got, buf, err = l.ReadAt(idx, want[idx].Pos, buf)
				} else {
					got, err = l.ReadAhead(idx, want[idx].Pos, &w)
				}
				if err != nil || got.Index != idx || !bytes.Equal(got.Message, want[idx].Message) {
					t.Errorf("read %d: index %d, %v", idx, got.Index, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := open(); n > maxOpenSegments {
		t.Fatalf("%d segment files open after random reads, want at most %d", n, maxOpenSegments)
	}
}

// ReadAhead reads the same records as ReadAt, in order, by jumps, across
// segments, bigger than its window, and ones appended after the window was
// read; and what it returns stays valid when the window moves on.
func TestReadAhead(t *testing.T) {
	l, _ := openT(t, t.TempDir(), Options{SegmentSize: 256 << 10})
	rng := rand.New(rand.NewPCG(3, 4))
	want := fill(t, l, 1000, rng)
	big := enq(0)
	big.Message = body(l.LastIndex()+1, 3*windowSize)
	bigEvs := []event.Event{big}
	appendWait(t, l, bigEvs)
	want[bigEvs[0].Index] = bigEvs[0]
	maps.Copy(want, fill(t, l, 1000, rng))

	check := func(w *Window, idx uint64) event.Event {
		t.Helper()
		got, err := l.ReadAhead(idx, want[idx].Pos, w)
		if err != nil {
			t.Fatalf("ReadAhead(%d): %v", idx, err)
		}
		if got.Index != idx || !bytes.Equal(got.Message, want[idx].Message) {
			t.Fatalf("ReadAhead(%d): index %d, wrong message", idx, got.Index)
		}
		return got
	}
	var w Window
	first := check(&w, 1)
	for idx := uint64(2); idx <= l.LastIndex(); idx++ {
		check(&w, idx)
	}
	if !bytes.Equal(first.Message, want[1].Message) {
		t.Fatal("a record read earlier changed when the window moved on")
	}
	for range 500 {
		check(&w, 1+uint64(rng.IntN(int(l.LastIndex()))))
	}

	// Records appended after the window was read: the window ends where
	// the segment ended then, so they are read from the file.
	w = Window{}
	last := l.LastIndex()
	check(&w, last-1)
	check(&w, last) // forward: a window from here, cut short by the end of the file
	more := fill(t, l, 20, rng)
	for idx := last + 1; idx <= l.LastIndex(); idx++ {
		want[idx] = more[idx]
		check(&w, idx)
	}
}

// TestCommitForgetsCallbacks: once a commit has called its done callbacks
// the log holds no reference to them, so nothing they captured (a closed
// connection and its buffers, in the broker) outlives them. The log used
// to keep them in its reused batches until later commits overwrote them.
func TestCommitForgetsCallbacks(t *testing.T) {
	for _, policy := range []SyncPolicy{SyncAlways, SyncInterval, SyncNone} {
		t.Run(policy.String(), func(t *testing.T) {
			l, _ := openT(t, t.TempDir(), Options{Sync: policy, SyncInterval: time.Millisecond})
			defer l.Close()
			var freed sync.WaitGroup
			for range 8 {
				captured := new([1 << 10]byte)
				freed.Add(1)
				runtime.AddCleanup(captured, func(*sync.WaitGroup) { freed.Done() }, &freed)
				done := make(chan error, 1)
				if _, err := l.Append([]event.Event{enq(10)}, func(err error) { _ = captured[0]; done <- err }); err != nil {
					t.Fatal(err)
				}
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			}
			all := make(chan struct{})
			go func() { freed.Wait(); close(all) }()
			deadline := time.After(10 * time.Second)
			for {
				runtime.GC()
				select {
				case <-all:
					return
				case <-deadline:
					t.Fatal("the log still holds committed callbacks")
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	}
}

// A write that fails on the writer goroutine is told to OnFail once, with
// the log's sticky error, whether or not anyone waits on the records: the
// owner of a lazy append learns of it without writing again.
func TestOnFailReportsAWriteFailure(t *testing.T) {
	var fail atomic.Bool
	failures := make(chan error, 4)
	l, _ := openT(t, t.TempDir(), Options{Sync: SyncAlways, SyncInterval: 20 * time.Millisecond,
		Fault: func(op string) error {
			if op == "write" && fail.Load() {
				return errors.New("injected")
			}
			return nil
		},
		OnFail: func(err error) { failures <- err }})
	appendWait(t, l, []event.Event{enq(10)})
	fail.Store(true)
	if _, err := l.AppendLazy([]event.Event{enq(10)}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failures:
		if !errors.Is(err, ErrFailed) || !errors.Is(l.Err(), ErrFailed) {
			t.Fatalf("OnFail got %v, Err %v", err, l.Err())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a failed write was never reported to OnFail")
	}
	if _, err := l.Append([]event.Event{enq(10)}, nil); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after the failure: %v", err)
	}
	l.Close() // the writer has exited: nothing can report again
	if n := len(failures); n != 0 {
		t.Fatalf("OnFail called %d more times", n)
	}
}

// A failure the log takes on another goroutine (TruncateFront: tidwall
// cannot write its START file, as on a full disk) ends the wait of every
// record the writer holds for the SyncInterval fsync, with an error: the
// records written before (A) and while (B) it failed are answered, not
// left for a timer or a Close that will never come.
func TestHeldWaitersAnsweredWhenTheLogFailsElsewhere(t *testing.T) {
	dir := t.TempDir()
	l, _ := openT(t, dir, Options{SegmentSize: 2048})
	fill(t, l, 40, rand.New(rand.NewPCG(1, 1)))
	l.Close()
	var fault atomic.Pointer[func(string) error]
	l, _ = openT(t, dir, Options{Sync: SyncInterval, SyncInterval: time.Hour, SegmentSize: 2048,
		Fault: func(op string) error {
			if f := fault.Load(); f != nil {
				return (*f)(op)
			}
			return nil
		}})
	segs := l.segs.list()
	if len(segs) < 4 {
		t.Fatalf("want several segments, got %v", segs)
	}
	waitWritten := func() {
		for deadline := time.Now().Add(5 * time.Second); l.written.Load() != l.LastIndex(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("record not written")
			}
		}
	}
	// A: written, held until the timer's fsync (an hour away).
	doneA := make(chan error, 1)
	if _, err := l.Append([]event.Event{enq(10)}, func(err error) { doneA <- err }); err != nil {
		t.Fatal(err)
	}
	waitWritten()
	// B: the writer takes it and is held up in its write; C queues behind.
	inWrite, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hold := func(op string) error {
		if op == "write" {
			once.Do(func() { close(inWrite); <-unblock })
		}
		return nil
	}
	fault.Store(&hold)
	doneB, doneC := make(chan error, 1), make(chan error, 1)
	if _, err := l.Append([]event.Event{enq(10)}, func(err error) { doneB <- err }); err != nil {
		t.Fatal(err)
	}
	<-inWrite
	if _, err := l.Append([]event.Event{enq(10)}, func(err error) { doneC <- err }); err != nil {
		t.Fatal(err)
	}
	// The log fails on this goroutine.
	if err := os.Mkdir(segmentPath(dir, segs[2]-1)+".START.TEMP", 0o750); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TruncateFront(segs[2]); err == nil || !errors.Is(l.Err(), ErrFailed) {
		t.Fatalf("TruncateFront: %v, log error %v", err, l.Err())
	}
	close(unblock)
	if err := <-doneC; err == nil {
		t.Fatal("C acknowledged by a failed log")
	}
	for name, ch := range map[string]chan error{"A": doneA, "B": doneB} {
		select {
		case err := <-ch:
			if !errors.Is(err, ErrFailed) {
				t.Errorf("record %s told %v, want the log's failure", name, err)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("record %s, written before the log failed, is never answered (the writer has exited)", name)
		}
	}
	l.Close()
}
