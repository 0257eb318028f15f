package tools

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
	"github.com/walbus/walbus/tools/compaction"
)

// Where a record was read from: replay's source field.
const (
	SourceLog      = "log"      // the entity's log
	SourceArchive  = "archive"  // an archive compaction moved still-needed records into
	SourceRetained = "retained" // history a compaction dropped and kept with --retain
)

// records reads an entity's records wherever they are after compactions:
// its log; below the log's first index, its archives (the records the state
// still needs); and, if asked for, the history `walbus compact --retain`
// kept for it. Every record is read once, by index: the log's copy for the
// indexes the log holds, else an archive's, else the retained history's.
type records struct {
	label    string
	ro       *log.ReadOnly
	first    uint64         // the log's first index; 0 for a log without segments
	archives []*log.Archive // the entity's, newest first, as the server orders them
	retained []*log.Archive // retained history files, newest first
	held     []heldRecord   // the records kept outside the log below first, in index order
	problems []string       // archives and history files that could not be opened
}

// heldRecord is a record below the log's first index and where it is.
type heldRecord struct {
	index  uint64
	from   *log.Archive
	source string // SourceArchive or SourceRetained
}

// logRecords reads the log in dir alone (the namespace log).
func logRecords(label, dir string) (*records, error) {
	ro, err := log.OpenReadOnly(dir)
	if err != nil {
		return nil, err
	}
	return &records{label: label, ro: ro, first: firstIndex(ro)}, nil
}

// findEntityRecords finds the live entity called name in the data
// directory data and opens its records (see entityRecords).
func findEntityRecords(data, name, retained string) (EntityInfo, *records, error) {
	cat, err := ReadCatalog(data)
	if err != nil {
		return EntityInfo{}, nil, err
	}
	info, err := cat.Find(name)
	if err != nil {
		return EntityInfo{}, nil, err
	}
	recs, err := entityRecords(info, retained)
	if err != nil {
		return EntityInfo{}, nil, fmt.Errorf("%s: %w", info.Name, err)
	}
	return info, recs, nil
}

// entityRecords opens entity e's log and archives and, if retained is not
// empty, its history in that directory (see compaction.RetainedDir).
// Archives that do not open are listed in problems and left out.
func entityRecords(e EntityInfo, retained string) (*records, error) {
	r, err := logRecords(e.Name, e.LogDir())
	if err != nil {
		return nil, err
	}
	r.archives = r.openAll(layout.ArchiveDir(e.Dir), "*.wba", "archive")
	if retained != "" {
		dir := compaction.RetainedDir(retained, e.ID)
		if err := checkRetainedName(dir, e.Name); err != nil {
			r.close()
			return nil, err
		}
		r.retained = r.openAll(dir, compaction.RetainedGlob, "retained history")
	}
	held := map[uint64]heldRecord{}
	for _, set := range []struct {
		archives []*log.Archive
		source   string
	}{{r.archives, SourceArchive}, {r.retained, SourceRetained}} {
		for _, a := range set.archives {
			for _, idx := range a.Indexes() {
				if _, ok := held[idx]; !ok && (r.first == 0 || idx < r.first) {
					held[idx] = heldRecord{index: idx, from: a, source: set.source}
				}
			}
		}
	}
	for _, idx := range slices.Sorted(mapKeys(held)) {
		r.held = append(r.held, held[idx])
	}
	return r, nil
}

// checkRetainedName refuses retained history recorded for another entity
// (entity ids are only unique within one data directory).
func checkRetainedName(dir, name string) error {
	b, err := os.ReadFile(filepath.Join(dir, compaction.RetainedNameFile))
	if err != nil {
		return nil // no history kept for the entity, or no name to compare
	}
	if kept := strings.TrimSuffix(string(b), "\n"); !strings.EqualFold(kept, name) {
		return fmt.Errorf("retained history %s is for entity %q, not %q: is it from another data directory?", dir, kept, name)
	}
	return nil
}

// openAll opens the archives in dir whose names match pattern, newest
// (highest name) first.
func (r *records) openAll(dir, pattern, what string) []*log.Archive {
	paths, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil {
		return nil
	}
	slices.Sort(paths)
	slices.Reverse(paths)
	var out []*log.Archive
	for _, p := range paths {
		a, err := log.OpenArchive(p)
		if err != nil {
			r.problems = append(r.problems, fmt.Sprintf("%s %s unreadable: %s", what, filepath.Base(p), archiveReason(err)))
			continue
		}
		out = append(out, a)
	}
	return out
}

// archiveReason is what went wrong with an archive, without the location
// the caller states anyway.
func archiveReason(err error) string {
	var cerr *log.Damage
	if errors.As(err, &cerr) {
		return cerr.Reason
	}
	var perr *os.PathError
	if errors.As(err, &perr) {
		return perr.Err.Error()
	}
	return err.Error()
}

func (r *records) close() {
	r.ro.Close()
	for _, a := range r.archives {
		a.Close()
	}
	for _, a := range r.retained {
		a.Close()
	}
}

// walk calls fn for every record with from <= index <= to (to 0: no
// bound), in index order: those kept outside the log below its first index,
// then the log's. A held record that does not read back goes to bad and is
// skipped. Damage in the log stops the walk as in readLog, and an error fn
// returns is returned (errStop ends the walk quietly).
func (r *records) walk(from, to uint64, fn func(ev *event.Event, source string) error, bad func(h heldRecord, err error)) (*log.Damage, error) {
	for _, h := range r.held {
		if h.index < from {
			continue
		}
		if to != 0 && h.index > to {
			return nil, nil
		}
		ev, err := h.from.Read(h.index)
		if err != nil {
			if bad != nil {
				bad(h, err)
			}
			continue
		}
		if err := fn(&ev, h.source); err != nil {
			if errors.Is(err, errStop) {
				return nil, nil
			}
			return nil, err
		}
	}
	return readLog(r.ro, from, to, func(ev *event.Event, _ string) error { return fn(ev, SourceLog) })
}

// read returns the record at index, which the state says sits at pos in the
// log, the way the server reads it (broker's Entity.record): from the
// newest archive holding it when it is at or before the log's first index
// (the log's first record after a compaction has a stale position), else
// from the log. from is the archive read, nil for the log.
func (r *records) read(index uint64, pos event.Position) (ev event.Event, from *log.Archive, err error) {
	if index <= r.first {
		for _, a := range r.archives {
			if a.Has(index) {
				ev, err = a.Read(index)
				return ev, a, err
			}
		}
		if index < r.first {
			return event.Event{}, nil, fmt.Errorf("record %d is before the log (which starts at %d) and in no archive", index, r.first)
		}
	}
	ev, err = r.ro.ReadAt(index, pos)
	return ev, nil, err
}

// indexRange is a run of indexes, both ends included.
type indexRange struct{ from, to uint64 }

func (g indexRange) String() string {
	if g.from == g.to {
		return fmt.Sprint(g.from)
	}
	return fmt.Sprintf("%d-%d", g.from, g.to)
}

func (g indexRange) len() uint64 { return g.to - g.from + 1 }

// gaps lists the indexes below the log's first index that no source holds:
// history compacted away, or truncated by the server behind its snapshots.
func (r *records) gaps() []indexRange {
	var out []indexRange
	next := uint64(1)
	for _, h := range r.held {
		if h.index > next {
			out = append(out, indexRange{next, h.index - 1})
		}
		next = h.index + 1
	}
	if r.first > next {
		out = append(out, indexRange{next, r.first - 1})
	}
	return out
}

// lastGap is the highest index no source holds below the log's first
// index, 0 when the history is whole: a projection replayed alongside must
// start after it.
func (r *records) lastGap() uint64 {
	gaps := r.gaps()
	if len(gaps) == 0 {
		return 0
	}
	return gaps[len(gaps)-1].to
}

// missing sums the lengths of gaps.
func missing(gaps []indexRange) uint64 {
	var n uint64
	for _, g := range gaps {
		n += g.len()
	}
	return n
}
