package amqpserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/message"
	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/amqpserver/transport"
	"github.com/walbus/walbus/broker"
)

// linkError turns a broker error into the error of a refused or detached
// link.
func linkError(err error) *frames.Error {
	cond, _ := classify(err)
	return &frames.Error{Condition: encoding.Symbol(cond), Description: describe(err)}
}

// authorize checks that the connection holds a claim with right on the
// entity a link addresses, and watches the claim's expiry: when it lapses
// without a new token the link is detached.
//
// The claim is checked against the whole address (a dead-letter subqueue is
// "q/$DeadLetterQueue"): the JS SDK puts a token for exactly the address it
// attaches to, and a token for "q" covers everything under it.
func (cs *connState) authorize(l *transport.Link, address string, right sas.Rights) *frames.Error {
	ok, until := cs.claims.allows(address, right, cs.s.cfg.Now())
	if !ok {
		return &frames.Error{Condition: condUnauthorized,
			Description: fmt.Sprintf("Unauthorized access. '%s' claim(s) are required to perform this operation.", right)}
	}
	cs.guard(l, address, right, until)
	return nil
}

// attachSender accepts a link on which the client sends to a queue or a
// topic.
func (cs *connState) attachSender(l *transport.Link, address string) {
	if to, via := l.PeerAttach().Properties.Get(transferDestinationProp); via {
		cs.attachViaSender(l, address, to)
		return
	}
	e, queue, err := cs.resolve(address)
	if err != nil {
		l.Refuse(linkError(err))
		return
	}
	if queue != broker.MainQueue && e.IsTopic() {
		// A subscription takes what its rules pick from the topic's sends
		// (docs/compatibility.md §4).
		l.Refuse(&frames.Error{Condition: condNotAllowed, Description: "Cannot send to a subscription; send to its topic"})
		return
	}
	if ferr := cs.authorize(l, address, sas.Send); ferr != nil {
		l.Refuse(ferr)
		return
	}
	if !cs.servedHere(e) {
		cs.passOn(l, e, func(ctx context.Context, node uint64) error { return cs.relaySend(ctx, l, node, address, nil) })
		return
	}
	cfg, err := e.Config()
	if err != nil {
		cs.refuse(l, linkError(err))
		return
	}
	bindBurst(l, e)
	if err := l.AcceptInbound(&transport.Reply{MaxMessageSize: uint64(cfg.MaxMessageSize)}, &senderLink{cs: cs, e: e, queue: queue}); err != nil {
		cs.unguard(l)
	}
}

// refuse refuses an authorised link, which then needs no watching.
func (cs *connState) refuse(l *transport.Link, err *frames.Error) {
	cs.unguard(l)
	l.Refuse(err)
}

// senderLink stores what the client sends. Each transfer is accepted only
// once its messages are durable, or rejected with the reason.
type senderLink struct {
	cs    *connState
	e     *broker.Entity
	queue uint32
	// to is the destination of a sender through a via-entity (e), or "".
	to string
}

func (sl *senderLink) Detached(l *transport.Link, _ *frames.Error) { sl.cs.unguard(l) }

func (sl *senderLink) Deliver(d transport.Delivery) {
	// The messages alias the transport's buffer, which is reused once
	// Deliver returns; inbound copies what it keeps.
	msgs, err := inbound(d.Payload, d.MessageFormat)
	if err != nil {
		cond := condDecodeError
		if errors.Is(err, message.ErrNullAnnotation) {
			// Well formed but refused: a condition the SDKs treat as
			// final, not as a broken connection to recover.
			cond = condNotAllowed
		}
		d.Settle(&frames.Rejected{Error: &frames.Error{Condition: encoding.Symbol(cond), Description: err.Error()}})
		return
	}
	if ts, ok := isTxn(d.State); ok {
		sl.txnSend(d, ts, msgs)
		return
	}
	done := func(err error) {
		if err != nil {
			d.Settle(&frames.Rejected{Error: linkError(err)})
			return
		}
		d.Settle(&frames.Accepted{})
	}
	if sl.to != "" {
		sl.e.SendVia(sl.to, msgs, done)
		return
	}
	sl.e.Send(sl.queue, msgs, done)
}

// The session filter key and the descriptor the Go SDK wraps it in
// (docs/compatibility.md §9), and the attach property of a sender through
// a via-entity (§10).
const (
	transferDestinationProp = "com.microsoft:transfer-destination-address"
	sessionFilterKey        = "com.microsoft:session-filter"
	lockedUntilUTCProp      = "com.microsoft:locked-until-utc"
	timeoutProp             = "com.microsoft:timeout"
)

// attachReceiver accepts a link on which the client receives from a queue,
// a subscription or one of their dead-letter subqueues; with a session
// filter it is a session receiver, answered once a session is locked for
// it.
func (cs *connState) attachReceiver(l *transport.Link, address string) {
	e, queue, err := cs.resolve(address)
	if err != nil {
		l.Refuse(linkError(err))
		return
	}
	if queue == broker.MainQueue && e.IsTopic() {
		// A topic holds nothing to receive: amqp:not-allowed, which the
		// SDKs take as final rather than retry (docs/compatibility.md §4).
		l.Refuse(&frames.Error{Condition: condNotAllowed,
			Description: fmt.Sprintf("Cannot receive from a topic; use %s/Subscriptions/<name>", e.Name())})
		return
	}
	if ferr := cs.authorize(l, address, sas.Listen); ferr != nil {
		l.Refuse(ferr)
		return
	}
	if !cs.servedHere(e) {
		cs.passOn(l, e, func(ctx context.Context, node uint64) error { return cs.relayReceive(ctx, l, node, address) })
		return
	}
	a := l.PeerAttach()
	mode := broker.PeekLock
	if l.SndSettleMode() == frames.SenderSettleSettled {
		mode = broker.ReceiveAndDelete
	}
	var filter any
	sessions := false
	if a.Source != nil {
		filter, sessions = a.Source.Filter.Get(sessionFilterKey)
	}
	rl := &receiverLink{cs: cs, l: l, e: e, queue: queue, mode: mode, unsettled: make(map[uint32]broker.LockToken)}
	bindBurst(l, e)
	r, err := e.Attach(broker.ReceiverOptions{Queue: queue, Name: l.Name(), Mode: mode, Sessions: sessions,
		Deliver: rl.deliver, Lost: rl.lost})
	if err != nil {
		cs.refuse(l, linkError(err))
		return
	}
	rl.r = r
	if !sessions {
		rl.accept(nil)
		return
	}
	wanted := sessionFilterID(filter)
	wait := cs.s.cfg.SessionWait
	if v, found := a.Properties.Get(timeoutProp); found {
		if ms, isNum := asInt64(v); isNum && ms > 0 {
			// The client's own deadline follows its timeout closely (the
			// Go SDK asks for its deadline less at most 100 ms): answer a
			// little early, so the timeout reaches it before the deadline
			// does, even on a busy machine.
			asked := time.Duration(ms) * time.Millisecond
			wait = asked - min(asked/10, time.Second)
		}
	}
	if wanted != "" {
		wait = 0 // a named session is granted or refused at once
	}
	r.AcceptSession(wanted, wait, func(lock broker.SessionLock, err error) {
		// This runs on the entity's actor, which must not wait for itself:
		// what follows calls the receiver, which posts to that actor and
		// would block with its queue full (docs/architecture.md#threading-contract).
		go cs.sessionAccepted(l, r, rl, a, filter, lock, err)
	})
}

// sessionAccepted answers a session receiver's attach once the broker has
// locked a session for it, or refuses it.
func (cs *connState) sessionAccepted(l *transport.Link, r *broker.Receiver, rl *receiverLink, a *frames.Attach, filter any, lock broker.SessionLock, err error) {
	if err != nil {
		r.Detach(nil)
		cs.refuse(l, linkError(err))
		return
	}
	rl.mu.Lock()
	rl.session = lock.SessionID
	rl.mu.Unlock()
	src := *a.Source
	src.Filter = slices.Clone(a.Source.Filter)
	src.Filter = src.Filter.Set(encoding.Symbol(sessionFilterKey), echoFilter(filter, broker.ClientSessionID(lock.SessionID)))
	rl.accept(&transport.Reply{Source: &src,
		Properties: encoding.Map{{Key: encoding.Symbol(lockedUntilUTCProp), Value: dotNetTicks(lock.LockedUntil)}}})
}

// sessionFilterID returns the session a filter names, or "" for the next
// available one. The Go SDK sends described(0x137000000C, id or null), the
// JS SDK a plain string or null: null asks for the next session, a string
// names one, "" included.
func sessionFilterID(filter any) string {
	v := filter
	if d, isDescribed := filter.(encoding.Described); isDescribed {
		v = d.Value
	}
	s, named := v.(string)
	if !named {
		return ""
	}
	return broker.SessionIDOf(s)
}

// echoFilter answers a session filter in the form the client used, with the
// session actually locked.
func echoFilter(filter any, session string) any {
	if d, isDescribed := filter.(encoding.Described); isDescribed {
		return encoding.Described{Descriptor: d.Descriptor, Value: session}
	}
	return session
}

// dotNetTicks is a unix-ns time as .NET ticks (100 ns since 0001-01-01).
func dotNetTicks(ns int64) int64 { return ns/100 + 621355968000000000 }

// receiverLink hands a broker receiver's messages to the client.
type receiverLink struct {
	cs    *connState
	l     *transport.Link
	e     *broker.Entity
	queue uint32
	mode  broker.Mode
	r     *broker.Receiver

	mu        sync.Mutex
	session   string                      // the session it holds, for session receivers
	unsettled map[uint32]broker.LockToken // delivery-id -> lock, peek-lock deliveries not yet settled
	held      []broker.Delivery           // deliveries waiting for credit
	closed    bool
	scratch   []byte // the payload being sent; Send copies it out
}

// accept answers the attach and starts receiving with the credit the
// client granted meanwhile. The link is known to $management before its
// answer leaves: a client that peeks, or asks for its session's state,
// right after the attach names it as the associated link (a session
// receiver is answered from another goroutine than the one reading its
// requests).
func (rl *receiverLink) accept(reply *transport.Reply) {
	name := rl.l.Name()
	rl.cs.mu.Lock()
	if rl.cs.receivers == nil {
		rl.cs.receivers = make(map[string]*receiverLink)
	}
	rl.cs.receivers[name] = rl
	rl.cs.mu.Unlock()
	if err := rl.l.AcceptOutbound(reply, rl); err != nil {
		rl.cs.mu.Lock()
		if rl.cs.receivers[name] == rl {
			delete(rl.cs.receivers, name)
		}
		rl.cs.mu.Unlock()
		rl.r.Detach(nil)
		rl.cs.unguard(rl.l)
		return
	}
	rl.Credit(rl.l, rl.l.Credit())
}

// Credit passes the client's credit to the broker receiver. The two count
// the same deliveries: every broker delivery is sent on this link. The
// link's delivery-count also counts credit given up by drains, which the
// broker never handed out, so that part is taken off (a JS client drains
// after nearly every receiveMessages call with credit left: counted as
// deliveries, it let the broker lock messages the link had no credit for).
func (rl *receiverLink) Credit(l *transport.Link, c transport.Credit) {
	rl.mu.Lock()
	rl.sendHeld()
	rl.mu.Unlock()
	rl.r.SetLimit(c.Limit - c.Drained)
	if c.Drain {
		rl.r.Drain(func(uint64) {
			rl.mu.Lock()
			rl.sendHeld()
			rl.mu.Unlock()
			l.Drained()
		})
		return
	}
}

// deliver sends one broker delivery, from a broker goroutine. One that
// arrives after the link closed (the broker took it before the link's
// detach reached it) goes back: a receive-and-delete delivery is already
// removed from the queue and would be lost, and a peek-lock one would stay
// locked, unseen, until its lock ran out and then count a delivery.
func (rl *receiverLink) deliver(d broker.Delivery) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.closed {
		// deliver runs on the entity's actor, which must not wait for
		// itself: Restore and Unsent post to it, so they go on their own
		// goroutine (docs/architecture.md#threading-contract).
		if rl.mode == broker.ReceiveAndDelete {
			go rl.e.Restore([]broker.Delivery{d}, nil)
		} else {
			go rl.r.Unsent([]broker.LockToken{d.Token})
		}
		return
	}
	rl.held = append(rl.held, d)
	rl.sendHeld()
}

// sendHeld sends the held deliveries while credit lasts. rl.mu is held.
func (rl *receiverLink) sendHeld() {
	for len(rl.held) > 0 && !rl.closed {
		d := &rl.held[0]
		payload, err := outbound(rl.scratch[:0], d)
		if cap(payload) <= maxScratch {
			rl.scratch = payload
		}
		if err != nil {
			rl.cs.s.logger.Error("cannot encode a delivery", "entity", rl.e.Name(), "seq", d.Seq, "err", err)
			rl.l.Close(&frames.Error{Condition: condInternal, Description: "cannot encode a delivery"})
			return
		}
		var tag []byte
		if d.Token != (broker.LockToken{}) {
			t := deliveryTag(d.Token)
			tag = t[:]
		} else {
			tag = []byte(fmt.Sprint(d.Seq))
		}
		id, err := rl.l.Send(tag, 0, payload, rl.mode == broker.ReceiveAndDelete)
		if err != nil {
			return // no credit now; Credit sends the rest
		}
		if rl.mode == broker.PeekLock {
			rl.unsettled[id] = d.Token
		}
		rl.held[0] = broker.Delivery{}
		rl.held = rl.held[1:]
	}
}

// Disposition settles a delivery the client disposed of, and answers with
// the outcome or with message-lock-lost.
func (rl *receiverLink) Disposition(l *transport.Link, id uint32, state frames.DeliveryState, settled bool) {
	rl.mu.Lock()
	token, known := rl.unsettled[id]
	ts, transactional := isTxn(state)
	if !transactional {
		delete(rl.unsettled, id)
	}
	rl.mu.Unlock()
	if known && transactional {
		// The lock stays held, and the delivery known, until the commit.
		rl.txnSettle(id, token, ts, settled)
		return
	}
	if !known {
		if !settled {
			l.Settle(id, &frames.Rejected{Error: &frames.Error{Condition: condLockLost, Description: describe(broker.ErrLockLost)}})
		}
		return
	}
	s, err := settlement(state)
	if err != nil {
		if !settled {
			l.Settle(id, &frames.Rejected{Error: linkError(err)})
		}
		return
	}
	s.Token = token
	rl.e.Settle(rl.queue, s, func(err error) {
		if settled {
			return
		}
		if err != nil {
			l.Settle(id, &frames.Rejected{Error: linkError(err)})
			return
		}
		if _, deadLettered := state.(*frames.Rejected); deadLettered {
			// A rejected outcome carrying an error reads as a failed
			// settlement to go-amqp; Service Bus answers a dead-letter with
			// a bare rejected.
			state = &frames.Rejected{}
		}
		l.Settle(id, state)
	})
}

// forget drops a delivery a transaction settled.
func (rl *receiverLink) forget(id uint32) {
	rl.mu.Lock()
	delete(rl.unsettled, id)
	rl.mu.Unlock()
}

// settlement maps a disposition state to a broker outcome
// (docs/compatibility.md §5): accepted completes, released releases,
// modified abandons or, with undeliverable-here, defers, and rejected
// dead-letters with the reason and description of its error info.
func settlement(state frames.DeliveryState) (broker.Settlement, error) {
	var s broker.Settlement
	switch st := state.(type) {
	case *frames.Accepted:
		s.Outcome = broker.Complete
	case *frames.Released:
		s.Outcome = broker.Release
	case *frames.Modified:
		s.Outcome = broker.Abandon
		if st.UndeliverableHere {
			s.Outcome = broker.Defer
		}
		if len(st.MessageAnnotations) > 0 {
			props, err := encoding.AppendAny(nil, st.MessageAnnotations)
			if err != nil {
				return s, fmt.Errorf("%w: properties to modify: %v", broker.ErrInvalid, err)
			}
			s.Props = props
		}
	case *frames.Rejected:
		s.Outcome = broker.DeadLetter
		if st.Error != nil {
			var rest encoding.Map
			for _, kv := range st.Error.Info {
				key, _ := kv.Key.(encoding.Symbol)
				if skey, isStr := kv.Key.(string); isStr {
					key = encoding.Symbol(skey)
				}
				switch key {
				case propDeadLetterReason:
					s.Reason, _ = kv.Value.(string)
				case propDeadLetterDescription:
					s.Description, _ = kv.Value.(string)
				default:
					rest = append(rest, encoding.MapEntry{Key: string(key), Value: kv.Value})
				}
			}
			if len(rest) > 0 {
				props, err := encoding.AppendAny(nil, rest)
				if err != nil {
					return s, fmt.Errorf("%w: dead-letter properties: %v", broker.ErrInvalid, err)
				}
				s.Props = props
			}
		}
	default:
		return s, fmt.Errorf("%w: disposition state %T", broker.ErrInvalid, state)
	}
	return s, nil
}

// lost detaches the link when its broker receiver can no longer receive
// (session lock lost, entity deleted or failed).
func (rl *receiverLink) lost(err error) {
	var ferr *frames.Error
	switch {
	case errors.Is(err, broker.ErrSessionLockLost):
		ferr = &frames.Error{Condition: condSessionLockLost, Description: err.Error()}
	case errors.Is(err, broker.ErrClosed):
		ferr = &frames.Error{Condition: condDetachForced, Description: err.Error()}
	default:
		ferr = linkError(err)
	}
	rl.l.Close(ferr)
}

// Detached lets the broker receiver go. Deliveries that never left (held
// for credit) are released without counting a delivery, or, taken by
// receive-and-delete, restored; those sent keep their locks until settled
// or expired.
func (rl *receiverLink) Detached(l *transport.Link, _ *frames.Error) {
	rl.mu.Lock()
	rl.closed = true
	var unsent []broker.LockToken
	var removed []broker.Delivery
	for _, d := range rl.held {
		switch {
		case d.Token != (broker.LockToken{}):
			unsent = append(unsent, d.Token)
		case rl.mode == broker.ReceiveAndDelete:
			removed = append(removed, d)
		}
	}
	rl.held = nil
	rl.mu.Unlock()
	if len(removed) > 0 {
		rl.e.Restore(removed, nil)
	}
	rl.r.Detach(unsent)
	rl.cs.mu.Lock()
	if rl.cs.receivers[l.Name()] == rl {
		delete(rl.cs.receivers, l.Name())
	}
	rl.cs.mu.Unlock()
	rl.cs.unguard(l)
}

// NewBracket is the broker.Options.NewBracket that lets the links of an
// entity write what its actor and log writer send them in one syscall per
// connection and run (transport.Burst).
func NewBracket() broker.Bracket { return transport.NewBurst() }

// bindBurst binds l to its entity's burst, if the broker has them.
func bindBurst(l *transport.Link, e *broker.Entity) {
	if b, ok := e.Bracket().(*transport.Burst); ok {
		l.SetBurst(b)
	}
}
