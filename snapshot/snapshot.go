// Package snapshot stores an entity's projection at a log index so restart
// replays only the log after it. A snapshot file is
//
//	magic "WALBSNAP" | version u32 | index u64 | raw length u64 | CRC32-C of raw u32 | zstd(raw)
//
// (integers big-endian), where raw is projection.Entity's canonical encoding.
// Files are written to a temporary name, fsynced, renamed and the directory
// fsynced, so a crash leaves either the old set of snapshots or the new one.
// Identical states give byte-identical files.
package snapshot

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
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/projection"
)

const (
	magic      = "WALBSNAP"
	version    = 1
	headerSize = 8 + 4 + 8 + 8 + 4
	prefix     = "snap-"
	suffix     = ".wbs"
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
	out := make([]byte, headerSize, headerSize+len(raw)/3)
	copy(out, magic)
	binary.BigEndian.PutUint32(out[8:], version)
	binary.BigEndian.PutUint64(out[12:], index)
	binary.BigEndian.PutUint64(out[20:], uint64(len(raw)))
	binary.BigEndian.PutUint32(out[28:], crc32.Checksum(raw, castagnoli))
	return encoder().EncodeAll(raw, out)
}

// Decode checks a snapshot file's bytes and returns its index and raw state.
func Decode(b []byte) (uint64, []byte, error) {
	if len(b) < headerSize || string(b[:8]) != magic {
		return 0, nil, fmt.Errorf("%w: no snapshot header", ErrCorrupt)
	}
	if v := binary.BigEndian.Uint32(b[8:]); v != version {
		return 0, nil, fmt.Errorf("%w: version %d, want %d", ErrCorrupt, v, version)
	}
	index := binary.BigEndian.Uint64(b[12:])
	size := binary.BigEndian.Uint64(b[20:])
	sum := binary.BigEndian.Uint32(b[28:])
	if size > MaxRawSize {
		return 0, nil, fmt.Errorf("%w: claims %d bytes of state from %d compressed", ErrCorrupt, size, len(b)-headerSize)
	}
	// Our encoder's windows are a few MiB; a frame asking for more is damaged
	// or hostile, and would otherwise allocate what it asks. The output is
	// read without trusting the claimed size: a stream that inflates past it
	// is rejected.
	d, err := zstd.NewReader(bytes.NewReader(b[headerSize:]), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxWindow))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	defer d.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(d, int64(size)+1)); err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	raw := buf.Bytes()
	if uint64(len(raw)) != size {
		return 0, nil, fmt.Errorf("%w: %d bytes of state, header says %d", ErrCorrupt, len(raw), size)
	}
	if crc32.Checksum(raw, castagnoli) != sum {
		return 0, nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	return index, raw, nil
}

// Write stores a snapshot of raw state at index in dir atomically.
func Write(dir string, index uint64, raw []byte) (Info, error) {
	if err := log.MkdirAllDurable(dir, 0o750); err != nil {
		return Info{}, err
	}
	data := Encode(index, raw)
	final := filepath.Join(dir, fileName(index))
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return Info{}, err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		os.Remove(tmp)
		return Info{}, fmt.Errorf("write snapshot %d: %w", index, err)
	}
	if err := log.SyncDir(dir); err != nil {
		return Info{}, err
	}
	return Info{Index: index, Path: final, Size: int64(len(data))}, nil
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
				return e, info, skipped, nil
			}
		}
		skipped = append(skipped, Skipped{info, err})
	}
	return nil, Info{}, skipped, nil
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
	var moved []Info
	for _, info := range infos {
		if info.Index <= last {
			break // newest first
		}
		if err := os.Rename(info.Path, info.Path+beyondSuffix); err != nil {
			return moved, err
		}
		moved = append(moved, info)
	}
	if len(moved) > 0 {
		if err := log.SyncDir(dir); err != nil {
			return moved, err
		}
	}
	return moved, nil
}
