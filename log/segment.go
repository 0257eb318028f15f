package log

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/walbus/walbus/log/event"
)

// Segment files are tidwall/wal's binary format: each entry is a uvarint
// length followed by that many bytes (our envelope). A file is named by the
// 20-digit index of its first entry.

const segmentNameLen = 20

// SegmentName is the file name of the segment whose first index is first.
func SegmentName(first uint64) string { return fmt.Sprintf("%020d", first) }

// Damage is one damaged place in a log: a record that fails its checks, a
// gap between segments, or an unreadable segment or archive. The server's
// Open returns it for damage before the tail; the offline tools return it
// wherever a read had to stop.
type Damage struct {
	Dir     string // the log's directory or the archive's path; "" when the reader names the log itself
	Segment uint64 // first index of the segment, 0 when not about one segment
	Offset  int64  // byte offset of the damage, -1 when not about one place
	Index   uint64 // the index the damaged record should have had, 0 if unknown
	Reason  string
	// Followed: a valid record with the next index comes right after the
	// damage, so it is in the middle of written data and cannot be a torn
	// write.
	Followed bool
	// Tail: the damage is in the last segment and nothing valid follows: a
	// torn tail, which Open cuts away. A Damage with Tail set is not
	// corruption.
	Tail bool
}

func (d *Damage) Error() string {
	var b strings.Builder
	if d.Dir != "" {
		fmt.Fprintf(&b, "log %s: ", d.Dir)
	}
	if d.Segment != 0 {
		fmt.Fprintf(&b, "segment %s ", SegmentName(d.Segment))
	}
	if d.Offset >= 0 {
		fmt.Fprintf(&b, "offset %d ", d.Offset)
	}
	kind := "corrupt"
	if d.Tail {
		kind = "torn tail"
	}
	fmt.Fprintf(&b, "(index %d): %s: %s", d.Index, kind, d.Reason)
	return b.String()
}

// ErrCorrupt matches, with errors.Is, every *Damage that is not a torn tail.
var ErrCorrupt = errors.New("log corrupt")

func (d *Damage) Is(target error) bool { return target == ErrCorrupt && !d.Tail }

// listSegments returns the first indexes of the segment files in dir, sorted.
// Names that are not exactly 20 digits (tidwall's START/END/TEMP files, our
// own files) are not segments.
func listSegments(dir string) ([]uint64, error) {
	segs, _, err := readSegments(dir)
	return segs, err
}

// readSegments lists dir once: the segments' first indexes, sorted, and
// whether tidwall left START or END files behind (a truncation cut short
// by a crash; its Open finishes the job).
func readSegments(dir string) (segs []uint64, interrupted bool, err error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, false, err
	}
	for _, ent := range ents {
		name := ent.Name()
		if len(name) == segmentNameLen+6 && name[segmentNameLen:] == ".START" ||
			len(name) == segmentNameLen+4 && name[segmentNameLen:] == ".END" {
			interrupted = true
		}
		if ent.IsDir() || len(name) != segmentNameLen {
			continue
		}
		first, err := strconv.ParseUint(name, 10, 64)
		if err != nil || first == 0 {
			continue
		}
		segs = append(segs, first)
	}
	slices.Sort(segs)
	return segs, interrupted, nil
}

// recordInfo describes one valid record found by scanRecords.
type recordInfo struct {
	off   int // offset of the entry (its length prefix)
	end   int // offset just past the entry
	index uint64
	flags uint8
}

// scanRecords walks the entries of one segment whose first index is first and
// returns the valid prefix, and the first bad entry if any (Segment, Offset,
// Index, Reason and Followed set).
func scanRecords(data []byte, first uint64) ([]recordInfo, *Damage) {
	var recs []recordInfo
	off := 0
	want := first
	for off < len(data) {
		body, n, reason := entryAt(data, off)
		if reason == "" {
			e, err := event.DecodeRecord(body)
			switch {
			case err != nil:
				reason = err.Error()
			case e.Index != want:
				reason = fmt.Sprintf("record holds index %d", e.Index)
			default:
				recs = append(recs, recordInfo{off: off, end: off + n, index: want, flags: e.Flags})
				off += n
				want++
				continue
			}
		}
		return recs, &Damage{Segment: first, Offset: int64(off), Index: want, Reason: reason,
			Followed: nextRecordAfter(data, off, n, want+1)}
	}
	return recs, nil
}

// nextRecordAfter reports whether the valid record with index next follows
// the bad entry at off, whose framing gave it n bytes (0 when its length
// prefix is unreadable). With a damaged length prefix the framing cannot
// be trusted, so the bytes after off are searched for that record: damage
// to a length must not make written records behind it look like the end
// of a torn write. Only index next counts, as for an entry whose length
// is intact: records further on could be pages of an unfinished write
// that reached the disk around a hole.
func nextRecordAfter(data []byte, off, n int, next uint64) bool {
	if n > 0 && off+n < len(data) {
		if body, _, r := entryAt(data, off+n); r == "" {
			if e, err := event.DecodeRecord(body); err == nil && e.Index == next {
				return true
			}
		}
	}
	for p := off + 1; p < len(data); p++ {
		body, _, r := entryAt(data, p)
		if r != "" || (body[0] != event.FormatVersion && body[0] != event.FormatVersionRaft) ||
			binary.BigEndian.Uint64(body[3:11]) != next {
			continue
		}
		if e, err := event.DecodeRecord(body); err == nil && e.Index == next {
			return true
		}
	}
	return false
}

// entryAt frames the entry at off: it returns the envelope bytes and the
// entry's total length. A non-empty reason means the framing itself is bad;
// n is then the entry length if it could be determined, else 0.
func entryAt(data []byte, off int) (body []byte, n int, reason string) {
	size, k := binary.Uvarint(data[off:])
	if k <= 0 {
		return nil, 0, "unreadable length prefix"
	}
	if size < event.MinRecordSize {
		return nil, 0, fmt.Sprintf("entry of %d bytes is shorter than an envelope", size)
	}
	if size > uint64(len(data)-off-k) {
		return nil, 0, fmt.Sprintf("entry of %d bytes runs past the end of the segment", size)
	}
	return data[off+k : off+k+int(size)], k + int(size), ""
}

// segmentSet is the list of segment files of one log and a cache of read-only
// handles for positional reads. Records are read with pread on our own
// handles, never through tidwall's Read, whose reads of old segments load the
// whole file and race with writers. At most maxOpenSegments handles stay
// open, the least recently used closed first: a log pinned far back (an
// old deferred message) whose backlog is read through would otherwise hold
// a descriptor for every segment it read.
type segmentSet struct {
	dir string

	mu    sync.RWMutex
	segs  []uint64 // first index of each segment, ascending
	files map[uint64]*handle
	clock atomic.Uint64 // ticks once per handle use

	// idle, if set, is how long a handle may go unused before it is
	// closed, so that a quiet log holds no descriptor for its readers.
	idle    time.Duration
	sweep   *time.Timer // armed while handles are open (under mu)
	sweptAt uint64      // clock when sweep was armed
}

// handle is an open segment and when it was last used (segmentSet.clock).
type handle struct {
	f    *os.File
	used atomic.Uint64
}

// maxOpenSegments bounds each log's open read handles.
const maxOpenSegments = 32

func newSegmentSet(dir string, segs []uint64) *segmentSet {
	return &segmentSet{dir: dir, segs: segs, files: make(map[uint64]*handle)}
}

func (s *segmentSet) path(first uint64) string { return segmentPath(s.dir, first) }

// find returns the first index of the segment holding index, or false.
func (s *segmentSet) find(index uint64) (uint64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return findSegment(s.segs, index)
}

func findSegment(segs []uint64, index uint64) (uint64, bool) {
	i, found := slices.BinarySearch(segs, index)
	if found {
		return segs[i], true
	}
	if i == 0 {
		return 0, false
	}
	return segs[i-1], true
}

func (s *segmentSet) list() []uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Clone(s.segs)
}

func (s *segmentSet) add(first uint64) {
	s.mu.Lock()
	s.segs = append(s.segs, first)
	s.mu.Unlock()
}

// replaceFront drops every segment before keep and records that the segment
// starting at newFirst now begins the log (tidwall rewrote it).
func (s *segmentSet) replaceFront(dropBefore, newFirst uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, _ := slices.BinarySearch(s.segs, dropBefore)
	for _, first := range s.segs[:i] {
		if h := s.files[first]; h != nil {
			h.f.Close()
			delete(s.files, first)
		}
	}
	s.segs = append([]uint64{newFirst}, s.segs[i:]...)
}

func (s *segmentSet) file(first uint64) (*os.File, error) {
	s.mu.RLock()
	h := s.files[first]
	s.mu.RUnlock()
	if h != nil {
		h.used.Store(s.clock.Add(1))
		return h.f, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.files[first]; h != nil {
		h.used.Store(s.clock.Add(1))
		return h.f, nil
	}
	f, err := os.Open(s.path(first))
	if err != nil {
		return nil, err
	}
	if len(s.files) >= maxOpenSegments {
		s.closeLeastUsed()
	}
	h = &handle{f: f}
	h.used.Store(s.clock.Add(1))
	s.files[first] = h
	s.armSweep()
	return f, nil
}

// armSweep starts the timer that closes unused handles, unless it runs
// already. Callers hold mu.
func (s *segmentSet) armSweep() {
	if s.idle <= 0 || s.sweep != nil {
		return
	}
	s.sweptAt = s.clock.Load()
	s.sweep = time.AfterFunc(s.idle, s.sweepIdle)
}

// sweepIdle closes the handles not used since the sweep was armed, and
// arms it again while some stay open.
func (s *segmentSet) sweepIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for first, h := range s.files {
		if h.used.Load() <= s.sweptAt {
			h.f.Close()
			delete(s.files, first)
		}
	}
	s.sweep = nil
	if len(s.files) > 0 {
		s.armSweep()
	}
}

// closeLeastUsed closes the handle used longest ago. A read already under
// way on it finishes first (the file is closed once no call uses it); one
// that fetched it but has not started sees os.ErrClosed, and pread opens
// the segment again. Callers hold s.mu.
func (s *segmentSet) closeLeastUsed() {
	var (
		oldest uint64
		at     = uint64(math.MaxUint64)
	)
	for first, h := range s.files {
		if u := h.used.Load(); u < at {
			oldest, at = first, u
		}
	}
	s.files[oldest].f.Close()
	delete(s.files, oldest)
}

// pread reads len(p) bytes at off of the segment starting at first.
func (s *segmentSet) pread(first uint64, p []byte, off int64) (int, error) {
	for attempt := 0; ; attempt++ {
		f, err := s.file(first)
		if err != nil {
			return 0, err
		}
		n, err := f.ReadAt(p, off)
		if errors.Is(err, os.ErrClosed) && attempt < 100 {
			continue // its handle was closed under it to make room
		}
		return n, err
	}
}

// readAt reads and checks the record with the given index at pos. buf is
// reused when large enough; the event's byte slices alias the returned buffer.
func (s *segmentSet) readAt(index uint64, pos event.Position, buf []byte) (event.Event, []byte, error) {
	first, ok := s.find(index)
	if !ok {
		return event.Event{}, buf, fmt.Errorf("read index %d: before the first segment", index)
	}
	if cap(buf) < int(pos.Size) {
		buf = make([]byte, pos.Size)
	}
	buf = buf[:pos.Size]
	if _, err := s.pread(first, buf, int64(pos.Offset)); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return event.Event{}, buf, fmt.Errorf("read index %d at %s+%d: %w", index, SegmentName(first), pos.Offset, err)
	}
	e, err := s.decodeAt(first, index, pos, buf)
	return e, buf, err
}

// decodeAt decodes rec, read at pos of segment first, as the record index.
func (s *segmentSet) decodeAt(first, index uint64, pos event.Position, rec []byte) (event.Event, error) {
	e, err := event.DecodeRecord(rec)
	if err == nil && e.Index != index {
		err = fmt.Errorf("record holds index %d", e.Index)
	}
	if err != nil {
		return event.Event{}, &Damage{Dir: s.dir, Segment: first, Offset: int64(pos.Offset), Index: index, Reason: err.Error()}
	}
	e.Pos = pos
	return e, nil
}

// A Window is the stretch of a segment a reader last read through
// ReadAhead: a reader going through records in log order (a backlog being
// delivered) then reads the segment once per window, not once per record.
// The zero value is ready; a Window belongs to one goroutine.
type Window struct {
	seg  uint64 // first index of the segment read; 0 before the first read
	off  int64  // where data starts in it
	end  int64  // where the last record read ends
	data []byte
}

// windowSize is how much a forward read takes at once.
const windowSize = 64 << 10

// readAhead is readAt through w. Moving forward in the segment (the record
// starts at or after the end of the one read before) reads a window from
// the record on, kept for the next records; a jump, or a record larger than
// a window, is read alone. The event owns its bytes either way.
func (s *segmentSet) readAhead(index uint64, pos event.Position, w *Window) (event.Event, error) {
	first, ok := s.find(index)
	if !ok {
		return event.Event{}, fmt.Errorf("read index %d: before the first segment", index)
	}
	start, end := int64(pos.Offset), int64(pos.Offset)+int64(pos.Size)
	forward := w.seg == first && start >= w.end
	var rec []byte
	if w.seg == first && start >= w.off && end <= w.off+int64(len(w.data)) {
		rec = bytes.Clone(w.data[start-w.off : end-w.off])
	} else {
		size := int(pos.Size)
		forward = forward && size <= windowSize // a large message is read alone
		if forward {
			if w.data == nil {
				w.data = make([]byte, windowSize)
			}
			rec = w.data[:windowSize]
		} else {
			rec = make([]byte, size)
		}
		n, err := s.pread(first, rec, start)
		if n < int(pos.Size) {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			w.seg, w.data = 0, w.data[:0]
			return event.Event{}, fmt.Errorf("read index %d at %s+%d: %w", index, SegmentName(first), pos.Offset, err)
		}
		if forward {
			// A window may end inside a record still being written; only
			// records read whole from it are used.
			w.off, w.data = start, rec[:n]
			rec = bytes.Clone(rec[:pos.Size])
		} else {
			w.off, w.data = start, w.data[:0]
		}
	}
	w.seg, w.end = first, end
	return s.decodeAt(first, index, pos, rec)
}

// scan calls fn for every record with from <= index <= to, in order, reading
// whole segments. It checks every envelope and that indexes are contiguous
// across segments.
func (s *segmentSet) scan(from, to uint64, fn func(*event.Event) error) error {
	segs := s.list()
	if len(segs) == 0 || from > to {
		return nil
	}
	start := 0
	if first, ok := findSegment(segs, from); ok {
		start = slices.Index(segs, first)
	}
	want := segs[start]
	for i := start; i < len(segs) && want <= to; i++ {
		if segs[i] != want {
			return &Damage{Dir: s.dir, Segment: segs[i], Offset: -1, Index: want,
				Reason: fmt.Sprintf("segment starts at index %d; the previous one ended at %d", segs[i], want-1)}
		}
		data, err := os.ReadFile(s.path(segs[i]))
		if err != nil {
			return fmt.Errorf("read segment %s: %w", SegmentName(segs[i]), err)
		}
		off := 0
		for off < len(data) && want <= to {
			body, n, reason := entryAt(data, off)
			var e event.Event
			if reason == "" {
				e, err = event.DecodeRecord(body)
				if err != nil {
					reason = err.Error()
				} else if e.Index != want {
					reason = fmt.Sprintf("record holds index %d", e.Index)
				}
			}
			if reason != "" {
				return &Damage{Dir: s.dir, Segment: segs[i], Offset: int64(off), Index: want, Reason: reason}
			}
			if want >= from {
				e.Pos = event.Position{Offset: uint32(off + n - len(body)), Size: uint32(len(body))}
				if err := fn(&e); err != nil {
					return err
				}
			}
			off += n
			want++
		}
	}
	return nil
}

// reset replaces the segment list after the log was cut back.
func (s *segmentSet) reset(segs []uint64) {
	s.close()
	s.mu.Lock()
	s.segs = segs
	s.mu.Unlock()
}

func (s *segmentSet) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for first, h := range s.files {
		h.f.Close()
		delete(s.files, first)
	}
	if s.sweep != nil {
		s.sweep.Stop()
		s.sweep = nil
	}
}

// SyncDir fsyncs the directory dir, making the names created, renamed or
// removed in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// MkdirAllDurable is os.MkdirAll that also makes every directory it
// creates durable in its parent: a file fsynced in a directory whose own
// name is not durable can vanish with it in a crash.
func MkdirAllDurable(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil {
		if !fi.IsDir() {
			return &os.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAllDurable(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil {
		if os.IsExist(err) {
			return nil
		}
		return err
	}
	return SyncDir(parent)
}
