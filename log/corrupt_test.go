package log

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/walbus/walbus/log/event"
)

// copyDir copies the flat directory src to a new temporary directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	segs, err := listSegments(dir)
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segments: %v", err)
	}
	return segmentPath(dir, segs[len(segs)-1])
}

func mutateFile(t *testing.T, path string, fn func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, fn(b), 0o640); err != nil {
		t.Fatal(err)
	}
}

// golden builds a closed log of n single-record groups and returns its
// directory and events by index.
func golden(t *testing.T, n int, opts Options) (string, map[uint64]event.Event) {
	t.Helper()
	dir := t.TempDir()
	l, _ := openT(t, dir, opts)
	want := fill(t, l, n-1, rand.New(rand.NewPCG(9, 9)))
	// The last record is small, so tearing it at every length stays quick.
	last := enq(0)
	last.Message = body(uint64(n), 40)
	evs := []event.Event{last}
	appendWait(t, l, evs)
	want[evs[0].Index] = evs[0]
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, want
}

// reopenCheck opens dir and checks that indexes 1..last hold what want says
// and that the log accepts the next append at last+1.
func reopenCheck(t *testing.T, dir string, opts Options, want map[uint64]event.Event, last uint64) OpenReport {
	t.Helper()
	l, rep := openT(t, dir, opts)
	defer l.Close()
	if rep.LastIndex != last {
		t.Fatalf("last index %d, want %d (repair: %s)", rep.LastIndex, last, rep.Repair)
	}
	n := uint64(0)
	err := l.Scan(1, func(e *event.Event) error {
		n++
		if !bytes.Equal(e.Message, want[e.Index].Message) {
			t.Fatalf("index %d changed", e.Index)
		}
		return nil
	})
	if err != nil || n != last {
		t.Fatalf("scan: %d records, %v", n, err)
	}
	if first := appendWait(t, l, []event.Event{enq(5)}); first != last+1 {
		t.Fatalf("next append got index %d, want %d", first, last+1)
	}
	return rep
}

func TestTornTailEveryK(t *testing.T) {
	const n = 20
	src, want := golden(t, n, Options{})
	lastEntry := event.UvarintLen(uint64(want[n].Pos.Size)) + int(want[n].Pos.Size)
	for k := 1; k <= lastEntry; k++ {
		dir := copyDir(t, src)
		mutateFile(t, lastSegment(t, dir), func(b []byte) []byte { return b[:len(b)-k] })
		rep := reopenCheck(t, dir, Options{}, want, n-1)
		if k < lastEntry && (!rep.Repair.Torn || rep.Repair.FromIndex != n || rep.Repair.Bytes != int64(lastEntry-k)) {
			t.Fatalf("k=%d: repair %+v", k, rep.Repair)
		}
		if k == lastEntry && rep.Repair.Bytes != 0 {
			t.Fatalf("k=%d removed a whole entry, nothing to repair, got %+v", k, rep.Repair)
		}
	}
}

func TestZerosAppendedLoseNothing(t *testing.T) {
	src, want := golden(t, 10, Options{})
	for _, zeros := range []int{1, 2, 7, event.MinRecordSize, 4096, 70000} {
		dir := copyDir(t, src)
		mutateFile(t, lastSegment(t, dir), func(b []byte) []byte { return append(b, make([]byte, zeros)...) })
		rep := reopenCheck(t, dir, Options{}, want, 10)
		if rep.Repair.Bytes != int64(zeros) {
			t.Fatalf("%d zeros: repair %+v", zeros, rep.Repair)
		}
	}
}

func TestBitFlipInTailRecordIsTorn(t *testing.T) {
	src, want := golden(t, 10, Options{})
	dir := copyDir(t, src)
	mutateFile(t, lastSegment(t, dir), func(b []byte) []byte { b[len(b)-3] ^= 0x10; return b })
	rep := reopenCheck(t, dir, Options{}, want, 9)
	if !rep.Repair.Torn || rep.Repair.FromIndex != 10 {
		t.Fatalf("repair %+v", rep.Repair)
	}
}

func TestBitFlipBeforeTailIsCorruption(t *testing.T) {
	src, want := golden(t, 10, Options{})
	dir := copyDir(t, src)
	off := want[5].Pos.Offset + 12
	mutateFile(t, lastSegment(t, dir), func(b []byte) []byte { b[off] ^= 0x01; return b })
	_, _, err := Open(dir, Options{})
	var ce *Damage
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Index != 5 {
		t.Fatalf("open: %v", err)
	}
	// Told to repair, Open cuts the log at the damage.
	reopenCheck(t, dir, Options{Repair: true}, want, 4)
}

// Damage to the length prefix of a record in the middle of the last
// segment, with written records after it, is corruption like a flipped bit
// in its body (TestBitFlipBeforeTailIsCorruption): Open refuses with a
// *Damage unless told to repair, and does not cut records 5..10
// away as a torn tail.
func TestLengthPrefixDamageBeforeTailIsCorruption(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(b []byte, prefixOff int) []byte
	}{
		{"length grows", func(b []byte, off int) []byte { b[off] |= 0x7f; return b }},
		{"length shrinks", func(b []byte, off int) []byte { b[off] = event.MinRecordSize; return b }},
		{"zeroed bytes", func(b []byte, off int) []byte {
			for i := off; i < off+8; i++ {
				b[i] = 0
			}
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, want := golden(t, 10, Options{}) // one segment
			dir := copyDir(t, src)
			pos := want[5].Pos
			prefixOff := int(pos.Offset) - event.UvarintLen(uint64(pos.Size))
			mutateFile(t, lastSegment(t, dir), func(b []byte) []byte { return tc.mutate(b, prefixOff) })
			l, rep, err := Open(dir, Options{})
			if err == nil {
				last := l.LastIndex()
				l.Close()
				t.Fatalf("open succeeded and silently dropped acknowledged indexes %d..10 (last index now %d, repair: %s)",
					last+1, last, rep.Repair)
			}
			var ce *Damage
			if !errors.As(err, &ce) || ce.Index != 5 {
				t.Fatalf("open: %v", err)
			}
			reopenCheck(t, dir, Options{Repair: true}, want, 4)
		})
	}
}

func TestBitFlipInOlderSegment(t *testing.T) {
	opts := Options{SegmentSize: 2048}
	src, want := golden(t, 60, opts)
	dir := copyDir(t, src)
	segs, _ := listSegments(dir)
	if len(segs) < 3 {
		t.Fatalf("want several segments, got %d", len(segs))
	}
	victim := segs[1]
	pos := want[victim+1].Pos
	mutateFile(t, segmentPath(dir, victim), func(b []byte) []byte { b[pos.Offset+pos.Size-6] ^= 0x80; return b })

	// Open does not read old segments, so it succeeds; every read path then
	// reports the damage as typed corruption with its place.
	l, _ := openT(t, dir, opts)
	err := l.Scan(1, func(*event.Event) error { return nil })
	var ce *Damage
	if !errors.As(err, &ce) || ce.Segment != victim || ce.Index != victim+1 || ce.Offset != int64(pos.Offset)-int64(event.UvarintLen(uint64(pos.Size))) {
		t.Fatalf("scan: %v", err)
	}
	if _, _, err := l.ReadAt(victim+1, pos, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ReadAt: %v", err)
	}
	// The operator's repair: cut the log back to just before the damage.
	if err := l.TruncateBack(victim); err != nil {
		t.Fatal(err)
	}
	if err := l.Scan(1, func(*event.Event) error { return nil }); err != nil {
		t.Fatalf("scan after repair: %v", err)
	}
	if first := appendWait(t, l, []event.Event{enq(3)}); first != victim+1 {
		t.Fatalf("append after repair at %d", first)
	}
	l.Close()
}

func TestMissingSegmentIsCorruption(t *testing.T) {
	opts := Options{SegmentSize: 2048}
	src, _ := golden(t, 60, opts)
	dir := copyDir(t, src)
	segs, _ := listSegments(dir)
	os.Remove(segmentPath(dir, segs[2]))
	l, _ := openT(t, dir, opts)
	defer l.Close()
	err := l.Scan(1, func(*event.Event) error { return nil })
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("scan over a missing segment: %v", err)
	}
}

func TestUnfinishedGroupIsDropped(t *testing.T) {
	opts := Options{SegmentSize: 4096}
	for _, tc := range []struct {
		name  string
		group int // records in the final group
		size  int
	}{
		{"inside one segment", 3, 100},
		{"across segments", 12, 700},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			l, _ := openT(t, dir, opts)
			want := fill(t, l, 5, rand.New(rand.NewPCG(1, 1)))
			segsBefore, _ := listSegments(dir)
			evs := make([]event.Event, tc.group)
			for i := range evs {
				evs[i] = enq(tc.size)
			}
			appendWait(t, l, evs)
			l.Close()
			segsAfter, _ := listSegments(dir)
			if tc.name == "across segments" && len(segsAfter) == len(segsBefore) {
				t.Fatal("group did not cross a segment boundary")
			}
			// Tear the group's last record: the whole group must go, in
			// every segment it touched.
			mutateFile(t, lastSegment(t, dir), func(b []byte) []byte { return b[:len(b)-1] })
			rep := reopenCheck(t, dir, opts, want, 5)
			if rep.Repair.FromIndex != 6 || rep.Repair.Records != tc.group-1 || !rep.Repair.Torn {
				t.Fatalf("repair %+v", rep.Repair)
			}
		})
	}
}

func TestInterruptedFrontTruncation(t *testing.T) {
	opts := Options{SegmentSize: 2048}
	src, want := golden(t, 60, opts)
	dir := copyDir(t, src)
	segs, _ := listSegments(dir)
	// Leave behind what tidwall writes first when truncating the front to
	// segs[2]: a START file holding the surviving segment. A crash then
	// stops it before the old files are removed.
	b, _ := os.ReadFile(segmentPath(dir, segs[2]))
	os.WriteFile(segmentPath(dir, segs[2])+".START", b, 0o640)
	// and also tear the tail, which tidwall alone could not open
	mutateFile(t, lastSegment(t, dir), func(b []byte) []byte { return b[:len(b)-2] })
	l, rep := openT(t, dir, opts)
	defer l.Close()
	if rep.FirstIndex != segs[2] || rep.LastIndex != 59 {
		t.Fatalf("report %+v, want first %d last 59", rep, segs[2])
	}
	for idx := segs[2]; idx <= 59; idx++ {
		if _, _, err := l.ReadAt(idx, want[idx].Pos, nil); err != nil {
			t.Fatalf("ReadAt(%d): %v", idx, err)
		}
	}
}

func FuzzScanSegment(f *testing.F) {
	l, _, _ := Open(f.TempDir(), Options{})
	for i := range 3 {
		l.Append([]event.Event{{Type: event.Completed, Seq: uint64(i)}, {Type: event.Released, Seq: 1}}, nil)
	}
	l.Close()
	segs, _ := listSegments(l.Dir())
	seed, _ := os.ReadFile(segmentPath(l.Dir(), segs[0]))
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		recs, bad := scanRecords(data, 1)
		end := 0
		for i, r := range recs {
			if r.off != end || r.index != uint64(i+1) || r.end <= r.off {
				t.Fatalf("record %d: %+v after offset %d", i, r, end)
			}
			end = r.end
		}
		if bad == nil && end != len(data) {
			t.Fatalf("clean scan stopped at %d of %d", end, len(data))
		}
		if bad != nil && bad.Offset != int64(end) {
			t.Fatalf("bad record at %d, valid prefix ends at %d", bad.Offset, end)
		}
	})
}
