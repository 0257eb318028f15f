package snapshot

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"testing"
	"time"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// applier decides and applies commands on e at a fixed time, numbering the
// events as a log would.
func applier(t testing.TB, e *projection.Entity) func(projection.Command) {
	now := int64(1_700_000_000_000_000_000)
	idx := e.LastIndex()
	return func(cmd projection.Command) {
		t.Helper()
		evs, err := e.Decide(cmd, now)
		if err != nil {
			t.Fatal(err)
		}
		for i := range evs {
			idx++
			evs[i].Index = idx
			evs[i].Pos = event.Position{Offset: uint32(idx * 100), Size: 50}
			if err := e.Apply(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// state builds an entity with some messages in several states.
func state(t testing.TB, n int) *projection.Entity {
	t.Helper()
	e := projection.New()
	apply := applier(t, e)
	cfg := projection.DefaultConfig()
	cfg.DefaultTTL = time.Hour
	apply(projection.Configure{Name: "q", Config: cfg})
	for i := range n {
		apply(projection.Send{Messages: []projection.Message{{Body: []byte("x"), MessageID: fmt.Sprint(i)}}})
	}
	apply(projection.Lock{Receiver: "r", Max: n / 3, Limit: ^uint64(0), Nonce: 42})
	return e
}

func TestWriteLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	e := state(t, 300)
	raw := e.Encode(nil)
	info, err := Write(dir, e.LastIndex(), raw)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size >= int64(len(raw)) {
		t.Errorf("no compression: %d bytes for %d raw", info.Size, len(raw))
	}
	got, loaded, skipped, err := Load(dir, func(uint64) error { return nil })
	if err != nil || got == nil || len(skipped) != 0 {
		t.Fatalf("load: %v %v %v", got, skipped, err)
	}
	if loaded.Index != e.LastIndex() || !bytes.Equal(got.Encode(nil), raw) {
		t.Fatal("loaded state differs")
	}
}

func TestIdenticalStateIdenticalFile(t *testing.T) {
	a, b := state(t, 200), state(t, 200)
	fa := Encode(a.LastIndex(), a.Encode(nil))
	fb := Encode(b.LastIndex(), b.Encode(nil))
	if !bytes.Equal(fa, fb) {
		t.Fatal("identical states gave different snapshot files")
	}
}

func TestLoadSkipsDamagedSnapshots(t *testing.T) {
	older, newer := state(t, 50), state(t, 80)
	damage := map[string]func([]byte) []byte{
		"truncated":       func(b []byte) []byte { return b[:len(b)-7] },
		"header only":     func(b []byte) []byte { return b[:headerSize] },
		"bit flip body":   func(b []byte) []byte { b[len(b)/2] ^= 4; return b },
		"bit flip header": func(b []byte) []byte { b[20] ^= 1; return b },
		"bad magic":       func(b []byte) []byte { b[0] = 'X'; return b },
		"empty":           func([]byte) []byte { return nil },
	}
	for name, fn := range damage {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Write(dir, older.LastIndex(), older.Encode(nil)); err != nil {
				t.Fatal(err)
			}
			info, err := Write(dir, newer.LastIndex(), newer.Encode(nil))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(info.Path)
			os.WriteFile(info.Path, fn(b), 0o640)
			got, loaded, skipped, err := Load(dir, func(uint64) error { return nil })
			if err != nil || got == nil {
				t.Fatalf("load: %v", err)
			}
			if loaded.Index != older.LastIndex() || len(skipped) != 1 || !errors.Is(skipped[0].Err, ErrCorrupt) {
				t.Fatalf("loaded %d, skipped %+v", loaded.Index, skipped)
			}
		})
	}
}

func TestLoadHonoursUsable(t *testing.T) {
	dir := t.TempDir()
	e := state(t, 10)
	Write(dir, e.LastIndex(), e.Encode(nil))
	got, _, skipped, err := Load(dir, func(uint64) error { return errors.New("beyond the log") })
	if err != nil || got != nil || len(skipped) != 1 {
		t.Fatalf("got %v skipped %v err %v", got, skipped, err)
	}
}

func TestPrune(t *testing.T) {
	dir := t.TempDir()
	e := state(t, 5)
	for i := uint64(1); i <= 5; i++ {
		Write(dir, i, e.Encode(nil))
	}
	os.WriteFile(dir+"/snap-x.wbs.tmp", []byte("partial"), 0o640)
	if err := Prune(dir, 2); err != nil {
		t.Fatal(err)
	}
	infos, _ := List(dir)
	if len(infos) != 2 || infos[0].Index != 5 || infos[1].Index != 4 {
		t.Fatalf("after prune: %+v", infos)
	}
	if _, err := os.Stat(dir + "/snap-x.wbs.tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("temporary file left behind")
	}
}

func FuzzDecode(f *testing.F) {
	e := state(f, 20)
	f.Add(Encode(e.LastIndex(), e.Encode(nil)))
	f.Add([]byte(magic))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, raw, err := Decode(b)
		if err != nil {
			return
		}
		// A file that checks out holds whatever was written; the state
		// decoder must then cope with it too, without panicking.
		projection.Decode(raw)
	})
}

// A stream longer than its header claims is rejected, and decoding goes on
// working afterwards (this once left a shared decoder locked).
func TestLongerThanClaimedIsRejected(t *testing.T) {
	e := state(t, 30)
	raw := e.Encode(nil)
	b := Encode(e.LastIndex(), raw)
	b[23]-- // the piece's raw length one byte short
	for range 3 {
		if _, _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decode: %v", err)
		}
	}
	if _, got, err := Decode(Encode(e.LastIndex(), raw)); err != nil || !bytes.Equal(got, raw) {
		t.Fatalf("good file after bad ones: %v", err)
	}
}

// After a log loses its end (Open with Repair cutting at damage, as the
// broker's recovery with Repair does), a snapshot taken beyond the new end
// is set aside (SetAsideBeyond, which the broker runs before Rebuild). Left
// in place, it would be picked once the log, taking new events at the same
// indexes, is long enough again: its state holds the lost events and none
// of the new ones.
func TestSnapshotBeyondACutLogIsSetAside(t *testing.T) {
	root := t.TempDir()
	logDir, snapDir := root+"/log", root+"/snap"
	now := int64(1_700_000_000_000_000_000)
	l, _, err := log.Open(logDir, log.Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := projection.New()
	run := func(l *log.Log, st *projection.Entity, cmd projection.Command) {
		t.Helper()
		evs, err := st.Decide(cmd, now)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		if _, err := l.Append(evs, func(err error) { done <- err }); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for i := range evs {
			if err := st.Apply(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	send := func(l *log.Log, st *projection.Entity, id string) {
		run(l, st, projection.Send{Messages: []projection.Message{{Body: []byte(id), MessageID: id}}})
	}
	run(l, st, projection.Configure{Name: "q", Config: projection.DefaultConfig()})
	for i := range 10 {
		send(l, st, fmt.Sprint("old-", i))
	}
	// A snapshot at 11, durable log at 11: all as the broker does it.
	if _, err := Write(snapDir, st.LastIndex(), st.Encode(nil)); err != nil {
		t.Fatal(err)
	}
	l.Close()

	// Damage in the middle of the last segment; the operator opens with
	// Repair, accepting the loss of indexes 6..11.
	ro, _ := log.OpenReadOnly(logDir)
	seg := ro.Segments()[0].Path
	var pos event.Position
	ro.Scan(6, 6, func(e *event.Event) error { pos = e.Pos; return nil })
	ro.Close()
	b, _ := os.ReadFile(seg)
	b[pos.Offset+15] ^= 1
	os.WriteFile(seg, b, 0o640)
	l, rep, err := log.Open(logDir, log.Options{Repair: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.LastIndex != 5 {
		t.Fatalf("repair left last index %d", rep.LastIndex)
	}
	moved, err := SetAsideBeyond(snapDir, l.LastIndex())
	if err != nil || len(moved) != 1 || moved[0].Index != 11 {
		t.Fatalf("set aside: %v, %v", moved, err)
	}
	if _, err := os.Stat(moved[0].Path + beyondSuffix); err != nil {
		t.Fatalf("the snapshot set aside is not kept: %v", err)
	}
	st, rb, err := Rebuild(snapDir, l)
	if err != nil || rb.Snapshot != 0 {
		t.Fatalf("rebuild after the cut: snapshot %d, %v", rb.Snapshot, err)
	}
	// Life goes on: a receiver locks the four messages left (indexes
	// 6..9) and two new messages come (10, 11).
	run(l, st, projection.Lock{Receiver: "r", Max: 10, Limit: ^uint64(0), Nonce: 1})
	send(l, st, "new-0")
	send(l, st, "new-1")
	if st.LastIndex() != 11 {
		t.Fatalf("state at %d", st.LastIndex())
	}
	want := st.Encode(nil)
	l.Close()

	// Restart.
	l, _, err = log.Open(logDir, log.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got, rb, err := Rebuild(snapDir, l)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Encode(nil), want) {
		t.Fatalf("restart loaded stale snapshot %d: state %+v, but the log says %+v",
			rb.Snapshot, got.Queue(event.MainQueue).Counts(), st.Queue(event.MainQueue).Counts())
	}
}

// A snapshot of state that compresses beyond any fixed ratio (session
// states of zeros: 4 MiB in well under a KiB) loads, on its own and as the
// only snapshot of a log cut behind it: a ratio check once refused it as a
// decompression bomb, and the entity could not start.
func TestHighlyCompressibleStateLoads(t *testing.T) {
	e := projection.New()
	apply := applier(t, e)
	cfg := projection.DefaultConfig()
	cfg.RequiresSession = true
	apply(projection.Configure{Name: "q", Config: cfg})
	for i := range 4 {
		id := fmt.Sprintf("s%d", i)
		apply(projection.AcceptSession{SessionID: id, Receiver: "r"})
		apply(projection.SetSessionState{SessionID: id, Receiver: "r", State: make([]byte, 1<<20)})
	}
	raw := e.Encode(nil)
	dir := t.TempDir()
	info, err := Write(dir, e.LastIndex(), raw)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size > 64<<10 {
		t.Fatalf("the state compressed to %d bytes; the test wants a ratio far beyond 4096:1", info.Size)
	}
	got, _, skipped, err := Load(dir, func(uint64) error { return nil })
	if err != nil || got == nil {
		t.Errorf("load: %v, skipped %v", err, skipped)
	}
	// The broker cuts the log front once snapshots cover it: the entity
	// must still rebuild from the snapshot alone.
	if _, _, err := Rebuild(dir, cutLog{first: e.LastIndex() + 1, last: e.LastIndex()}); err != nil {
		t.Errorf("rebuild after the log was cut: %v", err)
	}
}

// cutLog is an empty log whose records up to first-1 were truncated.
type cutLog struct{ first, last uint64 }

func (c cutLog) FirstIndex() uint64                              { return c.first }
func (c cutLog) LastIndex() uint64                               { return c.last }
func (c cutLog) ScanFrom(uint64, func(*event.Event) error) error { return nil }

// A version 1 file (the whole state in one frame, its length and CRC in
// the header) still loads.
func TestReadsVersion1(t *testing.T) {
	e := state(t, 50)
	raw := e.Encode(nil)
	b := make([]byte, headerSizeV1)
	copy(b, magic)
	binary.BigEndian.PutUint32(b[8:], 1)
	binary.BigEndian.PutUint64(b[12:], e.LastIndex())
	binary.BigEndian.PutUint64(b[20:], uint64(len(raw)))
	binary.BigEndian.PutUint32(b[28:], crc32.Checksum(raw, castagnoli))
	b = encoder().EncodeAll(raw, b)
	index, got, err := Decode(b)
	if err != nil || index != e.LastIndex() || !bytes.Equal(got, raw) {
		t.Fatalf("index %d, %d bytes, %v", index, len(got), err)
	}
	b[len(b)/2] ^= 1
	if _, _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a damaged version 1 file: %v", err)
	}
}

// The broker writes a state in the pieces EncodePieces gives, one per
// queue, gathered up to minPiece; the file loads back to the same state,
// and a file that lost its end, or a piece, is refused.
func TestPieces(t *testing.T) {
	e := state(t, 40_000)
	dir := t.TempDir()
	w, err := Create(dir, e.LastIndex())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := e.EncodePieces(func(p []byte) error { n++; return w.Add(p) }); err != nil {
		t.Fatal(err)
	}
	info, err := w.Commit()
	if err != nil {
		t.Fatal(err)
	}
	if n != 1+len(e.QueueNumbers())+1 {
		t.Fatalf("%d pieces for %d queues", n, len(e.QueueNumbers()))
	}
	if b, _ := os.ReadFile(info.Path); bytes.Count(b, []byte{0x28, 0xb5, 0x2f, 0xfd}) < 2 {
		t.Fatal("the file has one zstd frame: the state should take more than one piece")
	}
	raw, err := Read(info)
	if err != nil || !bytes.Equal(raw, e.Encode(nil)) {
		t.Fatalf("read back: %v", err)
	}
	b, _ := os.ReadFile(info.Path)
	if _, _, err := Decode(b[:len(b)-endSize]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("without its end: %v", err)
	}
	first := headerSize + pieceHeader + int(binary.BigEndian.Uint32(b[headerSize+8:]))
	cut := append(append([]byte{}, b[:headerSize]...), b[first:]...)
	if _, _, err := Decode(cut); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("without its first piece: %v", err)
	}
}
