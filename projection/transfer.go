package projection

import (
	"fmt"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
)

// Dead-letter reasons for a message that ForwardDeadLetteredMessagesTo
// cannot deliver (TransferDeadLetter). Service Bus names the missing
// SessionId and an exceeded hop count so; the others are walbus's.
const (
	ReasonSessionIDIsNull     = "Session ID is null"
	ReasonMessageSizeExceeded = "MessageSizeExceeded"
	ReasonForwardingRefused   = "ForwardingRefused"
	// ReasonMaxTransferHops: one more forward would exceed MaxHops.
	ReasonMaxTransferHops = "MaxTransferHopCountExceeded"
)

// TransferDeadLetter moves a message of dead-letter queue Queue, locked by
// Token (the dead-letter forwarder's lock), to the transfer dead-letter
// subqueue of the same group: its ForwardDeadLetteredMessagesTo target
// refused it for good. A message of the transfer queue that its
// destination refuses moves to the entity's transfer dead-letter queue. Reason and Description say why and become its
// DeadLetterReason and DeadLetterErrorDescription.
type TransferDeadLetter struct {
	Queue uint32
	Token event.LockToken
	// Seq names the message in the transfer queue, which holds no locks.
	Seq         uint64
	Reason      string
	Description string
}

func (TransferDeadLetter) isCommand() {}

func (d *decision) transferDeadLetter(c TransferDeadLetter) error {
	q, err := d.queue(c.Queue)
	if err != nil {
		return err
	}
	if event.KindOf(c.Queue) != event.KindDeadLetter && !q.transfer {
		return fmt.Errorf("%w: only the messages of a dead-letter queue or the transfer queue move to a transfer dead-letter queue", ErrNotAllowed)
	}
	seq := c.Seq
	if q.transfer {
		if _, ok := q.msgs.Get(seq); !ok {
			return fmt.Errorf("%w: no message %d in the transfer queue", ErrInvalid, seq)
		}
	} else if seq, _, err = d.heldLock(q, c.Token); err != nil {
		return err
	}
	d.emit(event.Event{Type: event.TransferDeadLettered, Queue: c.Queue, Seq: seq, Reason: c.Reason,
		Description: c.Description})
	return nil
}

// transferDeadLetter moves a message from a dead-letter queue to the
// transfer dead-letter subqueue of its group, or from the transfer queue
// to the entity's, keeping its SequenceNumber, delivery count and
// overlays; the event is one more overlay.
func (e *Entity) transferDeadLetter(q *Queue, ev *event.Event, m index.Meta) error {
	to := event.SubqueueOf(q.No, event.KindTransferDeadLetter)
	switch {
	case q.transfer:
		to = event.TransferDeadLetterQueue
	case event.KindOf(q.No) != event.KindDeadLetter:
		return fmt.Errorf("event %d: message %d of queue %d is not in a dead-letter queue", ev.Index, ev.Seq, q.No)
	}
	overlays := q.overlays[ev.Seq]
	q.remove(ev.Seq, m)
	tdlq := e.queues[to]
	tdlq.add(ev.Seq, index.Meta{Pos: m.Pos, Deliveries: m.Deliveries, State: index.Available}, "")
	tdlq.overlays[ev.Seq] = append(overlays, Ref{Index: ev.Index, Pos: ev.Pos})
	return nil
}

// Send-via: a client in a transaction sends a message for another entity
// through this one (the via-entity). The commit puts it in this entity's
// transfer queue (event.TransferQueue, a Transfer event naming its
// destination), so it is exactly as durable as the transaction. The shell
// then moves the oldest messages to their destination, a run bound for one
// destination at a time, and completes them here (TransferDone) once the
// destination's append is durable. No client reaches the transfer queue,
// so its messages are never locked. A crash between the two appends makes
// the shell send them again: the destination's Arrived event remembers the
// last one it took from this source and drops the repeats, which is sound
// because the shell only ever sends the oldest messages, in order. The
// run that goes again may be longer than the first (more messages became
// durable meanwhile), so the repeat is dropped message by message. What
// the destination refuses for good goes to the transfer dead-letter
// queue, saying why.

// Transfer puts Messages in the transfer queue, bound for the entity named
// To. Only a queue entity has a transfer queue. The messages keep their
// ScheduledAt and TTL for their destination: here they wait for neither.
type Transfer struct {
	To       string
	Messages []Message
}

func (Transfer) isCommand() {}

// Arrival marks a Send as messages from another entity's transfer queue:
// Source is the key it sends under, Seqs the SequenceNumber there of each
// of the send's messages, ascending. A source sends in SequenceNumber
// order, so a message whose Seq is no greater than the last one taken
// from Source repeats one (the source crashed before it completed it) and
// is dropped; the rest are sent.
type Arrival struct {
	Source uint64
	Seqs   []uint64
}

// fresh is what of msgs, which a's Seqs number, has not arrived before,
// or nil when a's Seqs are not ascending, one per message.
func (e *Entity) fresh(a *Arrival, msgs []Message) ([]Message, error) {
	if len(a.Seqs) != len(msgs) || len(msgs) == 0 {
		return nil, fmt.Errorf("%w: an arrival of %d messages numbers %d", ErrInvalid, len(msgs), len(a.Seqs))
	}
	for i := 1; i < len(a.Seqs); i++ {
		if a.Seqs[i] <= a.Seqs[i-1] {
			return nil, fmt.Errorf("%w: an arrival's SequenceNumbers go back (%d after %d)", ErrInvalid, a.Seqs[i], a.Seqs[i-1])
		}
	}
	last, ok := e.forwarded[a.Source]
	if !ok {
		return msgs, nil
	}
	i := 0
	for i < len(msgs) && a.Seqs[i] <= last {
		i++
	}
	return msgs[i:], nil
}

func (d *decision) transfer(c Transfer) error {
	if d.e.IsTopic() {
		return fmt.Errorf("%w: a topic cannot be the via-entity of a transfer; send through a queue", ErrNotAllowed)
	}
	if c.To == "" {
		return fmt.Errorf("%w: a transfer without a destination", ErrInvalid)
	}
	if err := d.e.quota(c.Messages); err != nil {
		return err
	}
	for _, m := range c.Messages {
		d.emit(event.Event{Type: event.Transfer, Queue: event.TransferQueue, Until: max(m.ScheduledAt, 0),
			TTL: int64(m.TTL), MessageID: m.MessageID, SessionID: m.SessionID, Name: c.To, Message: m.Body})
	}
	return nil
}

// TransferQueue is the entity's transfer queue, or nil: a topic has none,
// and a queue has one once something was sent through it.
func (e *Entity) TransferQueue() *Queue {
	if e.IsTopic() {
		return nil
	}
	return e.Queue(event.TransferQueue)
}

// applyTransfer adds a message to the transfer queue, which the first one
// creates. It neither expires nor activates here.
func (e *Entity) applyTransfer(ev *event.Event) error {
	if e.IsTopic() || ev.Queue != event.TransferQueue {
		return fmt.Errorf("event %d: a transfer in queue %d of %s, which has no transfer queue there", ev.Index, ev.Queue, e.name)
	}
	q := e.TransferQueue()
	if q == nil {
		q = newQueue(event.TransferQueue, false, &e.cfg)
		q.transfer = true
		for len(e.queues) <= int(event.TransferQueue) {
			e.queues = append(e.queues, nil)
		}
		e.queues[event.TransferQueue] = q
	}
	q.add(ev.Index, index.Meta{Pos: ev.Pos, State: index.Available}, "")
	return nil
}

// TransferDone completes messages of the transfer queue that reached
// their destination; those no longer there are skipped.
type TransferDone struct {
	Seqs []uint64
}

func (TransferDone) isCommand() {}

func (d *decision) transferDone(c TransferDone) error {
	q := d.e.TransferQueue()
	if q == nil {
		return fmt.Errorf("%w: no transfer queue", ErrInvalid)
	}
	done := make(map[uint64]bool, len(c.Seqs))
	for _, seq := range c.Seqs {
		if _, ok := q.msgs.Get(seq); ok && !done[seq] {
			done[seq] = true
			d.emit(event.Event{Type: event.Completed, Queue: event.TransferQueue, Seq: seq})
		}
	}
	return nil
}
