package log

import (
	"errors"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbus/walbus/log/event"
)

// waitSegments waits until l has n segments (a roll is done once the log
// lists the new one) and returns them as the directory lists them.
func waitSegments(t *testing.T, l *Log, n int) []uint64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(l.segs.list()) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d segments, want %d", len(l.segs.list()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	segs, err := listSegments(l.Dir())
	if err != nil || len(segs) != n {
		t.Fatalf("the log lists %d segments, the directory %v (%v)", n, segs, err)
	}
	return segs
}

// TestIdleRoll: a log that goes idle with a tail of IdleRollBytes or more
// closes it and begins an empty segment at the next index; records before
// and after read back at the positions Append gave, a scan agrees, and a
// reopened log carries on. A smaller tail is left alone.
func TestIdleRoll(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 1 << 20, IdleRoll: 20 * time.Millisecond, IdleRollBytes: 16 << 10}
	l, _ := openT(t, dir, opts)
	rng := rand.New(rand.NewPCG(5, 6))
	want := fill(t, l, 100, rng) // about 35 KB
	last := l.LastIndex()
	segs := waitSegments(t, l, 2)
	if segs[1] != last+1 {
		t.Fatalf("segments %v after index %d: the new one should start at %d", segs, last, last+1)
	}
	if fi, err := os.Stat(segmentPath(dir, segs[1])); err != nil || fi.Size() != 0 {
		t.Fatalf("new segment: %v, %v", fi, err)
	}
	checkAll(t, l, want)

	maps.Copy(want, fill(t, l, 10, rng)) // a few KB: under IdleRollBytes
	time.Sleep(10 * opts.IdleRoll)
	if segs, _ := listSegments(dir); len(segs) != 2 {
		t.Fatalf("a tail under IdleRollBytes was rolled: segments %v", segs)
	}
	checkAll(t, l, want)
	checkScan(t, l, want)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l, rep := openT(t, dir, opts)
	defer l.Close()
	if rep.FirstIndex != 1 || rep.LastIndex != uint64(len(want)) {
		t.Fatalf("reopened %+v, want 1-%d", rep, len(want))
	}
	maps.Copy(want, fill(t, l, 10, rng))
	checkAll(t, l, want)
}

// TestIdleRollFreesTheTail: the reason for rolling. tidwall holds the tail
// segment in memory; a log written and left idle gives it back.
func TestIdleRollFreesTheTail(t *testing.T) {
	const size = 32 << 20
	l, _ := openT(t, t.TempDir(), Options{SegmentSize: 256 << 20, IdleRoll: 50 * time.Millisecond})
	defer l.Close()
	evs := make([]event.Event, 32)
	for i := range evs {
		evs[i] = enq(size / len(evs))
	}
	appendWait(t, l, evs)
	evs = nil
	waitSegments(t, l, 2)
	if heap := heapAfterGC(); heap > size/2 {
		t.Fatalf("after %d MiB written and the log idle, the heap holds %d MiB", size>>20, heap>>20)
	}
}

// heapAfterGC is this process's heap after a collection.
func heapAfterGC() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestFilledSegmentLeavesNoCache: a batch whose last record fills the
// tail makes tidwall close it and begin the next one; the log drops the
// closed one from tidwall's cache at once, not when the next record comes
// or the log goes idle.
func TestFilledSegmentLeavesNoCache(t *testing.T) {
	const size = 16 << 20
	l, _ := openT(t, t.TempDir(), Options{SegmentSize: size, IdleRoll: time.Hour})
	defer l.Close()
	for range 2 * size >> 20 {
		appendWait(t, l, []event.Event{enq(1 << 20)})
	}
	if segs, _ := listSegments(l.Dir()); len(segs) != 3 {
		t.Fatalf("segments %v: want two full ones and an empty tail", segs)
	}
	if heap := heapAfterGC(); heap > size/2 {
		t.Fatalf("after two %d MiB segments filled, the heap holds %d MiB", size>>20, heap>>20)
	}
}

// TestIdleRollFailure: a roll that cannot create its segment file (here by
// injection; a full disk, say) changes nothing: the log keeps its tail and
// takes records, opening it works, and once files can be created again
// the next idle roll happens.
func TestIdleRollFailure(t *testing.T) {
	for _, op := range []string{"roll", "roll-dir"} {
		t.Run(op, func(t *testing.T) { testIdleRollFailure(t, op) })
	}
}

// testIdleRollFailure fails the roll at op: creating the file, or making
// its name durable (the file is then removed again).
func testIdleRollFailure(t *testing.T, failing string) {
	dir := t.TempDir()
	var (
		mu     sync.Mutex
		tried  int
		broken = true
	)
	opts := Options{IdleRoll: 10 * time.Millisecond, IdleRollBytes: 1}
	opts.Fault = func(op string) error {
		mu.Lock()
		defer mu.Unlock()
		if op != failing {
			return nil
		}
		tried++
		if broken {
			return errors.New("injected: no space left on device")
		}
		return nil
	}
	attempts := func() int {
		mu.Lock()
		defer mu.Unlock()
		return tried
	}
	l, _ := openT(t, dir, opts)
	rng := rand.New(rand.NewPCG(7, 8))
	want := fill(t, l, 20, rng)
	for deadline := time.Now().Add(10 * time.Second); attempts() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no roll was tried")
		}
	}
	if err := l.Err(); err != nil {
		t.Fatalf("a roll that created nothing failed the log: %v", err)
	}
	maps.Copy(want, fill(t, l, 20, rng))
	checkAll(t, l, want)
	if segs, _ := listSegments(dir); len(segs) != 1 {
		t.Fatalf("segments %v after failed rolls", segs)
	}
	l.Close()

	// Opening with a tail to roll and no room to roll it opens as before.
	l, rep := openT(t, dir, opts)
	if rep.LastIndex != 40 || len(l.segs.list()) != 1 {
		t.Fatalf("reopened %+v with segments %v", rep, l.segs.list())
	}
	mu.Lock()
	broken = false
	mu.Unlock()
	maps.Copy(want, fill(t, l, 5, rng))
	waitSegments(t, l, 2)
	maps.Copy(want, fill(t, l, 5, rng))
	checkAll(t, l, want)
	l.Close()
	l, rep = openT(t, dir, Options{})
	defer l.Close()
	if rep.LastIndex != 50 {
		t.Fatalf("reopened %+v, want 50 records", rep)
	}
	checkAll(t, l, want)
}

// TestIdleRollWithTruncation: rolls on the writer and front truncation on
// another goroutine, as the broker's snapshots do it, over many bursts: the
// records kept read back, and the log reopens whole.
func TestIdleRollWithTruncation(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 8 << 10, IdleRoll: time.Millisecond, IdleRollBytes: 512}
	l, _ := openT(t, dir, opts)
	rng := rand.New(rand.NewPCG(9, 10))
	want := map[uint64]event.Event{}
	stop := make(chan struct{})
	truncated := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				truncated <- nil
				return
			default:
			}
			if last := l.LastIndex(); last > 50 {
				if _, err := l.TruncateFront(last - 50); err != nil {
					truncated <- err
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	for range 60 {
		maps.Copy(want, fill(t, l, 5+rng.IntN(20), rng))
		time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
	}
	close(stop)
	if err := <-truncated; err != nil {
		t.Fatal(err)
	}
	first := l.FirstIndex()
	maps.DeleteFunc(want, func(idx uint64, _ event.Event) bool { return idx <= first })
	l = reopenChecked(t, l, dir, opts, want)
	defer l.Close()
	n := 0
	if err := l.Scan(0, func(*event.Event) error { n++; return nil }); err != nil || n != int(l.LastIndex()-first+1) {
		t.Fatalf("scan: %d records, %v", n, err)
	}
}

// TestOpenRollsALargeTail: tidwall reads the last segment whole when it
// opens; a log that finds it IdleRollBytes or larger begins the next one at
// once, so a restart of many queues does not hold every tail until they go
// idle. A small tail is appended to as before.
func TestOpenRollsALargeTail(t *testing.T) {
	dir := t.TempDir()
	opts := Options{IdleRoll: time.Hour, IdleRollBytes: 16 << 10}
	l, _ := openT(t, dir, opts)
	rng := rand.New(rand.NewPCG(11, 12))
	want := fill(t, l, 10, rng) // a few KB
	l.Close()

	l, _ = openT(t, dir, opts)
	if segs := l.segs.list(); len(segs) != 1 {
		t.Fatalf("a small tail was rolled at open: %v", segs)
	}
	maps.Copy(want, fill(t, l, 100, rng)) // now over 16 KiB
	last := l.LastIndex()
	l.Close()

	l, rep := openT(t, dir, opts)
	defer l.Close()
	segs, _ := listSegments(dir)
	if len(segs) != 2 || segs[1] != last+1 || !slices.Equal(segs, l.segs.list()) {
		t.Fatalf("after reopening a %d-record log: files %v, log %v; want a new segment at %d", last, segs, l.segs.list(), last+1)
	}
	if rep.FirstIndex != 1 || rep.LastIndex != last {
		t.Fatalf("reopened %+v", rep)
	}
	maps.Copy(want, fill(t, l, 10, rng))
	checkAll(t, l, want)
	if segs, _ := listSegments(dir); len(segs) != 2 {
		t.Fatalf("appends after the roll went elsewhere: %v", segs)
	}
}

// TestNewSegmentDirectoryUnsynced: records in a segment file whose name
// the directory has not made durable are not acknowledged. With the
// directory's fsync failing, every commit up to the first record of the
// second segment succeeds, the commit holding that record fails, and the
// log refuses further writes.
func TestNewSegmentDirectoryUnsynced(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 1024, Fault: func(op string) error {
		if op == "segment-dir" {
			return errors.New("injected: directory fsync failed")
		}
		return nil
	}}
	l, _ := openT(t, dir, opts)
	defer l.Close()
	var acked []uint64
	for i := 0; i < 100; i++ {
		e := enq(0)
		e.Message = body(l.LastIndex()+1, 200)
		done := make(chan error, 1)
		first, err := l.Append([]event.Event{e}, func(err error) { done <- err })
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		if err := <-done; err != nil {
			segs, _ := listSegments(dir)
			if len(segs) != 2 || first != segs[1] {
				t.Fatalf("commit of %d failed (%v) with segments %v: not the first record of a new segment", first, err, segs)
			}
			if !errors.Is(l.Err(), ErrFailed) {
				t.Fatalf("log error after the failed directory fsync: %v", l.Err())
			}
			if len(acked) < 3 {
				t.Fatalf("only %d commits before the new segment", len(acked))
			}
			return
		}
		acked = append(acked, first)
	}
	t.Fatalf("100 commits of 200 bytes in 1 KiB segments, and none needed the directory synced: %v", acked)
}

// openIn counts this process's open files in dir.
func openIn(t *testing.T, dir string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && filepath.Dir(target) == dir {
			n++
		}
	}
	return n
}

// TestIdleLogSleeps: a log idle for IdleRoll, everything it wrote durable,
// holds no file open, whether it was written or only read; it then takes
// records, reads, truncates its front and reopens as a log that never
// slept would.
func TestIdleLogSleeps(t *testing.T) {
	dir := t.TempDir()
	// Long enough that the reads' handles are still open when counted
	// right after them.
	opts := Options{SegmentSize: 2048, IdleRoll: 200 * time.Millisecond}
	l, _ := openT(t, dir, opts)
	defer l.Close()
	waitAsleep := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); openIn(t, dir) > 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d files of the log still open", what, openIn(t, dir))
			}
		}
	}
	waitAsleep("opened, never written")
	rng := rand.New(rand.NewPCG(9, 10))
	want := fill(t, l, 100, rng)
	waitAsleep("after 100 records")

	checkAll(t, l, want) // the reads open segments
	if openIn(t, dir) == 0 {
		t.Fatal("reads held no segment open: the test shows nothing")
	}
	waitAsleep("after reads")

	maps.Copy(want, fill(t, l, 50, rng))
	checkAll(t, l, want)
	waitAsleep("after 50 more")
	first, err := l.TruncateFront(120)
	if err != nil || first <= 1 {
		t.Fatalf("TruncateFront while asleep: first %d, %v", first, err)
	}
	if n := openIn(t, dir); n != 0 {
		t.Fatalf("TruncateFront left %d files open in a sleeping log", n)
	}
	for idx := range want {
		if idx <= first {
			delete(want, idx)
		}
	}
	maps.Copy(want, fill(t, l, 10, rng))
	checkAll(t, l, want)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, rep := openT(t, dir, opts)
	defer l.Close()
	if rep.FirstIndex != first || rep.LastIndex != 160 {
		t.Fatalf("reopened %+v, want first %d last 160", rep, first)
	}
	checkAll(t, l, want)
}

// TestSleepWakeUnderTruncation: a log that sleeps and wakes every few
// milliseconds while another goroutine truncates its front and reads it
// keeps every record after the cut, in order, also after reopening (run
// with -race, it also checks who touches tidwall when).
func TestSleepWakeUnderTruncation(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 1024, IdleRoll: time.Millisecond, IdleRollBytes: 512}
	l, _ := openT(t, dir, opts)
	rng := rand.New(rand.NewPCG(11, 12))
	var (
		mu   sync.Mutex
		want = map[uint64]event.Event{}
	)
	stop := make(chan struct{})
	cutter := make(chan error, 1)
	go func() {
		var err error
		defer func() { cutter <- err }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if last := l.DurableIndex(); last > 20 {
				if _, err = l.TruncateFront(last - 20); err != nil {
					return
				}
			}
			mu.Lock()
			for idx, ev := range want {
				if idx > l.FirstIndex() {
					if _, _, err = l.ReadAt(idx, ev.Pos, nil); err != nil {
						mu.Unlock()
						return
					}
					break
				}
			}
			mu.Unlock()
		}
	}()
	for range 60 {
		got := fill(t, l, 1+rng.IntN(5), rng)
		mu.Lock()
		maps.Copy(want, got)
		mu.Unlock()
		time.Sleep(time.Duration(rng.IntN(4)) * time.Millisecond)
	}
	close(stop)
	if err := <-cutter; err != nil {
		t.Fatalf("truncating or reading while the log slept and woke: %v", err)
	}
	first := l.FirstIndex()
	for idx := range want {
		if idx <= first {
			delete(want, idx)
		}
	}
	l = reopenChecked(t, l, dir, opts, want)
	defer l.Close()
}

// reopenChecked checks want against l, closes it, opens dir again and
// checks that the log spans the same indexes and holds want; it returns
// the reopened log.
func reopenChecked(t *testing.T, l *Log, dir string, opts Options, want map[uint64]event.Event) *Log {
	t.Helper()
	checkAll(t, l, want)
	first, last := l.FirstIndex(), l.LastIndex()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, rep := openT(t, dir, opts)
	if rep.FirstIndex != first || rep.LastIndex != last {
		l.Close()
		t.Fatalf("reopened %+v, want %d-%d", rep, first, last)
	}
	checkAll(t, l, want)
	return l
}

// TestWakeFailure: a sleeping log that cannot open tidwall again (here by
// injection) acknowledges nothing of the commit that needed it and fails,
// and what it had acknowledged before it slept opens intact.
func TestWakeFailure(t *testing.T) {
	dir := t.TempDir()
	var broken atomic.Bool
	opts := Options{IdleRoll: 10 * time.Millisecond, Fault: func(op string) error {
		if op == "wake" && broken.Load() {
			return errors.New("injected: too many open files")
		}
		return nil
	}}
	l, _ := openT(t, dir, opts)
	rng := rand.New(rand.NewPCG(13, 14))
	want := fill(t, l, 10, rng)
	for deadline := time.Now().Add(10 * time.Second); openIn(t, dir) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the log never slept")
		}
	}
	broken.Store(true)
	done := make(chan error, 1)
	if _, err := l.Append([]event.Event{enq(0)}, func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("a commit was acknowledged although tidwall could not be opened")
	}
	if !errors.Is(l.Err(), ErrFailed) {
		t.Fatalf("log error after a failed wake: %v", l.Err())
	}
	l.Close()
	l, rep := openT(t, dir, Options{})
	defer l.Close()
	if rep.LastIndex != 10 {
		t.Fatalf("reopened %+v, want the 10 acknowledged records", rep)
	}
	checkAll(t, l, want)
}

// TestReopenedLogStartsAsleep: a log reopened with a sound tail holds no
// file and no writer goroutine until it is used (a namespace of thousands
// of entities starts without a descriptor for each), reports what tidwall
// would, and takes and serves records as a log opened awake does. A log
// that has gone to sleep has no writer either, and the next append starts
// one.
func TestReopenedLogStartsAsleep(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 2048, IdleRoll: 100 * time.Millisecond}
	l, _ := openT(t, dir, opts)
	rng := rand.New(rand.NewPCG(13, 14))
	want := fill(t, l, 60, rng) // several segments, the last partly filled
	last, bytes := l.LastIndex(), l.Bytes()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := listSegments(dir)
	if len(segs) < 3 {
		t.Fatalf("segments %v: the test wants several", segs)
	}

	l, rep := openT(t, dir, opts)
	defer l.Close()
	running := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.running
	}
	if n := openIn(t, dir); n != 0 || running() {
		t.Fatalf("reopened: %d files open, writer running %v; want none", n, running())
	}
	if rep.FirstIndex != 1 || rep.LastIndex != last || l.Bytes() != bytes || rep.Segments != len(segs) {
		t.Fatalf("reopened %+v with %d bytes; want 1-%d in %d segments, %d bytes", rep, l.Bytes(), last, len(segs), bytes)
	}
	checkAll(t, l, want)
	maps.Copy(want, fill(t, l, 20, rng))
	checkAll(t, l, want)
	for deadline := time.Now().Add(10 * time.Second); running() || openIn(t, dir) > 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("idle: %d files open, writer running %v", openIn(t, dir), running())
		}
	}
	maps.Copy(want, fill(t, l, 5, rng)) // starts a writer again
	checkAll(t, l, want)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, rep = openT(t, dir, opts)
	defer l.Close()
	if rep.LastIndex != last+25 {
		t.Fatalf("reopened %+v, want last %d", rep, last+25)
	}
	checkAll(t, l, want)
}
