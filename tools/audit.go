package tools

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/walbus/walbus/log"
)

// AuditOptions name the message to audit: by SequenceNumber (any number it
// had: a scheduled message's, or the one its activation gave it), or by
// MessageId (every message that carried it).
type AuditOptions struct {
	Seq       uint64
	MessageID string
}

// Life is the whole recorded life of one message.
type Life struct {
	Entity    string   `json:"entity"`
	Seqs      []uint64 `json:"seqs"` // the numbers it had, oldest first: scheduled, then activated
	MessageID string   `json:"message_id,omitempty"`
	SessionID string   `json:"session_id,omitempty"`
	Size      int      `json:"size"`
	// Outcome is how the life ended: completed, received-and-deleted,
	// dead-lettered (and still in the dead-letter queue), expired,
	// cancelled, or pending (still in its queue).
	Outcome    string   `json:"outcome"`
	State      string   `json:"state,omitempty"` // where a message still in a queue stands
	Deliveries int      `json:"deliveries"`      // failed delivery attempts
	Steps      []Step   `json:"steps"`
	Notes      []string `json:"notes,omitempty"`
	// Incomplete: damage stopped the read of the log, so later steps may
	// be missing.
	Incomplete bool `json:"incomplete,omitempty"`

	// What the steps so far say about the message.
	queue     uint32
	stage     string // scheduled, available, locked, deferred, or "" once it ended
	deferred  bool
	lockUntil int64
	receiver  string
	reason    string
	stepTimes []int64
}

// Step is one event in a message's life.
type Step struct {
	Index         uint64 `json:"index"`
	Time          string `json:"time"`
	SincePrevious string `json:"since_previous"`
	SinceStart    string `json:"since_start"`
	Type          string `json:"type"`
	Queue         string `json:"queue"`
	Seq           uint64 `json:"seq"`
	What          string `json:"what"`
}

// Audit follows messages of entity through its log and returns the life of
// each, in SequenceNumber order.
func Audit(data, entity string, opts AuditOptions) ([]*Life, error) {
	if (opts.Seq == 0) == (opts.MessageID == "") {
		return nil, errors.New("audit needs a SequenceNumber or a MessageId (one of them)")
	}
	cat, err := ReadCatalog(data)
	if err != nil {
		return nil, err
	}
	info, err := cat.Find(entity)
	if err != nil {
		return nil, err
	}
	ro, err := log.OpenReadOnly(info.LogDir())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", info.Name, err)
	}
	defer ro.Close()

	// Pass 1: the activation links (scheduled number -> live number), the
	// messages that match, and the time the log ends.
	activatedAs := map[uint64]uint64{}
	scheduledAs := map[uint64]uint64{}
	var roots []uint64
	var logEnd int64
	dmg, err := readLog(ro, 1, 0, func(ev *log.Event, _ string) error {
		logEnd = ev.Time
		if ev.Type == log.Activated {
			activatedAs[ev.Seq], scheduledAs[ev.Index] = ev.Index, ev.Seq
		}
		if opts.MessageID != "" && hasMessage(ev.Type) && ev.MessageID == opts.MessageID {
			roots = append(roots, ev.Index)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if opts.Seq != 0 {
		roots = []uint64{opts.Seq}
	}
	lives := map[uint64]*Life{} // by every number a message had
	var out []*Life
	for _, seq := range roots {
		for scheduledAs[seq] != 0 {
			seq = scheduledAs[seq]
		}
		if lives[seq] != nil {
			continue // an activation of a message already followed
		}
		l := &Life{Entity: info.Name}
		for ; seq != 0; seq = activatedAs[seq] {
			l.Seqs = append(l.Seqs, seq)
			lives[seq] = l
		}
		out = append(out, l)
	}

	// Pass 2: every event about those messages.
	_, err = readLog(ro, 1, 0, func(ev *log.Event, _ string) error {
		if ev.Type == log.SessionLockRenewed {
			for _, l := range out {
				if l.stage == "locked" && l.SessionID != "" && l.SessionID == ev.SessionID && l.queue == ev.Queue {
					l.step(ev, fmt.Sprintf("session lock renewed until %s (%s), and the message lock with it",
						formatTime(ev.Until), relative(ev.Until, ev.Time)))
					l.lockUntil = ev.Until
				}
			}
			return nil
		}
		seq := seqOf(ev)
		if seq == 0 {
			return nil
		}
		if l := lives[seq]; l != nil {
			l.follow(ev)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var found []*Life
	for _, l := range out {
		if len(l.Steps) == 0 {
			continue
		}
		l.finish(logEnd, firstIndex(ro), dmg)
		found = append(found, l)
	}
	if len(found) == 0 {
		what := fmt.Sprintf("SequenceNumber %d", opts.Seq)
		if opts.MessageID != "" {
			what = fmt.Sprintf("MessageId %q", opts.MessageID)
		}
		if dmg != nil {
			return nil, fmt.Errorf("%s: no message with %s in the readable log (%v)", info.Name, what, dmg)
		}
		return nil, fmt.Errorf("%s: no message with %s in the log", info.Name, what)
	}
	slices.SortFunc(found, func(a, b *Life) int { return cmp.Compare(a.Seqs[0], b.Seqs[0]) })
	return found, nil
}

// step records ev with its description.
func (l *Life) step(ev *log.Event, what string) {
	s := Step{Index: ev.Index, Time: formatTime(ev.Time), Type: ev.Type.String(), Queue: QueueName(ev.Queue),
		Seq: seqOf(ev), What: what}
	if n := len(l.Steps); n == 0 {
		s.SincePrevious, s.SinceStart = "-", "0s"
	} else {
		s.SincePrevious = time.Duration(ev.Time - l.stepTimes[n-1]).String()
		s.SinceStart = time.Duration(ev.Time - l.stepTimes[0]).String()
	}
	l.Steps = append(l.Steps, s)
	l.stepTimes = append(l.stepTimes, ev.Time)
}

// follow applies one event about the message to what is known of it.
func (l *Life) follow(ev *log.Event) {
	until := func(at int64) string { return fmt.Sprintf("%s (%s)", formatTime(at), relative(at, ev.Time)) }
	unlocked := func() {
		l.stage, l.receiver, l.lockUntil = "available", "", 0
		if l.deferred {
			l.stage = "deferred"
		}
	}
	switch ev.Type {
	case log.Enqueued, log.Scheduled:
		l.MessageID, l.SessionID, l.Size, l.queue = ev.MessageID, ev.SessionID, len(ev.Message), ev.Queue
		var b strings.Builder
		if ev.Type == log.Enqueued {
			l.stage = "available"
			fmt.Fprintf(&b, "enqueued as seq %d in %s", ev.Index, QueueName(ev.Queue))
		} else {
			l.stage = "scheduled"
			fmt.Fprintf(&b, "scheduled as seq %d for %s", ev.Index, until(ev.Until))
		}
		l.describeMessage(&b, ev)
		if ev.Type == log.Enqueued && ev.Until != 0 {
			fmt.Fprintf(&b, ", expires %s", until(ev.Until))
		}
		if ev.TTL != 0 {
			fmt.Fprintf(&b, ", time to live %s once active", time.Duration(ev.TTL))
		}
		l.step(ev, b.String())
	case log.Activated:
		l.MessageID, l.SessionID, l.Size, l.queue = ev.MessageID, ev.SessionID, len(ev.Message), ev.Queue
		l.stage, l.Deliveries = "available", 0
		var b strings.Builder
		fmt.Fprintf(&b, "activated: seq %d is now seq %d in %s", ev.Seq, ev.Index, QueueName(ev.Queue))
		if ev.Until != 0 {
			fmt.Fprintf(&b, ", expires %s", until(ev.Until))
		}
		l.step(ev, b.String())
	case log.ScheduleCancelled:
		l.stage, l.Outcome = "", "cancelled"
		l.step(ev, "cancelled before its activation")
	case log.Locked:
		l.stage, l.receiver, l.lockUntil = "locked", ev.Receiver, ev.Until
		l.step(ev, fmt.Sprintf("locked by %s until %s, delivery attempt %d, token %s",
			quoteIfNeeded(ev.Receiver), until(ev.Until), l.Deliveries+1, FormatToken(ev.Token)))
	case log.LockRenewed:
		l.lockUntil = ev.Until
		l.step(ev, "lock renewed until "+until(ev.Until))
	case log.LockExpired:
		l.Deliveries++
		unlocked()
		l.step(ev, fmt.Sprintf("lock expired: failed deliveries now %d", l.Deliveries))
	case log.Abandoned:
		l.Deliveries++
		unlocked()
		l.step(ev, fmt.Sprintf("abandoned: failed deliveries now %d%s", l.Deliveries, propsNote(ev)))
	case log.Released:
		unlocked()
		l.step(ev, "released without counting a delivery")
	case log.Deferred:
		l.deferred = true
		unlocked()
		l.step(ev, "deferred: now received only by its SequenceNumber"+propsNote(ev))
	case log.DeadLettered:
		l.queue, l.deferred, l.reason = ev.Queue|1, false, ev.Reason
		unlocked()
		what := fmt.Sprintf("dead-lettered from %s to %s: reason %s", QueueName(ev.Queue), QueueName(ev.Queue|1),
			quoteIfNeeded(ev.Reason))
		if ev.Description != "" {
			what += ", description " + quoteIfNeeded(ev.Description)
		}
		l.step(ev, what+propsNote(ev))
	case log.Completed:
		l.stage, l.Outcome = "", "completed"
		l.step(ev, "completed")
	case log.ReceivedAndDeleted:
		l.stage, l.Outcome = "", "received-and-deleted"
		l.step(ev, "received and deleted by "+quoteIfNeeded(ev.Receiver))
	case log.Expired:
		l.stage, l.Outcome = "", "expired"
		l.step(ev, "expired: its time to live ran out")
	}
}

func (l *Life) describeMessage(b *strings.Builder, ev *log.Event) {
	if ev.MessageID != "" {
		fmt.Fprintf(b, ", id %s", quoteIfNeeded(ev.MessageID))
	}
	if ev.SessionID != "" {
		fmt.Fprintf(b, ", session %s", quoteIfNeeded(ev.SessionID))
	}
	fmt.Fprintf(b, ", %d bytes", len(ev.Message))
}

func propsNote(ev *log.Event) string {
	if len(ev.Props) == 0 {
		return ""
	}
	return fmt.Sprintf(", sets properties (%dB)", len(ev.Props))
}

// finish states how the life ends, or where the message stands at the end
// of the log (logEnd).
func (l *Life) finish(logEnd int64, first uint64, dmg *Damage) {
	if l.Steps[0].Seq != l.Seqs[0] || !slices.Contains([]string{"enqueued", "scheduled"}, l.Steps[0].Type) {
		l.Notes = append(l.Notes, fmt.Sprintf("the message's first records are no longer in the log (it starts at index %d): its delivery count here counts only what the log holds", first))
	}
	if dmg != nil {
		l.Incomplete = !dmg.Tail // a torn record is lost to the server too
		l.Notes = append(l.Notes, fmt.Sprintf("the log is unreadable from index %d, so later steps may be missing: %v", dmg.Index, dmg))
	}
	if l.stage == "" {
		if l.queue&1 == 1 {
			l.State = l.Outcome + " from the dead-letter queue"
		}
		return
	}
	l.Outcome = "pending"
	if l.queue&1 == 1 {
		l.Outcome = "dead-lettered"
	}
	switch l.stage {
	case "locked":
		l.State = fmt.Sprintf("locked by %s until %s in %s", quoteIfNeeded(l.receiver), formatTime(l.lockUntil), QueueName(l.queue))
		if l.lockUntil <= logEnd {
			l.State += " (the lock ran out before the log ends; its expiry is not recorded yet)"
		}
	default:
		l.State = fmt.Sprintf("%s in %s", l.stage, QueueName(l.queue))
	}
	if last := l.stepTimes[len(l.stepTimes)-1]; logEnd > last {
		l.State += fmt.Sprintf("; unchanged for %s when the log ends (%s)", time.Duration(logEnd-last), formatTime(logEnd))
	}
}

// WriteLives prints lives for people.
func WriteLives(w io.Writer, lives []*Life) error {
	var b strings.Builder
	for i, l := range lives {
		if i > 0 {
			b.WriteByte('\n')
		}
		seqs := make([]string, len(l.Seqs))
		for i, s := range l.Seqs {
			seqs[i] = fmt.Sprint(s)
		}
		fmt.Fprintf(&b, "%s seq %s", l.Entity, strings.Join(seqs, " -> "))
		if l.MessageID != "" {
			fmt.Fprintf(&b, ", id %s", quoteIfNeeded(l.MessageID))
		}
		if l.SessionID != "" {
			fmt.Fprintf(&b, ", session %s", quoteIfNeeded(l.SessionID))
		}
		fmt.Fprintf(&b, ", %d bytes: %s", l.Size, l.Outcome)
		if l.Outcome == "dead-lettered" && l.reason != "" {
			fmt.Fprintf(&b, " (%s)", l.reason)
		}
		fmt.Fprintf(&b, ", %s\n", plural(l.Deliveries, "failed delivery"))
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  index\ttime\t+prev\t+start\tstep")
		for _, s := range l.Steps {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\n", s.Index, s.Time, s.SincePrevious, s.SinceStart, s.What)
		}
		tw.Flush()
		if l.State != "" {
			fmt.Fprintf(&b, "  now: %s\n", l.State)
		}
		for _, n := range l.Notes {
			fmt.Fprintf(&b, "  note: %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
