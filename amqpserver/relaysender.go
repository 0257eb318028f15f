package amqpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/transport"
)

// relaySend answers the attach of a client's sender l, to target, by
// attaching a sender to the same address at node, with props in its
// attach (a via-entity's destination); the client is told the leader's
// max-message-size. When node cannot be reached or refuses, it returns
// the error and leaves the attach to passOn.
func (cs *connState) relaySend(ctx context.Context, l *transport.Link, node uint64, target string, props map[string]any) error {
	ctx, cancel := context.WithTimeout(ctx, relayAttachTimeout)
	defer cancel()
	sess, err := cs.s.relays.session(ctx, node)
	if err != nil {
		return err
	}
	out, err := sess.NewSender(ctx, target, &amqp.SenderOptions{Name: relayName(l), Properties: props,
		SettlementMode: amqp.SenderSettleModeUnsettled.Ptr(), RequestedReceiverSettleMode: amqp.ReceiverSettleModeFirst.Ptr()})
	if err != nil {
		closeSession(sess)
		return err
	}
	rs := &relaySender{cs: cs, node: node, sess: sess, out: out}
	if err := l.AcceptInbound(&transport.Reply{MaxMessageSize: out.MaxMessageSize()}, rs); err != nil {
		closeSession(sess)
		cs.unguard(l)
	}
	return nil
}

// relaySender passes the transfers of a client's sender on to the
// entity's leader, in the order they came, and settles each with the
// leader's outcome, even after the client's detach (whose outcome it may
// still await).
type relaySender struct {
	cs       *connState
	node     uint64
	sess     *amqp.Session
	out      *amqp.Sender
	order    serial
	inFlight sync.WaitGroup // transfers not yet settled
}

func (rs *relaySender) Deliver(d transport.Delivery) {
	if _, ok := isTxn(d.State); ok {
		d.Settle(&frames.Rejected{Error: notPassedOn(rs.node)})
		return
	}
	msg := new(amqp.Message)
	if err := msg.UnmarshalBinary(bytes.Clone(d.Payload)); err != nil {
		d.Settle(&frames.Rejected{Error: &frames.Error{Condition: condDecodeError, Description: err.Error()}})
		return
	}
	msg.Format = d.MessageFormat // a Service Bus batch stays one
	rs.inFlight.Add(1)
	rs.order.do(func() { rs.send(d, msg) })
}

// send sends one message at the leader, and waits for the leader's outcome
// on a goroutine of its own, so that the next message need not wait.
func (rs *relaySender) send(d transport.Delivery, msg *amqp.Message) {
	ctx, cancel := context.WithTimeout(context.Background(), relayOpTimeout)
	receipt, err := rs.out.SendWithReceipt(ctx, msg, nil)
	if err != nil {
		cancel()
		rs.failed(d, err)
		rs.inFlight.Done()
		return
	}
	go func() {
		defer rs.inFlight.Done()
		defer cancel()
		state, err := receipt.Wait(ctx)
		if err != nil {
			rs.failed(d, err)
			return
		}
		rs.settle(d, state)
	}()
}

// settle gives the client the leader's outcome. A leader that answers
// server-busy no longer leads: the client's link is detached too, so that
// its next attach finds the new leader.
func (rs *relaySender) settle(d transport.Delivery, state amqp.DeliveryState) {
	switch st := state.(type) {
	case *amqp.StateAccepted:
		d.Settle(&frames.Accepted{})
	case *amqp.StateRejected:
		ferr := &frames.Error{Condition: condInternal, Description: "the entity's leader rejected the message without saying why"}
		if st.Error != nil {
			ferr = &frames.Error{Condition: encoding.Symbol(st.Error.Condition), Description: st.Error.Description}
		}
		d.Settle(&frames.Rejected{Error: ferr})
		if ferr.Condition == condServerBusy {
			d.Link.Close(&frames.Error{Condition: condDetachForced,
				Description: fmt.Sprintf("node %d no longer leads the entity; attach again", rs.node)})
		}
	default:
		d.Settle(&frames.Rejected{Error: &frames.Error{Condition: condInternal,
			Description: fmt.Sprintf("the entity's leader answered %T", state)}})
	}
}

// failed rejects a delivery the leader did not settle. Unless only that
// message was refused (by go-amqp, for its size), the link there is of no
// more use, and the client's is detached.
func (rs *relaySender) failed(d transport.Delivery, err error) {
	ferr := relayError(rs.node, err)
	d.Settle(&frames.Rejected{Error: ferr})
	var amqpErr *amqp.Error
	if errors.As(err, &amqpErr) && amqpErr.Condition == amqp.ErrCondMessageSizeExceeded {
		return
	}
	d.Link.Close(&frames.Error{Condition: condDetachForced, Description: ferr.Description})
}

// Detached ends the session at the leader once the transfers under way are
// settled.
func (rs *relaySender) Detached(l *transport.Link, _ *frames.Error) {
	rs.cs.unguard(l)
	go func() {
		rs.inFlight.Wait()
		closeSession(rs.sess)
	}()
}
