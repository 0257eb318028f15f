package log

import (
	"os"

	"github.com/walbus/walbus/log/event"
)

// ReadOnly is a log opened for offline tools: it never repairs, truncates
// or writes anything, so inspecting a damaged directory leaves it as it was.
type ReadOnly struct {
	set *segmentSet
}

// SegmentInfo describes one segment file.
type SegmentInfo struct {
	First uint64 // index of its first record (its name)
	Path  string
	Size  int64
}

// RecordInfo is one valid record found by WalkSegment.
type RecordInfo struct {
	Event  event.Event // byte slices alias the segment's buffer, valid during the callback
	Offset int64       // of the entry (its length prefix) in the segment
	Size   int         // of the whole entry
}

// OpenReadOnly opens the log in dir for reading only.
func OpenReadOnly(dir string) (*ReadOnly, error) {
	segs, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	return &ReadOnly{set: newSegmentSet(dir, segs)}, nil
}

// Segments lists the segment files in order.
func (r *ReadOnly) Segments() []SegmentInfo {
	var out []SegmentInfo
	for _, first := range r.set.list() {
		info := SegmentInfo{First: first, Path: r.set.path(first)}
		if fi, err := os.Stat(info.Path); err == nil {
			info.Size = fi.Size()
		}
		out = append(out, info)
	}
	return out
}

// WalkSegment reads every record of the segment starting at first, checking
// each envelope and that indexes follow from first, and calls fn for each
// valid one. It stops at the first damage and returns it, or an error from
// reading the file or from fn. The damage's Tail is set when the segment is
// the last and nothing valid follows the damage: what Open would cut away.
func (r *ReadOnly) WalkSegment(first uint64, fn func(RecordInfo) error) (*Damage, error) {
	data, err := os.ReadFile(r.set.path(first))
	if err != nil {
		return nil, err
	}
	recs, bad := scanRecords(data, first)
	for _, rec := range recs {
		body, _, _ := entryAt(data, rec.off)
		e, _ := event.DecodeRecord(body)
		e.Pos = event.Position{Offset: uint32(rec.end - len(body)), Size: uint32(len(body))}
		if err := fn(RecordInfo{Event: e, Offset: int64(rec.off), Size: rec.end - rec.off}); err != nil {
			return nil, err
		}
	}
	if bad == nil {
		return nil, nil
	}
	segs := r.set.list()
	bad.Tail = !bad.Followed && len(segs) > 0 && segs[len(segs)-1] == first
	return bad, nil
}

// Scan calls fn for every record with from <= index <= to (to 0: to the
// end), in order, across segments. Damage anywhere, including a torn tail,
// is a *Damage.
func (r *ReadOnly) Scan(from, to uint64, fn func(*event.Event) error) error {
	if to == 0 {
		to = ^uint64(0)
	}
	return r.set.scan(from, to, fn)
}

// ReadAt reads the record at index from its position, checking it.
func (r *ReadOnly) ReadAt(index uint64, pos event.Position) (event.Event, error) {
	e, _, err := r.set.readAt(index, pos, nil)
	return e, err
}

// FirstIndex is the first segment's first index (1 for an empty log).
func (r *ReadOnly) FirstIndex() uint64 {
	segs := r.set.list()
	if len(segs) == 0 {
		return 1
	}
	return segs[0]
}

// LastIndex is the index of the last valid record of the last segment (a
// torn tail is not counted).
func (r *ReadOnly) LastIndex() uint64 {
	segs := r.set.list()
	if len(segs) == 0 {
		return 0
	}
	last := segs[len(segs)-1] - 1
	r.WalkSegment(segs[len(segs)-1], func(rec RecordInfo) error {
		last = rec.Event.Index
		return nil
	})
	return last
}

// ScanFrom scans from index to the end: ReadOnly as a snapshot.Source.
func (r *ReadOnly) ScanFrom(from uint64, fn func(*event.Event) error) error {
	return r.Scan(from, 0, fn)
}

// Close releases the file handles.
func (r *ReadOnly) Close() { r.set.close() }
