package replica

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
)

// LogStorage is a member's Storage on its entity log: the Raft log is the
// event log, written once (docs/cluster.md, "The entity log is the Raft
// log"). A Raft entry is one atomic group of records. Its first record's
// envelope (version 2) holds the entry's term, index and tag; an entry
// without events (a new leader's empty entry, a change of membership) is
// one Marker record. So every entry takes at least one log index, and an
// entry's records get the log indexes after its predecessor's: the same on
// every replica, since Raft's logs that agree on an entry agree on all
// before it.
//
// Beside the log, in the same directory: the hard state (raft-state) and
// the newest snapshot (raft-snapshot), each written whole to a temporary
// file, fsynced and renamed.
//
// Stage appends without waiting and Sync waits for the log's group commit;
// Group calls Sync after every Stage, before anything else, and a
// LogStorage relies on that (the log cannot be cut back under records it
// has not written yet). It is not safe for concurrent use.
type LogStorage struct {
	dir  string
	opts log.Options
	log  *log.Log

	snap    *pb.Snapshot // the newest snapshot; its index 0 for none
	snapLog uint64       // the log index its state reaches
	ents    []entryRef   // the entries after the snapshot, by Raft index

	// recent keeps the last entries staged, as Raft gave them, so that
	// the leader sends them to followers without reading the log back.
	recent []*pb.Entry

	hs     *pb.HardState // staged
	hsFile *pb.HardState // durable
	// SyncCommit makes Sync write the hard state whenever the commit
	// index moves, so that a restart applies at once what was committed
	// (the metadata group's few entries).
	SyncCommit bool
	pending    bool // records appended since the last Sync

	// pos holds where each record from log index posBase on sits in its
	// segment: the records' owner reads message bodies by position, and
	// the events it decided or applied never passed through log.Append
	// to learn theirs. Position may be called from other goroutines.
	posMu   sync.RWMutex
	pos     []event.Position
	posBase uint64

	shared atomic.Pointer[log.Log] // log, for Log
}

// entryRef is where an entry's records are: from log index start, n of
// them.
type entryRef struct {
	index, term, start uint64
	n                  uint32
	tag                uint64
}

func (r entryRef) end() uint64 { return r.start + uint64(r.n) - 1 }

const (
	hardStateFile = "raft-state"
	snapshotFile  = "raft-snapshot"
	logDir        = "log"
	recentEntries = 512
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// OpenLogStorage opens (creating if needed) the storage in dir. opts are
// the log's; its sync policy decides what durable means, as for any
// entity log.
func OpenLogStorage(dir string, opts log.Options) (*LogStorage, error) {
	if err := log.MkdirAllDurable(dir, 0o750); err != nil {
		return nil, err
	}
	s := &LogStorage{dir: dir, opts: opts, snap: &pb.Snapshot{}, hs: &pb.HardState{}}
	if err := s.readSnapshot(); err != nil {
		return nil, err
	}
	hs, err := readHardState(filepath.Join(dir, hardStateFile))
	if err != nil {
		return nil, err
	}
	s.hs, s.hsFile = hs, proto.Clone(hs).(*pb.HardState)
	if err := s.openLog(); err != nil {
		return nil, err
	}
	// The commit index is written with the term and vote only, so it may
	// be behind: never behind the snapshot, which holds committed state.
	if s.hs.GetCommit() < s.snapIndex() {
		s.hs.Commit = proto.Uint64(s.snapIndex())
	}
	if s.hs.GetCommit() > s.lastIndex() {
		s.log.Close()
		return nil, fmt.Errorf("replica: %s: committed index %d is past the log's last entry %d", dir, s.hs.GetCommit(), s.lastIndex())
	}
	return s, nil
}

// openLog opens the log and maps its entries. A log that does not go on
// from the snapshot (one was taken, and a crash came before the log was
// reset after it) is reset now.
func (s *LogStorage) openLog() error {
	dir := filepath.Join(s.dir, logDir)
	for attempt := 0; ; attempt++ {
		l, _, err := log.Open(dir, s.opts)
		if err != nil {
			return err
		}
		ents, pos, err := mapEntries(l)
		if err == nil {
			var ok bool
			if ents, ok, err = s.follows(ents, l); ok {
				s.log, s.ents = l, ents
				s.shared.Store(l)
				s.posMu.Lock()
				s.pos, s.posBase = pos, l.FirstIndex()
				s.posMu.Unlock()
				return nil
			}
		}
		if cerr := l.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("replica: %s: %w", dir, err)
		}
		if attempt > 0 {
			return fmt.Errorf("replica: %s: the log does not follow snapshot %d after a reset", dir, s.snapIndex())
		}
		if err := log.Reset(dir, s.snapLog+1); err != nil {
			return err
		}
	}
}

// follows returns the log's entries after the snapshot, and whether the
// log goes on from it. With no snapshot, a log that does not begin with
// entry 1 is an error: nothing replaces it.
func (s *LogStorage) follows(ents []entryRef, l *log.Log) ([]entryRef, bool, error) {
	idx := s.snapIndex()
	if idx == 0 {
		if len(ents) == 0 && l.LastIndex() >= l.FirstIndex() {
			return nil, false, errors.New("the log holds no Raft entry: not a replica's log")
		}
		if len(ents) > 0 && (ents[0].index != 1 || ents[0].start != l.FirstIndex()) {
			return nil, false, fmt.Errorf("the log begins with Raft entry %d at log index %d, and no snapshot holds those before",
				ents[0].index, ents[0].start)
		}
		return ents, true, nil
	}
	for i, r := range ents {
		switch {
		case r.index == idx && r.term == s.snap.GetMetadata().GetTerm() && r.end() == s.snapLog:
			return ents[i+1:], true, nil
		case r.index == idx+1 && r.start == s.snapLog+1:
			return ents[i:], true, nil
		}
	}
	// No entry after the snapshot yet: the log must end where it does.
	return nil, len(ents) == 0 && l.LastIndex() == s.snapLog, nil
}

// mapEntries scans l for its entries, and where its records are.
func mapEntries(l *log.Log) ([]entryRef, []event.Position, error) {
	var ents []entryRef
	var pos []event.Position
	err := l.Scan(0, func(ev *event.Event) error {
		pos = append(pos, ev.Pos)
		if ev.Term == 0 {
			if len(ents) > 0 {
				ents[len(ents)-1].n++
			}
			return nil // records before the first whole entry: cut at the front
		}
		if n := len(ents); n > 0 && ev.Entry != ents[n-1].index+1 {
			return fmt.Errorf("log index %d begins Raft entry %d after entry %d", ev.Index, ev.Entry, ents[n-1].index)
		}
		ents = append(ents, entryRef{index: ev.Entry, term: ev.Term, start: ev.Index, n: 1, tag: ev.Tag})
		return nil
	})
	return ents, pos, err
}

// Position is where the record at log index sits in its segment, for a
// positional read (log.ReadAt, ReadAhead). It is safe for concurrent use.
func (s *LogStorage) Position(index uint64) (event.Position, bool) {
	s.posMu.RLock()
	defer s.posMu.RUnlock()
	if index < s.posBase || index-s.posBase >= uint64(len(s.pos)) {
		return event.Position{}, false
	}
	return s.pos[index-s.posBase], true
}

func (s *LogStorage) snapIndex() uint64 { return s.snap.GetMetadata().GetIndex() }

func (s *LogStorage) lastIndex() uint64 { return s.snapIndex() + uint64(len(s.ents)) }

// ref is entry i's place.
func (s *LogStorage) ref(i uint64) entryRef { return s.ents[i-s.snapIndex()-1] }

// InitialState is the hard state and the membership of the snapshot.
func (s *LogStorage) InitialState() (*pb.HardState, *pb.ConfState, error) {
	cs := &pb.ConfState{}
	if c := s.snap.GetMetadata().GetConfState(); c != nil {
		cs = proto.Clone(c).(*pb.ConfState)
	}
	return proto.Clone(s.hs).(*pb.HardState), cs, nil
}

var _ Storage = (*LogStorage)(nil)

// FirstIndex is the first entry after the snapshot.
func (s *LogStorage) FirstIndex() (uint64, error) { return s.snapIndex() + 1, nil }

// LastIndex is the last entry staged.
func (s *LogStorage) LastIndex() (uint64, error) { return s.lastIndex(), nil }

// Term is entry i's term.
func (s *LogStorage) Term(i uint64) (uint64, error) {
	switch idx := s.snapIndex(); {
	case i == idx:
		return s.snap.GetMetadata().GetTerm(), nil
	case i < idx:
		return 0, raft.ErrCompacted
	case i > s.lastIndex():
		return 0, raft.ErrUnavailable
	}
	return s.ref(i).term, nil
}

// Snapshot is the newest snapshot.
func (s *LogStorage) Snapshot() (*pb.Snapshot, error) { return s.snap, nil }

// Entries reads entries [lo, hi), their encoded sizes up to maxSize (at
// least one).
func (s *LogStorage) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	if lo <= s.snapIndex() {
		return nil, raft.ErrCompacted
	}
	if hi > s.lastIndex()+1 || lo > hi {
		return nil, fmt.Errorf("replica: entries [%d, %d) past the last %d: %w", lo, hi, s.lastIndex(), raft.ErrUnavailable)
	}
	var out []*pb.Entry
	var size uint64
	add := func(e *pb.Entry) bool {
		size += uint64(proto.Size(e))
		if len(out) > 0 && size > maxSize {
			return false
		}
		out = append(out, e)
		return true
	}
	i := lo
	// From the log, for those older than what recent holds.
	if n := len(s.recent); i < hi && (n == 0 || i < s.recent[0].GetIndex()) {
		stop := hi
		if n > 0 {
			stop = min(hi, s.recent[0].GetIndex())
		}
		ents, err := s.read(i, stop, maxSize)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if !add(e) {
				return out, nil
			}
			i++
		}
		if i < stop {
			return out, nil // the size limit stopped the read
		}
	}
	for ; i < hi; i++ {
		if !add(s.recent[i-s.recent[0].GetIndex()]) {
			break
		}
	}
	return out, nil
}

var errEnough = errors.New("enough")

// read reads entries [lo, hi) back from the log, stopping once their
// size passes maxSize.
func (s *LogStorage) read(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	first, last := s.ref(lo), s.ref(hi-1)
	var out []*pb.Entry
	var size uint64
	var evs []event.Event
	var cur entryRef
	r := lo
	err := s.log.Scan(first.start, func(ev *event.Event) error {
		if ev.Index > last.end() {
			return errEnough
		}
		if ev.Index == first.start || ev.Term != 0 {
			cur = s.ref(r)
			if ev.Index != cur.start || ev.Term != cur.term || ev.Entry != r {
				return fmt.Errorf("log index %d holds Raft entry %d of term %d, want entry %d of term %d",
					ev.Index, ev.Entry, ev.Term, r, cur.term)
			}
		}
		ev2 := *ev
		ev2.Message, ev2.Props, ev2.State = bytes.Clone(ev.Message), bytes.Clone(ev.Props), bytes.Clone(ev.State)
		evs = append(evs, ev2)
		if ev.Index < cur.end() {
			return nil
		}
		e, err := entryOf(r, cur, evs)
		if err != nil {
			return err
		}
		out = append(out, e)
		evs, r = evs[:0], r+1
		if size += uint64(proto.Size(e)); size > maxSize || r == hi {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, fmt.Errorf("replica: read entries %d to %d: %w", lo, hi-1, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("replica: read entries %d to %d: %w", lo, hi-1, raft.ErrUnavailable)
	}
	return out, nil
}

// entryOf makes Raft entry index back from its records.
func entryOf(index uint64, ref entryRef, evs []event.Event) (*pb.Entry, error) {
	e := &pb.Entry{Term: proto.Uint64(ref.term), Index: proto.Uint64(index)}
	if evs[0].Type == event.Marker {
		if len(evs) != 1 {
			return nil, fmt.Errorf("a marker record in an entry of %d records", len(evs))
		}
		typ := pb.EntryType(evs[0].Queue)
		e.Type = &typ
		if len(evs[0].State) > 0 {
			e.Data = bytes.Clone(evs[0].State)
		}
		return e, nil
	}
	typ := pb.EntryType_EntryNormal
	e.Type, e.Data = &typ, EncodeEntry(ref.tag, evs)
	return e, nil
}

// Stage appends entries, cutting off any the log has from the first one's
// index on, and stages the hard state.
func (s *LogStorage) Stage(hs *pb.HardState, entries []*pb.Entry) error {
	if len(entries) > 0 {
		if err := s.append(entries); err != nil {
			return err
		}
	}
	if hs != nil {
		s.hs = proto.Clone(hs).(*pb.HardState)
	}
	return nil
}

func (s *LogStorage) append(entries []*pb.Entry) error {
	// Those the snapshot already holds are dropped.
	for len(entries) > 0 && entries[0].GetIndex() <= s.snapIndex() {
		entries = entries[1:]
	}
	if len(entries) == 0 {
		return nil
	}
	first := entries[0].GetIndex()
	if first > s.lastIndex()+1 {
		return fmt.Errorf("replica: entry %d after the last %d leaves a hole", first, s.lastIndex())
	}
	if first <= s.lastIndex() {
		// A new leader overrules an uncommitted suffix.
		if first <= s.hs.GetCommit() {
			return fmt.Errorf("replica: entry %d would replace a committed one (commit %d)", first, s.hs.GetCommit())
		}
		cut := s.ref(first).start - 1
		if err := s.log.TruncateBack(cut); err != nil {
			return err
		}
		s.ents = s.ents[:first-s.snapIndex()-1]
		s.posMu.Lock()
		if cut+1 >= s.posBase {
			s.pos = s.pos[:min(uint64(len(s.pos)), cut+1-s.posBase)]
		}
		s.posMu.Unlock()
		for len(s.recent) > 0 && s.recent[len(s.recent)-1].GetIndex() >= first {
			s.recent = s.recent[:len(s.recent)-1]
		}
	}
	for _, e := range entries {
		var evs []event.Event
		var tag uint64
		if e.GetType() == pb.EntryType_EntryNormal && len(e.GetData()) > 0 {
			var err error
			if tag, evs, err = DecodeEntry(e.GetData()); err != nil {
				return fmt.Errorf("replica: entry %d: %w", e.GetIndex(), err)
			}
		} else {
			evs = []event.Event{{Type: event.Marker, Queue: uint32(e.GetType()), State: e.GetData()}}
		}
		evs[0].Term, evs[0].Entry, evs[0].Tag = e.GetTerm(), e.GetIndex(), tag
		start, err := s.log.Append(evs, nil)
		if err != nil {
			return err
		}
		if want := s.nextLogIndex(); start != want {
			return fmt.Errorf("replica: entry %d went to log index %d, want %d", e.GetIndex(), start, want)
		}
		s.posMu.Lock()
		if len(s.pos) == 0 {
			s.posBase = start
		}
		for i := range evs {
			s.pos = append(s.pos, evs[i].Pos)
		}
		s.posMu.Unlock()
		s.ents = append(s.ents, entryRef{index: e.GetIndex(), term: e.GetTerm(), start: start, n: uint32(len(evs)), tag: tag})
		s.recent = append(s.recent, e)
	}
	if n := len(s.recent); n > recentEntries {
		s.recent = append(s.recent[:0:0], s.recent[n-recentEntries/2:]...)
	}
	s.pending = true
	return nil
}

// nextLogIndex is the log index the next entry's first record gets.
func (s *LogStorage) nextLogIndex() uint64 {
	if n := len(s.ents); n > 0 {
		return s.ents[n-1].end() + 1
	}
	return s.snapLog + 1
}

// Sync waits until what Stage appended is durable, then writes the hard
// state if its term or vote changed (a changed commit index alone waits
// for the next such write: Raft learns it again from the leader), or,
// with SyncCommit, if its commit index changed too.
func (s *LogStorage) Sync() error {
	if s.pending {
		done := make(chan error, 1)
		if _, err := s.log.Append(nil, func(err error) { done <- err }); err != nil {
			return err
		}
		if err := <-done; err != nil {
			return err
		}
		s.pending = false
	}
	if s.hs.GetTerm() != s.hsFile.GetTerm() || s.hs.GetVote() != s.hsFile.GetVote() ||
		s.SyncCommit && s.hs.GetCommit() != s.hsFile.GetCommit() {
		if err := writeHardState(filepath.Join(s.dir, hardStateFile), s.hs); err != nil {
			return err
		}
		s.hsFile = proto.Clone(s.hs).(*pb.HardState)
	}
	return nil
}

// StageSnapshot replaces the log with snap, a snapshot from the leader:
// the snapshot is written first, then the log is reset to go on after it.
// Both are durable when it returns.
func (s *LogStorage) StageSnapshot(snap *pb.Snapshot) error {
	logIndex, _, err := DecodeSnapshot(snap.GetData())
	if err != nil {
		return err
	}
	if err := s.Sync(); err != nil {
		return err
	}
	if err := writeSnapshot(filepath.Join(s.dir, snapshotFile), snap, logIndex); err != nil {
		return err
	}
	s.snap, s.snapLog = proto.Clone(snap).(*pb.Snapshot), logIndex
	s.ents, s.recent = nil, nil
	if err := s.log.Close(); err != nil && !errors.Is(err, log.ErrClosed) {
		return err
	}
	if err := log.Reset(filepath.Join(s.dir, logDir), logIndex+1); err != nil {
		return err
	}
	return s.openLog()
}

// CreateSnapshot makes the member's own snapshot at entry index (applied
// by its state machine, whose state data holds) and drops the log before
// it, as far as whole segments allow.
func (s *LogStorage) CreateSnapshot(index uint64, cs *pb.ConfState, data []byte) error {
	return s.CreateSnapshotKeeping(index, cs, data, 0)
}

// CreateSnapshotKeeping is CreateSnapshot for a state that still reads
// records of the log before the snapshot: the log is kept from log index
// keep on (0: nothing is kept). Raft no longer serves the entries before
// the snapshot either way.
func (s *LogStorage) CreateSnapshotKeeping(index uint64, cs *pb.ConfState, data []byte, keep uint64) error {
	if index <= s.snapIndex() {
		return raft.ErrSnapOutOfDate
	}
	if index > s.lastIndex() {
		return fmt.Errorf("replica: snapshot at %d past the last entry %d", index, s.lastIndex())
	}
	logIndex, _, err := DecodeSnapshot(data)
	if err != nil {
		return err
	}
	ref := s.ref(index)
	if logIndex != ref.end() {
		return fmt.Errorf("replica: a snapshot of entry %d reaches log index %d; the entry ends at %d", index, logIndex, ref.end())
	}
	snap := &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{
		Index: proto.Uint64(index), Term: proto.Uint64(ref.term), ConfState: proto.Clone(cs).(*pb.ConfState)}}
	if err := writeSnapshot(filepath.Join(s.dir, snapshotFile), snap, logIndex); err != nil {
		return err
	}
	s.ents = s.ents[index-s.snapIndex():]
	s.snap, s.snapLog = snap, logIndex
	cut := logIndex + 1
	if keep > 0 {
		cut = min(cut, keep)
	}
	if cut <= s.log.FirstIndex() {
		return nil
	}
	first, err := s.log.TruncateFront(cut)
	if err != nil {
		return err
	}
	// The log's new first record is the only one that moved: tidwall
	// rewrote the segment that holds it.
	var moved event.Position
	if err := s.log.Scan(first, func(ev *event.Event) error {
		moved = ev.Pos
		return errEnough
	}); err != nil && !errors.Is(err, errEnough) {
		return err
	}
	s.posMu.Lock()
	if first > s.posBase {
		drop := min(uint64(len(s.pos)), first-s.posBase)
		s.pos, s.posBase = append([]event.Position(nil), s.pos[drop:]...), s.posBase+drop
	}
	if first == s.posBase && len(s.pos) > 0 {
		s.pos[0] = moved
	}
	s.posMu.Unlock()
	return nil
}

// EntryEnding is the entry whose records end at log index logIndex, if
// one does and the storage still holds it.
func (s *LogStorage) EntryEnding(logIndex uint64) (uint64, bool) {
	i := sort.Search(len(s.ents), func(i int) bool { return s.ents[i].end() >= logIndex })
	if i < len(s.ents) && s.ents[i].end() == logIndex {
		return s.ents[i].index, true
	}
	return 0, false
}

// Close closes the log.
func (s *LogStorage) Close() error { return s.log.Close() }

// Log is the entity log under the storage, for reading events. It is
// safe for concurrent use; a leader's snapshot replaces the log (the one
// before is closed).
func (s *LogStorage) Log() *log.Log { return s.shared.Load() }

// LogIndex is where entry i's records are in the log: the first and the
// last log index.
func (s *LogStorage) LogIndex(i uint64) (first, last uint64, err error) {
	if i <= s.snapIndex() || i > s.lastIndex() {
		return 0, 0, raft.ErrUnavailable
	}
	r := s.ref(i)
	return r.start, r.end(), nil
}

// The files beside the log: a magic, the content, a CRC32-C of both.

const (
	hardStateMagic = "WBRAFTH1"
	snapshotMagic  = "WBRAFTS1"
)

func writeHardState(path string, hs *pb.HardState) error {
	b := []byte(hardStateMagic)
	b = binary.BigEndian.AppendUint64(b, hs.GetTerm())
	b = binary.BigEndian.AppendUint64(b, hs.GetVote())
	b = binary.BigEndian.AppendUint64(b, hs.GetCommit())
	return writeFileDurable(path, b)
}

func readHardState(path string) (*pb.HardState, error) {
	b, err := readChecked(path, hardStateMagic)
	if err != nil || b == nil {
		return &pb.HardState{}, err
	}
	if len(b) != 24 {
		return nil, fmt.Errorf("replica: %s: %d bytes of hard state", path, len(b))
	}
	return &pb.HardState{Term: proto.Uint64(binary.BigEndian.Uint64(b)),
		Vote: proto.Uint64(binary.BigEndian.Uint64(b[8:])), Commit: proto.Uint64(binary.BigEndian.Uint64(b[16:]))}, nil
}

func writeSnapshot(path string, snap *pb.Snapshot, logIndex uint64) error {
	m, err := proto.Marshal(snap)
	if err != nil {
		return err
	}
	b := binary.BigEndian.AppendUint64([]byte(snapshotMagic), logIndex)
	return writeFileDurable(path, append(b, m...))
}

func (s *LogStorage) readSnapshot() error {
	path := filepath.Join(s.dir, snapshotFile)
	b, err := readChecked(path, snapshotMagic)
	if err != nil || b == nil {
		return err
	}
	if len(b) < 8 {
		return fmt.Errorf("replica: %s: %d bytes", path, len(b))
	}
	snap := &pb.Snapshot{}
	if err := proto.Unmarshal(b[8:], snap); err != nil {
		return fmt.Errorf("replica: %s: %w", path, err)
	}
	logIndex := binary.BigEndian.Uint64(b)
	if in, _, err := DecodeSnapshot(snap.GetData()); err != nil || in != logIndex || snap.GetMetadata().GetIndex() == 0 {
		return fmt.Errorf("replica: %s: a snapshot of entry %d, log index %d, whose data says %d (%v)",
			path, snap.GetMetadata().GetIndex(), logIndex, in, err)
	}
	s.snap, s.snapLog = snap, logIndex
	return nil
}

// readChecked reads a file written by writeFileDurable: nil for none.
func readChecked(path, magic string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(b) < len(magic)+4 || string(b[:len(magic)]) != magic {
		return nil, fmt.Errorf("replica: %s is not a %s file", path, magic)
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("replica: %s: checksum mismatch", path)
	}
	return body[len(magic):], nil
}

// writeFileDurable writes b and its CRC to a temporary file, fsyncs it and
// renames it over path, then fsyncs the directory.
func writeFileDurable(path string, b []byte) error {
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return log.SyncDir(filepath.Dir(path))
}
