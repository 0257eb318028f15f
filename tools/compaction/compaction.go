// Package compaction reclaims the disk held by dead events in a stopped
// broker's data directory (`walbus compact`).
//
// The server already truncates the front of a log once everything there is
// settled. What it cannot drop are old messages still alive (deferred,
// scheduled, dead-lettered): one of them pins every segment after it. An
// offline compaction moves the records still needed below a cut point (the
// start of the log's last segment) into an archive keyed by log index, then
// truncates the log there. Each message keeps its SequenceNumber, since
// that is the index of its record, now read from the archive.
//
// The steps, in order, each one atomic: write the new archive (holding
// everything still needed from older archives too); write a snapshot of the
// state at the end of the log; truncate the log's front; delete the older
// archives. A compaction killed at any point leaves the directory as it
// was or as it would be afterwards, at worst with an extra archive whose
// records are also elsewhere; running it again finishes the job.
package compaction

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/snapshot"
)

// Options configure a compaction.
type Options struct {
	// Retain, if not empty, is a directory that receives the history the
	// compaction drops, as archives `walbus replay --retained` reads.
	Retain string
	// Entity limits the compaction to one entity; empty compacts all.
	Entity string
}

// Report says what a compaction did to one entity.
type Report struct {
	Entity      string
	BytesBefore int64 // of the entity's log, archives and snapshots
	BytesAfter  int64
	Cut         uint64 // records below it left the log; 0 when nothing was done
	Archived    int    // records kept in the archive
	Dropped     int    // dead records removed
	Retained    string // where the dropped history went, if anywhere
	Note        string // why nothing was done, if so
}

// Compact compacts the entities of the stopped broker in dataDir. It holds
// the directory's lock throughout, so it refuses to run beside a server.
func Compact(dataDir string, opts Options) ([]Report, error) {
	if _, err := os.Stat(layout.NamespaceLog(dataDir)); err != nil {
		return nil, fmt.Errorf("%s is not a walbus data directory: %w", dataDir, err)
	}
	lock, err := log.LockDir(dataDir)
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	entities, err := Entities(dataDir)
	if err != nil {
		return nil, err
	}
	var reports []Report
	found := false
	for _, e := range entities {
		if opts.Entity != "" && !strings.EqualFold(opts.Entity, e.Name) {
			continue
		}
		found = true
		if _, err := os.Stat(filepath.Join(e.Dir, raftStateFile)); err == nil {
			return reports, fmt.Errorf("entity %s is a cluster member's (its log is Raft's, and its snapshots cut it): "+
				"walbus compact works on a single node's data", e.Name)
		}
		rep, err := compactEntity(e, opts)
		if err != nil {
			return reports, fmt.Errorf("entity %s: %w", e.Name, err)
		}
		reports = append(reports, rep)
	}
	if opts.Entity != "" && !found {
		return nil, fmt.Errorf("no entity named %q in %s", opts.Entity, dataDir)
	}
	return reports, nil
}

// raftStateFile is the file a cluster member's storage keeps beside its
// entity's log (replica.LogStorage's hard state).
const raftStateFile = "raft-state"

// The layout of `--retain DIR`, which the offline tools read back: per
// entity a directory named by its id holding the history archives and a
// file with the entity's name.
const (
	RetainedGlob     = "history-*.wba" // the history archives in a RetainedDir
	RetainedNameFile = "entity-name"
)

// RetainedDir is where --retain dir keeps the history of the entity with id.
func RetainedDir(dir string, id uint64) string {
	return filepath.Join(dir, layout.DirName(id))
}

// EntityDir is an entity of a data directory.
type EntityDir struct {
	Name string
	ID   uint64
	Dir  string
}

// Entities lists the entities a data directory's namespace log says exist.
func Entities(dataDir string) ([]EntityDir, error) {
	ns, err := log.OpenReadOnly(layout.NamespaceLog(dataDir))
	if err != nil {
		return nil, fmt.Errorf("namespace log: %w", err)
	}
	defer ns.Close()
	live := map[string]EntityDir{} // by lower-case name
	err = ns.Scan(1, 0, func(ev *event.Event) error {
		key := strings.ToLower(ev.Name)
		switch ev.Type {
		case event.EntityCreated:
			live[key] = EntityDir{Name: ev.Name, ID: ev.Index,
				Dir: layout.EntityDir(dataDir, ev.Index)}
		case event.EntityDeleted:
			delete(live, key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("namespace log: %w", err)
	}
	out := make([]EntityDir, 0, len(live))
	for _, e := range live {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b EntityDir) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func compactEntity(e EntityDir, opts Options) (Report, error) {
	rep := Report{Entity: e.Name, BytesBefore: dirSize(e.Dir)}
	logDir, snapDir, arcDir := layout.LogDir(e.Dir), layout.SnapshotDir(e.Dir), layout.ArchiveDir(e.Dir)
	// A compaction killed while writing an archive leaves its temporary file.
	log.RemoveArchiveTemps(arcDir)
	ro, err := log.OpenReadOnly(logDir)
	if err != nil {
		return rep, err
	}
	segs := ro.Segments()
	ro.Close()
	archives, err := log.OpenArchives(arcDir)
	if err != nil {
		return rep, err
	}
	defer func() {
		for _, a := range archives {
			a.Close()
		}
	}()
	if len(segs) < 2 && len(archives) == 0 {
		rep.Note, rep.BytesAfter = "the log has one segment and no archive: nothing to compact", rep.BytesBefore
		return rep, nil
	}
	l, _, err := log.Open(logDir, log.Options{})
	if err != nil {
		return rep, err
	}
	defer l.Close()
	// The cut is the start of the last segment that holds records (a log
	// that ended exactly at a segment's size has an empty one after it):
	// the segment being written is never touched, so a log of one segment
	// only has its archives compacted.
	cut := segs[len(segs)-1].First
	if cut > l.LastIndex() && len(segs) > 1 {
		cut = segs[len(segs)-2].First
	}
	cut = max(cut, l.FirstIndex())
	st, _, err := snapshot.Rebuild(snapDir, l)
	if err != nil {
		return rep, err
	}
	first := l.FirstIndex()
	needed := st.NeededBelow(cut)

	if opts.Retain != "" {
		path, err := retainHistory(l, archives, needed, cut, e, opts.Retain)
		if err != nil {
			return rep, fmt.Errorf("retain history: %w", err)
		}
		rep.Retained = path
	}

	// 1. The new archive: every record below the cut the state still reads.
	if err := log.MkdirAllDurable(arcDir, 0o750); err != nil {
		return rep, err // the archive's name must outlive the truncation below
	}
	arcPath := filepath.Join(arcDir, fmt.Sprintf("arc-%020d.wba", cut))
	if len(needed) > 0 {
		if _, err := log.ArchiveRecords(arcPath, l, archives, needed); err != nil {
			return rep, err
		}
	}
	rep.Archived = len(needed)
	rep.Dropped = int(max(cut, first)-first) + len(archivedBelow(archives, first)) - len(needed)

	// 2. A snapshot at the end of the log, so replay never needs what goes.
	if _, err := snapshot.Write(snapDir, st.LastIndex(), st.Encode(nil)); err != nil {
		return rep, err
	}
	if err := snapshot.Prune(snapDir, 2); err != nil {
		return rep, err
	}
	// 3. The log's front.
	if _, err := l.TruncateFront(cut); err != nil {
		return rep, err
	}
	// 4. The archives the new one supersedes.
	for _, a := range archives {
		if a.Path() != arcPath || len(needed) == 0 {
			a.Close()
			if err := os.Remove(a.Path()); err != nil && !errors.Is(err, os.ErrNotExist) {
				return rep, err
			}
		}
	}
	archives = nil
	rep.Cut = cut
	rep.BytesAfter = dirSize(e.Dir)
	return rep, nil
}

// archivedBelow lists the indexes the archives hold below the log's first
// index (a record also in the log is the log's), without duplicates.
func archivedBelow(archives []*log.Archive, first uint64) []uint64 {
	var out []uint64
	for _, a := range archives {
		for _, idx := range a.Indexes() {
			if idx < first {
				out = append(out, idx)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// retainHistory writes every record the compaction drops (the dead ones
// below cut, from the archives and the log) to an archive in dir, named
// after the entity and the index range, and returns its path ("" when
// nothing is dropped).
func retainHistory(l *log.Log, archives []*log.Archive, needed []projection.Ref, cut uint64, e EntityDir, dir string) (string, error) {
	keep := make(map[uint64]bool, len(needed))
	for _, r := range needed {
		keep[r.Index] = true
	}
	first := l.FirstIndex()
	from, to := uint64(0), uint64(0)
	var dropped []uint64
	for _, idx := range archivedBelow(archives, first) {
		if !keep[idx] {
			dropped = append(dropped, idx)
		}
	}
	switch {
	case len(dropped) > 0:
		from = dropped[0]
	case first < cut:
		from = first
	default:
		return "", nil
	}
	to = max(cut, first) - 1
	if len(dropped) > 0 && first >= cut {
		to = dropped[len(dropped)-1]
	}
	entityDir := RetainedDir(dir, e.ID)
	if err := log.MkdirAllDurable(entityDir, 0o750); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(entityDir, RetainedNameFile), []byte(e.Name+"\n"), 0o640); err != nil {
		return "", err
	}
	// Two compactions can drop the same range (the second one only a
	// record the first kept because it was live then); the history of the
	// first must stay, so a name in use gets a number.
	path := filepath.Join(entityDir, fmt.Sprintf("history-%020d-%020d.wba", from, to))
	for n := 2; exists(path); n++ {
		path = filepath.Join(entityDir, fmt.Sprintf("history-%020d-%020d-%d.wba", from, to, n))
	}
	w, err := log.CreateArchive(path)
	if err != nil {
		return "", err
	}
	var buf []byte
	add := func(ev *event.Event) error {
		buf = event.AppendRecord(buf[:0], ev)
		return w.Add(buf)
	}
	for _, idx := range dropped {
		ev, ok, err := log.ReadArchived(archives, idx)
		if err == nil && !ok {
			err = errors.New("in no archive")
		}
		if err == nil {
			err = add(&ev)
		}
		if err != nil {
			w.Abort()
			return "", fmt.Errorf("record %d: %w", idx, err)
		}
	}
	if first < cut {
		err = l.Scan(first, func(ev *event.Event) error {
			if ev.Index >= cut {
				return errStop
			}
			if keep[ev.Index] {
				return nil
			}
			return add(ev)
		})
		if err != nil && !errors.Is(err, errStop) {
			w.Abort()
			return "", err
		}
	}
	if w.Len() == 0 {
		w.Abort()
		return "", nil
	}
	return path, w.Commit()
}

var errStop = errors.New("stop")

func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
