package replica

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
)

// TestLogStorageAgainstMemory runs random histories of what Raft asks of
// a storage (entries appended, a suffix overruled, hard states, snapshots
// taken and received, restarts, and kill -9: a copy of the directory as
// it stood after a Sync) on a LogStorage and on etcd's MemoryStorage, and
// checks after every step that they answer alike: first and last index,
// every term, entries in random ranges and size limits, the snapshot and
// the initial state. It also checks the log itself: every entry's records
// sit where its predecessor's end.
func TestLogStorageAgainstMemory(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { storageHistory(t, seed, 150) })
	}
}

type storageModel struct {
	t    *testing.T
	rng  *rand.Rand
	dir  string
	opts log.Options
	s    *LogStorage
	ms   *raft.MemoryStorage
	hs   *pb.HardState
	// ends[i] is the log index entry i's records end at, as the group
	// numbers them: its predecessor's end plus its events (one at least).
	ends   map[uint64]uint64
	term   uint64
	copies int
}

func storageHistory(t *testing.T, seed uint64, steps int) {
	m := &storageModel{t: t, rng: rand.New(rand.NewPCG(seed, 99)), dir: t.TempDir(),
		opts: log.Options{SegmentSize: 2048, IdleRollBytes: 512}, ms: raft.NewMemoryStorage(),
		hs: &pb.HardState{}, ends: map[uint64]uint64{0: 0}, term: 1}
	var err error
	if m.s, err = OpenLogStorage(m.dir, m.opts); err != nil {
		t.Fatal(err)
	}
	defer func() { m.s.Close() }()
	for i := 0; i < steps && !t.Failed(); i++ {
		m.step()
		m.compare(fmt.Sprintf("step %d", i))
	}
}

func (m *storageModel) last() uint64 { l, _ := m.ms.LastIndex(); return l }
func (m *storageModel) first() uint64 {
	f, _ := m.ms.FirstIndex()
	return f
}

// entry makes entry i of term: events, an empty entry or a change of
// membership.
func (m *storageModel) entry(i, term uint64) *pb.Entry {
	e := &pb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(term)}
	typ := pb.EntryType_EntryNormal
	n := uint64(1)
	switch r := m.rng.IntN(10); {
	case r < 7:
		var evs []event.Event
		for range 1 + m.rng.IntN(4) {
			evs = append(evs, event.Event{Type: event.Enqueued, Time: int64(i), MessageID: fmt.Sprint("m", i),
				Message: make([]byte, m.rng.IntN(300))})
		}
		e.Data, n = EncodeEntry(m.rng.Uint64N(1000), evs), uint64(len(evs))
	case r < 8:
		// A new leader's empty entry.
	default:
		typ = pb.EntryType_EntryConfChangeV2
		e.Data = []byte(fmt.Sprint("change ", i))
	}
	e.Type = &typ
	m.ends[i] = m.ends[i-1] + n
	return e
}

func (m *storageModel) step() {
	t, r := m.t, m.rng.IntN(100)
	switch {
	case r < 45: // append, perhaps overruling a suffix
		from := m.last() + 1
		if m.last() > m.hs.GetCommit() && m.rng.IntN(3) == 0 {
			from = m.hs.GetCommit() + 1 + m.rng.Uint64N(m.last()-m.hs.GetCommit())
			m.term++
		}
		var ents []*pb.Entry
		for i := range 1 + m.rng.IntN(5) {
			ents = append(ents, m.entry(from+uint64(i), m.term))
		}
		var hs *pb.HardState
		if m.rng.IntN(2) == 0 {
			m.hs = &pb.HardState{Term: proto.Uint64(m.term), Vote: proto.Uint64(m.rng.Uint64N(3)), Commit: m.hs.Commit}
			hs = m.hs
		}
		if err := m.s.Stage(hs, ents); err != nil {
			t.Fatalf("stage %d entries from %d: %v", len(ents), from, err)
		}
		if err := m.ms.Append(ents); err != nil {
			t.Fatal(err)
		}
		m.sync()
	case r < 60: // commit moves
		if c := m.hs.GetCommit(); c < m.last() {
			m.hs = proto.Clone(m.hs).(*pb.HardState)
			m.hs.Commit = proto.Uint64(c + 1 + m.rng.Uint64N(m.last()-c))
			if err := m.s.Stage(m.hs, nil); err != nil {
				t.Fatal(err)
			}
			m.sync()
		}
	case r < 70: // the member's own snapshot
		c := m.hs.GetCommit()
		if c < m.first() {
			return
		}
		at := m.first() + m.rng.Uint64N(c-m.first()+1)
		cs := &pb.ConfState{Voters: []uint64{1, 2, 3}}
		data := EncodeSnapshot(m.ends[at], fmt.Appendf(nil, "state at %d", at))
		// Half the time the state still reads records before the
		// snapshot: the log keeps them.
		var keep uint64
		if m.rng.IntN(2) == 0 {
			keep = 1 + m.rng.Uint64N(m.ends[at]+1)
		}
		before := m.s.Log().FirstIndex()
		if err := m.s.CreateSnapshotKeeping(at, cs, data, keep); err != nil {
			t.Fatalf("snapshot at %d: %v", at, err)
		}
		if first := m.s.Log().FirstIndex(); keep > 0 && first > max(keep, before) {
			t.Fatalf("snapshot at %d keeping log index %d on: the log begins at %d", at, keep, first)
		}
		if _, err := m.ms.CreateSnapshot(at, cs, data); err != nil {
			t.Fatal(err)
		}
		if err := m.ms.Compact(at); err != nil {
			t.Fatal(err)
		}
	case r < 75: // a snapshot from the leader, past the log or inside it
		at := m.hs.GetCommit() + 1 + m.rng.Uint64N(20)
		m.term++
		// The leader's log numbers its records its own way past what this
		// member committed.
		logIndex := m.ends[m.hs.GetCommit()] + m.rng.Uint64N(30) + at - m.hs.GetCommit()
		snap := &pb.Snapshot{Data: EncodeSnapshot(logIndex, []byte("the leader's state")), Metadata: &pb.SnapshotMetadata{
			Index: proto.Uint64(at), Term: proto.Uint64(m.term), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 4}}}}
		if err := m.s.StageSnapshot(snap); err != nil {
			t.Fatalf("snapshot %d from the leader: %v", at, err)
		}
		if err := m.ms.ApplySnapshot(snap); err != nil {
			t.Fatal(err)
		}
		m.hs = &pb.HardState{Term: proto.Uint64(m.term), Vote: m.hs.Vote, Commit: proto.Uint64(at)}
		if err := m.s.Stage(m.hs, nil); err != nil {
			t.Fatal(err)
		}
		m.sync()
		m.ends = map[uint64]uint64{at: logIndex}
	case r < 85: // restart
		if err := m.s.Close(); err != nil {
			t.Fatal(err)
		}
		m.reopen(m.dir)
	default: // kill -9: the files as they stood after the last Sync
		m.copies++
		dir := filepath.Join(t.TempDir(), fmt.Sprint("copy", m.copies))
		if err := os.CopyFS(dir, os.DirFS(m.dir)); err != nil {
			t.Fatal(err)
		}
		if err := m.s.Close(); err != nil {
			t.Fatal(err)
		}
		m.dir = dir
		m.reopen(dir)
	}
}

func (m *storageModel) sync() {
	if err := m.s.Sync(); err != nil {
		m.t.Fatal(err)
	}
}

// reopen opens the storage in dir as a restart does. The commit index is
// written with the term and vote only, so the one read back may be older,
// never below the snapshot: Raft learns the rest from the leader.
func (m *storageModel) reopen(dir string) {
	var err error
	if m.s, err = OpenLogStorage(dir, m.opts); err != nil {
		m.t.Fatalf("reopen: %v", err)
	}
	hs, _, _ := m.s.InitialState()
	if hs.GetTerm() != m.hs.GetTerm() || hs.GetVote() != m.hs.GetVote() || hs.GetCommit() > m.hs.GetCommit() ||
		hs.GetCommit() < m.first()-1 {
		m.t.Fatalf("reopened hard state %v, staged %v", hs, m.hs)
	}
	m.hs = hs
	if err := m.ms.SetHardState(hs); err != nil {
		m.t.Fatal(err)
	}
}

func (m *storageModel) compare(when string) {
	t, s, ms := m.t, m.s, m.ms
	t.Helper()
	f1, _ := s.FirstIndex()
	l1, _ := s.LastIndex()
	f2, l2 := m.first(), m.last()
	if f1 != f2 || l1 != l2 {
		t.Fatalf("%s: entries %d to %d, want %d to %d", when, f1, l1, f2, l2)
	}
	for i := f2 - 1; i <= l2+1; i++ {
		a, err1 := s.Term(i)
		b, err2 := ms.Term(i)
		if a != b || !errors.Is(err1, err2) && !(err2 == nil && err1 == nil) {
			t.Fatalf("%s: term of %d: %d, %v; want %d, %v", when, i, a, err1, b, err2)
		}
	}
	if _, err := s.Term(f2 - 2); f2 > 1 && !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("%s: term before the snapshot: %v", when, err)
	}
	sa, _ := s.Snapshot()
	sb, _ := ms.Snapshot()
	if sa.GetMetadata().GetIndex() != sb.GetMetadata().GetIndex() || sa.GetMetadata().GetTerm() != sb.GetMetadata().GetTerm() ||
		string(sa.GetData()) != string(sb.GetData()) ||
		confString(sa.GetMetadata().GetConfState()) != confString(sb.GetMetadata().GetConfState()) {
		t.Fatalf("%s: snapshot %v, want %v", when, sa.GetMetadata(), sb.GetMetadata())
	}
	_, cs1, _ := s.InitialState()
	_, cs2, _ := ms.InitialState()
	if confString(cs1) != confString(cs2) {
		t.Fatalf("%s: conf state %v, want %v", when, cs1, cs2)
	}
	if l2 < f2 {
		return
	}
	for range 5 {
		lo := f2 + m.rng.Uint64N(l2-f2+1)
		hi := lo + 1 + m.rng.Uint64N(l2-lo+1)
		max := []uint64{0, 500, 5000, raftNoLimit}[m.rng.IntN(4)]
		a, err1 := s.Entries(lo, hi, max)
		b, err2 := ms.Entries(lo, hi, max)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: entries [%d, %d): %v; memory %v", when, lo, hi, err1, err2)
		}
		if len(a) != len(b) {
			t.Fatalf("%s: entries [%d, %d) up to %d bytes: %d, want %d", when, lo, hi, max, len(a), len(b))
		}
		for i := range a {
			if !proto.Equal(a[i], b[i]) {
				t.Fatalf("%s: entry %d: %v, want %v", when, b[i].GetIndex(), a[i], b[i])
			}
		}
	}
	// Every record's recorded position is where a scan finds it.
	if err := s.log.Scan(0, func(ev *event.Event) error {
		if pos, ok := s.Position(ev.Index); !ok || pos != ev.Pos {
			return fmt.Errorf("record %d is at %+v; the storage says %+v (%v)", ev.Index, ev.Pos, pos, ok)
		}
		return nil
	}); err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	// Every entry's records end where the group's numbering says.
	for i := f2; i <= l2; i++ {
		first, last, err := s.LogIndex(i)
		if err != nil || last != m.ends[i] || first != m.ends[i-1]+1 {
			t.Fatalf("%s: entry %d at log indexes %d to %d (%v), want to end at %d after %d", when, i, first, last, err,
				m.ends[i], m.ends[i-1])
		}
	}
}

const raftNoLimit = 1<<64 - 1

func confString(cs *pb.ConfState) string {
	return fmt.Sprint(cs.GetVoters(), cs.GetLearners(), cs.GetVotersOutgoing(), cs.GetLearnersNext(), cs.GetAutoLeave())
}

// A snapshot from the leader is written before the log is reset after it.
// A crash between the two leaves the old log beside the new snapshot: the
// next open sees that the log does not go on from the snapshot and resets
// it then.
func TestLogStorageSnapshotBeforeReset(t *testing.T) {
	dir := t.TempDir()
	opts := log.Options{SegmentSize: 1024}
	s, err := OpenLogStorage(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	var ents []*pb.Entry
	for i := uint64(1); i <= 30; i++ {
		typ := pb.EntryType_EntryNormal
		ents = append(ents, &pb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(1), Type: &typ,
			Data: EncodeEntry(i, []event.Event{{Type: event.Enqueued, MessageID: "m", Message: make([]byte, 100)}})})
	}
	if err := s.Stage(&pb.HardState{Term: proto.Uint64(1), Commit: proto.Uint64(10)}, ents); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The leader's snapshot at entry 40 (log index 77), written as
	// StageSnapshot writes it, and then the crash.
	snap := &pb.Snapshot{Data: EncodeSnapshot(77, []byte("state")), Metadata: &pb.SnapshotMetadata{
		Index: proto.Uint64(40), Term: proto.Uint64(3), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}
	if err := writeSnapshot(filepath.Join(dir, snapshotFile), snap, 77); err != nil {
		t.Fatal(err)
	}
	s, err = OpenLogStorage(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	hs, _, _ := s.InitialState()
	if first != 41 || last != 40 || hs.GetCommit() != 40 || s.Log().FirstIndex() != 78 || s.Log().LastIndex() != 77 {
		t.Fatalf("after the crash: entries %d to %d, commit %d, log %d to %d; want none after 40, commit 40, log from 78",
			first, last, hs.GetCommit(), s.Log().FirstIndex(), s.Log().LastIndex())
	}
	typ := pb.EntryType_EntryNormal
	next := &pb.Entry{Index: proto.Uint64(41), Term: proto.Uint64(3), Type: &typ}
	if err := s.Stage(nil, []*pb.Entry{next}); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if a, b, err := s.LogIndex(41); a != 78 || b != 78 || err != nil {
		t.Fatalf("entry 41 at log indexes %d to %d (%v), want 78", a, b, err)
	}
}

// Damaged files beside the log, and a log that is not a replica's, are
// refused with an error that names them; nothing is reset over them.
func TestLogStorageRefusesDamage(t *testing.T) {
	opts := log.Options{}
	fresh := func(t *testing.T) string {
		dir := t.TempDir()
		s, err := OpenLogStorage(dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		typ := pb.EntryType_EntryNormal
		e := &pb.Entry{Index: proto.Uint64(1), Term: proto.Uint64(1), Type: &typ}
		if err := s.Stage(&pb.HardState{Term: proto.Uint64(1), Vote: proto.Uint64(1), Commit: proto.Uint64(1)}, []*pb.Entry{e}); err != nil {
			t.Fatal(err)
		}
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateSnapshot(1, &pb.ConfState{Voters: []uint64{1}}, EncodeSnapshot(1, nil)); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, name := range []string{hardStateFile, snapshotFile} {
		for _, damage := range []string{"flip", "cut", "foreign"} {
			t.Run(name+"/"+damage, func(t *testing.T) {
				dir := fresh(t)
				path := filepath.Join(dir, name)
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				switch damage {
				case "flip":
					b[len(b)/2] ^= 1
				case "cut":
					b = b[:len(b)-3]
				case "foreign":
					b = []byte("something else entirely")
				}
				if err := os.WriteFile(path, b, 0o640); err != nil {
					t.Fatal(err)
				}
				if s, err := OpenLogStorage(dir, opts); err == nil {
					s.Close()
					t.Fatal("opened")
				} else if !strings.Contains(err.Error(), name) {
					t.Fatalf("the error does not name the file: %v", err)
				}
			})
		}
	}
	t.Run("plain entity log", func(t *testing.T) {
		dir := t.TempDir()
		l, _, err := log.Open(filepath.Join(dir, logDir), opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Append([]event.Event{{Type: event.Enqueued, MessageID: "m"}}, nil); err != nil {
			t.Fatal(err)
		}
		l.Close()
		if s, err := OpenLogStorage(dir, opts); err == nil {
			s.Close()
			t.Fatal("a log without Raft entries opened as a replica's")
		}
	})
}

// FuzzDecodeEntry: an entry's data that decodes encodes back to the same
// bytes (one form only, so every replica rebuilds the leader's bytes), and
// nothing makes it panic.
func FuzzDecodeEntry(f *testing.F) {
	f.Add(EncodeEntry(7, []event.Event{{Type: event.Enqueued, MessageID: "m", Message: []byte("body")}}))
	f.Add(EncodeEntry(0, []event.Event{{Type: event.Completed, Seq: 3}, {Type: event.Locked, Seq: 4, Until: 9}}))
	f.Add([]byte{0})
	// A tag in a longer varint than it needs.
	f.Add(append([]byte{0x87, 0x00}, EncodeEntry(7, []event.Event{{Type: event.Completed, Seq: 3}})[1:]...))
	f.Fuzz(func(t *testing.T, b []byte) {
		tag, evs, err := DecodeEntry(b)
		if err != nil {
			return
		}
		if again := EncodeEntry(tag, evs); string(again) != string(b) {
			t.Fatalf("decoded and encoded again: %x, was %x", again, b)
		}
	})
}
