// Package snapshot stores an entity's projection at a log index so restart
// replays only the log after it. A snapshot file is (integers big-endian)
//
//	magic "WALBSNAP" | version u32 = 2 | index u64
//	pieces: (raw length u32, not 0 | CRC32-C of raw u32 | compressed length u32 | zstd(raw))...
//	end: 0 u32 | total raw length u64 | piece count u32
//
// where the pieces, one after another, are projection.Entity's canonical
// encoding as EncodePieces hands it out: the entity, then each queue, then
// a topic's subscriptions. Each is compressed and checked on its own, so
// writing a snapshot holds one piece in memory, not the whole state.
// Version 1 files (one zstd frame of the whole state, after its length and
// CRC) are still read.
// Files are written to a temporary name, fsynced, renamed and the directory
// fsynced, so a crash leaves either the old set of snapshots or the new one.
// Identical states give byte-identical files.
package snapshot

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/projection"
)

const (
	magic      = "WALBSNAP"
	version    = 2
	headerSize = 8 + 4 + 8
	// Version 1's header also has the raw length and its CRC.
	headerSizeV1 = headerSize + 8 + 4
	pieceHeader  = 4 + 4 + 4
	endSize      = 4 + 8 + 4
	// maxPiece is the most raw state one piece may hold; Write cuts larger
	// states into pieces of pieceSize.
	maxPiece  = 1 << 30
	pieceSize = 4 << 20
	prefix    = "snap-"
	suffix    = ".wbs"
	// MaxRawSize bounds what a snapshot header may claim. The claim is
	// not trusted for allocation (the output grows as the stream inflates),
	// nor bounded by the compressed size: state can compress beyond any
	// fixed ratio (session states of zeros: 4 MiB in 745 bytes).
	MaxRawSize = 16 << 30
	maxWindow  = 64 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is wrapped by every error about a damaged snapshot file.
var ErrCorrupt = errors.New("snapshot corrupt")

// Info describes one snapshot file.
type Info struct {
	Index uint64 // log index the snapshot covers: events up to and including it
	Path  string
	Size  int64
}

func fileName(index uint64) string { return fmt.Sprintf("%s%020d%s", prefix, index, suffix) }

var (
	encOnce sync.Once
	enc     *zstd.Encoder
	// decoders are stream decoders kept for the next snapshot: making one
	// costs more than reading a small entity's snapshot. Each decodes one
	// stream at a time, on the caller's goroutine (concurrency 1).
	decoders sync.Pool
)

func encoder() *zstd.Encoder {
	encOnce.Do(func() {
		// One goroutine per stream keeps the output deterministic.
		enc, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedDefault))
	})
	return enc
}

// Encode builds the bytes of a snapshot file for raw state at index.
func Encode(index uint64, raw []byte) []byte {
	var buf bytes.Buffer
	w := newPieceWriter(&buf, index)
	for len(raw) > 0 {
		n := min(len(raw), pieceSize)
		w.add(raw[:n])
		raw = raw[n:]
	}
	w.end()
	return buf.Bytes()
}

// pieceWriter writes a snapshot's header, pieces and end to an io.Writer.
type pieceWriter struct {
	w      io.Writer
	raw    uint64
	pieces uint32
	buf    []byte
	err    error
}

func newPieceWriter(w io.Writer, index uint64) *pieceWriter {
	p := &pieceWriter{w: w}
	head := make([]byte, headerSize)
	copy(head, magic)
	binary.BigEndian.PutUint32(head[8:], version)
	binary.BigEndian.PutUint64(head[12:], index)
	p.write(head)
	return p
}

func (p *pieceWriter) write(b []byte) {
	if p.err == nil {
		_, p.err = p.w.Write(b)
	}
}

// add writes one piece. An empty piece is not written.
func (p *pieceWriter) add(raw []byte) error {
	if len(raw) == 0 || p.err != nil {
		return p.err
	}
	if len(raw) > maxPiece {
		p.err = fmt.Errorf("snapshot piece of %d bytes, most %d", len(raw), maxPiece)
		return p.err
	}
	p.buf = append(p.buf[:0], make([]byte, pieceHeader)...)
	p.buf = encoder().EncodeAll(raw, p.buf)
	binary.BigEndian.PutUint32(p.buf[0:], uint32(len(raw)))
	binary.BigEndian.PutUint32(p.buf[4:], crc32.Checksum(raw, castagnoli))
	binary.BigEndian.PutUint32(p.buf[8:], uint32(len(p.buf)-pieceHeader))
	p.write(p.buf)
	p.raw += uint64(len(raw))
	p.pieces++
	return p.err
}

func (p *pieceWriter) end() error {
	var end [endSize]byte
	binary.BigEndian.PutUint64(end[4:], p.raw)
	binary.BigEndian.PutUint32(end[12:], p.pieces)
	p.write(end[:])
	return p.err
}

// Decode checks a snapshot file's bytes and returns its index and raw state.
func Decode(b []byte) (uint64, []byte, error) {
	if len(b) < headerSize || string(b[:8]) != magic {
		return 0, nil, fmt.Errorf("%w: no snapshot header", ErrCorrupt)
	}
	index := binary.BigEndian.Uint64(b[12:])
	switch v := binary.BigEndian.Uint32(b[8:]); v {
	case 1:
		raw, err := decodeV1(b)
		return index, raw, err
	case version:
	default:
		return 0, nil, fmt.Errorf("%w: version %d, want 1 or %d", ErrCorrupt, v, version)
	}
	var raw []byte
	rest := b[headerSize:]
	for pieces := uint32(0); ; pieces++ {
		if len(rest) < 4 {
			return 0, nil, fmt.Errorf("%w: ends inside piece %d", ErrCorrupt, pieces)
		}
		size := binary.BigEndian.Uint32(rest)
		if size == 0 {
			if len(rest) != endSize {
				return 0, nil, fmt.Errorf("%w: %d bytes at the end, want %d", ErrCorrupt, len(rest), endSize)
			}
			if total, n := binary.BigEndian.Uint64(rest[4:]), binary.BigEndian.Uint32(rest[12:]); total != uint64(len(raw)) || n != pieces {
				return 0, nil, fmt.Errorf("%w: %d pieces of %d bytes, the end says %d of %d", ErrCorrupt, pieces, len(raw), n, total)
			}
			return index, raw, nil
		}
		if len(rest) < pieceHeader {
			return 0, nil, fmt.Errorf("%w: ends inside piece %d", ErrCorrupt, pieces)
		}
		sum, clen := binary.BigEndian.Uint32(rest[4:]), binary.BigEndian.Uint32(rest[8:])
		rest = rest[pieceHeader:]
		if size > maxPiece || uint64(len(raw))+uint64(size) > MaxRawSize || uint64(clen) > uint64(len(rest)) {
			return 0, nil, fmt.Errorf("%w: piece %d claims %d bytes from %d compressed", ErrCorrupt, pieces, size, clen)
		}
		var err error
		if raw, err = inflate(raw, rest[:clen], uint64(size), sum); err != nil {
			return 0, nil, fmt.Errorf("%w: piece %d: %v", ErrCorrupt, pieces, err)
		}
		rest = rest[clen:]
	}
}

// decodeV1 reads a version 1 file's state.
func decodeV1(b []byte) ([]byte, error) {
	if len(b) < headerSizeV1 {
		return nil, fmt.Errorf("%w: no snapshot header", ErrCorrupt)
	}
	size := binary.BigEndian.Uint64(b[20:])
	sum := binary.BigEndian.Uint32(b[28:])
	if size > MaxRawSize {
		return nil, fmt.Errorf("%w: claims %d bytes of state from %d compressed", ErrCorrupt, size, len(b)-headerSizeV1)
	}
	raw, err := inflate(nil, b[headerSizeV1:], size, sum)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return raw, nil
}

// inflate appends to dst the size bytes compressed in frame, whose CRC32-C
// is sum. Our encoder's windows are a few MiB; a frame asking for more is
// damaged or hostile, and would otherwise allocate what it asks. The output
// is read without trusting the claimed size: a stream that inflates past it
// is rejected.
func inflate(dst, frame []byte, size uint64, sum uint32) ([]byte, error) {
	d, _ := decoders.Get().(*zstd.Decoder)
	if d == nil {
		var err error
		if d, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow)); err != nil {
			return dst, err
		}
	}
	if err := d.Reset(bytes.NewReader(frame)); err != nil {
		return dst, err
	}
	defer func() {
		d.Reset(nil) // lets go of the frame
		decoders.Put(d)
	}()
	buf := bytes.NewBuffer(dst)
	if _, err := buf.ReadFrom(io.LimitReader(d, int64(size)+1)); err != nil {
		return dst, err
	}
	out := buf.Bytes()
	if got := uint64(len(out) - len(dst)); got != size {
		return dst, fmt.Errorf("%d bytes of state, header says %d", got, size)
	}
	if crc32.Checksum(out[len(dst):], castagnoli) != sum {
		return dst, errors.New("checksum mismatch")
	}
	return out, nil
}

// Writer writes a snapshot file piece by piece; the file appears, whole,
// at Commit. Small pieces are gathered into one of at least minPiece
// bytes, so that a namespace of small entities does not pay a frame for
// each of their queues; a large one is compressed on its own.
type Writer struct {
	dir, final, tmp string
	index           uint64
	f               *os.File
	bw              *bufio.Writer
	p               *pieceWriter
	pending         []byte
}

// minPiece is the least raw state Writer puts in a piece (but the last).
const minPiece = 256 << 10

// Create starts the snapshot at index in dir.
func Create(dir string, index uint64) (*Writer, error) {
	if err := log.MkdirAllDurable(dir, 0o750); err != nil {
		return nil, err
	}
	final := filepath.Join(dir, fileName(index))
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return nil, err
	}
	w := &Writer{dir: dir, final: final, tmp: tmp, index: index, f: f, bw: bufio.NewWriterSize(f, 1<<20)}
	w.p = newPieceWriter(w.bw, index)
	return w, nil
}

// Add adds the next piece of the raw state; raw may be reused afterwards.
func (w *Writer) Add(raw []byte) error {
	if len(w.pending) == 0 && len(raw) >= minPiece {
		return w.p.add(raw)
	}
	w.pending = append(w.pending, raw...)
	if len(w.pending) < minPiece {
		return w.p.err
	}
	err := w.p.add(w.pending)
	w.pending = w.pending[:0]
	return err
}

// Bytes is the raw state added so far.
func (w *Writer) Bytes() int64 { return int64(w.p.raw) + int64(len(w.pending)) }

// Commit ends the file, fsyncs it and renames it into place.
func (w *Writer) Commit() (Info, error) {
	w.p.add(w.pending)
	err := w.p.end()
	if err == nil {
		err = w.bw.Flush()
	}
	if err == nil {
		err = w.f.Sync()
	}
	var size int64
	if fi, serr := w.f.Stat(); err == nil && serr == nil {
		size = fi.Size()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(w.tmp, w.final)
	}
	if err != nil {
		os.Remove(w.tmp)
		return Info{}, fmt.Errorf("write snapshot %d: %w", w.index, err)
	}
	if err := log.SyncDir(w.dir); err != nil {
		return Info{}, err
	}
	return Info{Index: w.index, Path: w.final, Size: size}, nil
}

// Abort drops the snapshot being written.
func (w *Writer) Abort() {
	w.f.Close()
	os.Remove(w.tmp)
}

// Write stores a snapshot of raw state at index in dir atomically.
func Write(dir string, index uint64, raw []byte) (Info, error) {
	w, err := Create(dir, index)
	if err != nil {
		return Info{}, err
	}
	for len(raw) > 0 {
		n := min(len(raw), pieceSize)
		if err := w.Add(raw[:n]); err != nil {
			w.Abort()
			return Info{}, err
		}
		raw = raw[n:]
	}
	return w.Commit()
}

// List returns the snapshots in dir, newest first. Leftover temporary files
// are ignored.
func List(dir string) ([]Info, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, ent := range ents {
		name := ent.Name()
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) {
			continue
		}
		index, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, prefix), suffix), 10, 64)
		if err != nil {
			continue
		}
		info := Info{Index: index, Path: filepath.Join(dir, name)}
		if fi, err := ent.Info(); err == nil {
			info.Size = fi.Size()
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b Info) int {
		switch {
		case a.Index > b.Index:
			return -1
		case a.Index < b.Index:
			return 1
		}
		return 0
	})
	return out, nil
}

// Read loads one snapshot file and checks it.
func Read(info Info) ([]byte, error) {
	b, err := os.ReadFile(info.Path)
	if err != nil {
		return nil, err
	}
	index, raw, err := Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", info.Path, err)
	}
	if index != info.Index {
		return nil, fmt.Errorf("%s: %w: holds index %d", info.Path, ErrCorrupt, index)
	}
	return raw, nil
}

// Skipped is a snapshot Load passed over, and why.
type Skipped struct {
	Info Info
	Err  error
}

// Load returns the newest snapshot in dir that reads back, checks and
// decodes, and that usable accepts (the caller checks it fits its log);
// older ones are tried in turn. It reports the ones it skipped. With no usable
// snapshot it returns a nil Entity.
func Load(dir string, usable func(index uint64) error) (*projection.Entity, Info, []Skipped, error) {
	infos, err := List(dir)
	if err != nil {
		return nil, Info{}, nil, err
	}
	e, info, skipped := load(infos, usable)
	return e, info, skipped, nil
}

// load is Load over snapshots already listed, newest first.
func load(infos []Info, usable func(index uint64) error) (*projection.Entity, Info, []Skipped) {
	var skipped []Skipped
	for _, info := range infos {
		if err := usable(info.Index); err != nil {
			skipped = append(skipped, Skipped{info, err})
			continue
		}
		raw, err := Read(info)
		if err == nil {
			var e *projection.Entity
			if e, err = projection.Decode(raw); err == nil && e.LastIndex() != info.Index {
				err = fmt.Errorf("%w: state is at index %d", ErrCorrupt, e.LastIndex())
			}
			if err == nil {
				return e, info, skipped
			}
		}
		skipped = append(skipped, Skipped{info, err})
	}
	return nil, Info{}, skipped
}

// Prune deletes all but the newest keep snapshots and any leftover
// temporary files.
func Prune(dir string, keep int) error {
	infos, err := List(dir)
	if err != nil {
		return err
	}
	for i, info := range infos {
		if i >= keep {
			if err := os.Remove(info.Path); err != nil {
				return err
			}
		}
	}
	ents, _ := os.ReadDir(dir)
	for _, ent := range ents {
		if strings.HasSuffix(ent.Name(), ".tmp") {
			os.Remove(filepath.Join(dir, ent.Name()))
		}
	}
	return nil
}

// beyondSuffix marks a snapshot set aside by SetAsideBeyond; List ignores it.
const beyondSuffix = ".beyond-log"

// SetAsideBeyond renames the snapshots in dir that cover more than a log
// ending at last, and returns them. Such a snapshot describes records the
// log no longer has (cut by a repair): new records take those indexes,
// and once the log is that long again a start must not take the snapshot
// for their state. The files are kept, renamed, for inspection.
func SetAsideBeyond(dir string, last uint64) ([]Info, error) {
	infos, err := List(dir)
	if err != nil {
		return nil, err
	}
	moved, _, err := setAsideBeyond(dir, infos, last)
	return moved, err
}

// setAsideBeyond is SetAsideBeyond over snapshots already listed, newest
// first; it also returns those left.
func setAsideBeyond(dir string, infos []Info, last uint64) (moved, left []Info, err error) {
	for len(infos) > 0 && infos[0].Index > last {
		info := infos[0]
		if err := os.Rename(info.Path, info.Path+beyondSuffix); err != nil {
			return moved, infos, err
		}
		moved = append(moved, info)
		infos = infos[1:]
	}
	if len(moved) > 0 {
		if err := log.SyncDir(dir); err != nil {
			return moved, infos, err
		}
	}
	return moved, infos, nil
}
