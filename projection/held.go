package projection

import (
	"fmt"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
)

// Scheduling inside a transaction. A schedule answers with the
// SequenceNumbers of its messages, which are log indexes, so a schedule in
// an open transaction is written at once, held (event.ScheduledHeld,
// index.FlagHeld): it counts as scheduled but neither activates nor
// counts for duplicate detection. The commit's atomic group confirms it
// (Confirm); a roll back cancels it (Cancel), and so does the shell's
// start for those whose transaction never committed (Held lists them).

// HeldMessage is a held message a commit confirms: its SequenceNumber and
// the MessageId duplicate detection remembers from then on.
type HeldMessage struct {
	Seq       uint64
	MessageID string
}

// Confirm makes held messages of Queue scheduled for good. Those no longer
// held (cancelled meanwhile) are skipped.
type Confirm struct {
	Queue    uint32
	Messages []HeldMessage
}

func (Confirm) isCommand() {}

func (d *decision) confirm(c Confirm) error {
	q, err := d.queue(c.Queue)
	if err != nil {
		return err
	}
	done := make(map[uint64]bool, len(c.Messages))
	for _, m := range c.Messages {
		if meta, ok := q.msgs.Get(m.Seq); ok && meta.State == index.Scheduled && meta.Flags&index.FlagHeld != 0 && !done[m.Seq] {
			done[m.Seq] = true
			d.emit(event.Event{Type: event.Confirmed, Queue: c.Queue, Seq: m.Seq, MessageID: m.MessageID})
		}
	}
	return nil
}

// applyHeld adds a held scheduled message, with its activation timer
// (which waits while it is held).
func (e *Entity) applyHeld(q *Queue, ev *event.Event) {
	q.add(ev.Index, index.Meta{Pos: ev.Pos, State: index.Scheduled, Flags: index.FlagHeld}, ev.SessionID)
	q.scheduleTimers.Push(ev.Until, ev.Index)
}

// applyConfirmed lets a held message activate, and duplicate detection
// remember it.
func (e *Entity) applyConfirmed(q *Queue, ev *event.Event, m index.Meta) error {
	if m.State != index.Scheduled || m.Flags&index.FlagHeld == 0 {
		return fmt.Errorf("event %d: message %d of queue %d is not held", ev.Index, ev.Seq, q.No)
	}
	m.Flags &^= index.FlagHeld
	q.msgs.Put(ev.Seq, m)
	e.remember(ev.MessageID, ev.Time)
	return nil
}

// Held lists the held messages of each queue, in order: a shell that
// starts cancels them, as no transaction survives a restart.
func (e *Entity) Held() map[uint32][]uint64 {
	var out map[uint32][]uint64
	for _, q := range e.liveQueues() {
		it := q.scheduled.Iterator()
		for it.HasNext() {
			seq := it.Next()
			if m, ok := q.msgs.Get(seq); ok && m.Flags&index.FlagHeld != 0 {
				if out == nil {
					out = map[uint32][]uint64{}
				}
				out[q.No] = append(out[q.No], seq)
			}
		}
	}
	return out
}

// scheduleActionable: a live activation timer can be acted on unless its
// message is held.
func (q *Queue) scheduleActionable(t index.Timer) bool {
	m, ok := q.msgs.Get(t.Key)
	return ok && m.State == index.Scheduled && m.Flags&index.FlagHeld == 0
}
