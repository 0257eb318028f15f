package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/broker/replica"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/snapshot"
)

// Snapshots in a cluster (docs/cluster.md, "Snapshots and the log's
// front").
//
// A member's snapshot is the entity's state at the end of an entry its
// group committed, taken as a single node takes one (after SnapshotEvery
// events or SnapshotBytes of log) and handed to replica.Member.Compact.
// The log is cut in front of it only as far as the state allows: message
// bodies are records of the log, and the log keeps every one the state
// still reads. A member's own snapshot therefore holds the state alone.
//
// A member far behind gets the leader's snapshot instead of entries; it
// has none of the records before it, so the snapshot travels with them:
// when Raft sends one, the sender reads the records its state reads below
// its index and puts them in the message. The member that restores it
// writes them to an archive (the one compaction writes, package log) and
// reads them from there, as from a compacted log's.

// clusterStateMagic begins a member snapshot's state.
const clusterStateMagic = "WBCS\x01"

// encodeClusterState is a member snapshot's state: the entity's state
// (snapshot.Encode: compressed, checksummed) as of log index index, then
// the records it reads below index when they travel with it (whole
// envelopes, in index order).
func encodeClusterState(index uint64, raw []byte, records [][]byte) []byte {
	state := snapshot.Encode(index, raw)
	b := append([]byte(clusterStateMagic), binary.AppendUvarint(nil, uint64(len(state)))...)
	b = append(b, state...)
	b = binary.AppendUvarint(b, uint64(len(records)))
	for _, r := range records {
		b = binary.AppendUvarint(b, uint64(len(r)))
		b = append(b, r...)
	}
	return b
}

// decodeClusterState reads what encodeClusterState wrote: the state's
// log index and encoding (projection.Encode's), and the records, each
// checked, below the index and in increasing order.
func decodeClusterState(b []byte) (index uint64, raw []byte, records [][]byte, err error) {
	fail := func(format string, args ...any) (uint64, []byte, [][]byte, error) {
		return 0, nil, nil, fmt.Errorf("a member snapshot's state: "+format, args...)
	}
	if len(b) < len(clusterStateMagic) || string(b[:len(clusterStateMagic)]) != clusterStateMagic {
		return fail("not one (no magic)")
	}
	b = b[len(clusterStateMagic):]
	field := func() ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		f := b[k : k+int(n)]
		b = b[k+int(n):]
		return f, true
	}
	state, ok := field()
	if !ok {
		return fail("the state is cut")
	}
	if index, raw, err = snapshot.Decode(state); err != nil {
		return fail("%v", err)
	}
	count, k := binary.Uvarint(b)
	if k <= 0 || count > uint64(len(b)) {
		return fail("no record count")
	}
	b = b[k:]
	var prev uint64
	for i := uint64(0); i < count; i++ {
		r, ok := field()
		if !ok {
			return fail("record %d of %d is cut", i+1, count)
		}
		ev, err := event.DecodeRecord(r)
		if err != nil {
			return fail("record %d of %d: %v", i+1, count, err)
		}
		if ev.Index <= prev || ev.Index > index {
			return fail("record %d of %d has log index %d, after %d, in a state at %d", i+1, count, ev.Index, prev, index)
		}
		prev = ev.Index
		records = append(records, r)
	}
	if len(b) > 0 {
		return fail("%d bytes after the records", len(b))
	}
	return index, raw, records, nil
}

// startMemberSnapshot takes a member's snapshot of the state now, once the
// group committed it (a leader's state may be ahead of the commit; a
// follower's never is), and hands it to the member, keeping the log from
// the first record the state reads.
func (e *Entity) startMemberSnapshot(l memberLog) {
	frozen := e.st.Frozen()
	index := e.st.LastIndex()
	keep := e.st.FirstNeededFrom(e.archivedThrough() + 1)
	e.snap.running = true
	e.snap.sinceLast = 0
	e.snap.bytesAt = e.log.Bytes()
	barrier := make(chan error, 1)
	if !e.raft.leading {
		barrier <- nil
	} else if _, err := l.Append(nil, func(err error) { barrier <- err }); err != nil {
		barrier <- err
	}
	go func() {
		start := time.Now()
		var raw []byte
		err := <-barrier
		if err == nil {
			// Where the records sit in this member's log, for the tools
			// (the events the state applied came without).
			frozen.Reposition(l.Position)
			raw = frozen.Encode(nil)
			// The offline tools read the entity's own snapshots: one of
			// the same state goes there first, so the log is never cut
			// past what they can read.
			err = writeToolSnapshot(e.dir, index, raw)
		}
		if err == nil {
			err = l.Compact(index, encodeClusterState(index, raw, nil), keep)
		}
		elapsed := time.Since(start)
		if hook := e.b.opts.OnSnapshot; hook != nil {
			hook(SnapshotStats{Entity: e.name, Index: index, Bytes: len(raw), Took: elapsed, Err: err})
		}
		e.post(func(e *Entity) {
			e.snap.running = false
			switch {
			case err == nil:
				e.snap.lastIndex = index
				e.b.logger.Debug("member snapshot written", "entity", e.name, "index", index, "bytes", len(raw), "took", elapsed)
			case errors.Is(err, replica.ErrNotLeader), errors.Is(err, replica.ErrStopped):
				// The term ended before the state was committed, or the
				// member closed: the next snapshot is taken on what comes.
			default:
				e.b.logger.Warn("member snapshot failed", "entity", e.name, "index", index, "err", err)
			}
			e.snapshotEnded()
		})
	}()
}

// sendSnapshot sends m, Raft's snapshot for a member behind, with the
// records its state reads below it. A snapshot that cannot be sent (a
// record a newer snapshot let go of, a member that closed) is reported
// failed: Raft sends its newest one later.
func (e *Entity) sendSnapshot(mem *replica.Member, m *pb.Message) {
	data, err := e.withRecords(mem, m.GetSnapshot().GetData())
	if err != nil {
		e.b.logger.Warn("member snapshot not sent", "entity", e.name, "to", m.GetTo(), "err", err)
		mem.ReportSnapshot(m.GetTo(), false)
		return
	}
	out := proto.Clone(m).(*pb.Message)
	out.Snapshot.Data = data
	e.b.opts.Cluster.Send(e.id, out)
}

// withRecords is the snapshot data with the records its state reads
// below its index, read from the member's log or the archives.
func (e *Entity) withRecords(mem *replica.Member, data []byte) ([]byte, error) {
	logIndex, state, err := replica.DecodeSnapshot(data)
	if err != nil {
		return nil, err
	}
	index, raw, records, err := decodeClusterState(state)
	if err != nil {
		return nil, err
	}
	if len(records) > 0 {
		return data, nil // it carries them: a snapshot this member restored
	}
	st, err := projection.Decode(raw)
	if err != nil {
		return nil, err
	}
	archives := *e.arcList.Load()
	l := mem.Log()
	for _, ref := range st.NeededBelow(index + 1) {
		var ev event.Event
		var ok bool
		if ref.Index <= l.FirstIndex() {
			ev, ok, err = log.ReadArchived(archives, ref.Index)
		}
		if !ok && err == nil {
			pos, found := mem.Position(ref.Index)
			if !found {
				return nil, fmt.Errorf("record %d: in neither the member's log nor an archive", ref.Index)
			}
			ev, _, err = l.ReadAt(ref.Index, pos, nil)
		}
		if err != nil {
			return nil, fmt.Errorf("record %d: %w", ref.Index, err)
		}
		ev.Term, ev.Entry, ev.Tag = 0, 0, 0
		ev.Flags &^= event.FlagContinued
		records = append(records, event.AppendRecord(nil, &ev))
	}
	return replica.EncodeSnapshot(logIndex, encodeClusterState(index, raw, records)), nil
}

// restoreMember makes a member snapshot's state the entity's: at open
// (the member's own, or one it restored before) or from the leader. The
// records that came with it go to an archive first (unless it is there
// already), which then replaces the older ones.
func (e *Entity) restoreMember(logIndex uint64, state []byte) error {
	index, raw, records, err := decodeClusterState(state)
	if err == nil && index != logIndex {
		err = fmt.Errorf("a snapshot at log index %d holds a state at %d", logIndex, index)
	}
	if err != nil {
		return err
	}
	st, err := projection.Decode(raw)
	if err == nil && st.LastIndex() != logIndex {
		err = fmt.Errorf("a snapshot at log index %d holds a state at %d", logIndex, st.LastIndex())
	}
	if err != nil {
		return err
	}
	if len(records) > 0 {
		dir := layout.ArchiveDir(e.dir)
		path := filepath.Join(dir, fmt.Sprintf("arc-%020d.wba", logIndex+1))
		if _, err := os.Stat(path); err != nil {
			if err := log.MkdirAllDurable(dir, 0o750); err != nil {
				return err
			}
			log.RemoveArchiveTemps(dir)
			if err := log.WriteArchive(path, records); err != nil {
				return fmt.Errorf("archive the snapshot's records: %w", err)
			}
		}
		a, err := log.OpenArchive(path)
		if err != nil {
			return err
		}
		// The new archive holds every record the state reads below it:
		// the older ones go.
		old := slices.DeleteFunc(slices.Clone(e.archives), func(o *log.Archive) bool { return o.Path() == path })
		e.closeArchives()
		e.setArchives([]*log.Archive{a})
		for _, o := range old {
			if err := os.Remove(o.Path()); err != nil && !os.IsNotExist(err) {
				e.b.logger.Warn("an archive the snapshot replaced stays", "entity", e.name, "path", o.Path(), "err", err)
			}
		}
	}
	if len(records) > 0 {
		// The log now begins after the snapshot: the offline tools need
		// it as the entity's own.
		if err := writeToolSnapshot(e.dir, logIndex, raw); err != nil {
			return err
		}
	}
	e.st = st
	e.cache = newBodyCache(e.b.opts.CacheBytes)
	cfg := st.Config()
	e.cfg.Store(&cfg)
	e.snap.lastIndex = logIndex
	return nil
}

// writeToolSnapshot writes raw, the state at log index, as the entity's
// own snapshot (the single node's form, which the offline tools read),
// unless it is there, and keeps the newest keepSnapshots.
func writeToolSnapshot(entityDir string, index uint64, raw []byte) error {
	dir := layout.SnapshotDir(entityDir)
	if infos, err := snapshot.List(dir); err == nil && len(infos) > 0 && infos[0].Index >= index {
		return nil
	}
	if err := log.MkdirAllDurable(dir, 0o750); err != nil {
		return err
	}
	if _, err := snapshot.Write(dir, index, raw); err != nil {
		return err
	}
	return snapshot.Prune(dir, keepSnapshots)
}
