package transport

import (
	"github.com/walbus/walbus/amqpserver/frames"
)

// linkState follows a link endpoint through attach and detach (§2.6.3,
// §2.6.6).
type linkState uint8

const (
	linkPending   linkState = iota // the peer's attach is in, ours is not out
	linkAttached                   // both attaches exchanged
	linkDetaching                  // our detach is out, the peer's awaited
	linkAnswering                  // the peer's detach is in; ours follows the outcomes it awaits
	linkClosed                     // gone
)

// Link is one link the peer attached. Its exported methods are safe for
// concurrent use.
type Link struct {
	sess     *Session
	conn     *Conn
	attach   *frames.Attach // the peer's
	inbound  bool           // the peer is the sender
	inHandle uint32         // the peer's handle
	done     chan struct{}

	// Guarded by conn.mu.
	state     linkState
	outHandle uint32 // ours, assigned when we answer
	err       *frames.Error
	inH       InboundHandler
	outH      OutboundHandler
	sndMode   frames.SenderSettleMode
	maxSize   uint64 // inbound: enforced limit; outbound: the peer's (0: none)
	burst     *Burst // see SetBurst

	// Inbound: we are the receiver (§2.6.7). Counts are 64-bit since the
	// attach; deliveryCount is the 32-bit wire value.
	deliveryCount uint32
	received      uint64 // deliveries begun
	limit         uint64 // received may reach this: what we last advertised
	inflight      uint32 // delivered to the handler, not yet settled by it
	window        uint32
	asm           assembly // reader goroutine only

	// Outbound: we are the sender. Our initial-delivery-count is 0, so
	// delivery-count is uint32(sent).
	sent         uint64
	drained      uint64 // of sent, credit given up answering drains
	credit       uint32 // link-credit(snd)
	drainPending bool
	drainMode    bool
	// awaiting holds, from the peer's detach on (see owed), the ids whose
	// outcome it still awaits; Settle answers the detach after the last.
	awaiting map[uint32]struct{}
}

// Name is the link name from the peer's attach.
func (l *Link) Name() string { return l.attach.Name }

// Inbound reports a link on which the peer sends and we receive (the
// peer attached with role sender).
func (l *Link) Inbound() bool { return l.inbound }

// PeerAttach is the peer's attach: source, target (or coordinator) with
// filters and capabilities, requested settle modes, max-message-size and
// properties. Do not modify it.
func (l *Link) PeerAttach() *frames.Attach { return l.attach }

// SndSettleMode is the link's sender settle mode, as the peer asked and
// the attach answer echoes (mixed when the peer named none): on an
// outbound link, whether Send may or must pre-settle.
func (l *Link) SndSettleMode() frames.SenderSettleMode { return l.sndMode }

// Session is the session the link belongs to.
func (l *Link) Session() *Session { return l.sess }

// Conn is the link's connection.
func (l *Link) Conn() *Conn { return l.conn }

// Done is closed when the link is finished, or when a pending attach can
// no longer complete.
func (l *Link) Done() <-chan struct{} { return l.done }

// onAttach registers the peer's attach and asks the handler (§2.6.3).
func (s *Session) onAttach(perf []byte) *frames.Error {
	a := new(frames.Attach)
	if err := a.Decode(perf); err != nil {
		return newError(CondDecodeError, err.Error())
	}
	c := s.conn
	if uint64(a.Handle) >= uint64(c.cfg.MaxLinksPerSession) {
		// §2.7.2: a handle above handle-max is a framing error.
		return newError(CondFramingError, "attach handle above handle-max")
	}
	if int(a.Handle) < len(s.links) && s.links[a.Handle] != nil {
		s.endWith(newError(CondHandleInUse, "attach on a handle already in use"))
		return nil
	}
	l := &Link{
		sess:     s,
		conn:     c,
		attach:   a,
		inbound:  a.Role == frames.RoleSender,
		inHandle: a.Handle,
		done:     make(chan struct{}),
		sndMode:  a.SndSettleMode.Or(frames.SenderSettleMixed),
	}
	if l.inbound {
		// Required from a sender (§2.7.3); a peer that omits it gets 0.
		l.deliveryCount = a.InitialDeliveryCount.Or(0)
	} else {
		l.maxSize = a.MaxMessageSize.Or(0)
	}
	s.links = growTo(s.links, int(a.Handle))
	s.links[a.Handle] = l
	c.events = append(c.events, event{kind: evAttach, link: l})
	return nil
}

// AcceptInbound completes the attach of a link on which the peer sends,
// with h receiving its deliveries. It grants the initial credit.
func (l *Link) AcceptInbound(r *Reply, h InboundHandler) error {
	if !l.inbound {
		return ErrWrongRole
	}
	return l.accept(r, h, nil)
}

// AcceptOutbound completes the attach of a link on which we send, with h
// receiving credit and dispositions. Credit the peer granted before the
// attach completed is not reported through h; read Link.Credit after
// accepting.
func (l *Link) AcceptOutbound(r *Reply, h OutboundHandler) error {
	if l.inbound {
		return ErrWrongRole
	}
	return l.accept(r, nil, h)
}

func (l *Link) accept(r *Reply, in InboundHandler, out OutboundHandler) error {
	c := l.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := l.canAnswer(); err != nil {
		return err
	}
	if r == nil {
		r = &Reply{}
	}
	if !l.assignHandle() {
		return ErrLinkClosed
	}
	reply := l.replyAttach()
	if r.Source != nil {
		reply.Source = r.Source
	}
	if r.Target != nil {
		reply.Target, reply.Coordinator = r.Target, nil
	}
	// The terminus our side owns must not be null, or the peer reads the
	// reply as a refusal and waits for a detach (§2.6.3, go-amqp link.go).
	if l.inbound && reply.Target == nil && reply.Coordinator == nil {
		reply.Target = &frames.Target{}
	}
	if !l.inbound && reply.Source == nil {
		reply.Source = &frames.Source{}
	}
	size := r.MaxMessageSize
	if l.inbound && (size == 0 || size > c.cfg.MaxMessageSize) {
		size = c.cfg.MaxMessageSize
	}
	if size > 0 {
		reply.MaxMessageSize = frames.Some(size)
	}
	reply.Properties = r.Properties
	reply.OfferedCapabilities = r.OfferedCapabilities
	reply.DesiredCapabilities = r.DesiredCapabilities
	c.appendFrame(l.sess.outChannel, reply)
	l.state = linkAttached
	l.conn.srv.links.Add(1)
	l.inH, l.outH = in, out
	if l.inbound {
		l.maxSize = size
		l.window = r.Credit
		if l.window == 0 {
			l.window = c.cfg.LinkCredit
		}
		// Grant credit at once: go-amqp senders block until a flow with
		// link-credit arrives (docs/compatibility.md §4).
		l.limit = l.received + uint64(l.window)
		l.sess.appendFlow(l)
	} else if l.drainPending && l.credit == 0 {
		l.answerDrain()
	}
	return nil
}

// Refuse answers the attach with a null terminus and then detaches with
// err (§2.6.3, Fig 2.33); go-amqp returns err from NewSender/NewReceiver.
func (l *Link) Refuse(err *frames.Error) error {
	c := l.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := l.canAnswer(); e != nil {
		return e
	}
	l.refuse(err)
	return nil
}

// canAnswer reports whether the attach can still be answered.
func (l *Link) canAnswer() error {
	switch {
	case l.state == linkClosed || !l.conn.writable() || l.sess.ending:
		return ErrLinkClosed
	case l.state != linkPending:
		return ErrAttached
	}
	return nil
}

// refuse sends attach with the null local terminus and detach(closed,
// err); the link then waits for the peer's detach, or is gone already if
// that arrived first. Called with mu held.
func (l *Link) refuse(err *frames.Error) {
	c := l.conn
	if !l.assignHandle() {
		return
	}
	reply := l.replyAttach()
	if l.inbound {
		reply.Target, reply.Coordinator = nil, nil
	} else {
		reply.Source = nil
	}
	c.appendFrame(l.sess.outChannel, reply)
	c.appendFrame(l.sess.outChannel, &frames.Detach{Handle: l.outHandle, Closed: true, Error: err})
	l.err = err
	l.state = linkDetaching
	close(l.done)
}

// replyAttach is our attach answering the peer's: the opposite role, our
// handle, the requested settle modes stated explicitly (go-amqp fails the
// attach when a requested mode is not echoed, docs/compatibility.md §4), and
// initial-delivery-count 0 when we send (rhea assumes 0).
func (l *Link) replyAttach() *frames.Attach {
	a := l.attach
	reply := &frames.Attach{
		Name:          a.Name,
		Handle:        l.outHandle,
		Role:          !a.Role,
		SndSettleMode: frames.Some(a.SndSettleMode.Or(frames.SenderSettleMixed)),
		RcvSettleMode: frames.Some(a.RcvSettleMode.Or(frames.ReceiverSettleFirst)),
		Source:        a.Source,
		Target:        a.Target,
		Coordinator:   a.Coordinator,
	}
	if !l.inbound {
		reply.InitialDeliveryCount = frames.Some[uint32](0)
	}
	return reply
}

// assignHandle picks our lowest free handle under the peer's handle-max
// (§2.6.2 recommends the lowest). None is left only if the peer attached
// more links than its own handle-max lets us answer; the attach cannot be
// answered at all then, so the connection is closed. Called with mu held.
func (l *Link) assignHandle() bool {
	s := l.sess
	limit := uint64(s.peerHandleMax)
	for i := 0; uint64(i) <= limit; i++ {
		if i >= len(s.outLinks) || s.outLinks[i] == nil {
			s.outLinks = growTo(s.outLinks, i)
			s.outLinks[i] = l
			l.outHandle = uint32(i)
			return true
		}
	}
	l.conn.closeWith(newError(CondResourceLimit, "more links than the peer's handle-max"))
	return false
}

// Close detaches the link with err (nil for a clean close), always with
// closed=true since go-amqp rejects anything else (docs/compatibility.md §2).
// A pending attach is refused instead. Detached follows once the peer
// answers.
func (l *Link) Close(err *frames.Error) error {
	c := l.conn
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case l.state == linkPending && l.canAnswer() == nil:
		l.refuse(err)
	case l.state == linkAttached && c.writable():
		l.detach(err)
	default:
		return ErrLinkClosed
	}
	return nil
}

// detach sends our closing detach and forgets the link's deliveries: no
// disposition may follow for a closed link (§2.7.6). Called with mu held.
func (l *Link) detach(err *frames.Error) {
	l.conn.appendFrame(l.sess.outChannel, &frames.Detach{Handle: l.outHandle, Closed: true, Error: err})
	l.err = err
	l.state = linkDetaching
	l.forgetDeliveries()
}

// onDetach handles the peer's detach: the answer to ours, or a request we
// answer with closed=true (§2.6.6).
func (s *Session) onDetach(perf []byte) *frames.Error {
	var d frames.Detach
	if err := d.Decode(perf); err != nil {
		return newError(CondDecodeError, err.Error())
	}
	c := s.conn
	if uint64(d.Handle) >= uint64(c.cfg.MaxLinksPerSession) {
		return newError(CondFramingError, "detach handle above handle-max")
	}
	if int(d.Handle) >= len(s.links) || s.links[d.Handle] == nil {
		s.endWith(newError(CondUnattachedHandle, "detach of a handle that is not attached"))
		return nil
	}
	l := s.links[d.Handle]
	switch l.state {
	case linkPending:
		// The handler has not answered yet: answer for it so the peer's
		// detach gets its reply, and let Done tell the handler.
		l.refuse(nil)
	case linkAttached:
		l.err = d.Error
		l.owed()
		if len(l.awaiting) > 0 {
			// The peer settled deliveries and then detached (the JS SDK
			// closing a receiver with a completeMessage under way), or
			// sent unsettled transfers and then detached (a sender closed
			// with sends under way): their outcomes wait for durability,
			// and a peer forgets a link's deliveries once its detach is
			// answered, so Settle answers the detach after the last of
			// them. The handler is told now.
			l.state = linkAnswering
			l.forgetDeliveries()
			c.notifyDetached(l)
			return nil
		}
		c.appendFrame(s.outChannel, &frames.Detach{Handle: l.outHandle, Closed: true})
	}
	c.finishLink(l, l.err)
	return nil
}

// owed records in awaiting the outcomes the peer waits for as it
// detaches: on an inbound link its unsettled transfers the handler has
// not settled yet, on an outbound one the deliveries it disposed of
// unsettled. Called with mu held.
func (l *Link) owed() {
	await := func(id uint32) {
		if l.awaiting == nil {
			l.awaiting = make(map[uint32]struct{})
		}
		l.awaiting[id] = struct{}{}
	}
	if l.inbound {
		for id, d := range l.sess.inUnsettled {
			if d.link == l && !d.peerSettled {
				await(id)
			}
		}
		return
	}
	for id, od := range l.sess.outUnsettled {
		if od.link == l && od.awaited {
			await(id)
		}
	}
}

// answered sends the detach's answer once the last owed outcome went out
// (linkAnswering). Called with mu held.
func (l *Link) answered() {
	if l.state == linkAnswering && len(l.awaiting) == 0 {
		l.conn.appendFrame(l.sess.outChannel, &frames.Detach{Handle: l.outHandle, Closed: true})
		l.conn.releaseLink(l)
	}
}

// finishLink ends the link for good: frees its handles, drops its
// deliveries and queues Detached. Called with mu held.
func (c *Conn) finishLink(l *Link, err *frames.Error) {
	switch l.state {
	case linkClosed:
		return
	case linkAnswering:
		c.releaseLink(l) // the handler was told when the peer detached
		return
	}
	wasPending := l.state == linkPending
	c.releaseLink(l)
	if l.err == nil {
		l.err = err
	}
	if !wasPending {
		c.notifyDetached(l)
	}
	select {
	case <-l.done:
	default:
		close(l.done)
	}
}

// releaseLink frees the link's handles and drops its deliveries. Called
// with mu held.
func (c *Conn) releaseLink(l *Link) {
	if l.state != linkPending {
		c.srv.links.Add(-1)
	}
	l.state = linkClosed
	s := l.sess
	if int(l.inHandle) < len(s.links) && s.links[l.inHandle] == l {
		s.links[l.inHandle] = nil
	}
	if int(l.outHandle) < len(s.outLinks) && s.outLinks[l.outHandle] == l {
		s.outLinks[l.outHandle] = nil
	}
	l.forgetDeliveries()
}

// notifyDetached closes Done and queues the handler's Detached. Called
// with mu held, on the reader goroutine.
func (c *Conn) notifyDetached(l *Link) {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	if l.inH != nil {
		c.events = append(c.events, event{kind: evDetached, link: l, handler: l.inH, err: l.err})
	} else if l.outH != nil {
		c.events = append(c.events, event{kind: evDetached, link: l, handler: l.outH, err: l.err})
	}
}

// forgetDeliveries drops the link's unsettled deliveries and queued
// transfers. Called with mu held.
func (l *Link) forgetDeliveries() {
	s := l.sess
	if l.inbound {
		for id, d := range s.inUnsettled {
			if _, owed := l.awaiting[id]; d.link == l && (!owed || l.state != linkAnswering) {
				delete(s.inUnsettled, id)
			}
		}
		l.inflight = 0
		if l.state != linkAnswering {
			l.awaiting = nil
		}
		return
	}
	for id, od := range s.outUnsettled {
		if _, owed := l.awaiting[id]; od.link == l && (!owed || l.state != linkAnswering) {
			delete(s.outUnsettled, id)
		}
	}
	if l.state != linkAnswering {
		l.awaiting = nil
	}
	kept := s.queue[:0]
	for _, q := range s.queue {
		if q.link != l {
			kept = append(kept, q)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
}
