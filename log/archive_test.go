package log

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/walbus/walbus/log/event"
)

func archiveRecords(n int, size int) ([][]byte, map[uint64][]byte) {
	var recs [][]byte
	bodies := map[uint64][]byte{}
	for i := range n {
		idx := uint64(3*i + 2) // not contiguous, as archived records are not
		b := body(idx, size+i%97)
		e := event.Event{Type: event.Enqueued, Index: idx, Time: int64(i), MessageID: "m", Message: b}
		recs = append(recs, event.AppendRecord(nil, &e))
		bodies[idx] = b
	}
	return recs, bodies
}

func TestArchiveRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.wba")
	recs, bodies := archiveRecords(3000, 300) // several blocks
	if err := WriteArchive(path, recs); err != nil {
		t.Fatal(err)
	}
	a, err := OpenArchive(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Len() != 3000 || a.First() != 2 || a.Last() != 3*2999+2 {
		t.Fatalf("len %d first %d last %d", a.Len(), a.First(), a.Last())
	}
	// Read in an order that crosses blocks back and forth.
	for _, idx := range append(a.Indexes()[2990:], a.Indexes()[:20]...) {
		e, err := a.Read(idx)
		if err != nil || !bytes.Equal(e.Message, bodies[idx]) {
			t.Fatalf("read %d: %v", idx, err)
		}
	}
	if _, err := a.Read(3); !errors.Is(err, ErrNotArchived) {
		t.Fatalf("read of an index not archived: %v", err)
	}
	if err := WriteArchive(path, [][]byte{recs[1], recs[0]}); err == nil {
		t.Fatal("records out of order accepted")
	}
}

func TestArchiveDamage(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.wba")
	recs, _ := archiveRecords(500, 200)
	if err := WriteArchive(good, recs); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(good)
	for name, damage := range map[string]func([]byte) []byte{
		"truncated":      func(b []byte) []byte { return b[:len(b)-5] },
		"index bit flip": func(b []byte) []byte { b[len(b)-archiveFooter-3] ^= 1; return b },
		"bad magic":      func(b []byte) []byte { b[0] = 'X'; return b },
		"empty":          func([]byte) []byte { return nil },
	} {
		path := filepath.Join(dir, name)
		os.WriteFile(path, damage(bytes.Clone(data)), 0o640)
		if _, err := OpenArchive(path); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: open gave %v", name, err)
		}
	}
	// Damage inside a block is found when a record in it is read.
	path := filepath.Join(dir, "block")
	b := bytes.Clone(data)
	b[len(archiveMagic)+40] ^= 0xff
	os.WriteFile(path, b, 0o640)
	a, err := OpenArchive(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.Read(a.First()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read from a damaged block: %v", err)
	}
}

func FuzzOpenArchive(f *testing.F) {
	recs, _ := archiveRecords(20, 50)
	path := filepath.Join(f.TempDir(), "seed.wba")
	WriteArchive(path, recs)
	seed, _ := os.ReadFile(path)
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "a.wba")
		os.WriteFile(p, b, 0o640)
		a, err := OpenArchive(p)
		if err != nil {
			return
		}
		defer a.Close()
		for _, idx := range a.Indexes() {
			a.Read(idx) // must not panic, whatever it returns
		}
	})
}
