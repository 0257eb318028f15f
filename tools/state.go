package tools

import (
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/snapshot"
)

// Rebuilt is an entity's projection rebuilt offline, as the server would
// rebuild it, up to a point.
type Rebuilt struct {
	Entity   EntityInfo
	State    *projection.Entity
	Snapshot uint64 // index of the snapshot it started from; 0 for none
	Replayed int    // events applied after the snapshot
	// Reached is false when the log ends (or stops being readable) before
	// the point asked for.
	Reached bool
	// Damaged is set when damage in the log stopped the rebuild early (not
	// a torn tail, which the server cuts too: the state is then the
	// server's).
	Damaged bool
	Notes   []string // snapshots skipped, damage met, groups dropped
	recs    *records
}

// Close releases the log and archives the rebuild kept open for reading
// records.
func (r *Rebuilt) Close() { r.recs.close() }

// Rebuild rebuilds the projection of entity as it stood at point at (unset:
// the end of the log): the newest usable snapshot at or before the point,
// then the log after it. Like the server it leaves out a trailing atomic
// group that never completed, and stops at damage.
func Rebuild(data, entity string, at Point) (*Rebuilt, error) {
	info, recs, err := findEntityRecords(data, entity, "")
	if err != nil {
		return nil, err
	}
	r := &Rebuilt{Entity: info, recs: recs}
	for _, p := range recs.problems {
		r.notef("%s", p)
	}
	if err := r.run(at); err != nil {
		recs.close()
		return nil, err
	}
	return r, nil
}

func (r *Rebuilt) notef(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

func (r *Rebuilt) run(at Point) error {
	ro := r.recs.ro
	first, last := firstIndex(ro), tailIndex(ro)
	st := r.pickSnapshot(at, first, last)
	if st == nil {
		if first > 1 && !at.IsZero() {
			compacted := ""
			if len(r.recs.held) > 0 {
				compacted = " (walbus compact moved the history before it out of the log)"
			}
			return fmt.Errorf("%s: the log starts at index %d and no usable snapshot at or before %s covers the events before it%s", r.Entity.Name, first, at, compacted)
		}
		if first > 1 {
			return fmt.Errorf("%s: the log starts at index %d and no usable snapshot covers the events before it", r.Entity.Name, first)
		}
		st = projection.New()
	}
	r.State = st
	if at.Index != 0 && at.Index <= st.LastIndex() {
		r.Reached = true
		return nil
	}
	var pending []event.Event // an atomic group still open
	var seen uint64
	apply := func(ev *event.Event) {
		if err := safeApply(st, ev); err != nil {
			r.notef("index %d does not apply: %v", ev.Index, err)
		}
		r.Replayed++
	}
	dmg, err := readLog(ro, st.LastIndex()+1, at.Index, func(ev *event.Event, _ string) error {
		if !at.notAfter(ev) {
			r.Reached = true
			return errStop
		}
		seen = ev.Index
		if ev.Flags&event.FlagContinued == 0 && len(pending) == 0 {
			apply(ev)
			return nil
		}
		pending = append(pending, cloneEvent(ev))
		if ev.Flags&event.FlagContinued == 0 {
			for i := range pending {
				apply(&pending[i])
			}
			pending = pending[:0]
		}
		return nil
	})
	if err != nil {
		return err
	}
	if at.Index != 0 && seen == at.Index {
		r.Reached = true
	}
	if r.Reached {
		// The group goes on after the point: a point-in-time view shows
		// what the log held then.
		for i := range pending {
			apply(&pending[i])
		}
	} else if len(pending) > 0 {
		r.notef("records %d-%d are an unfinished atomic group: left out, as the server drops them on open",
			pending[0].Index, pending[len(pending)-1].Index)
	}
	if dmg != nil {
		r.Damaged = !dmg.Tail // a torn tail is cut by the server too
		r.notef("the log is unreadable from index %d: %v", dmg.Index, dmg)
	}
	if !r.Reached && !at.IsZero() {
		r.notef("the log ends before %s: this is the state at its end", at)
	}
	if at.IsZero() {
		r.Reached = true
	}
	return nil
}

// pickSnapshot returns the newest snapshot at or before at that fits the log
// (first..last) and reads back, or nil.
func (r *Rebuilt) pickSnapshot(at Point, first, last uint64) *projection.Entity {
	infos, err := snapshot.List(r.Entity.SnapshotDir())
	if err != nil {
		r.notef("snapshots unreadable: %v", err)
		return nil
	}
	for _, info := range infos {
		if at.Index != 0 && info.Index > at.Index {
			continue
		}
		if info.Index+1 < first || info.Index > last {
			r.notef("snapshot %d skipped: it does not fit the log (indexes %d-%d)", info.Index, first, last)
			continue
		}
		st, err := loadSnapshot(info)
		if err != nil {
			r.notef("snapshot %d skipped: %v", info.Index, err)
			continue
		}
		if at.Time != 0 && st.LastTime() > at.Time {
			continue
		}
		r.Snapshot = info.Index
		return st
	}
	return nil
}

// tailIndex is the last index of the valid records of the last segment, the
// end the server's snapshot check compares with; 0 for an empty log.
func tailIndex(ro *log.ReadOnly) uint64 {
	segs := ro.Segments()
	if len(segs) == 0 {
		return 0
	}
	s := segs[len(segs)-1]
	last := s.First - 1
	ro.WalkSegment(s.First, func(rec log.RecordInfo) error {
		last = rec.Event.Index
		return nil
	})
	return last
}

// cloneEvent copies ev so it outlives the walk that read it.
func cloneEvent(ev *event.Event) event.Event {
	c := *ev
	c.Props = slices.Clone(ev.Props)
	c.Message = slices.Clone(ev.Message)
	c.State = slices.Clone(ev.State)
	return c
}

// StateOptions shape a state report.
type StateOptions struct {
	At  Point
	Max int // locks and sessions listed per queue; 0 for 20
}

// StateReport is an entity's projection at a point, for people and machines.
type StateReport struct {
	Entity   string        `json:"entity"`
	At       string        `json:"at"`    // the point asked for, or "end"
	Index    uint64        `json:"index"` // the last event applied
	Time     string        `json:"time"`  // its timestamp
	AsOf     string        `json:"as_of"` // the time ages are measured at
	Snapshot uint64        `json:"snapshot"`
	Replayed int           `json:"replayed"`
	Queues   []QueueReport `json:"queues"`
	Notes    []string      `json:"notes,omitempty"`
	// Damaged: the log is unreadable before the point, so this is the
	// state where it stops being readable.
	Damaged bool `json:"damaged,omitempty"`
}

// QueueReport is one queue of a StateReport.
type QueueReport struct {
	Queue        string          `json:"queue"`
	Subscription string          `json:"subscription,omitempty"` // a topic's queue: whose it is
	Available    uint64          `json:"available"`
	Locked       uint64          `json:"locked"`
	Deferred     uint64          `json:"deferred"`
	Scheduled    uint64          `json:"scheduled"`
	Total        uint64          `json:"total"`
	Oldest       *MessageReport  `json:"oldest,omitempty"`
	LockCount    int             `json:"lock_count"`
	Locks        []LockReport    `json:"locks,omitempty"` // up to StateOptions.Max
	Sessions     []SessionReport `json:"sessions,omitempty"`
	// SessionCount is the number of sessions known; -1 for a queue
	// without sessions.
	SessionCount int `json:"session_count"`
}

// MessageReport describes one message.
type MessageReport struct {
	Seq        uint64 `json:"seq"`
	MessageID  string `json:"message_id,omitempty"`
	SessionID  string `json:"session_id,omitempty"`
	State      string `json:"state"`
	Deliveries int    `json:"deliveries"`
	EnqueuedAt string `json:"enqueued_at,omitempty"`
	Age        string `json:"age,omitempty"`
	Problem    string `json:"problem,omitempty"` // its record could not be read
	// Archive names the archive its record was read from, when compaction
	// moved it out of the log.
	Archive string `json:"archive,omitempty"`
}

// LockReport is one message lock.
type LockReport struct {
	Seq      uint64 `json:"seq"`
	Receiver string `json:"receiver"`
	Until    string `json:"until"`
	Token    string `json:"token"`
}

// SessionReport is one session.
type SessionReport struct {
	ID          string `json:"id"`
	Owner       string `json:"owner,omitempty"`
	LockedUntil string `json:"locked_until,omitempty"`
	Messages    int    `json:"messages"`
	StateSize   int    `json:"state_size"`
}

// State rebuilds entity at opts.At and describes it.
func State(data, entity string, opts StateOptions) (*StateReport, error) {
	r, err := Rebuild(data, entity, opts.At)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Report(opts), nil
}

// Report describes the rebuilt state.
func (r *Rebuilt) Report(opts StateOptions) *StateReport {
	if opts.Max <= 0 {
		opts.Max = 20
	}
	st := r.State
	asOf := st.LastTime()
	if opts.At.Time != 0 && r.Reached {
		asOf = opts.At.Time
	}
	rep := &StateReport{Entity: r.Entity.Name, At: opts.At.String(), Index: st.LastIndex(), Time: formatTime(st.LastTime()),
		AsOf: formatTime(asOf), Snapshot: r.Snapshot, Replayed: r.Replayed, Notes: r.Notes, Damaged: r.Damaged}
	for _, no := range st.QueueNumbers() {
		q := st.Queue(no)
		// A transfer dead-letter queue is nearly always empty: shown only
		// when it is not. A topic's own queues hold only its scheduled
		// messages.
		if q == nil || event.KindOf(no) == event.KindTransferDeadLetter && q.Counts().Total == 0 ||
			st.IsTopic() && no < event.QueueGroup && q.Counts().Total == 0 {
			continue
		}
		qr := r.queueReport(q, asOf, opts.Max)
		if s := st.SubscriptionOf(no); s != nil {
			qr.Subscription = s.Name()
		}
		rep.Queues = append(rep.Queues, qr)
	}
	return rep
}

func (r *Rebuilt) queueReport(q *projection.Queue, asOf int64, max int) QueueReport {
	c := q.Counts()
	qr := QueueReport{Queue: QueueName(q.No), Available: c.Available, Locked: c.Locked, Deferred: c.Deferred,
		Scheduled: c.Scheduled, Total: c.Total, SessionCount: -1}
	if oldest := q.Peek(0, 1, math.MaxUint64); len(oldest) == 1 {
		m := r.message(q, oldest[0], asOf)
		qr.Oldest = &m
	}
	if c.Locked > 0 {
		for _, seq := range q.Peek(0, math.MaxInt, math.MaxUint64) {
			lk, ok := q.Lock(seq)
			if !ok {
				continue
			}
			qr.LockCount++
			if len(qr.Locks) < max {
				qr.Locks = append(qr.Locks, LockReport{Seq: seq, Receiver: lk.Receiver, Until: formatTime(lk.Until),
					Token: FormatToken(lk.Token)})
			}
		}
	}
	if ss := q.Sessions(); ss != nil {
		qr.SessionCount = ss.Len()
		for _, s := range ss.Sorted() {
			if len(qr.Sessions) == max {
				break
			}
			sr := SessionReport{ID: s.ID, Owner: s.Owner, Messages: s.Messages, StateSize: len(s.State)}
			if s.Owner != "" {
				sr.LockedUntil = formatTime(s.LockedUntil)
			}
			qr.Sessions = append(qr.Sessions, sr)
		}
	}
	return qr
}

// message describes message seq of q, reading its record for its ids and
// enqueue time.
func (r *Rebuilt) message(q *projection.Queue, seq uint64, asOf int64) MessageReport {
	m, _ := q.Message(seq)
	mr := MessageReport{Seq: seq, State: m.State.String(), Deliveries: int(m.Deliveries)}
	if m.State == index.Locked && m.Flags&index.FlagDeferred != 0 {
		mr.State = "locked (deferred)"
	}
	ev, from, err := r.recs.read(seq, m.Pos)
	if from != nil {
		mr.Archive = filepath.Base(from.Path())
	}
	if err != nil {
		mr.Problem = err.Error()
		if from != nil {
			mr.Problem = archiveReason(err)
		}
		return mr
	}
	mr.MessageID, mr.SessionID = ev.MessageID, ev.SessionID
	mr.EnqueuedAt = formatTime(ev.Time)
	mr.Age = time.Duration(asOf - ev.Time).String()
	return mr
}

// WriteText prints the report for people.
func (rep *StateReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "entity %s at %s: index %d (%s)", rep.Entity, rep.At, rep.Index, rep.Time)
	if rep.Snapshot != 0 {
		fmt.Fprintf(&b, ", from snapshot %d + %d events\n", rep.Snapshot, rep.Replayed)
	} else {
		fmt.Fprintf(&b, ", from the log (%d events)\n", rep.Replayed)
	}
	fmt.Fprintf(&b, "%-6s %10s %10s %10s %10s %10s\n", "queue", "available", "locked", "deferred", "scheduled", "total")
	for _, q := range rep.Queues {
		fmt.Fprintf(&b, "%-6s %10d %10d %10d %10d %10d\n", q.label(), q.Available, q.Locked, q.Deferred, q.Scheduled, q.Total)
	}
	for _, q := range rep.Queues {
		if m := q.Oldest; m != nil {
			fmt.Fprintf(&b, "%s: oldest message seq %d", q.label(), m.Seq)
			if m.MessageID != "" {
				fmt.Fprintf(&b, " id %s", quoteIfNeeded(m.MessageID))
			}
			if m.SessionID != "" {
				fmt.Fprintf(&b, " session %s", sessionText(m.SessionID))
			}
			if m.Archive != "" {
				fmt.Fprintf(&b, " (archived in %s)", m.Archive)
			}
			fmt.Fprintf(&b, ", %s, %s", m.State, plural(m.Deliveries, "failed delivery"))
			if m.Problem != "" {
				fmt.Fprintf(&b, ", record unreadable: %s\n", m.Problem)
			} else {
				fmt.Fprintf(&b, ", enqueued %s, age %s (as of %s)\n", m.EnqueuedAt, m.Age, rep.AsOf)
			}
		}
		if q.LockCount > 0 {
			fmt.Fprintf(&b, "%s: %s held\n", q.label(), plural(q.LockCount, "lock"))
			tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  seq\treceiver\tuntil\ttoken")
			for _, lk := range q.Locks {
				fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", lk.Seq, lk.Receiver, lk.Until, lk.Token)
			}
			tw.Flush()
			if more := q.LockCount - len(q.Locks); more > 0 {
				fmt.Fprintf(&b, "  ... and %d more\n", more)
			}
		}
		if q.SessionCount > 0 {
			fmt.Fprintf(&b, "%s: %s\n", q.label(), plural(q.SessionCount, "session"))
			tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  id\towner\tlocked until\tmessages\tstate")
			for _, s := range q.Sessions {
				owner, until := s.Owner, s.LockedUntil
				if owner == "" {
					owner, until = "-", "-"
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%dB\n", sessionText(s.ID), owner, until, s.Messages, s.StateSize)
			}
			tw.Flush()
			if more := q.SessionCount - len(q.Sessions); more > 0 {
				fmt.Fprintf(&b, "  ... and %d more\n", more)
			}
		}
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// label names the queue for people: a subscription's by its name
// ("red", "red/dlq").
func (q QueueReport) label() string {
	if q.Subscription == "" {
		return q.Queue
	}
	if i := strings.IndexByte(q.Queue, '/'); i >= 0 {
		return q.Subscription + q.Queue[i:]
	}
	return q.Subscription
}
