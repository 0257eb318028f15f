package amqpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/message"
	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/amqpserver/transport"
	"github.com/walbus/walbus/broker"
)

// Transactions (AMQP 1.0 part 4, docs/compatibility.md §10): a client
// attaches a link to the coordinator, declares a transaction, does sends
// and settlements inside it, and discharges it. The work waits here, in
// the connection's state, and reaches the broker at commit as one
// broker.Transaction: one atomic group on the entity's log.

// Transaction conditions (AMQP 1.0 §4.5.8).
const (
	condTxnUnknown  = "amqp:transaction:unknown-id"
	condTxnRollback = "amqp:transaction:rollback"
	condTxnTimeout  = "amqp:transaction:timeout"
)

// A connection may have this many transactions open at once, and
// remembers up to as many that ran out (Config.TxnTimeout).
const (
	maxOpenTxns    = 1000
	maxTimedOutIDs = 1000
)

// txnSpanText is what Service Bus says of work on a second entity in one
// transaction.
const txnSpanText = "Local transactions cannot span multiple top-level entities such as queue or topic."

// txn is one declared transaction.
type txn struct {
	id    []byte
	ctrl  *transport.Link // the coordinator link that declared it
	timer *time.Timer
	// e is the entity the transaction works on: the first it touched.
	e    *broker.Entity
	work broker.Transaction
	// settled are the dispositions the commit answers: deliveries whose
	// receiver awaits our settlement, and whose ids their links forget
	// once the commit holds.
	settled []txnDisposition
	// discharging: a discharge is under way; no more work joins.
	discharging bool
}

// txnDisposition is a receiver's transactional disposition.
type txnDisposition struct {
	rl      *receiverLink
	id      uint32
	state   *frames.TransactionalState
	settled bool // by the peer already: nothing to answer
}

// txnTable holds a connection's transactions. Guarded by connState.mu.
type txnTable struct {
	open     map[string]*txn
	timedOut map[string]bool // ids that ran out, so a late discharge says so
}

// attachCoordinator accepts a transaction controller's link: any
// connection that holds a claim may declare transactions; each transfer
// and disposition in one is authorized by its own link.
func (cs *connState) attachCoordinator(l *transport.Link) {
	if !cs.claims.any(cs.s.cfg.Now()) {
		l.Refuse(&frames.Error{Condition: condUnauthorized, Description: "Unauthorized access. A token is required to declare transactions."})
		return
	}
	caps := l.PeerAttach().Coordinator.Capabilities
	for _, c := range caps {
		if c != "amqp:local-transactions" {
			l.Refuse(&frames.Error{Condition: condNotImplemented, Description: fmt.Sprintf("transaction capability %s is not supported; only amqp:local-transactions", c)})
			return
		}
	}
	l.AcceptInbound(nil, &coordinatorLink{cs: cs})
}

// coordinatorLink takes declares and discharges.
type coordinatorLink struct {
	cs *connState
}

// Detached rolls back every transaction the link declared and did not
// discharge (AMQP 1.0 §4.2).
func (cl *coordinatorLink) Detached(l *transport.Link, _ *frames.Error) {
	cs := cl.cs
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for key, t := range cs.txns.open {
		if t.ctrl == l && !t.discharging {
			cs.endTxnLocked(key, t)
		}
	}
}

func (cl *coordinatorLink) Deliver(d transport.Delivery) {
	if d.Settled {
		// Declares and discharges must be sent unsettled (AMQP 1.0 §4.2).
		d.Settle(nil)
		d.Link.Close(&frames.Error{Condition: "amqp:illegal-state", Description: "declare and discharge must be sent unsettled"})
		return
	}
	body, err := controlBody(d.Payload)
	if err != nil {
		d.Settle(&frames.Rejected{Error: &frames.Error{Condition: condDecodeError, Description: err.Error()}})
		return
	}
	var declare frames.Declare
	if declare.Decode(body) == nil {
		if declare.GlobalID != nil {
			d.Settle(&frames.Rejected{Error: &frames.Error{Condition: condNotImplemented, Description: "distributed transactions are not supported"}})
			return
		}
		cl.declare(d)
		return
	}
	var discharge frames.Discharge
	if err := discharge.Decode(body); err != nil {
		d.Settle(&frames.Rejected{Error: &frames.Error{Condition: condDecodeError, Description: "want a declare or a discharge: " + err.Error()}})
		return
	}
	cl.discharge(d, discharge)
}

// controlBody returns the encoded amqp-value of a control message.
func controlBody(payload []byte) ([]byte, error) {
	s, err := message.Parse(payload)
	if err != nil {
		return nil, err
	}
	if s.BodyKind != message.BodyValue {
		return nil, errors.New("a declare or discharge travels in an amqp-value body")
	}
	return s.ValueBytes(s.Body), nil
}

func (cl *coordinatorLink) declare(d transport.Delivery) {
	cs := cl.cs
	id := make([]byte, 16)
	rand.Read(id)
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.txns.open == nil {
		cs.txns.open = make(map[string]*txn)
	}
	if len(cs.txns.open) >= maxOpenTxns {
		d.Settle(&frames.Rejected{Error: &frames.Error{Condition: condResourceLimit,
			Description: fmt.Sprintf("a connection may hold at most %d open transactions", maxOpenTxns)}})
		return
	}
	t := &txn{id: id, ctrl: d.Link}
	t.work.ID = id
	key := string(id)
	t.timer = time.AfterFunc(cs.s.cfg.TxnTimeout, func() {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		if cur := cs.txns.open[key]; cur == t && !t.discharging {
			cs.endTxnLocked(key, t)
			if cs.txns.timedOut == nil || len(cs.txns.timedOut) >= maxTimedOutIDs {
				cs.txns.timedOut = make(map[string]bool)
			}
			cs.txns.timedOut[key] = true
		}
	})
	cs.txns.open[key] = t
	d.Settle(&frames.Declared{TxnID: id})
}

// endTxnLocked forgets a transaction that did not commit. Its
// dispositions stay unsettled: their locks are still held, and the client
// may settle them again. What it scheduled is cancelled. Callers hold
// cs.mu.
func (cs *connState) endTxnLocked(key string, t *txn) {
	t.timer.Stop()
	delete(cs.txns.open, key)
	cancelHeld(t.e, t.work.Schedules)
}

// cancelHeld cancels the held schedules of a transaction that did not
// commit. Nobody waits for it: a start cancels what a crash left held.
func cancelHeld(e *broker.Entity, schedules []broker.TxSchedule) {
	if len(schedules) == 0 {
		return
	}
	// Off the caller's goroutine: it may hold cs.mu, or be an actor.
	go func() {
		for _, s := range schedules {
			seqs := make([]uint64, len(s.Messages))
			for i, m := range s.Messages {
				seqs[i] = m.Seq
			}
			e.Cancel(s.Queue, seqs, func(error) {})
		}
	}()
}

// txnSchedule schedules messages in a transaction: they are written now,
// held, and answered with their SequenceNumbers; the commit confirms them
// and a roll back cancels them. A schedule still under way when its
// transaction is discharged is cancelled and answered with the
// transaction's end.
func (cs *connState) txnSchedule(t *mgmtTarget, id []byte, req *rpcRequest, reply func(rpcResponse)) {
	id = bytes.Clone(id) // it aliases the frame, and the answer comes later
	msgs, err := scheduleRequest(req.bodyMap())
	if err != nil {
		reply(failure(err))
		return
	}
	txn, ferr := cs.joinTxn(id, t.e, len(msgs))
	if ferr != nil {
		reply(rpcResponse{status: 400, condition: string(ferr.Condition), description: ferr.Description})
		return
	}
	cs.mu.Unlock()
	t.e.ScheduleHeld(t.queue, msgs, func(held []broker.HeldMessage, err error) {
		if err != nil {
			reply(failure(err))
			return
		}
		seqs := make([]uint64, len(held))
		for i, m := range held {
			seqs[i] = m.Seq
		}
		cs.mu.Lock()
		if cs.txns.open[string(id)] != txn || txn.discharging {
			ferr := cs.unknownTxn(id)
			cs.mu.Unlock()
			cancelHeld(t.e, []broker.TxSchedule{{Queue: t.queue, Messages: held}})
			reply(rpcResponse{status: 400, condition: string(ferr.Condition), description: ferr.Description})
			return
		}
		txn.work.Schedules = append(txn.work.Schedules, broker.TxSchedule{Queue: t.queue, Messages: held})
		cs.mu.Unlock()
		reply(scheduled(seqs))
	})
}

// unknownTxn is the error for a txn-id the connection does not hold.
func (cs *connState) unknownTxn(id []byte) *frames.Error {
	if cs.txns.timedOut[string(id)] {
		return &frames.Error{Condition: condTxnTimeout, Description: fmt.Sprintf("transaction %x ran out (%v) and was rolled back", id, cs.s.cfg.TxnTimeout)}
	}
	return &frames.Error{Condition: condTxnUnknown, Description: fmt.Sprintf("transaction %x is unknown or already discharged", id)}
}

func (cl *coordinatorLink) discharge(d transport.Delivery, dis frames.Discharge) {
	cs := cl.cs
	key := string(dis.TxnID)
	cs.mu.Lock()
	t := cs.txns.open[key]
	if t == nil || t.discharging {
		ferr := cs.unknownTxn(dis.TxnID)
		cs.mu.Unlock()
		d.Settle(&frames.Rejected{Error: ferr})
		return
	}
	if dis.Fail || t.e == nil {
		// A roll back always succeeds (AMQP 1.0 §4.3); so does a commit of
		// nothing.
		cs.endTxnLocked(key, t)
		cs.mu.Unlock()
		d.Settle(&frames.Accepted{})
		return
	}
	t.discharging = true
	t.timer.Stop()
	cs.mu.Unlock()
	t.e.Commit(t.work, func(err error) {
		// On the entity's actor or log writer: nothing here waits.
		cs.mu.Lock()
		delete(cs.txns.open, key)
		cs.mu.Unlock()
		if err != nil {
			cancelHeld(t.e, t.work.Schedules)
			d.Settle(&frames.Rejected{Error: &frames.Error{Condition: condTxnRollback,
				Description: fmt.Sprintf("the transaction was rolled back: %s", describe(err))}})
			return
		}
		for _, td := range t.settled {
			td.rl.forget(td.id)
			if !td.settled {
				td.rl.l.Settle(td.id, td.state)
			}
		}
		d.Settle(&frames.Accepted{})
	})
}

// joinTxn finds the open transaction id names for work on e, which
// becomes its entity if it has none: the error to answer with, or nil
// with cs.mu held (the caller adds its work and unlocks).
func (cs *connState) joinTxn(id []byte, e *broker.Entity, ops int) (*txn, *frames.Error) {
	cs.mu.Lock()
	t := cs.txns.open[string(id)]
	var ferr *frames.Error
	switch {
	case t == nil || t.discharging:
		ferr = cs.unknownTxn(id)
	case t.e != nil && t.e != e:
		ferr = &frames.Error{Condition: condNotAllowed, Description: txnSpanText}
	case t.work.Ops()+ops > broker.MaxTxOps:
		ferr = &frames.Error{Condition: condResourceLimit,
			Description: fmt.Sprintf("a transaction holds at most %d operations", broker.MaxTxOps)}
	}
	if ferr != nil {
		cs.mu.Unlock()
		return nil, ferr
	}
	t.e = e
	return t, nil
}

// txnSend adds a transactional transfer's messages to its transaction and
// gives the provisional outcome (AMQP 1.0 §4.4.1): accepted, to take
// effect at commit. Messages sent through a via-entity are work on it,
// whatever their destination.
func (sl *senderLink) txnSend(d transport.Delivery, ts *frames.TransactionalState, msgs []broker.Message) {
	t, ferr := sl.cs.joinTxn(ts.TxnID, sl.e, len(msgs))
	if ferr != nil {
		d.Settle(&frames.Rejected{Error: ferr})
		return
	}
	if sl.to != "" {
		t.work.Transfers = append(t.work.Transfers, broker.TxTransfer{To: sl.to, Messages: msgs})
	} else {
		t.work.Sends = append(t.work.Sends, broker.TxSend{Queue: sl.queue, Messages: msgs})
	}
	sl.cs.mu.Unlock()
	d.Settle(&frames.TransactionalState{TxnID: bytes.Clone(ts.TxnID), Outcome: &frames.Accepted{}})
}

// txnSettle adds a transactional disposition to its transaction; the lock
// stays held until the commit settles it.
func (rl *receiverLink) txnSettle(id uint32, token broker.LockToken, ts *frames.TransactionalState, settled bool) {
	answer := func(ferr *frames.Error) {
		if !settled {
			rl.l.Settle(id, &frames.Rejected{Error: ferr})
		}
	}
	s, err := settlement(ts.Outcome)
	if err != nil {
		answer(linkError(err))
		return
	}
	s.Token = token
	t, ferr := rl.cs.joinTxn(ts.TxnID, rl.e, 1)
	if ferr != nil {
		answer(ferr)
		return
	}
	t.work.Settles = append(t.work.Settles, broker.TxSettle{Queue: rl.queue, Settlement: s})
	// The answer, at the commit, must not alias the frame: the outcome
	// goes back without the client's error or annotations (as a plain
	// settlement answers it).
	state := &frames.TransactionalState{TxnID: bytes.Clone(ts.TxnID), Outcome: ts.Outcome}
	switch o := ts.Outcome.(type) {
	case *frames.Rejected:
		state.Outcome = &frames.Rejected{}
	case *frames.Modified:
		state.Outcome = &frames.Modified{DeliveryFailed: o.DeliveryFailed, UndeliverableHere: o.UndeliverableHere}
	}
	t.settled = append(t.settled, txnDisposition{rl: rl, id: id, state: state, settled: settled})
	rl.cs.mu.Unlock()
}

// txnRequest runs a management request sent in a transaction. Settling
// by lock token and scheduling join the transaction; reading operations
// (peek, renew, session state) and receiving deferred messages change
// nothing a roll back would undo and run as they are; the others
// (cancelling a schedule, batch delete, rules) cannot be part of one.
func (cs *connState) txnRequest(t *mgmtTarget, id []byte, req *rpcRequest, reply func(rpcResponse)) {
	switch op := req.prop("operation"); op {
	case "com.microsoft:update-disposition":
		tokens, s, err := dispositionRequest(req.bodyMap())
		if err != nil {
			reply(failure(err))
			return
		}
		txn, ferr := cs.joinTxn(id, t.e, len(tokens))
		if ferr != nil {
			reply(rpcResponse{status: 400, condition: string(ferr.Condition), description: ferr.Description})
			return
		}
		for _, tok := range tokens {
			s.Token = tok
			txn.work.Settles = append(txn.work.Settles, broker.TxSettle{Queue: t.queue, Settlement: s})
		}
		cs.mu.Unlock()
		reply(ok(200, nil))
	case "com.microsoft:schedule-message":
		cs.txnSchedule(t, id, req, reply)
	case "com.microsoft:peek-message", "com.microsoft:renew-lock", "com.microsoft:renew-session-lock",
		"com.microsoft:get-session-state", "com.microsoft:enumerate-rules", "com.microsoft:get-message-sessions",
		"com.microsoft:receive-by-sequence-number":
		// A receive takes locks, which a transaction's settlements then
		// end; the rest read.
		t.handle(req, reply)
	default:
		reply(rpcResponse{status: 501, condition: condNotImplemented,
			description: fmt.Sprintf("operation %q is not supported in a transaction", op)})
	}
}

// isTxn returns a delivery state's transaction, if it has one.
func isTxn(state frames.DeliveryState) (*frames.TransactionalState, bool) {
	ts, ok := state.(*frames.TransactionalState)
	return ts, ok && ts != nil
}

// attachViaSender accepts a sender through a via-entity (send-via,
// docs/compatibility.md §10): the link's target is the via, a queue, and
// its transfer-destination-address property the destination, an entity
// to send to. The client needs Send on both. Its messages go into the
// via's log, in its transaction if they are sent in one, and on to the
// destination after.
func (cs *connState) attachViaSender(l *transport.Link, address string, prop any) {
	to, ok := prop.(string)
	if !ok || to == "" {
		l.Refuse(&frames.Error{Condition: condInvalidField,
			Description: fmt.Sprintf("%s must name the destination, not %v", transferDestinationProp, prop)})
		return
	}
	to = strings.Trim(addressPath(to), "/") // the .NET SDK gives a whole URI (sb://host/queue)
	e, queue, err := cs.resolve(address)
	if err != nil {
		l.Refuse(linkError(err))
		return
	}
	if queue != broker.MainQueue {
		l.Refuse(&frames.Error{Condition: condNotAllowed,
			Description: fmt.Sprintf("a via-entity is a queue; %s is not one", address)})
		return
	}
	dst, dq, err := cs.resolve(to)
	if err != nil {
		l.Refuse(linkError(err))
		return
	}
	if dq != broker.MainQueue {
		l.Refuse(&frames.Error{Condition: condNotAllowed,
			Description: fmt.Sprintf("messages are sent to a queue or a topic; %s is neither", to)})
		return
	}
	if allowed, _ := cs.claims.allows(to, sas.Send, cs.s.cfg.Now()); !allowed {
		l.Refuse(&frames.Error{Condition: condUnauthorized,
			Description: fmt.Sprintf("Unauthorized access. '%s' claim(s) are required to perform this operation on %s.", sas.Send, to)})
		return
	}
	if ferr := cs.authorize(l, address, sas.Send); ferr != nil {
		l.Refuse(ferr)
		return
	}
	if !cs.servedHere(e) {
		cs.passOn(l, e, func(ctx context.Context, node uint64) error {
			return cs.relaySend(ctx, l, node, address, map[string]any{transferDestinationProp: to})
		})
		return
	}
	if err := e.CheckVia(dst.Name()); err != nil {
		cs.refuse(l, linkError(err))
		return
	}
	cfg, err := dst.Config()
	if err != nil {
		cs.refuse(l, linkError(err))
		return
	}
	bindBurst(l, e)
	sl := &senderLink{cs: cs, e: e, queue: broker.MainQueue, to: dst.Name()}
	if err := l.AcceptInbound(&transport.Reply{MaxMessageSize: uint64(cfg.MaxMessageSize)}, sl); err != nil {
		cs.unguard(l)
	}
}
