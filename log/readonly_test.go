package log

import (
	"errors"
	"os"
	"testing"

	"github.com/walbus/walbus/log/event"
)

// The read-only view reports damage without repairing it.
func TestReadOnlyReportsWithoutRepairing(t *testing.T) {
	src, want := golden(t, 30, Options{SegmentSize: 2048})
	dir := copyDir(t, src)
	last := lastSegment(t, dir)
	mutateFile(t, last, func(b []byte) []byte { return b[:len(b)-3] })
	before, _ := os.ReadFile(last)

	r, err := OpenReadOnly(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	segs := r.Segments()
	if len(segs) < 2 {
		t.Fatalf("segments %v", segs)
	}
	var n int
	for i, s := range segs {
		prob, err := r.WalkSegment(s.First, func(rec RecordInfo) error {
			n++
			if w, ok := want[rec.Event.Index]; !ok || string(w.Message) != string(rec.Event.Message) {
				t.Fatalf("record %d wrong", rec.Event.Index)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if i < len(segs)-1 && prob != nil {
			t.Fatalf("segment %d: %v", s.First, prob)
		}
		if i == len(segs)-1 && (prob == nil || prob.Followed || !prob.Tail || prob.Index != 30) {
			t.Fatalf("torn tail not reported: %v", prob)
		}
	}
	if n != 29 {
		t.Fatalf("walked %d valid records, want 29", n)
	}
	if err := r.Scan(1, 0, func(*event.Event) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("scan over a torn tail: %v", err)
	}
	if after, _ := os.ReadFile(last); string(after) != string(before) {
		t.Fatal("the read-only view changed the segment")
	}
	if e, err := r.ReadAt(5, want[5].Pos); err != nil || e.Index != 5 {
		t.Fatalf("ReadAt: %v", err)
	}
}
