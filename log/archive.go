package log

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/walbus/walbus/log/event"
)

// An archive holds log records outside the segmented log, keyed by index:
// compaction moves the records still needed (live messages and the records
// that modify them) out of the front of a log into one, so the log's front
// can be truncated although old messages remain. Records keep their
// envelopes, CRCs included, so a read checks them as a log read does.
//
// File layout (integers big-endian unless said):
//
//	"WALBARC1"
//	blocks: each a zstd frame of consecutive records, each record a
//	        uvarint length and the envelope
//	index:  uvarint count, then per record: uvarint index delta (from the
//	        previous, the first from 0), uvarint block, uvarint offset in
//	        the block, uvarint size; then uvarint block count and per block
//	        uvarint file offset, uvarint compressed length, uvarint raw length
//	footer: index offset u64, index length u64, CRC32-C of the index u32,
//	        "WALBARCE"
//
// Archives are written to a temporary name, fsynced and renamed, so one is
// either whole or absent.

const (
	archiveMagic     = "WALBARC1"
	archiveEndMagic  = "WALBARCE"
	archiveFooter    = 8 + 8 + 4 + 8
	archiveBlockSize = 256 << 10
)

// ErrNotArchived is returned by Archive.Read for an index it does not hold.
// crcTable checksums an archive's index block.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

var ErrNotArchived = errors.New("record not in the archive")

// WriteArchive writes records (whole envelopes, as AppendRecord makes them)
// to path atomically. They must be in increasing index order.
func WriteArchive(path string, records [][]byte) error {
	w, err := CreateArchive(path)
	if err != nil {
		return err
	}
	for _, rec := range records {
		if err := w.Add(rec); err != nil {
			w.Abort()
			return err
		}
	}
	return w.Commit()
}

// ArchiveWriter streams records into a new archive: blocks go to a
// temporary file as they fill, only the index stays in memory, and Commit
// fsyncs and renames it into place. Until then the path is untouched.
type ArchiveWriter struct {
	path   string
	f      *os.File
	enc    *zstd.Encoder
	off    int
	blocks []archiveBlock
	index  []byte // per record: delta, block, offset, size
	count  int
	raw    []byte
	comp   []byte
	prev   uint64
	err    error
}

// CreateArchive starts an archive to be written to path.
func CreateArchive(path string) (*ArchiveWriter, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path+".tmp", os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		enc.Close()
		return nil, err
	}
	w := &ArchiveWriter{path: path, f: f, enc: enc}
	w.write([]byte(archiveMagic))
	return w, w.err
}

func (w *ArchiveWriter) write(b []byte) {
	if w.err == nil {
		_, w.err = w.f.Write(b)
		w.off += len(b)
	}
}

func (w *ArchiveWriter) flush() {
	if len(w.raw) == 0 {
		return
	}
	w.comp = w.enc.EncodeAll(w.raw, w.comp[:0])
	w.blocks = append(w.blocks, archiveBlock{off: int64(w.off), clen: int64(len(w.comp)), rlen: int64(len(w.raw))})
	w.write(w.comp)
	w.raw = w.raw[:0]
}

// Add appends one record; indexes must increase.
func (w *ArchiveWriter) Add(rec []byte) error {
	if w.err != nil {
		return w.err
	}
	e, err := event.DecodeRecord(rec)
	if err != nil {
		return fmt.Errorf("archive record: %w", err)
	}
	if e.Index <= w.prev {
		return fmt.Errorf("archive records out of order: %d after %d", e.Index, w.prev)
	}
	if len(w.raw) >= archiveBlockSize {
		w.flush()
	}
	w.index = binary.AppendUvarint(w.index, e.Index-w.prev)
	w.index = binary.AppendUvarint(w.index, uint64(len(w.blocks)))
	w.index = binary.AppendUvarint(w.index, uint64(len(w.raw)+event.UvarintLen(uint64(len(rec)))))
	w.index = binary.AppendUvarint(w.index, uint64(len(rec)))
	w.raw = binary.AppendUvarint(w.raw, uint64(len(rec)))
	w.raw = append(w.raw, rec...)
	w.prev = e.Index
	w.count++
	return w.err
}

// Len is the number of records added.
func (w *ArchiveWriter) Len() int { return w.count }

// Commit writes the index and footer, fsyncs, and renames the archive into
// place, then fsyncs the directory.
func (w *ArchiveWriter) Commit() error {
	w.flush()
	index := binary.AppendUvarint(nil, uint64(w.count))
	index = append(index, w.index...)
	index = binary.AppendUvarint(index, uint64(len(w.blocks)))
	for _, b := range w.blocks {
		index = binary.AppendUvarint(index, uint64(b.off))
		index = binary.AppendUvarint(index, uint64(b.clen))
		index = binary.AppendUvarint(index, uint64(b.rlen))
	}
	indexOff := w.off
	w.write(index)
	foot := binary.BigEndian.AppendUint64(nil, uint64(indexOff))
	foot = binary.BigEndian.AppendUint64(foot, uint64(len(index)))
	foot = binary.BigEndian.AppendUint32(foot, crc32.Checksum(index, crcTable))
	w.write(append(foot, archiveEndMagic...))
	if w.err == nil {
		w.err = w.f.Sync()
	}
	if err := w.f.Close(); w.err == nil {
		w.err = err
	}
	w.enc.Close()
	if w.err == nil {
		w.err = os.Rename(w.path+".tmp", w.path)
	}
	if w.err != nil {
		os.Remove(w.path + ".tmp")
		return w.err
	}
	return SyncDir(filepath.Dir(w.path))
}

// Abort drops an archive being written.
func (w *ArchiveWriter) Abort() {
	w.f.Close()
	w.enc.Close()
	os.Remove(w.path + ".tmp")
}

// Archive is an archive opened for reading. Safe for concurrent use.
type Archive struct {
	path    string
	f       *os.File
	entries map[uint64]archiveEntry
	blocks  []archiveBlock
	first   uint64
	last    uint64
	size    int64

	mu     sync.Mutex
	cached int // block in cache, -1 for none
	cache  []byte
	dec    *zstd.Decoder
}

type archiveEntry struct {
	block, offset, size uint32
}

type archiveBlock struct {
	off, clen, rlen int64
}

// OpenArchive opens and checks an archive's index.
func OpenArchive(path string) (*Archive, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	a, err := readArchiveIndex(f, path)
	if err != nil {
		f.Close()
		return nil, err
	}
	return a, nil
}

func readArchiveIndex(f *os.File, path string) (*Archive, error) {
	corrupt := func(format string, args ...any) error {
		return &Damage{Dir: path, Offset: -1, Reason: "archive: " + fmt.Sprintf(format, args...)}
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	if size < int64(len(archiveMagic)+archiveFooter) {
		return nil, corrupt("%d bytes is too short", size)
	}
	var foot [archiveFooter]byte
	if _, err := f.ReadAt(foot[:], size-archiveFooter); err != nil {
		return nil, err
	}
	head := make([]byte, len(archiveMagic))
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil, err
	}
	if string(head) != archiveMagic || string(foot[20:]) != archiveEndMagic {
		return nil, corrupt("bad magic")
	}
	off, n := int64(binary.BigEndian.Uint64(foot[0:])), int64(binary.BigEndian.Uint64(foot[8:]))
	if off < int64(len(archiveMagic)) || n < 0 || off+n != size-archiveFooter {
		return nil, corrupt("index at %d+%d does not fit the file", off, n)
	}
	index := make([]byte, n)
	if _, err := f.ReadAt(index, off); err != nil {
		return nil, err
	}
	if crc32.Checksum(index, crcTable) != binary.BigEndian.Uint32(foot[16:]) {
		return nil, corrupt("index checksum mismatch")
	}
	r := event.NewReader(index)
	count := r.Count(4)
	a := &Archive{path: path, f: f, entries: make(map[uint64]archiveEntry, count), cached: -1, size: size}
	var idx uint64
	for range count {
		delta := r.Uvarint()
		e := archiveEntry{block: r.Uint32(), offset: r.Uint32(), size: r.Uint32()}
		if r.Err() != nil {
			break
		}
		if delta == 0 {
			return nil, corrupt("indexes not increasing")
		}
		idx += delta
		if a.first == 0 {
			a.first = idx
		}
		a.last = idx
		a.entries[idx] = e
	}
	for range r.Count(3) {
		b := archiveBlock{off: int64(r.Uvarint()), clen: int64(r.Uvarint()), rlen: int64(r.Uvarint())}
		if b.off < int64(len(archiveMagic)) || b.clen < 0 || b.off+b.clen > off || b.rlen < 0 || b.rlen > 64<<20 {
			return nil, corrupt("block at %d does not fit", b.off)
		}
		a.blocks = append(a.blocks, b)
	}
	if err := r.Done(); err != nil {
		return nil, corrupt("index: %v", err)
	}
	for idx, e := range a.entries {
		if int(e.block) >= len(a.blocks) || int64(e.offset)+int64(e.size) > a.blocks[e.block].rlen {
			return nil, corrupt("record %d outside its block", idx)
		}
	}
	return a, nil
}

// Path is the archive's file.
func (a *Archive) Path() string { return a.path }

// Size is the archive's file size.
func (a *Archive) Size() int64 { return a.size }

// Len is the number of records, First and Last their lowest and highest index.
func (a *Archive) Len() int      { return len(a.entries) }
func (a *Archive) First() uint64 { return a.first }
func (a *Archive) Last() uint64  { return a.last }

// Has reports whether the archive holds index.
func (a *Archive) Has(index uint64) bool {
	_, ok := a.entries[index]
	return ok
}

// Indexes returns the archived indexes in order.
func (a *Archive) Indexes() []uint64 {
	out := make([]uint64, 0, len(a.entries))
	for idx := range a.entries {
		out = append(out, idx)
	}
	slices.Sort(out)
	return out
}

// Read returns the record at index, checked; its byte slices are its own.
func (a *Archive) Read(index uint64) (event.Event, error) {
	e, ok := a.entries[index]
	if !ok {
		return event.Event{}, ErrNotArchived
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cached != int(e.block) {
		b := a.blocks[e.block]
		comp := make([]byte, b.clen)
		if _, err := a.f.ReadAt(comp, b.off); err != nil && !errors.Is(err, io.EOF) {
			return event.Event{}, err
		}
		if a.dec == nil {
			var err error
			if a.dec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(64<<20))); err != nil {
				return event.Event{}, err
			}
		}
		raw, err := a.dec.DecodeAll(comp, a.cache[:0])
		if err != nil || int64(len(raw)) != b.rlen {
			a.cached = -1
			return event.Event{}, &Damage{Dir: a.path, Offset: b.off, Index: index, Reason: fmt.Sprintf("archive block: %v", err)}
		}
		a.cache, a.cached = raw, int(e.block)
	}
	body, _, reason := entryAt(a.cache, int(e.offset)-event.UvarintLen(uint64(e.size)))
	if reason != "" || len(body) != int(e.size) {
		return event.Event{}, &Damage{Dir: a.path, Offset: -1, Index: index, Reason: "archive entry: " + reason}
	}
	ev, err := event.DecodeRecord(bytes.Clone(body))
	if err == nil && ev.Index != index {
		err = fmt.Errorf("record holds index %d", ev.Index)
	}
	if err != nil {
		return event.Event{}, &Damage{Dir: a.path, Offset: -1, Index: index, Reason: err.Error()}
	}
	return ev, nil
}

// Close releases the file.
func (a *Archive) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dec != nil {
		a.dec.Close()
	}
	return a.f.Close()
}

// OpenArchives opens every archive in dir, newest (highest cut) first: a
// record is looked up in the newest archive that has it. A missing dir has
// none.
func OpenArchives(dir string) ([]*Archive, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.wba"))
	if err != nil {
		return nil, err
	}
	slices.Sort(paths)
	slices.Reverse(paths)
	var out []*Archive
	for _, p := range paths {
		a, err := OpenArchive(p)
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// ReadArchived reads index from the first of archives that holds it; ok is
// false if none does. A log's first record after a compaction is in the
// log and in the archive, and its old position is stale in the log (the
// truncation rewrote its segment), so readers look there first.
func ReadArchived(archives []*Archive, index uint64) (ev event.Event, ok bool, err error) {
	for _, a := range archives {
		if a.Has(index) {
			ev, err = a.Read(index)
			return ev, true, err
		}
	}
	return event.Event{}, false, nil
}

// ArchiveRecords writes the records refs names (in increasing index order)
// to a new archive at path, each read from l or, when compaction moved it
// out of l before, from archives. It returns the bytes of the records
// written. The log may be appended to meanwhile.
func ArchiveRecords(path string, l *Log, archives []*Archive, refs []event.Ref) (int64, error) {
	w, err := CreateArchive(path)
	if err != nil {
		return 0, err
	}
	var buf []byte
	var n int64
	for _, ref := range refs {
		ev, err := readNeeded(l, archives, ref)
		if err == nil {
			buf = event.AppendRecord(buf[:0], &ev)
			n += int64(len(buf))
			err = w.Add(buf)
		}
		if err != nil {
			w.Abort()
			return 0, fmt.Errorf("record %d: %w", ref.Index, err)
		}
	}
	return n, w.Commit()
}

// readNeeded reads a record from l or, if it is before l's first index,
// from archives.
func readNeeded(l *Log, archives []*Archive, ref event.Ref) (event.Event, error) {
	if first := l.FirstIndex(); ref.Index <= first {
		if ev, ok, err := ReadArchived(archives, ref.Index); ok || ref.Index < first {
			if !ok {
				err = errors.New("before the log and in no archive")
			}
			return ev, err
		}
	}
	ev, _, err := l.ReadAt(ref.Index, ref.Pos, nil)
	return ev, err
}

// RemoveArchiveTemps removes what an archive writer killed before its
// Commit left in dir (its temporary files).
func RemoveArchiveTemps(dir string) {
	tmps, _ := filepath.Glob(filepath.Join(dir, "*.tmp"))
	for _, p := range tmps {
		os.Remove(p)
	}
}
