package broker

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/snapshot"
)

// Online compaction.
//
// A log's front is truncated once a snapshot covers it and the state reads
// nothing there any more. One old message still alive (dead-lettered,
// deferred, scheduled far ahead, or held by a subscription nobody reads
// while the others drain the topic) would keep every segment after it. So
// after a snapshot the entity looks at what truncation had to keep: when
// the segments before a cut hold enough bytes and the records the state
// still reads there are few, it copies those records into an archive keyed
// by log index (the archive of `walbus compact`, package log) and truncates
// the log at the cut. Messages keep their SequenceNumbers, which are the
// indexes of their records, now read from the archive; the projection does
// not change. Disk use then follows what the entity still holds rather than
// what was sent after its oldest message.
//
// Each compaction writes one archive holding everything still needed below
// its cut, those of the previous archive included, and the previous one is
// deleted: a compaction happens only when it frees at least twice what it
// writes, so over time it writes each byte a bounded number of times.
//
// The steps keep the data directory whole at every point, as the offline
// compaction does: the archive is written under a temporary name, fsynced
// and renamed; the actor then reads from it; only then is the log
// truncated and the older archive removed. A crash in between leaves an
// extra archive whose records are also in the log or the newer archive,
// which is harmless (records never change, whichever copy is read).

// compactState is the actor's memory of the last compaction decision.
type compactState struct {
	// checkedAt is the entity's disk use (log and archives) when it was
	// last looked at; the idle checkpoint looks again once it has grown by
	// Options.CompactBytes.
	checkedAt int64
	// again says that the last look found more to free than the oldest
	// snapshot let it: one more snapshot lets the next compaction go on.
	again bool
}

// compaction is one compaction planned off the actor, to install on it.
type compaction struct {
	log     *log.Log
	cut     uint64 // 0: the log stays, only the archives go
	path    string // the new archive, "" when nothing below cut is needed
	records int
	written int64
	freed   int64
}

// compactDue says whether the idle checkpoint should snapshot for the sake
// of a compaction: the last one said a later snapshot would let it free
// more, the entity has grown by CompactBytes since, or nothing it archived
// is needed any more.
func (e *Entity) compactDue() bool {
	min := e.b.opts.CompactBytes
	return min >= 0 && (e.compact.again || e.diskBytes()-e.compact.checkedAt >= min ||
		len(e.archives) > 0 && e.st.FirstNeeded() > e.archivedThrough())
}

// diskBytes is the entity's log and archives on disk.
func (e *Entity) diskBytes() int64 { return e.log.Bytes() + archiveBytes(e.archives) }

func archiveBytes(archives []*log.Archive) int64 {
	var n int64
	for _, a := range archives {
		n += a.Size()
	}
	return n
}

// setArchives makes archives the ones the actor reads from.
func (e *Entity) setArchives(archives []*log.Archive) {
	e.archives = archives
	e.arcBytes.Store(archiveBytes(archives))
	e.arcList.Store(&archives)
}

// planCompaction runs off the actor after the snapshot at index of st was
// written and the log truncated as far as the state allowed. It decides
// whether compacting the log's front is worth it and, if so, writes the
// archive. A nil compaction means nothing to do. again reports that a
// later snapshot would let it free more.
func planCompaction(l *log.Log, dir string, st *projection.Entity, index uint64, archives []*log.Archive, minBytes int64) (c *compaction, again bool, err error) {
	if minBytes < 0 {
		return nil, false, nil
	}
	// The log is kept back to the oldest snapshot, so that a damaged newest
	// one can be passed over (see truncate).
	infos, err := snapshot.List(layout.SnapshotDir(dir))
	if err != nil || len(infos) == 0 {
		return nil, false, err
	}
	bound := min(index, infos[len(infos)-1].Index) + 1
	cut := l.SegmentStart(bound)
	freed := l.Reclaimable(cut) + archiveBytes(archives)
	again = l.Reclaimable(l.SegmentStart(index+1))-l.Reclaimable(cut) >= minBytes
	if freed < minBytes && len(archives) == 0 {
		return nil, again, nil
	}
	// The log's first record stays in the log but moves within its
	// segment when the front is truncated, so the archive must hold it
	// too: readers look there first (see log.ReadArchived).
	below := max(cut, l.FirstIndex()+1)
	// Worth it when it frees enough, and twice what it writes. Sizing it
	// stops early, so a log that is mostly live (a backlog nobody reads
	// yet) costs a partial walk, not a list of every message.
	if freed < minBytes || st.NeededBytesBelow(below, freed/2) > freed/2 {
		if len(archives) > 0 && st.NeededBytesBelow(archives[0].Last()+1, 0) == 0 {
			// Not worth cutting the log, but the archives hold nothing
			// the state reads (what it does read is in the log): drop
			// them, or the idle checkpoint would ask again and again.
			return &compaction{log: l, freed: archiveBytes(archives)}, again, nil
		}
		return nil, again, nil
	}
	needed := st.NeededBelow(below)
	c = &compaction{log: l, cut: cut, records: len(needed), freed: freed}
	if len(needed) == 0 {
		return c, again, nil
	}
	arcDir := layout.ArchiveDir(dir)
	if err := log.MkdirAllDurable(arcDir, 0o750); err != nil {
		return nil, again, err
	}
	// A compaction killed while writing leaves its temporary file.
	log.RemoveArchiveTemps(arcDir)
	c.path = filepath.Join(arcDir, fmt.Sprintf("arc-%020d.wba", cut))
	if _, err := os.Stat(c.path); err == nil {
		// The same cut again, to drop what its archive no longer needs.
		c.path = filepath.Join(arcDir, fmt.Sprintf("arc-%020d-%020d.wba", cut, index))
	}
	if c.written, err = log.ArchiveRecords(c.path, l, archives, needed); err != nil {
		return nil, again, err
	}
	return c, again, nil
}

// installCompaction makes the actor read from the new archive, then
// truncates the log at the cut and removes the archives it supersedes.
func (e *Entity) installCompaction(c *compaction) {
	if e.log != c.log {
		// Recovery replaced the log meanwhile and opened the archives that
		// were there, the new one too if it was written in time; the next
		// compaction starts from that.
		return
	}
	var fresh *log.Archive
	if c.path != "" {
		a, err := log.OpenArchive(c.path)
		if err != nil {
			e.logger().Warn("compaction: cannot open the new archive; the log stays as it was", "path", c.path, "err", err)
			return
		}
		fresh = a
	}
	old := e.archives
	var now []*log.Archive
	if fresh != nil {
		now = []*log.Archive{fresh}
	}
	e.setArchives(now)
	first, err := e.log.FirstIndex(), error(nil)
	if c.cut > 0 {
		first, err = e.log.TruncateFront(c.cut)
	}
	if err != nil {
		e.logger().Warn("compaction: truncating the log failed", "cut", c.cut, "err", err)
		e.setArchives(append(now, old...))
		return
	}
	for _, a := range old {
		a.Close()
		if err := os.Remove(a.Path()); err != nil && !os.IsNotExist(err) {
			e.logger().Warn("compaction: cannot remove a superseded archive", "path", a.Path(), "err", err)
		}
	}
	e.logger().Debug("log compacted", "cut", c.cut, "first", first, "archived", c.records,
		"archive_bytes", c.written, "freed_bytes", c.freed)
}
