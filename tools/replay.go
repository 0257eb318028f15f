package tools

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/snapshot"
)

// ReplayOptions select what Replay prints.
type ReplayOptions struct {
	Entity   string       // one entity; "" for the namespace log, then every entity
	From, To Point        // bounds, inclusive; an index bound applies to each log
	Types    []event.Type // only these event types; empty for all
	JSON     bool         // JSON lines instead of a table
	Bodies   bool         // include a preview of message bodies
	BodyMax  int          // bytes of body to preview; 0 for DefaultBodyMax
	// Retained is a directory `walbus compact --retain` wrote history to:
	// the records the compactions dropped are replayed too, in their place.
	Retained string
	// Diag receives notes about damage and unfinished atomic groups; nil
	// discards them.
	Diag io.Writer
}

// Replay prints every event of the logs of the data directory data in log
// order. For an entity compacted by `walbus compact`, the records kept in
// its archives below the log's start come first, in index order (with
// Retained, the history the compactions dropped too). It reads every log as
// far as it is readable and returns an error naming the logs it could not
// read to the end.
func Replay(w io.Writer, data string, opts ReplayOptions) error {
	cat, err := ReadCatalog(data)
	if err != nil {
		return err
	}
	if opts.Diag == nil {
		opts.Diag = io.Discard
	}
	bw := bufio.NewWriter(w)
	defer bw.Flush()
	var errs []error
	if opts.Entity == "" {
		if err := replayNamespace(bw, data, opts); err != nil {
			errs = append(errs, err)
		}
		for _, e := range cat.Live() {
			if err := replayEntity(bw, data, e, opts); err != nil {
				errs = append(errs, err)
			}
		}
	} else {
		e, err := cat.Find(opts.Entity)
		if err != nil {
			return err
		}
		if err := replayEntity(bw, data, e, opts); err != nil {
			errs = append(errs, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

func replayNamespace(w *bufio.Writer, data string, opts ReplayOptions) error {
	dir := layout.NamespaceLog(data)
	recs, err := logRecords(NamespaceLabel, dir)
	if err != nil {
		return fmt.Errorf("%s: %w", NamespaceLabel, err)
	}
	defer recs.close()
	return replayLog(w, data, dir, "", recs, opts)
}

func replayEntity(w *bufio.Writer, data string, e EntityInfo, opts ReplayOptions) error {
	recs, err := entityRecords(e, opts.Retained)
	if err != nil {
		return fmt.Errorf("%s: %w", e.Name, err)
	}
	defer recs.close()
	return replayLog(w, data, e.LogDir(), e.SnapshotDir(), recs, opts)
}

// replayLog prints one log, after the records its entity keeps outside it.
// For an entity log (snapDir set) it keeps the projection alongside, so it
// can say each message's delivery count.
func replayLog(w *bufio.Writer, data, dir, snapDir string, recs *records, opts ReplayOptions) error {
	label := recs.label
	var errs []error
	for _, p := range recs.problems {
		fmt.Fprintf(opts.Diag, "%s: %s\n", label, p)
		errs = append(errs, fmt.Errorf("%s: %s", label, p))
	}

	var st *projection.Entity
	from := uint64(1)
	if opts.From.Index != 0 {
		from = opts.From.Index
	}
	gapEnd := recs.lastGap()
	if snapDir != "" {
		var before bool
		st, before = trackingBase(snapDir, gapEnd, opts.From)
		if st != nil && (before || st.LastIndex() < from) {
			from = st.LastIndex() + 1
		}
	}
	countsFrom := uint64(0) // the first index with a delivery count; 0: none
	if st != nil {
		countsFrom = st.LastIndex() + 1
	}
	headed, stopped, gapNoted := false, false, false
	var groupStart, groupEnd uint64 // a trailing run of records whose group continues
	unreadable := 0
	bad := func(h heldRecord, err error) {
		unreadable++
		fmt.Fprintf(opts.Diag, "%s: record %d in %s does not read back: %s\n", label, h.index, filepath.Base(h.from.Path()), archiveReason(err))
		if st != nil && h.index > st.LastIndex() {
			fmt.Fprintf(opts.Diag, "%s: delivery counts are not shown after index %d, which is missing\n", label, h.index)
			st = nil
		}
	}
	dmg, err := recs.walk(from, opts.To.Index, func(ev *event.Event, source string) error {
		if !opts.To.notAfter(ev) {
			stopped = true
			return errStop
		}
		var group uint64 // the records of its group before it, for a commit
		if source == SourceLog && ev.Flags&event.FlagContinued != 0 {
			if groupStart == 0 {
				groupStart = ev.Index
			}
			groupEnd = ev.Index
		} else {
			if groupStart != 0 {
				group = ev.Index - groupStart
			}
			groupStart = 0
		}
		c := eventContext{label: label, source: source, deliveries: -1, bodies: opts.Bodies, bodyMax: opts.BodyMax}
		if ev.Type == event.Committed {
			c.group = group
		}
		if st != nil && ev.Index > st.LastIndex() {
			before := deliveriesOf(st, ev)
			if err := safeApply(st, ev); err != nil {
				fmt.Fprintf(opts.Diag, "%s: index %d does not apply (%v); delivery counts are not shown after it\n", label, ev.Index, err)
				st = nil
			} else if after := deliveriesOf(st, ev); after >= 0 {
				c.deliveries = after
			} else {
				c.deliveries = before
			}
		}
		if !opts.From.notBefore(ev) || len(opts.Types) > 0 && !slices.Contains(opts.Types, ev.Type) {
			return nil
		}
		if !gapNoted && len(recs.held) > 0 && gapEnd != 0 && (countsFrom == 0 || ev.Index < countsFrom) {
			// Say once why indexes are missing and the counts start late
			// (or not at all): compaction dropped history.
			gapNoted = true
			gaps := recs.gaps()
			counts := "delivery counts are not shown"
			if countsFrom != 0 {
				counts = fmt.Sprintf("delivery counts are shown from index %d on", countsFrom)
			}
			hint := ""
			if opts.Retained == "" {
				hint = " (--retained DIR reads the history `walbus compact --retain DIR` kept)"
			}
			fmt.Fprintf(opts.Diag, "%s: %d records below index %d were compacted away (the last at %d): %s%s\n",
				label, missing(gaps), recs.first, gapEnd, counts, hint)
		}
		if opts.JSON {
			b, err := json.Marshal(eventRecord(ev, c))
			if err != nil {
				return err
			}
			w.Write(b)
			return w.WriteByte('\n')
		}
		if !headed {
			headed = true
			fmt.Fprintf(w, "# %s (%s)\n%s\n", label, relPath(data, dir), textHeader)
		}
		_, err := fmt.Fprintln(w, textLine(ev, c))
		return err
	}, bad)
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	if unreadable > 0 {
		errs = append(errs, fmt.Errorf("%s: %s do not read back", label, plural(unreadable, "archived record")))
	}
	if dmg != nil {
		fmt.Fprintf(opts.Diag, "%s: the log reads only up to index %d: %v\n", label, dmg.Index-1, dmg)
		errs = append(errs, fmt.Errorf("%s: %w", label, dmg))
	} else if groupStart != 0 && !stopped && (opts.To.Index == 0 || groupEnd < opts.To.Index) {
		fmt.Fprintf(opts.Diag, "%s: records %d-%d are an unfinished atomic group: the server drops them on open\n",
			label, groupStart, groupEnd)
	}
	return errors.Join(errs...)
}

// trackingBase is the projection replay starts from to derive delivery
// counts: the newest snapshot before from (so a replay of the end of a long
// log reads only the end), else the state before the first record of a
// history without gaps: empty for a history that starts at 1, or the
// oldest snapshot after the last index missing (gapEnd: dropped by
// compaction, or truncated from the log's front). before reports a
// snapshot before from; nil when there is none at all.
func trackingBase(snapDir string, gapEnd uint64, from Point) (st *projection.Entity, before bool) {
	infos, _ := snapshot.List(snapDir)
	if !from.IsZero() {
		for _, info := range infos { // newest first
			if info.Index < gapEnd || from.Index != 0 && info.Index >= from.Index {
				continue
			}
			if st, err := loadSnapshot(info); err == nil && (from.Time == 0 || st.LastTime() < from.Time) {
				return st, true
			}
		}
	}
	if gapEnd == 0 {
		return projection.New(), false
	}
	for i := len(infos) - 1; i >= 0; i-- { // oldest first
		if infos[i].Index < gapEnd {
			continue
		}
		if st, err := loadSnapshot(infos[i]); err == nil {
			return st, false
		}
	}
	return nil, false
}

// loadSnapshot reads and decodes one snapshot, checking that the state is
// at the snapshot's index.
func loadSnapshot(info snapshot.Info) (st *projection.Entity, err error) {
	defer func() {
		if r := recover(); r != nil {
			st, err = nil, fmt.Errorf("decoding panicked: %v", r)
		}
	}()
	raw, err := snapshot.Read(info)
	if err != nil {
		return nil, err
	}
	st, err = projection.Decode(raw)
	if err != nil {
		return nil, err
	}
	if st.LastIndex() != info.Index {
		return nil, fmt.Errorf("state is at index %d, the file says %d", st.LastIndex(), info.Index)
	}
	return st, nil
}

// safeApply applies ev to st, turning a panic (a projection bug met by
// strange input) into an error: the tools must survive any log.
func safeApply(st *projection.Entity, ev *event.Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("apply panicked: %v", r)
		}
	}()
	return st.Apply(ev)
}

// deliveriesOf is the delivery count of the message ev is about, looked up
// in its queue and then in the dead-letter queue, or -1 if it is in neither.
func deliveriesOf(st *projection.Entity, ev *event.Event) int {
	seq := seqOf(ev)
	if seq == 0 || isNamespaceType(ev.Type) {
		return -1
	}
	for _, no := range []uint32{ev.Queue, ev.Queue | 1} {
		if q := st.Queue(no); q != nil {
			if m, ok := q.Message(seq); ok {
				return int(m.Deliveries)
			}
		}
	}
	return -1
}

// relPath shows dir relative to the data directory when it is inside it.
func relPath(data, dir string) string {
	if rel, err := filepath.Rel(data, dir); err == nil && !strings.HasPrefix(rel, "..") {
		return filepath.ToSlash(rel)
	}
	return dir
}
