package amqpserver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/transport"
	"github.com/walbus/walbus/broker"
)

// sessionFilterCode is the descriptor the Go SDK gives its session filter
// (docs/compatibility.md §9), which go-amqp needs for every filter.
const sessionFilterCode uint64 = 0x137000000C

// relayReceive answers the attach of a client's receiver l, from source,
// by attaching a receiver to the same address at node, with the client's
// settle mode, session filter and com.microsoft:timeout. A session
// receiver's answer carries what the leader's said: the session it
// locked, in the filter's form the client used, and the lock's expiry.
// When node cannot be reached or refuses, it returns the error and leaves
// the attach to passOn.
func (cs *connState) relayReceive(ctx context.Context, l *transport.Link, node uint64, source string) error {
	a := l.PeerAttach()
	settled := l.SndSettleMode() == frames.SenderSettleSettled
	opts := &amqp.ReceiverOptions{Name: relayName(l), Credit: -1, SettlementMode: amqp.ReceiverSettleModeSecond.Ptr()}
	if settled {
		opts.RequestedSenderSettleMode = amqp.SenderSettleModeSettled.Ptr()
		opts.SettlementMode = amqp.ReceiverSettleModeFirst.Ptr()
	}
	var filter any
	sessions := false
	if a.Source != nil {
		filter, sessions = a.Source.Filter.Get(sessionFilterKey)
	}
	wait := relayAttachTimeout
	if sessions {
		opts.Filters = []amqp.LinkFilter{sessionLinkFilter(filter)}
		wait += cs.s.cfg.SessionWait
	}
	if v, found := a.Properties.Get(timeoutProp); found {
		if ms, isNum := asInt64(v); isNum && ms > 0 {
			opts.Properties = map[string]any{timeoutProp: ms}
			wait = relayAttachTimeout + time.Duration(ms)*time.Millisecond
		}
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	sess, err := cs.s.relays.session(ctx, node)
	if err != nil {
		return err
	}
	in, err := sess.NewReceiver(ctx, source, opts)
	if err != nil {
		closeSession(sess)
		return err
	}
	var reply *transport.Reply
	if sessions {
		reply = relayedSession(a, filter, in)
	}
	rr := &relayReceiver{cs: cs, l: l, node: node, sess: sess, in: in, settled: settled,
		sent: make(map[uint32]*amqp.Message), pumped: make(chan struct{})}
	rr.ctx, rr.stop = context.WithCancel(context.Background())
	cs.setRelayName(l.Name(), relayName(l))
	if err := l.AcceptOutbound(reply, rr); err != nil {
		rr.stop()
		close(rr.pumped)
		cs.setRelayName(l.Name(), "")
		closeSession(sess)
		cs.unguard(l)
		return nil
	}
	go rr.pump()
	return nil
}

// sessionLinkFilter is the client's session filter as go-amqp sends it:
// described, by the client's descriptor if it gave a code, else by the Go
// SDK's.
func sessionLinkFilter(filter any) amqp.LinkFilter {
	code, v := sessionFilterCode, filter
	if d, isDescribed := filter.(encoding.Described); isDescribed {
		v = d.Value
		if c, isCode := d.Descriptor.(uint64); isCode {
			code = c
		}
	}
	return amqp.NewLinkFilter(sessionFilterKey, code, v)
}

// relayedSession is the answer to a session receiver's attach passed on:
// the session the leader locked, in the form the client used, and the
// leader's com.microsoft:locked-until-utc (sessionAccepted).
func relayedSession(a *frames.Attach, filter any, in *amqp.Receiver) *transport.Reply {
	session, _ := in.LinkSourceFilterValue(sessionFilterKey).(string)
	src := *a.Source
	src.Filter = slices.Clone(a.Source.Filter).Set(encoding.Symbol(sessionFilterKey), echoFilter(filter, session))
	reply := &transport.Reply{Source: &src}
	if until, found := in.Properties()[lockedUntilUTCProp]; found {
		reply.Properties = encoding.Map{{Key: encoding.Symbol(lockedUntilUTCProp), Value: until}}
	}
	return reply
}

// setRelayName records the name a client's receive link has at the
// leader, for the $management requests that name it ("" forgets it).
func (cs *connState) setRelayName(name, relayed string) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if relayed == "" {
		delete(cs.passedOn, name)
		return
	}
	if cs.passedOn == nil {
		cs.passedOn = make(map[string]string)
	}
	cs.passedOn[name] = relayed
}

// relayedName is the name a client's receive link has at the leader, if
// it is passed on.
func (cs *connState) relayedName(name string) (string, bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	relayed, ok := cs.passedOn[name]
	return relayed, ok
}

// relayReceiver passes a client's receive link on to the entity's leader:
// a go-amqp receiver there on manual credit, which follows the client's.
// Each message goes to the client with the leader's delivery tag (its lock
// token, which settlement through $management names) and message format,
// and the client's dispositions settle it at the leader.
//
// Its pump goroutine owns held and credit; Credit only wakes it.
type relayReceiver struct {
	cs       *connState
	l        *transport.Link
	node     uint64
	sess     *amqp.Session
	in       *amqp.Receiver
	settled  bool               // receive-and-delete: the leader's deliveries come settled
	ctx      context.Context    // done once the client's link is
	stop     context.CancelFunc //
	settling sync.WaitGroup     // settlements under way at the leader
	pumped   chan struct{}      // closed when the pump has ended

	mu    sync.Mutex
	sent  map[uint32]*amqp.Message // client delivery-id -> the leader's message, not yet settled
	wake  context.CancelFunc       // ends the pump's wait for a message; nil while it does not wait
	woken bool                     // the credit changed while the pump was not waiting

	held   []*amqp.Message // received from the leader, waiting for the client's credit
	credit uint64          // credit the leader has from us and has not used, as far as we know
}

// pump moves messages from the leader to the client and the client's
// credit to the leader, until the client's link or the leader's ends.
func (rr *relayReceiver) pump() {
	defer close(rr.pumped)
	defer func() { _ = rr.releaseHeld() }()
	for {
		rr.forward()
		if err := rr.follow(rr.l.Credit()); err != nil {
			rr.fail(err)
			return
		}
		msg, err := rr.next()
		switch {
		case rr.ctx.Err() != nil:
			return
		case errors.Is(err, context.Canceled):
			continue // woken: the client's credit changed
		case err != nil:
			rr.fail(err)
			return
		}
		if rr.credit > 0 {
			rr.credit--
		}
		rr.held = append(rr.held, msg)
	}
}

// follow makes the leader's credit what the client's allows. The leader is
// drained when the client drains, and when the client's credit no longer
// covers what the leader may still send (a go-amqp client's drain takes
// its credit back at once, answered before the pump hears of it);
// otherwise it gets the client's credit that the messages held do not use.
func (rr *relayReceiver) follow(c transport.Credit) error {
	if c.Drain || c.Available() < uint64(len(rr.held))+rr.credit {
		if err := rr.drain(); err != nil {
			return err
		}
		if c.Drain {
			rr.l.Drained()
		}
		c = rr.l.Credit()
	}
	if avail := c.Available(); avail > uint64(len(rr.held))+rr.credit {
		more := min(avail-uint64(len(rr.held))-rr.credit, math.MaxUint32)
		if err := rr.in.IssueCredit(uint32(more)); err != nil {
			return err
		}
		rr.credit += more
	}
	return nil
}

// drain takes the leader's credit back. What the leader sent meanwhile
// goes to the client while its credit lasts; peek-lock messages left over
// go back to the leader.
func (rr *relayReceiver) drain() error {
	if rr.credit > 0 {
		ctx, cancel := context.WithTimeout(rr.ctx, relayOpTimeout)
		err := rr.in.DrainCredit(ctx, nil)
		cancel()
		if err != nil {
			return err
		}
		rr.credit = 0
		for msg := rr.in.Prefetched(); msg != nil; msg = rr.in.Prefetched() {
			rr.held = append(rr.held, msg)
		}
	}
	rr.forward()
	return rr.releaseHeld()
}

// next waits for the leader's next message, or until Credit wakes it
// (context.Canceled).
func (rr *relayReceiver) next() (*amqp.Message, error) {
	rr.mu.Lock()
	if rr.woken {
		rr.woken = false
		rr.mu.Unlock()
		return nil, context.Canceled
	}
	ctx, cancel := context.WithCancel(rr.ctx)
	rr.wake = cancel
	rr.mu.Unlock()
	msg, err := rr.in.Receive(ctx, nil)
	rr.mu.Lock()
	rr.wake = nil
	rr.mu.Unlock()
	cancel()
	return msg, err
}

// forward sends the held messages while the client's credit lasts.
func (rr *relayReceiver) forward() {
	for len(rr.held) > 0 {
		msg := rr.held[0]
		payload, err := msg.MarshalBinary()
		if err != nil {
			rr.l.Close(&frames.Error{Condition: condInternal, Description: "cannot encode a message from the leader: " + err.Error()})
			return
		}
		// Under mu: the client's disposition of it finds it.
		rr.mu.Lock()
		id, err := rr.l.Send(msg.DeliveryTag, msg.Format, payload, rr.settled)
		if err == nil && !rr.settled {
			rr.sent[id] = msg
		}
		rr.mu.Unlock()
		if err != nil {
			return // no credit now; Credit wakes the pump
		}
		rr.held[0] = nil
		rr.held = rr.held[1:]
	}
}

// releaseHeld gives the leader back the peek-lock messages held, without
// counting a delivery. A receive-and-delete message is the client's
// already: it stays held for the client's next credit, and is lost if the
// link closes first, as one a client's link takes just before it closes.
func (rr *relayReceiver) releaseHeld() error {
	if rr.settled || len(rr.held) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), relayOpTimeout)
	defer cancel()
	for len(rr.held) > 0 {
		if err := rr.in.ReleaseMessage(ctx, rr.held[0]); err != nil {
			return err
		}
		rr.held[0] = nil
		rr.held = rr.held[1:]
	}
	return nil
}

// fail detaches the client's link when the leader's failed or was detached
// (the leader died, stepped down, or lost the session's lock). A leader's
// server-busy becomes detach-forced: the Go SDK attaches again after a
// detach-forced, and not after a server-busy, which it takes for a refused
// operation to try again on the same link.
func (rr *relayReceiver) fail(err error) {
	ferr := relayError(rr.node, err)
	if ferr.Condition == condServerBusy {
		ferr.Condition = condDetachForced
	}
	rr.l.Close(ferr)
}

// Credit wakes the pump, which reads the client's credit itself.
func (rr *relayReceiver) Credit(*transport.Link, transport.Credit) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if rr.wake != nil {
		rr.wake()
		return
	}
	rr.woken = true
}

// Disposition settles a message at the leader as the client settled it
// (settlement in links.go reads the same states), and answers with the
// leader's outcome or error.
func (rr *relayReceiver) Disposition(l *transport.Link, id uint32, state frames.DeliveryState, settled bool) {
	if _, transactional := isTxn(state); transactional {
		if !settled {
			l.Settle(id, &frames.Rejected{Error: notPassedOn(rr.node)})
		}
		return
	}
	rr.mu.Lock()
	msg := rr.sent[id]
	delete(rr.sent, id)
	rr.mu.Unlock()
	if msg == nil {
		if !settled {
			l.Settle(id, &frames.Rejected{Error: &frames.Error{Condition: condLockLost, Description: describe(broker.ErrLockLost)}})
		}
		return
	}
	rr.settling.Add(1)
	go func() {
		defer rr.settling.Done()
		ferr := rr.settle(msg, state)
		if settled {
			return
		}
		if ferr != nil {
			l.Settle(id, &frames.Rejected{Error: ferr})
			return
		}
		if _, deadLettered := state.(*frames.Rejected); deadLettered {
			state = &frames.Rejected{} // as links.go answers a dead-letter
		}
		l.Settle(id, state)
	}()
}

// settle applies a client's disposition state to msg at the leader.
func (rr *relayReceiver) settle(msg *amqp.Message, state frames.DeliveryState) *frames.Error {
	ctx, cancel := context.WithTimeout(context.Background(), relayOpTimeout)
	defer cancel()
	var err error
	switch st := state.(type) {
	case *frames.Accepted:
		err = rr.in.AcceptMessage(ctx, msg)
	case *frames.Released:
		err = rr.in.ReleaseMessage(ctx, msg)
	case *frames.Modified:
		annotations, cerr := goAMQPAnnotations(st.MessageAnnotations)
		if cerr != nil {
			return linkError(fmt.Errorf("%w: properties to modify: %v", broker.ErrInvalid, cerr))
		}
		err = rr.in.ModifyMessage(ctx, msg, &amqp.ModifyMessageOptions{DeliveryFailed: st.DeliveryFailed,
			UndeliverableHere: st.UndeliverableHere, Annotations: annotations})
	case *frames.Rejected:
		reason, cerr := goAMQPError(st.Error)
		if cerr != nil {
			return linkError(fmt.Errorf("%w: dead-letter properties: %v", broker.ErrInvalid, cerr))
		}
		err = rr.in.RejectMessage(ctx, msg, reason)
	default:
		return linkError(fmt.Errorf("%w: disposition state %T", broker.ErrInvalid, state))
	}
	if err != nil {
		return relayError(rr.node, err)
	}
	return nil
}

// Detached ends the pump and, once it has ended and the settlements under
// way are done, the session at the leader, whose link then keeps the locks
// of the messages sent until they are settled or run out, as a client's
// link does when it detaches.
func (rr *relayReceiver) Detached(l *transport.Link, _ *frames.Error) {
	rr.stop()
	rr.cs.setRelayName(l.Name(), "")
	rr.cs.unguard(l)
	go func() {
		<-rr.pumped
		rr.settling.Wait()
		closeSession(rr.sess)
	}()
}
