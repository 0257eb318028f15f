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

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/snapshot"
)

// ReplayOptions select what Replay prints.
type ReplayOptions struct {
	Entity   string     // one entity; "" for the namespace log, then every entity
	From, To Point      // bounds, inclusive; an index bound applies to each log
	Types    []log.Type // only these event types; empty for all
	JSON     bool       // JSON lines instead of a table
	Bodies   bool       // include a preview of message bodies
	BodyMax  int        // bytes of body to preview; 0 for DefaultBodyMax
	// Diag receives notes about damage and unfinished atomic groups; nil
	// discards them.
	Diag io.Writer
}

// Replay prints every event of the logs of the data directory data in log
// order. It reads every log as far as it is readable and returns an error
// naming the logs it could not read to the end.
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
		if err := replayLog(bw, NamespaceLabel, data, filepath.Join(data, namespaceDir), "", opts); err != nil {
			errs = append(errs, err)
		}
		for _, e := range cat.Live() {
			if err := replayLog(bw, e.Name, data, e.LogDir(), e.SnapshotDir(), opts); err != nil {
				errs = append(errs, err)
			}
		}
	} else {
		e, err := cat.Find(opts.Entity)
		if err != nil {
			return err
		}
		if err := replayLog(bw, e.Name, data, e.LogDir(), e.SnapshotDir(), opts); err != nil {
			errs = append(errs, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// replayLog prints one log. For an entity log (snapDir set) it keeps the
// projection alongside, so it can say each message's delivery count.
func replayLog(w *bufio.Writer, label, data, dir, snapDir string, opts ReplayOptions) error {
	ro, err := log.OpenReadOnly(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	defer ro.Close()

	var st *projection.Entity
	from := uint64(1)
	if opts.From.Index != 0 {
		from = opts.From.Index
	}
	if snapDir != "" {
		var before bool
		st, before = trackingBase(ro, snapDir, opts.From)
		if st != nil && (before || st.LastIndex() < from) {
			from = st.LastIndex() + 1
		}
	}
	headed, stopped := false, false
	var groupStart, groupEnd uint64 // a trailing run of records whose group continues
	dmg, err := readLog(ro, from, opts.To.Index, func(ev *log.Event, _ string) error {
		if !opts.To.notAfter(ev) {
			stopped = true
			return errStop
		}
		if ev.Flags&log.FlagContinued != 0 {
			if groupStart == 0 {
				groupStart = ev.Index
			}
			groupEnd = ev.Index
		} else {
			groupStart = 0
		}
		c := eventContext{label: label, deliveries: -1, bodies: opts.Bodies, bodyMax: opts.BodyMax}
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
	})
	if err != nil {
		return fmt.Errorf("%s: %w", label, err)
	}
	if dmg != nil {
		fmt.Fprintf(opts.Diag, "%s: the log reads only up to index %d: %v\n", label, dmg.Index-1, dmg)
		return fmt.Errorf("%s: %w", label, dmg)
	}
	if groupStart != 0 && !stopped && (opts.To.Index == 0 || groupEnd < opts.To.Index) {
		fmt.Fprintf(opts.Diag, "%s: records %d-%d are an unfinished atomic group: the server drops them on open\n",
			label, groupStart, groupEnd)
	}
	return nil
}

// trackingBase is the projection replay starts from to derive delivery
// counts: the newest snapshot before from (so a replay of the end of a long
// log reads only the end), else the state before the log's first record:
// empty for a log that starts at 1, or the oldest snapshot the log
// continues. before reports a snapshot before from; nil when there is none
// at all.
func trackingBase(ro *log.ReadOnly, snapDir string, from Point) (st *projection.Entity, before bool) {
	first := firstIndex(ro)
	infos, _ := snapshot.List(snapDir)
	if !from.IsZero() {
		for _, info := range infos { // newest first
			if info.Index+1 < first || from.Index != 0 && info.Index >= from.Index {
				continue
			}
			if st, err := loadSnapshot(info); err == nil && (from.Time == 0 || st.LastTime() < from.Time) {
				return st, true
			}
		}
	}
	if first <= 1 {
		return projection.New(), false
	}
	for i := len(infos) - 1; i >= 0; i-- { // oldest first
		if infos[i].Index+1 < first {
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
func safeApply(st *projection.Entity, ev *log.Event) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("apply panicked: %v", r)
		}
	}()
	return st.Apply(ev)
}

// deliveriesOf is the delivery count of the message ev is about, looked up
// in its queue and then in the dead-letter queue, or -1 if it is in neither.
func deliveriesOf(st *projection.Entity, ev *log.Event) int {
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
