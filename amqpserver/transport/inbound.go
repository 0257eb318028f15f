package transport

import (
	"bytes"
	"fmt"

	"github.com/walbus/walbus/amqpserver/frames"
)

// keepAssemblyBuffer is the largest reassembly buffer a link keeps
// between multi-frame deliveries.
const keepAssemblyBuffer = 1 << 20

// reusable is what a link keeps of a reassembly buffer it is done with:
// the buffer emptied, or nothing if it is over keepAssemblyBuffer, so a
// large message's buffer goes as soon as the message has been handed over
// or dropped.
func reusable(buf []byte) []byte {
	if cap(buf) > keepAssemblyBuffer {
		return nil
	}
	return buf[:0]
}

// assembly is the delivery a link is receiving, frame by frame (§2.6.14).
// Only the reader goroutine touches it.
type assembly struct {
	active  bool
	multi   bool // payload is being copied into buf
	discard bool // past max-message-size: frames are dropped, then it is rejected
	id      uint32
	format  uint32
	settled bool
	state   frames.DeliveryState
	tag     []byte // aliases the frame until multi, then tagBuf
	tagBuf  []byte
	buf     []byte
}

// onTransfer handles one transfer frame (§2.7.5).
func (s *Session) onTransfer(perf, payload []byte) *frames.Error {
	c := s.conn
	t := &c.rxTransfer
	if err := t.Decode(perf); err != nil {
		return newError(CondDecodeError, err.Error())
	}
	if !s.countIncomingFrame() {
		return nil
	}
	l, e := s.linkFor(t.Handle)
	if e != nil || l == nil {
		return e
	}
	switch {
	case l.state == linkPending:
		l.fail(newError(CondTransferLimit, "transfer before the attach completed"))
		return nil
	case !l.inbound:
		l.fail(newError(CondNotAllowed, "transfer on a link where the peer is the receiver"))
		return nil
	}
	a := &l.asm
	if !a.active {
		if !l.beginDelivery(t) {
			return nil
		}
	} else {
		if t.DeliveryID.Present && t.DeliveryID.Value != a.id {
			l.fail(newError(CondNotAllowed, "delivery-id changed within a multi-frame delivery"))
			return nil
		}
		// Later frames: unset means "as before", true is sticky (§2.7.5).
		a.settled = a.settled || t.Settled
		if t.State != nil {
			a.state = cloneState(t.State)
		}
	}
	if t.Aborted {
		// The delivery is discarded and counts as settled (§2.6.14); its
		// credit is spent, so the window can move on.
		l.resetAssembly()
		l.topUp()
		return nil
	}
	if !a.discard && uint64(len(a.buf))+uint64(len(payload)) > l.maxSize {
		a.discard, a.buf = true, reusable(a.buf)
	}
	if a.discard {
		if !t.More {
			l.rejectOversize()
		}
		return nil
	}
	if t.More {
		if !a.multi {
			a.multi = true
			a.tagBuf = append(a.tagBuf[:0], a.tag...)
			a.tag = a.tagBuf
			a.state = cloneState(a.state)
			a.buf = a.buf[:0]
		}
		a.buf = appendGrowing(a.buf, payload)
		return nil
	}
	body := payload
	if a.multi {
		a.buf = appendGrowing(a.buf, payload)
		body = a.buf // alive until Deliver returns
		a.buf = reusable(a.buf)
	}
	a.active = false
	if !l.trackIncoming(a.id, inDelivery{link: l, peerSettled: a.settled}) {
		return nil
	}
	l.inflight++
	c.events = append(c.events, event{kind: evDeliver, in: l.inH, delivery: Delivery{
		Link:          l,
		ID:            a.id,
		Tag:           a.tag,
		MessageFormat: a.format,
		Settled:       a.settled,
		State:         a.state,
		Payload:       body,
	}})
	return nil
}

// beginDelivery checks and counts the first frame of a delivery against
// link credit (§2.6.7) and reports false if the link failed.
func (l *Link) beginDelivery(t *frames.Transfer) bool {
	if !t.DeliveryID.Present {
		l.fail(newError(CondNotAllowed, "first transfer of a delivery without delivery-id"))
		return false
	}
	if l.received >= l.limit {
		l.fail(newError(CondTransferLimit, "transfer without link credit"))
		return false
	}
	l.received++
	l.deliveryCount++
	a := &l.asm
	*a = assembly{
		active:  true,
		id:      t.DeliveryID.Value,
		format:  t.MessageFormat.Or(0),
		settled: t.Settled || l.sndMode == frames.SenderSettleSettled,
		state:   t.State,
		tag:     t.DeliveryTag,
		tagBuf:  a.tagBuf,
		buf:     a.buf[:0],
	}
	return true
}

// resetAssembly drops a partial delivery.
func (l *Link) resetAssembly() {
	a := &l.asm
	a.active, a.multi, a.discard, a.state, a.tag = false, false, false, nil, nil
	a.buf = reusable(a.buf)
}

// trackIncoming records an incoming delivery until the handler settles
// it; a delivery-id still unsettled fails the link (false).
func (l *Link) trackIncoming(id uint32, d inDelivery) bool {
	if old, dup := l.sess.inUnsettled[id]; dup && old.link != nil {
		l.fail(newError(CondNotAllowed, "delivery-id of an unsettled delivery reused"))
		return false
	}
	l.sess.inUnsettled[id] = d
	return true
}

// rejectOversize ends a delivery larger than max-message-size once its
// last frame is in: it is settled as rejected with message-size-exceeded
// and the link stays up. The spec allows detaching the link instead
// (§2.7.3), but the SDKs map the rejection to their message-too-large
// errors, while a JS sender whose link detaches mid-send only times out.
func (l *Link) rejectOversize() {
	a := &l.asm
	id, settled := a.id, a.settled
	l.resetAssembly()
	if !settled {
		l.conn.appendDisposition(l.sess.outChannel, frames.RoleReceiver, id, true, &frames.Rejected{
			Error: newError(CondMessageSizeExceeded, fmt.Sprintf("the message is larger than the link's max-message-size of %d bytes", l.maxSize))})
	}
	l.topUp()
}

// fail detaches the link with an engine-detected link error. Called by
// the reader with mu held.
func (l *Link) fail(err *frames.Error) {
	l.resetAssembly()
	switch l.state {
	case linkPending:
		l.refuse(err)
	case linkAttached:
		if l.conn.writable() {
			l.detach(err)
		}
	}
}

// Settle settles delivery id. On an inbound link it records the handler's
// outcome for an incoming delivery (see Delivery.Settle). On an outbound
// link it answers the peer's unsettled disposition with
// disposition(role=sender, settled=true, state) (§2.6.12 mode second).
// Both also work after the peer's detach for the outcomes it was awaiting
// then (its unsettled transfers, its unsettled dispositions): the
// detach's answer waits for the last of them. Settling an already
// settled or unknown delivery returns ErrUnknownDelivery and sends
// nothing.
func (l *Link) Settle(id uint32, state frames.DeliveryState) error {
	c := l.conn
	c.mu.Lock()
	c.writeState.enterBurst(l.burst)
	defer func() {
		c.writeState.leaveBurst()
		c.mu.Unlock()
	}()
	_, owed := l.awaiting[id]
	switch {
	case l.state == linkPending:
		return ErrNotAttached
	case l.state == linkAnswering && owed && c.writable():
		// An outcome the peer asked for before it detached.
	case l.state != linkAttached || !c.writable():
		return ErrLinkClosed
	}
	s := l.sess
	if !l.inbound {
		if s.outUnsettled[id].link != l {
			return ErrUnknownDelivery
		}
		delete(s.outUnsettled, id)
		delete(l.awaiting, id)
		c.appendDisposition(s.outChannel, frames.RoleSender, id, true, state)
		l.answered()
		return nil
	}
	d, ok := s.inUnsettled[id]
	if !ok || d.link != l {
		return ErrUnknownDelivery
	}
	if l.state == linkAnswering {
		// The peer detached and awaits this outcome before our detach.
		delete(s.inUnsettled, id)
		delete(l.awaiting, id)
		c.appendDisposition(s.outChannel, frames.RoleReceiver, id, true, state)
		l.answered()
		return nil
	}
	l.inflight--
	delete(s.inUnsettled, id)
	if !d.peerSettled {
		// Settled even when the peer asked for rcv-settle-mode second,
		// as Service Bus does: uAMQP (the Python SDK) waits for a
		// settled disposition and never settles after an unsettled one.
		c.appendDisposition(s.outChannel, frames.RoleReceiver, id, true, state)
	}
	l.topUp()
	return nil
}

// topUp grants more credit once the handler has settled enough (§2.6.7).
// The peer may keep window deliveries outstanding at the handler; flows go
// out when a quarter of the window is free again or the peer is nearly
// out of credit, so a busy link sends few flows and an idle one never
// stalls. The advertised limit only grows: go-amqp computes its credit
// unsigned and would wrap if it shrank (docs/compatibility.md §4, "Sender links").
func (l *Link) topUp() {
	if l.state != linkAttached || !l.conn.writable() {
		return
	}
	target := l.received - uint64(l.inflight) + uint64(l.window)
	if target <= l.limit {
		return
	}
	step := uint64(max(l.window/4, 1))
	if target-l.limit >= step || l.limit-l.received < step {
		l.limit = target
		l.sess.appendFlow(l)
	}
}

// peerFlowInbound applies a flow from the peer sender (§2.6.7): a
// delivery-count ahead of ours means it used credit without sending,
// which is how a sender answers drain; echo asks for our state.
func (l *Link) peerFlowInbound(fl *frames.Flow) {
	if fl.DeliveryCount.Present {
		ahead := int32(fl.DeliveryCount.Value - l.deliveryCount)
		if ahead > 0 {
			l.deliveryCount = fl.DeliveryCount.Value
			l.received = min(l.received+uint64(ahead), l.limit)
			l.topUp()
		}
	}
	if fl.Echo && l.state == linkAttached {
		l.sess.appendFlow(l)
	}
}

// fillFlow adds this link's state to a flow we send.
func (l *Link) fillFlow(fl *frames.Flow) {
	fl.Handle = frames.Some(l.outHandle)
	if l.inbound {
		fl.DeliveryCount = frames.Some(l.deliveryCount)
		fl.LinkCredit = frames.Some(uint32(min(l.limit-l.received, 1<<32-1)))
		return
	}
	fl.DeliveryCount = frames.Some(uint32(l.sent))
	fl.LinkCredit = frames.Some(l.credit)
	fl.Drain = l.drainMode
}

// cloneState copies the byte slices a decoded state shares with the read
// buffer, for a delivery that outlives its first frame.
func cloneState(s frames.DeliveryState) frames.DeliveryState {
	switch v := s.(type) {
	case *frames.TransactionalState:
		out := *v
		out.TxnID = bytes.Clone(v.TxnID)
		out.Outcome = cloneState(v.Outcome)
		return &out
	case *frames.Declared:
		return &frames.Declared{TxnID: bytes.Clone(v.TxnID)}
	}
	return s
}

// appendGrowing appends p to buf, doubling buf's capacity when it is full:
// append's own growth (a quarter at a time for large slices) would copy a
// 100 MB message about twenty times while it arrives.
func appendGrowing(buf, p []byte) []byte {
	if need := len(buf) + len(p); need > cap(buf) {
		grown := make([]byte, len(buf), max(need, 2*cap(buf)))
		copy(grown, buf)
		buf = grown
	}
	return append(buf, p...)
}
