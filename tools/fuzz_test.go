package tools

import (
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/snapshot"
	"github.com/walbus/walbus/tools/compaction"
)

// buildFuzzBase writes a small data directory with more variety than the
// golden one: several segments per log, snapshots taken as it goes (so the
// log is truncated in front), a session queue with state, and locks still
// held at the end.
func buildFuzzBase(t testing.TB, dir string) {
	s := newSceneWith(t, broker.Options{Dir: dir, SegmentSize: 384, SnapshotEvery: 6, FinalSnapshotMin: 1})
	cfg := projection.DefaultConfig()
	cfg.MaxDeliveryCount = 2
	cfg.DefaultTTL = time.Hour
	q := s.queue("work", cfg)
	r := s.receiver(q, event.MainQueue, "r", broker.PeekLock)
	for i := range 14 {
		s.send(q, msg(fmt.Sprint("w", i), "payload"))
		s.advance(time.Second)
		d := r.take()
		switch {
		case i < 9: // settled at once, so snapshots let the log's front go
			r.settle(d, projection.Complete, "")
		case i%3 == 0:
			r.settle(d, projection.Abandon, "")
		case i%3 == 1:
			r.settle(d, projection.Defer, "")
		default: // left locked
		}
	}
	scfg := projection.DefaultConfig()
	scfg.RequiresSession = true
	sq := s.queue("sessions", scfg)
	for _, id := range []string{"a", "b", "a"} {
		m := msg("s-"+id, "in session")
		m.SessionID = id
		s.send(sq, m)
	}
	sr := &receiver{s: s, e: sq, ch: make(chan broker.Delivery, 10)}
	rr, err := sq.Attach(broker.ReceiverOptions{Name: "sr", Sessions: true, Deliver: func(d broker.Delivery) { sr.ch <- d }})
	if err != nil {
		t.Fatal(err)
	}
	sr.r = rr
	accepted := make(chan error, 1)
	rr.AcceptSession("a", 0, func(_ broker.SessionLock, err error) { accepted <- err })
	if err := <-accepted; err != nil {
		t.Fatal(err)
	}
	stateSet := make(chan error, 1)
	rr.SetSessionState([]byte("state of a"), func(err error) { stateSet <- err })
	if err := <-stateSet; err != nil {
		t.Fatal(err)
	}
	d := sr.take()
	sr.settle(d, projection.Complete, "")
	sr.take() // left locked
	s.advance(time.Second)
	s.close()
}

var fuzzBase struct {
	once  sync.Once
	dir   string
	files []string // relative paths, sorted
}

func fuzzBaseDir(t testing.TB) (string, []string) {
	t.Helper()
	fuzzBase.once.Do(func() {
		dir, err := os.MkdirTemp("", "walbus-tools-fuzz-")
		if err != nil {
			t.Fatal(err)
		}
		fuzzBase.dir = dir
		buildFuzzBase(t, dir)
		fuzzBase.files = listFiles(dir)
	})
	return fuzzBase.dir, fuzzBase.files
}

// fuzzCompacted is the fuzz base compacted with walbus compact --retain:
// the data directory in data/, the history it retained in retained/.
var fuzzCompacted struct {
	once  sync.Once
	dir   string
	files []string // relative to dir, sorted
}

func fuzzCompactedDir(t testing.TB) (string, []string) {
	t.Helper()
	fuzzCompacted.once.Do(func() {
		base, _ := fuzzBaseDir(t)
		dir, err := os.MkdirTemp("", "walbus-tools-fuzz-compacted-")
		if err != nil {
			t.Fatal(err)
		}
		fuzzCompacted.dir = dir
		copyDir(t, base, filepath.Join(dir, "data"))
		reps, err := compaction.Compact(filepath.Join(dir, "data"), compaction.Options{Retain: filepath.Join(dir, "retained")})
		if err != nil {
			t.Fatal(err)
		}
		archived := 0
		for _, r := range reps {
			archived += r.Archived
		}
		if archived == 0 {
			t.Fatalf("the compaction of the fuzz base archived nothing: %+v", reps)
		}
		fuzzCompacted.files = listFiles(dir)
	})
	return fuzzCompacted.dir, fuzzCompacted.files
}

// listFiles lists the files under dir, relative to it, sorted.
func listFiles(dir string) []string {
	var files []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			files = append(files, rel)
		}
		return nil
	})
	slices.Sort(files)
	return files
}

// damage applies the operations encoded in ops to the data directory dir,
// whose files (before any damage) are files. Each operation is 8 bytes: a
// kind, a file selector, a 32-bit position or amount, and a value; the
// bytes after the last whole operation are data some kinds write.
func damage(dir string, files []string, ops []byte) {
	n := len(ops) / 8
	extra := ops[n*8:]
	for i := range min(n, 8) {
		op := ops[i*8 : i*8+8]
		kind, sel, val := op[0]%10, int(op[1]), op[7]
		arg := binary.BigEndian.Uint32(op[2:6])
		path := filepath.Join(dir, files[sel%len(files)])
		b, err := os.ReadFile(path)
		if err != nil {
			continue // removed by an earlier operation
		}
		switch kind {
		case 0: // truncate
			os.WriteFile(path, b[:int(arg)%(len(b)+1)], 0o640)
		case 1: // flip a bit
			if len(b) > 0 {
				b[int(arg)%len(b)] ^= 1 << (val % 8)
				os.WriteFile(path, b, 0o640)
			}
		case 2: // delete
			os.Remove(path)
		case 3, 4: // duplicate or rename under a nearby name
			if to := nearbyName(path, int(int8(val))); to != "" {
				os.WriteFile(to, b, 0o640)
				if kind == 4 {
					os.Remove(path)
				}
			}
		case 5: // a garbage snapshot: a valid envelope around random state
			snapDir := layout.SnapshotDir(filepath.Dir(filepath.Dir(path)))
			if _, err := os.Stat(snapDir); err == nil {
				os.WriteFile(filepath.Join(snapDir, fmt.Sprintf("snap-%020d.wbs", arg%64)), snapshot.Encode(uint64(arg%64), extra), 0o640)
			}
		case 6: // zeros, as where a write was allocated but never made
			if len(b) > 0 {
				at := int(arg) % len(b)
				clear(b[at:min(len(b), at+int(val)+1)])
				os.WriteFile(path, b, 0o640)
			}
		case 7: // garbage at the end
			os.WriteFile(path, append(b, extra...), 0o640)
		case 8: // a valid record with arbitrary fields at the end of a segment
			if isSegment(path) {
				ev := fuzzEvent(arg, val, extra)
				env := event.AppendRecord(nil, &ev)
				os.WriteFile(path, append(binary.AppendUvarint(b, uint64(len(env))), env...), 0o640)
			}
		case 9: // overwrite with data
			if len(b) > 0 {
				at := int(arg) % len(b)
				copy(b[at:], extra)
				os.WriteFile(path, b, 0o640)
			}
		}
	}
}

func isSegment(path string) bool {
	_, err := strconv.ParseUint(filepath.Base(path), 10, 64)
	return err == nil && len(filepath.Base(path)) == 20
}

// nearbyName is the name of a segment, snapshot or archive whose index is
// delta away from path's.
func nearbyName(path string, delta int) string {
	dir, base := filepath.Split(path)
	if isSegment(path) {
		n, _ := strconv.ParseUint(base, 10, 64)
		if m := int64(n) + int64(delta); m > 0 {
			return filepath.Join(dir, log.SegmentName(uint64(m)))
		}
		return ""
	}
	for _, kind := range []struct{ prefix, suffix string }{{"snap-", ".wbs"}, {"arc-", ".wba"}} {
		if strings.HasPrefix(base, kind.prefix) && strings.HasSuffix(base, kind.suffix) {
			n, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(base, kind.prefix), kind.suffix), 10, 64)
			if m := int64(n) + int64(delta); err == nil && m >= 0 {
				return filepath.Join(dir, fmt.Sprintf("%s%020d%s", kind.prefix, m, kind.suffix))
			}
		}
	}
	return ""
}

// fuzzEvent makes an event that passes every envelope check but may make
// no sense: the projection has to refuse it, not crash on it.
func fuzzEvent(arg uint32, val byte, extra []byte) event.Event {
	types := event.Types()
	ev := event.Event{Type: types[int(val)%len(types)], Index: uint64(arg % 256), Time: int64(arg) * 1e6,
		Queue: uint32(val>>4) % 3, Seq: uint64(arg>>8) % 64, Until: int64(arg) << 16, MessageID: "f",
		SessionID: string(extra[:min(len(extra), 3)]), Name: "work", Props: extra, Message: extra, State: extra}
	if val&1 == 1 {
		ev.Flags = event.FlagContinued
	}
	if ev.Index == 0 {
		ev.Index = 1
	}
	return ev
}

// FuzzVerify damages a real data directory at random and checks that
// verify (and the other tools) survive it, report rather than fail, never
// change a file, and say the same thing twice. With compacted, the
// directory was compacted first: its archives, and the history the
// compaction retained, are damaged too.
func FuzzVerify(f *testing.F) {
	for kind := range byte(10) {
		for _, sel := range []byte{0, 3, 7, 11} {
			f.Add(false, []byte{kind, sel, 0, 0, 0, 40, 3, 9, 'g', 'a', 'r', 'b', 'a', 'g', 'e'})
		}
	}
	// The compacted base's files, sorted: 1 and 7 are the two entities'
	// archives, 15 and 17 their retained history.
	for _, kind := range []byte{0, 1, 2, 4, 6, 9} { // truncate, flip, delete, rename, zeros, overwrite
		for _, sel := range []byte{1, 7, 15, 17, 2} {
			f.Add(true, []byte{kind, sel, 0, 0, 0, 40, 3, 9, 'g', 'a', 'r', 'b', 'a', 'g', 'e'})
		}
	}
	f.Add(false, []byte{})
	f.Add(true, []byte{})
	f.Fuzz(func(t *testing.T, compacted bool, ops []byte) {
		base, files := fuzzBaseDir(t)
		if compacted {
			base, files = fuzzCompactedDir(t)
		}
		root := copyTree(t, base)
		damage(root, files, ops)
		dir, retained := root, ""
		if compacted {
			dir, retained = filepath.Join(root, "data"), filepath.Join(root, "retained")
		}
		before := treeSums(t, root)
		findings, err := Verify(dir)
		if err != nil {
			t.Fatalf("verify: %v", err)
		}
		for _, fd := range findings {
			if strings.Contains(fd.Problem, "verify failed unexpectedly") || strings.Contains(fd.Problem, "panicked") {
				t.Fatalf("verify hit a panic: %s", fd)
			}
			if strings.Contains(fd.String(), "\n") {
				t.Fatalf("finding on more than one line: %q", fd)
			}
		}
		again, _ := Verify(dir)
		if sprintLines(again) != sprintLines(findings) {
			t.Fatalf("verify differs between runs:\n%s\n--\n%s", sprintLines(findings), sprintLines(again))
		}
		// The other tools must survive too; errors are fine.
		Replay(io.Discard, dir, ReplayOptions{Bodies: true})
		if compacted {
			Replay(io.Discard, dir, ReplayOptions{Bodies: true, Retained: retained})
		}
		if rep, err := Dump(dir, DumpOptions{Retained: retained}); err == nil {
			rep.WriteText(io.Discard)
		}
		for _, name := range []string{"work", "sessions"} {
			if rep, err := State(dir, name, StateOptions{}); err == nil {
				rep.WriteText(io.Discard)
			}
			for _, seq := range []uint64{5, 30} {
				if lives, err := Audit(dir, name, AuditOptions{Seq: seq, Retained: retained}); err == nil {
					WriteLives(io.Discard, lives)
				}
			}
		}
		if !sameTree(before, treeSums(t, root)) {
			t.Fatal("the tools changed the data directory")
		}
		if len(ops) == 0 && len(findings) != 0 {
			t.Fatalf("findings in the undamaged directory:\n%s", sprintLines(findings))
		}
	})
}
