package broker

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// Transaction is the work of one AMQP transaction on one entity, which
// Commit makes happen as a whole or not at all.
type Transaction struct {
	// ID is the transaction's id, recorded with its events.
	ID []byte
	// Sends are messages sent to the entity's queues (a topic's queue 0),
	// in the order they were sent.
	Sends []TxSend
	// Settles end locks held on the entity's queues.
	Settles []TxSettle
	// Transfers are sends to other entities through this one (send-via),
	// in the order they were sent.
	Transfers []TxTransfer
	// Schedules are the messages ScheduleHeld wrote for the transaction,
	// which its commit confirms.
	Schedules []TxSchedule
}

// TxSchedule is a schedule of a transaction: held messages of Queue.
type TxSchedule struct {
	Queue    uint32
	Messages []projection.HeldMessage
}

// TxSend is one send of a transaction.
type TxSend struct {
	Queue    uint32
	Messages []projection.Message
}

// TxSettle is one settlement of a transaction.
type TxSettle struct {
	Queue      uint32
	Settlement Settlement
}

// MaxTxOps is the most operations (sends and settlements) one transaction
// may hold: Service Bus's limit.
const MaxTxOps = 100

// Errors of transactions.
var (
	ErrTxTooLarge   = errors.New("a transaction holds at most 100 operations")
	ErrTxForwarding = errors.New("a transaction cannot send to a queue that forwards its messages")
)

// Ops counts the operations tx holds.
func (tx *Transaction) Ops() int {
	n := len(tx.Settles)
	for _, s := range tx.Sends {
		n += len(s.Messages)
	}
	for _, t := range tx.Transfers {
		n += len(t.Messages)
	}
	for _, s := range tx.Schedules {
		n += len(s.Messages)
	}
	return n
}

// Commit does tx's work as one atomic group on the entity's log, closed by
// a Committed event: every send, transfer and settlement is decided against the
// state as it stands, and if any is refused (a lock that is gone, a
// message too large, the entity disabled) none happens and done gets that
// error. done runs once the group is durable and applied. Locks a
// transaction settles stay held until then; a lock that ran out before
// the commit makes it fail with ErrLockLost.
func (e *Entity) Commit(tx Transaction, done func(error)) {
	if tx.Ops() > MaxTxOps {
		done(fmt.Errorf("%w (%d)", ErrTxTooLarge, tx.Ops()))
		return
	}
	for _, s := range tx.Sends {
		e.touch(s.Queue)
	}
	if len(tx.Sends) > 0 {
		if err := cmp.Or(e.sendable(), e.b.refuseNew()); err != nil {
			done(err)
			return
		}
		for _, s := range tx.Sends {
			if t, _, _, err := e.forwardTarget(s.Queue, s.Messages); err != nil {
				done(err)
				return
			} else if t != e {
				done(fmt.Errorf("%w: %s forwards to %s", ErrTxForwarding, e.name, t.name))
				return
			}
			e.readFilters(s.Messages)
		}
	}
	if err := e.transferable(tx.Transfers); err != nil {
		done(err)
		return
	}
	for _, s := range tx.Settles {
		e.touch(s.Queue)
	}
	e.do(done, func(e *Entity) ([]event.Event, error) {
		return e.decideTx(tx)
	})
}

// decideTx decides every operation of tx against the current state; the
// operations are independent of each other (sends make new messages, and
// each lock is settled once), so deciding them one after another without
// applying in between gives what applying in turn would.
func (e *Entity) decideTx(tx Transaction) ([]event.Event, error) {
	var evs []event.Event
	// Sends to one queue go as one batch, so that duplicate detection sees
	// the transaction's own messages too.
	var queues []uint32
	byQueue := map[uint32][]projection.Message{}
	for _, s := range tx.Sends {
		if _, ok := byQueue[s.Queue]; !ok {
			queues = append(queues, s.Queue)
		}
		byQueue[s.Queue] = append(byQueue[s.Queue], s.Messages...)
	}
	for _, q := range queues {
		out, err := e.decide(projection.Send{Queue: q, Messages: byQueue[q], Nonce: e.topicNonce()})
		if err != nil {
			return nil, err
		}
		evs = append(evs, out...)
	}
	for _, t := range tx.Transfers {
		out, err := e.decide(projection.Transfer{To: t.To, Messages: t.Messages})
		if err != nil {
			return nil, err
		}
		evs = append(evs, out...)
	}
	for _, s := range tx.Schedules {
		out, err := e.decide(projection.Confirm{Queue: s.Queue, Messages: s.Messages})
		if err != nil {
			return nil, err
		}
		evs = append(evs, out...)
	}
	for i, s := range tx.Settles {
		for _, before := range tx.Settles[:i] {
			if before.Queue == s.Queue && before.Settlement.Token == s.Settlement.Token {
				return nil, fmt.Errorf("%w: settled twice in one transaction", ErrLockLost)
			}
		}
		st := s.Settlement
		out, err := e.decide(projection.Settle{Queue: s.Queue, Token: st.Token, Outcome: st.Outcome, Props: st.Props,
			Reason: st.Reason, Description: st.Description})
		e.countLockLost(err)
		if err != nil {
			return nil, err
		}
		evs = append(evs, out...)
	}
	if err := e.check(); err != nil {
		return nil, err
	}
	return append(evs, event.Event{Type: event.Committed, Time: e.now(), State: bytes.Clone(tx.ID)}), nil
}

// cancelHeld cancels every held schedule: the transactions that held them
// ended with the process that ran them. It runs on the actor at start.
func (e *Entity) cancelHeld() {
	for queue, seqs := range e.st.Held() {
		evs, err := e.decide(projection.Cancel{Queue: queue, Seqs: seqs})
		if err == nil {
			err = e.commit(evs, nil)
		}
		if err != nil {
			e.logger().Warn("cannot cancel what transactions that did not commit scheduled", "queue", queue, "err", err)
			continue
		}
		e.logger().Info("cancelled what transactions that did not commit scheduled", "queue", queuePath(e.st, e.name, queue),
			"messages", len(seqs))
	}
}
