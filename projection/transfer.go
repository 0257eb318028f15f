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
// refused it for good. Reason and Description say why and become its
// DeadLetterReason and DeadLetterErrorDescription.
type TransferDeadLetter struct {
	Queue       uint32
	Token       event.LockToken
	Reason      string
	Description string
}

func (TransferDeadLetter) isCommand() {}

func (d *decision) transferDeadLetter(c TransferDeadLetter) error {
	q, err := d.queue(c.Queue)
	if err != nil {
		return err
	}
	if event.KindOf(c.Queue) != event.KindDeadLetter {
		return fmt.Errorf("%w: only a dead-letter queue's messages move to its transfer dead-letter queue", ErrNotAllowed)
	}
	seq, _, err := d.heldLock(q, c.Token)
	if err != nil {
		return err
	}
	d.emit(event.Event{Type: event.TransferDeadLettered, Queue: c.Queue, Seq: seq, Reason: c.Reason,
		Description: c.Description})
	return nil
}

// transferDeadLetter moves a message from a dead-letter queue to the
// transfer dead-letter subqueue of its group, keeping its SequenceNumber,
// delivery count and overlays; the event is one more overlay.
func (e *Entity) transferDeadLetter(q *Queue, ev *event.Event, m index.Meta) error {
	if event.KindOf(q.No) != event.KindDeadLetter {
		return fmt.Errorf("event %d: message %d of queue %d is not in a dead-letter queue", ev.Index, ev.Seq, q.No)
	}
	overlays := q.overlays[ev.Seq]
	q.remove(ev.Seq, m)
	tdlq := e.queues[event.SubqueueOf(q.No, event.KindTransferDeadLetter)]
	tdlq.add(ev.Seq, index.Meta{Pos: m.Pos, Deliveries: m.Deliveries, State: index.Available}, "")
	tdlq.overlays[ev.Seq] = append(overlays, Ref{Index: ev.Index, Pos: ev.Pos})
	return nil
}
