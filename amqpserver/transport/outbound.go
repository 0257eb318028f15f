package transport

import (
	"bytes"
	"math"

	"github.com/walbus/walbus/amqpserver/frames"
)

// maxDeliveryTag is the longest delivery-tag allowed (§2.8.7).
const maxDeliveryTag = 32

// Send sends one message on an outbound link without blocking: the frames
// are queued for the writer, split at the peer's max-frame-size, and held
// back only while the peer's session window is closed. It uses one credit
// and returns the delivery-id, which Disposition callbacks and Settle
// refer to. settled sends the delivery pre-settled (snd-settle-mode
// settled, or mixed); otherwise it stays unsettled until the peer's
// disposition. payload and tag may be reused once Send returns.
func (l *Link) Send(tag []byte, messageFormat uint32, payload []byte, settled bool) (uint32, error) {
	c := l.conn
	c.mu.Lock()
	c.writeState.enterBurst(l.burst)
	defer func() {
		c.writeState.leaveBurst()
		c.mu.Unlock()
	}()
	switch {
	case l.inbound:
		return 0, ErrWrongRole
	case l.state == linkPending:
		return 0, ErrNotAttached
	case l.state != linkAttached || !c.writable():
		return 0, ErrLinkClosed
	case l.credit == 0:
		return 0, ErrNoCredit
	case l.maxSize != 0 && uint64(len(payload)) > l.maxSize:
		return 0, ErrMessageTooLarge
	case len(tag) > maxDeliveryTag:
		return 0, ErrInvalidTag
	case settled && l.sndMode == frames.SenderSettleUnsettled,
		!settled && l.sndMode == frames.SenderSettleSettled:
		return 0, ErrSettleMode
	}
	s := l.sess
	id := s.nextDeliveryID
	s.nextDeliveryID++
	l.credit--
	l.sent++
	if !settled {
		s.outUnsettled[id] = outDelivery{link: l}
	}
	t := &c.sendScratch
	*t = frames.Transfer{
		Handle:        l.outHandle,
		DeliveryID:    frames.Some(id),
		DeliveryTag:   tag,
		MessageFormat: frames.Some(messageFormat),
		Settled:       settled,
	}
	s.sendTransfer(l, t, payload)
	if l.drainPending && l.credit == 0 {
		// Credit used up during a drain: the peer still waits for the
		// drain flow (rhea only completes on drain=true, credit 0).
		l.answerDrain()
	}
	return id, nil
}

// sendTransfer writes the frames of a delivery while the peer's incoming
// window allows and queues the rest (§2.5.6). Called with mu held.
func (s *Session) sendTransfer(l *Link, t *frames.Transfer, payload []byte) {
	c := s.conn
	if len(s.queue) == 0 {
		for s.remoteIncomingWindow > 0 {
			var rest []byte
			var err error
			c.out, rest, err = frames.AppendTransferFrame(c.out, s.outChannel, t, payload, c.outFrameSize)
			if err != nil {
				// Only a tag too long for the frame size gets here, and
				// Send bounds tags; fail the link rather than the stream.
				l.detach(newError(CondInternalError, err.Error()))
				return
			}
			s.nextOutgoingID++
			s.remoteIncomingWindow--
			if len(rest) == 0 {
				c.wakeWriter()
				return
			}
			payload = rest
			*t = t.Continuation()
		}
		c.wakeWriter()
	}
	q := queuedTransfer{link: l, t: *t, payload: bytes.Clone(payload)}
	q.t.DeliveryTag = bytes.Clone(t.DeliveryTag) // the caller may reuse it
	s.queue = append(s.queue, q)
}

// flushQueue sends queued frames as far as the peer's window now allows.
// Called with mu held.
func (s *Session) flushQueue() {
	c := s.conn
	sent := false
	for len(s.queue) > 0 && c.writable() {
		q := &s.queue[0]
		if q.flow {
			// A link flow held behind that link's transfers; flows do
			// not count against the window.
			if q.link.state == linkAttached {
				s.writeFlow(&q.fl)
			}
			*q = queuedTransfer{}
			s.queue = s.queue[1:]
			continue
		}
		if s.remoteIncomingWindow == 0 {
			break
		}
		out, rest, err := frames.AppendTransferFrame(c.out, s.outChannel, &q.t, q.payload, c.outFrameSize)
		if err != nil {
			l := q.link
			*q = queuedTransfer{}
			s.queue = s.queue[1:]
			l.detach(newError(CondInternalError, err.Error()))
			continue
		}
		c.out = out
		sent = true
		s.nextOutgoingID++
		s.remoteIncomingWindow--
		if len(rest) == 0 {
			*q = queuedTransfer{}
			s.queue = s.queue[1:]
			continue
		}
		q.payload = rest
		q.t = q.t.Continuation()
	}
	if len(s.queue) == 0 {
		s.queue = nil
	}
	if sent {
		c.wakeWriter()
	}
}

// queuedFor reports whether frames of l's deliveries wait in the queue.
func (s *Session) queuedFor(l *Link) bool {
	for i := range s.queue {
		if s.queue[i].link == l {
			return true
		}
	}
	return false
}

// Credit returns the peer's current credit on an outbound link.
func (l *Link) Credit() Credit {
	c := l.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	return l.creditLocked()
}

func (l *Link) creditLocked() Credit {
	return Credit{Limit: l.sent + uint64(l.credit), Sent: l.sent, Drained: l.drained, Drain: l.drainPending}
}

// Drained answers the peer's drain request once the handler has sent what
// it had: the unused credit is consumed by advancing delivery-count, and
// flow(drain=true, link-credit=0) goes out at once (§2.6.7). Without a
// pending drain it does nothing.
func (l *Link) Drained() error {
	c := l.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case l.inbound:
		return ErrWrongRole
	case l.state == linkPending:
		return ErrNotAttached
	case l.state != linkAttached || !c.writable():
		return ErrLinkClosed
	}
	if l.drainPending {
		l.answerDrain()
	}
	return nil
}

// answerDrain consumes the remaining credit and reports it. Called with
// mu held.
func (l *Link) answerDrain() {
	l.sent += uint64(l.credit)
	l.drained += uint64(l.credit)
	l.credit = 0
	l.drainPending = false
	l.drainMode = true
	l.sess.appendFlow(l)
}

// peerFlowOutbound applies the peer receiver's flow (§2.6.7):
// link-credit(snd) := delivery-count(rcv) + link-credit(rcv) -
// delivery-count(snd), in signed serial arithmetic, never below 0.
func (l *Link) peerFlowOutbound(fl *frames.Flow) {
	answered := false
	if fl.LinkCredit.Present {
		base := fl.DeliveryCount.Or(0) // our initial-delivery-count
		avail := int64(int32(base-uint32(l.sent))) + int64(fl.LinkCredit.Value)
		l.credit = uint32(min(max(avail, 0), math.MaxUint32))
	}
	l.drainMode = fl.Drain
	l.drainPending = fl.Drain
	if l.state != linkAttached {
		return // Accept reads the state; a pending drain is answered then
	}
	if l.drainPending && l.credit == 0 {
		// Nothing could be sent anyway: answer now, the JS SDK gives up
		// after 200 ms (docs/compatibility.md §7).
		l.answerDrain()
		answered = true
	}
	if fl.Echo && !answered {
		l.sess.appendFlow(l)
	}
	l.conn.events = append(l.conn.events, event{kind: evCredit, link: l, out: l.outH, credit: l.creditLocked()})
}

// onDisposition applies the peer's disposition to a range of deliveries
// (§2.7.6). ids that are unknown or already settled are ignored: rhea
// sends a second settled disposition in mode second (docs/compatibility.md
// §5).
func (s *Session) onDisposition(perf []byte) *frames.Error {
	c := s.conn
	d := &c.rxDisp
	if err := d.Decode(perf); err != nil {
		return newError(CondDecodeError, err.Error())
	}
	// The range runs forward from first to last, wrapping past 2^32-1
	// (delivery-numbers are RFC 1982 serial numbers, §2.8). A huge span is walked through our map of
	// unsettled ids instead of id by id.
	first, last := d.First, d.LastID()
	span := uint64(last-first) + 1
	if d.Role == frames.RoleReceiver {
		// The peer received these from us.
		if span <= uint64(len(s.outUnsettled)) {
			for i := uint64(0); i < span; i++ {
				s.peerDisposedOutgoing(first+uint32(i), d)
			}
		} else {
			for id := range s.outUnsettled {
				if uint64(id-first) < span {
					s.peerDisposedOutgoing(id, d)
				}
			}
		}
		return nil
	}
	// The peer sent these to us and settles them before the handler did
	// (§2.6.12). Our outcomes always go out settled, so a settlement
	// after one finds nothing.
	if span <= uint64(len(s.inUnsettled)) {
		for i := uint64(0); i < span; i++ {
			s.peerSettledIncoming(first+uint32(i), d.Settled)
		}
	} else {
		for id := range s.inUnsettled {
			if uint64(id-first) < span {
				s.peerSettledIncoming(id, d.Settled)
			}
		}
	}
	return nil
}

func (s *Session) peerDisposedOutgoing(id uint32, d *frames.Disposition) {
	od, ok := s.outUnsettled[id]
	l := od.link
	if !ok || l.state != linkAttached {
		return
	}
	if d.Settled {
		delete(s.outUnsettled, id)
	} else if !od.awaited {
		s.outUnsettled[id] = outDelivery{link: l, awaited: true}
	}
	s.conn.events = append(s.conn.events, event{kind: evDisposition, link: l, out: l.outH, id: id, state: cloneState(d.State), settled: d.Settled})
}

func (s *Session) peerSettledIncoming(id uint32, settled bool) {
	if !settled {
		return
	}
	d, ok := s.inUnsettled[id]
	if !ok {
		return
	}
	d.peerSettled = true
	s.inUnsettled[id] = d
}
