package broker

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// Send-via (docs/architecture.md, "Transactions"): a client sends messages
// for another entity through a queue, the via-entity, usually inside a
// transaction on that queue. The messages are appended to the via's own
// log, in its transfer queue (projection.Transfer), so they commit with
// the rest of the transaction, and are then moved to their destinations
// oldest first, in runs bound for one destination, much as the
// dead-letter forwarder moves messages (forward.go): a run is sent to the
// destination as one send with an Arrival naming this queue and the run's
// last SequenceNumber, and completed here once the destination has it
// durably. A crash between the two makes the run go again; the
// destination drops it as a repeat.
// A destination that is gone, or that can never take the message (too
// large, no SessionId where it needs one), sends it to the via's transfer
// dead-letter queue, saying why. Other failures are retried with backoff.

// TxTransfer is a send-via of a transaction: messages for the entity To,
// sent through the transaction's entity.
type TxTransfer struct {
	To       string
	Messages []projection.Message
}

// ReasonDestinationNotFound is the dead-letter reason of a transfer whose
// destination no longer exists.
const ReasonDestinationNotFound = "DestinationNotFound"

// ErrTransferTopic refuses a topic as a via-entity.
var ErrTransferTopic = fmt.Errorf("%w: only a queue can be the via-entity of a send-via", projection.ErrNotAllowed)

// SendVia sends msgs for the entity named to through e, outside a
// transaction: done runs once they are durably in e's transfer queue.
func (e *Entity) SendVia(to string, msgs []projection.Message, done func(error)) {
	if err := e.transferable([]TxTransfer{{To: to, Messages: msgs}}); err != nil {
		done(err)
		return
	}
	e.touch(event.MainQueue)
	e.do(done, func(e *Entity) ([]event.Event, error) {
		return e.decide(projection.Transfer{To: to, Messages: msgs})
	})
}

// CheckVia says whether messages can be sent through e to the entity
// named to: e must be a queue, to must exist and take messages; a sender
// link's attach asks it.
func (e *Entity) CheckVia(to string) error {
	_, err := e.viaTo(to)
	return err
}

// viaTo is CheckVia that returns the destination.
func (e *Entity) viaTo(to string) (*Entity, error) {
	if e.IsTopic() {
		return nil, fmt.Errorf("%w; %s is a topic", ErrTransferTopic, e.name)
	}
	t, err := e.b.Entity(to)
	if err != nil {
		return nil, err
	}
	return t, t.sendable()
}

// transferable checks transfers against e and their destinations as they
// stand: what would be refused there is refused now, not after the commit.
func (e *Entity) transferable(ts []TxTransfer) error {
	for _, tr := range ts {
		t, err := e.viaTo(tr.To)
		if err != nil {
			return err
		}
		cfg := t.cfg.Load()
		if cfg == nil {
			continue
		}
		for _, m := range tr.Messages {
			if len(m.Body) > cfg.MaxMessageSize {
				return fmt.Errorf("%w: %d bytes, limit %d (%s)", projection.ErrMessageTooLarge, len(m.Body), cfg.MaxMessageSize, t.name)
			}
			if cfg.RequiresSession && !cfg.Topic && m.SessionID == "" {
				return fmt.Errorf("%w (%s)", projection.ErrSessionIDRequired, t.name)
			}
		}
	}
	if len(ts) > 0 {
		return cmp.Or(e.sendable(), e.b.refuseNew())
	}
	return nil
}

// Transfers go in runs of at most maxTransferRun messages, and
// maxTransferBytes of bodies, bound for one destination.
const (
	maxTransferRun   = 100
	maxTransferBytes = 1 << 20
)

// transferOne sends the transfer queue's oldest durable messages bound for
// one destination, unless some are on their way. It runs on the actor,
// from forward. The run always starts at the queue's oldest message, so
// whatever a destination has taken from here is older than what it has
// not, and its Arrived record tells repeats apart (projection.Arrival).
func (e *Entity) transferOne(f *forwardState) {
	if f.busy || e.now() < f.retryAt {
		return
	}
	q := e.st.TransferQueue()
	limit := maxTransferRun
	if f.single {
		limit = 1 // the last run was refused: find the message that was
	}
	var (
		msgs  []projection.Message
		seqs  []uint64
		to    string
		bytes int
		hops  uint32
	)
	for _, seq := range q.Peek(0, limit, e.durable) {
		meta, _ := q.Message(seq)
		rec, err := e.record(seq, meta.Pos)
		if err != nil {
			e.forwardFailed(f, fmt.Errorf("transfer message %d: %w", seq, err))
			return
		}
		if len(seqs) > 0 && (!strings.EqualFold(rec.Name, to) || rec.Hops != hops || bytes+len(rec.Message) > maxTransferBytes) {
			break
		}
		to, hops, bytes = rec.Name, rec.Hops, bytes+len(rec.Message)
		seqs = append(seqs, seq)
		msgs = append(msgs, projection.Message{Body: rec.Message, MessageID: rec.MessageID, SessionID: rec.SessionID,
			TTL: time.Duration(rec.TTL), ScheduledAt: rec.Until})
	}
	if len(seqs) == 0 {
		return
	}
	e.fwd.gen++
	f.busy, f.seqs, f.target, f.gen = true, seqs, to, e.fwd.gen
	gen := f.gen
	done := func(err error) {
		// done runs on the destination's log writer, which must not
		// block (docs/architecture.md#threading-contract).
		go e.post(func(e *Entity) { e.transferred(gen, err) })
	}
	target, err := e.b.Entity(to)
	if err != nil {
		done(err)
		return
	}
	target.sendTransfer(msgs, &projection.Arrival{Source: e.forwardKey(event.TransferQueue), Seqs: seqs}, hops, done)
}

// transferred finishes run number gen: its messages are completed here
// once the destination has them; a refusal sends a lone message to the
// transfer dead-letter queue, or makes the next runs one message long
// until the refused one is found; other failures are tried again later.
func (e *Entity) transferred(gen uint64, err error) {
	f := e.fwd.by[event.TransferQueue]
	if f == nil || !f.busy || f.gen != gen {
		return // an earlier run's answer
	}
	f.busy = false
	reason, refused := transferRefusal(err)
	if err != nil && !refused {
		e.forwardFailed(f, fmt.Errorf("transfer messages %d to %d to %s: %w", f.seqs[0], f.seqs[len(f.seqs)-1], f.target, err))
		return
	}
	f.delay, f.retryAt = 0, 0
	var cmd projection.Command = projection.TransferDone{Seqs: f.seqs}
	switch {
	case refused && len(f.seqs) > 1:
		f.single = true // the next run, right after this batch, is one message
		return
	case refused:
		f.single = false
		e.logger().Warn("message refused by its send-via destination; moved to the transfer dead-letter queue",
			"queue", e.name, "seq", f.seqs[0], "destination", f.target, "reason", reason, "err", err)
		cmd = projection.TransferDeadLetter{Queue: event.TransferQueue, Seq: f.seqs[0], Reason: reason,
			Description: fmt.Sprintf("The message could not be transferred to %s: %v", f.target, err)}
	default:
		f.single = false
	}
	evs, err := e.decide(cmd)
	if err != nil {
		return
	}
	if _, done := cmd.(projection.TransferDone); done {
		// Nobody waits for it: lost in a crash, the run goes again and
		// the destination drops it.
		e.commitLazy(evs)
		return
	}
	e.commit(evs, nil)
}

// sendTransfer appends messages from another entity's transfer queue,
// following this entity's ForwardTo chain as any send does; done runs once
// they are durable (or dropped as a repeat).
func (e *Entity) sendTransfer(msgs []projection.Message, arrival *projection.Arrival, hops uint32, done func(error)) {
	if err := cmp.Or(e.sendable(), e.b.refuseNew()); err != nil {
		done(err) // tried again later
		return
	}
	t, more, via, err := e.forwardTarget(event.MainQueue, msgs)
	if err != nil {
		done(err)
		return
	}
	t.readFilters(msgs)
	t.do(done, func(t *Entity) ([]event.Event, error) {
		return t.decide(projection.Send{Queue: event.MainQueue, Messages: msgs, Hops: hops + more, Via: via,
			Arrival: arrival, Nonce: t.topicNonce()})
	})
}

// transferRefusal is forwardRefusal for a transfer: a destination that is
// gone refuses it too.
func transferRefusal(err error) (reason string, refused bool) {
	if errors.Is(err, ErrEntityNotFound) {
		return ReasonDestinationNotFound, true
	}
	return forwardRefusal(err)
}
