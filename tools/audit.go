package tools

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
)

// AuditOptions name the message to audit: by SequenceNumber (any number it
// had: a scheduled message's, or the one its activation gave it), or by
// MessageId (every message that carried it).
type AuditOptions struct {
	Seq       uint64
	MessageID string
	// Retained is a directory `walbus compact --retain` wrote history to:
	// the steps the compactions dropped are read from there.
	Retained string
}

// Life is the whole recorded life of one message.
type Life struct {
	Entity    string   `json:"entity"`
	Seqs      []uint64 `json:"seqs"` // the numbers it had, oldest first: scheduled, then activated
	MessageID string   `json:"message_id,omitempty"`
	SessionID string   `json:"session_id,omitempty"`
	Size      int      `json:"size"`
	// Outcome is how the life ended: completed, received-and-deleted,
	// dead-lettered (and still in a dead-letter queue, plain or transfer), expired,
	// cancelled, deleted (by a batch delete), or pending (still in its queue).
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
	gap       bool // history of the message was compacted away
	stepTimes []int64
	source    string // of the record being followed
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
	// Source is where the record was read: "log", "archive" or
	// "retained" (see EventRecord.Source).
	Source string `json:"source"`
}

// Audit follows messages of entity through its log and returns the life of
// each, in SequenceNumber order.
func Audit(data, entity string, opts AuditOptions) ([]*Life, error) {
	if (opts.Seq == 0) == (opts.MessageID == "") {
		return nil, errors.New("audit needs a SequenceNumber or a MessageId (one of them)")
	}
	info, recs, err := findEntityRecords(data, entity, opts.Retained)
	if err != nil {
		return nil, err
	}
	defer recs.close()
	var unreadable []string // held records that do not read back
	bad := func(h heldRecord, err error) {
		unreadable = append(unreadable, fmt.Sprintf("record %d in %s does not read back: %s", h.index, filepath.Base(h.from.Path()), archiveReason(err)))
	}

	// Pass 1: the activation links (scheduled number -> live number), the
	// messages that match, and the time the log ends.
	activatedAs := map[uint64]uint64{}
	scheduledAs := map[uint64]uint64{}
	var roots []uint64
	var logEnd int64
	dmg, err := recs.walk(1, 0, func(ev *event.Event, _ string) error {
		logEnd = ev.Time
		if ev.Type == event.Activated || ev.Type == event.Restored || ev.Type == event.RestoredCopy {
			activatedAs[ev.Seq], scheduledAs[ev.Index] = ev.Index, ev.Seq
		}
		if opts.MessageID != "" && hasMessage(ev.Type) && ev.MessageID == opts.MessageID {
			roots = append(roots, ev.Index)
		}
		return nil
	}, bad)
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
	_, err = recs.walk(1, 0, func(ev *event.Event, source string) error {
		if ev.Type == event.SessionLockRenewed {
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
			l.source = source
			l.follow(ev)
		}
		return nil
	}, nil)
	if err != nil {
		return nil, err
	}
	var found []*Life
	for _, l := range out {
		if len(l.Steps) == 0 {
			continue
		}
		l.compacted(recs, opts.Retained != "")
		l.finish(logEnd, recs, dmg)
		if len(unreadable) > 0 {
			l.Incomplete = true
			l.Notes = append(l.Notes, unreadable...)
		}
		found = append(found, l)
	}
	if len(found) > 0 {
		fromState(data, info.Name, found)
	}
	if len(found) == 0 {
		what := fmt.Sprintf("SequenceNumber %d", opts.Seq)
		if opts.MessageID != "" {
			what = fmt.Sprintf("MessageId %q", opts.MessageID)
		}
		if dmg != nil {
			return nil, fmt.Errorf("%s: no message with %s in the readable log (%v)", info.Name, what, dmg)
		}
		if gaps := recs.gaps(); len(recs.held) > 0 && len(gaps) > 0 {
			hint := ""
			if opts.Retained == "" {
				hint = "; --retained DIR reads the history `walbus compact --retain DIR` kept"
			}
			return nil, fmt.Errorf("%s: no message with %s in the log or its archives (%s below index %d were compacted away%s)",
				info.Name, what, plural(int(missing(gaps)), "record"), recs.first, hint)
		}
		return nil, fmt.Errorf("%s: no message with %s in the log", info.Name, what)
	}
	slices.SortFunc(found, func(a, b *Life) int { return cmp.Compare(a.Seqs[0], b.Seqs[0]) })
	return found, nil
}

// step records ev with its description.
func (l *Life) step(ev *event.Event, what string) {
	source := l.source
	if source == "" {
		source = SourceLog
	}
	s := Step{Index: ev.Index, Time: formatTime(ev.Time), Type: ev.Type.String(), Queue: QueueName(ev.Queue),
		Seq: seqOf(ev), What: what, Source: source}
	if n := len(l.Steps); n == 0 {
		s.SincePrevious, s.SinceStart = "-", "0s"
	} else {
		s.SincePrevious = time.Duration(ev.Time - l.stepTimes[n-1]).String()
		s.SinceStart = time.Duration(ev.Time - l.stepTimes[0]).String()
	}
	l.Steps = append(l.Steps, s)
	l.stepTimes = append(l.stepTimes, ev.Time)
}

// countFailure counts the failed delivery an abandon or a lock expiry is,
// as the projection does: not in a dead-letter queue.
func (l *Life) countFailure(ev *event.Event) {
	if event.KindOf(ev.Queue) == event.KindMessages {
		l.Deliveries++
	}
}

// follow applies one event about the message to what is known of it.
func (l *Life) follow(ev *event.Event) {
	until := func(at int64) string { return fmt.Sprintf("%s (%s)", formatTime(at), relative(at, ev.Time)) }
	unlocked := func() {
		l.stage, l.receiver, l.lockUntil = "available", "", 0
		if l.deferred {
			l.stage = "deferred"
		}
	}
	switch ev.Type {
	case event.Enqueued, event.Scheduled, event.ScheduledHeld:
		l.MessageID, l.SessionID, l.Size, l.queue = ev.MessageID, ev.SessionID, len(ev.Message), ev.Queue
		var b strings.Builder
		switch ev.Type {
		case event.Enqueued:
			l.stage = "available"
			fmt.Fprintf(&b, "enqueued as seq %d in %s", ev.Index, QueueName(ev.Queue))
		case event.Scheduled:
			l.stage = "scheduled"
			fmt.Fprintf(&b, "scheduled as seq %d for %s", ev.Index, until(ev.Until))
		default:
			l.stage = "held"
			fmt.Fprintf(&b, "scheduled as seq %d for %s in a transaction, held until it commits", ev.Index, until(ev.Until))
		}
		l.describeMessage(&b, ev)
		if ev.Type == event.Enqueued && ev.Until != 0 {
			fmt.Fprintf(&b, ", expires %s", until(ev.Until))
		}
		if ev.TTL != 0 {
			fmt.Fprintf(&b, ", time to live %s once active", time.Duration(ev.TTL))
		}
		l.step(ev, b.String())
	case event.Transfer:
		l.MessageID, l.SessionID, l.Size, l.queue = ev.MessageID, ev.SessionID, len(ev.Message), ev.Queue
		l.stage = "available"
		var b strings.Builder
		fmt.Fprintf(&b, "sent through this queue as seq %d of its transfer queue, for %s", ev.Index, quoteIfNeeded(ev.Name))
		l.describeMessage(&b, ev)
		l.step(ev, b.String())
	case event.Forwarded:
		l.MessageID, l.SessionID, l.Size, l.queue = ev.MessageID, ev.SessionID, len(ev.Message), ev.Queue
		l.stage = "available"
		var b strings.Builder
		fmt.Fprintf(&b, "forwarded here as seq %d in %s from the dead-letter queue of %s (seq %d there), reason %s",
			ev.Index, QueueName(ev.Queue), quoteIfNeeded(ev.Name), ev.Seq, quoteIfNeeded(ev.Reason))
		l.describeMessage(&b, ev)
		if ev.Until != 0 {
			fmt.Fprintf(&b, ", expires %s", until(ev.Until))
		}
		l.step(ev, b.String())
	case event.Activated:
		l.MessageID, l.SessionID, l.Size, l.queue = ev.MessageID, ev.SessionID, len(ev.Message), ev.Queue
		l.stage, l.Deliveries = "available", 0
		var b strings.Builder
		fmt.Fprintf(&b, "activated: seq %d is now seq %d in %s", ev.Seq, ev.Index, QueueName(ev.Queue))
		if ev.Until != 0 {
			fmt.Fprintf(&b, ", expires %s", until(ev.Until))
		}
		l.step(ev, b.String())
	case event.Restored, event.RestoredCopy:
		l.stage, l.Outcome, l.queue, l.Deliveries = "available", "", ev.Queue, int(ev.Deliveries)
		l.step(ev, fmt.Sprintf("restored: its receive-and-delete delivery never left (the link closed); seq %d is now seq %d in %s",
			ev.Seq, ev.Index, QueueName(ev.Queue)))
	case event.ScheduleCancelled:
		l.stage, l.Outcome = "", "cancelled"
		l.step(ev, "cancelled before its activation")
	case event.Confirmed:
		l.stage = "scheduled"
		l.step(ev, "its transaction committed: scheduled for good")
	case event.Locked:
		l.stage, l.receiver, l.lockUntil = "locked", ev.Receiver, ev.Until
		l.step(ev, fmt.Sprintf("locked by %s until %s, delivery attempt %d, token %s",
			quoteIfNeeded(ev.Receiver), until(ev.Until), l.Deliveries+1, FormatToken(ev.Token)))
	case event.LockRenewed:
		l.lockUntil = ev.Until
		l.step(ev, "lock renewed until "+until(ev.Until))
	case event.LockExpired:
		l.countFailure(ev)
		unlocked()
		l.step(ev, fmt.Sprintf("lock expired: failed deliveries now %d", l.Deliveries))
	case event.Abandoned:
		l.countFailure(ev)
		unlocked()
		l.step(ev, fmt.Sprintf("abandoned: failed deliveries now %d%s", l.Deliveries, propsNote(ev)))
	case event.Released:
		unlocked()
		l.step(ev, "released without counting a delivery")
	case event.Deferred:
		l.deferred = true
		unlocked()
		l.step(ev, "deferred: now received only by its SequenceNumber"+propsNote(ev))
	case event.DeadLettered, event.TransferDeadLettered:
		to, verb := event.SubqueueOf(ev.Queue, event.KindDeadLetter), "dead-lettered"
		if ev.Type == event.TransferDeadLettered {
			to, verb = event.SubqueueOf(ev.Queue, event.KindTransferDeadLetter), "could not be forwarded; transfer dead-lettered"
		}
		l.queue, l.deferred, l.reason = to, false, ev.Reason
		unlocked()
		what := fmt.Sprintf("%s from %s to %s: reason %s", verb, QueueName(ev.Queue), QueueName(to), quoteIfNeeded(ev.Reason))
		if ev.Description != "" {
			what += ", description " + quoteIfNeeded(ev.Description)
		}
		l.step(ev, what+propsNote(ev))
	case event.Completed:
		l.stage, l.Outcome = "", "completed"
		l.step(ev, "completed")
	case event.ReceivedAndDeleted:
		l.stage, l.Outcome = "", "received-and-deleted"
		l.step(ev, "received and deleted by "+quoteIfNeeded(ev.Receiver))
	case event.Expired:
		l.stage, l.Outcome = "", "expired"
		l.step(ev, "expired: its time to live ran out")
	case event.Deleted:
		l.stage, l.Outcome = "", "deleted"
		l.step(ev, "deleted unread by a batch delete (a purge) in "+QueueName(ev.Queue))
	}
}

func (l *Life) describeMessage(b *strings.Builder, ev *event.Event) {
	if ev.MessageID != "" {
		fmt.Fprintf(b, ", id %s", quoteIfNeeded(ev.MessageID))
	}
	if ev.SessionID != "" {
		fmt.Fprintf(b, ", session %s", sessionText(ev.SessionID))
	}
	fmt.Fprintf(b, ", %d bytes", len(ev.Message))
}

func propsNote(ev *event.Event) string {
	if len(ev.Props) == 0 {
		return ""
	}
	return fmt.Sprintf(", sets properties (%dB)", len(ev.Props))
}

// finish states how the life ends, or where the message stands at the end
// of the log (logEnd).
func (l *Life) finish(logEnd int64, recs *records, dmg *log.Damage) {
	if l.Steps[0].Seq != l.Seqs[0] || !slices.Contains([]string{"enqueued", "scheduled"}, l.Steps[0].Type) {
		where := "in the log"
		if len(recs.held) > 0 {
			where = "kept"
		}
		l.Notes = append(l.Notes, fmt.Sprintf("the message's first records are no longer %s (the log starts at index %d): its delivery count here counts only what is", where, recs.first))
	}
	if dmg != nil {
		l.Incomplete = !dmg.Tail // a torn record is lost to the server too
		l.Notes = append(l.Notes, fmt.Sprintf("the log is unreadable from index %d, so later steps may be missing: %v", dmg.Index, dmg))
	}
	if l.stage == "" {
		switch event.KindOf(l.queue) {
		case event.KindDeadLetter:
			l.State = l.Outcome + " from the dead-letter queue"
		case event.KindTransferDeadLetter:
			l.State = l.Outcome + " from the transfer dead-letter queue"
		}
		return
	}
	l.Outcome = "pending"
	if event.KindOf(l.queue) != event.KindMessages {
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
	if last := l.stepTimes[len(l.stepTimes)-1]; logEnd > last && !l.gap {
		l.State += fmt.Sprintf("; unchanged for %s when the log ends (%s)", time.Duration(logEnd-last), formatTime(logEnd))
	}
}

// compacted notes the history a compaction dropped between the message's
// first step and its end (or the end of the log): steps there are unknown.
func (l *Life) compacted(recs *records, retained bool) {
	if len(recs.held) == 0 {
		return // never compacted: finish says what the log lacks
	}
	from, to := l.Steps[0].Index, ^uint64(0)
	if l.stage == "" {
		to = l.Steps[len(l.Steps)-1].Index
	}
	var lost []indexRange
	for _, g := range recs.gaps() {
		if g.to > from && g.from < to {
			lost = append(lost, indexRange{max(g.from, from+1), min(g.to, to-1)})
		}
	}
	if len(lost) == 0 {
		return
	}
	l.gap = true
	hint := ""
	if !retained {
		hint = "; --retained DIR reads the history `walbus compact --retain DIR` kept"
	}
	l.Notes = append(l.Notes, fmt.Sprintf("history between index %d and %d was compacted away (%s): steps there are unknown, so the delivery attempts shown count only the steps kept%s",
		lost[0].from, lost[len(lost)-1].to, plural(int(missing(lost)), "record"), hint))
}

// fromState says where each message the steps leave in a queue stands
// when history of it was compacted away, and its delivery count, from the
// entity's state at the end of the log: the steps kept cannot tell.
func fromState(data, entity string, lives []*Life) {
	var gapped []*Life
	for _, l := range lives {
		if l.gap && l.stage != "" {
			gapped = append(gapped, l)
		}
	}
	if len(gapped) == 0 {
		return
	}
	r, err := Rebuild(data, entity, Point{})
	if err != nil {
		return
	}
	defer r.Close()
	for _, l := range gapped {
		seq := l.Seqs[len(l.Seqs)-1]
		found := false
		for _, no := range event.GroupOf(l.queue) {
			q := r.State.Queue(no)
			if q == nil {
				continue
			}
			m, ok := q.Message(seq)
			if !ok {
				continue
			}
			found = true
			l.queue = no
			l.Outcome = "pending"
			if event.KindOf(no) != event.KindMessages {
				l.Outcome = "dead-lettered"
			}
			l.State = fmt.Sprintf("%s in %s", m.State, QueueName(no))
			if lk, locked := q.Lock(seq); locked {
				l.State = fmt.Sprintf("locked by %s until %s in %s", quoteIfNeeded(lk.Receiver), formatTime(lk.Until), QueueName(no))
			}
			l.State += " (from the entity's state)"
			if int(m.Deliveries) != l.Deliveries {
				l.Notes = append(l.Notes, fmt.Sprintf("its delivery count, %d, is the entity's state's (the steps kept count %d)", m.Deliveries, l.Deliveries))
				l.Deliveries = int(m.Deliveries)
			}
			break
		}
		if !found {
			l.Outcome = "ended"
			l.State = "no longer in the entity's state: how it ended was compacted away"
		}
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
			fmt.Fprintf(&b, ", session %s", sessionText(l.SessionID))
		}
		fmt.Fprintf(&b, ", %d bytes: %s", l.Size, l.Outcome)
		if l.Outcome == "dead-lettered" && l.reason != "" {
			fmt.Fprintf(&b, " (%s)", l.reason)
		}
		fmt.Fprintf(&b, ", %s\n", plural(l.Deliveries, "failed delivery"))
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  index\ttime\t+prev\t+start\tstep")
		for _, s := range l.Steps {
			what := s.What
			switch s.Source {
			case SourceArchive:
				what += " [archived]"
			case SourceRetained:
				what += " [retained history]"
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\n", s.Index, s.Time, s.SincePrevious, s.SinceStart, what)
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
