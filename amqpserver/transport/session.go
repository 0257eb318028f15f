package transport

import (
	"math"

	"github.com/walbus/walbus/amqpserver/frames"
)

// defaultSessionWindow is the incoming-window we advertise and refresh,
// in transfer frames. It is large so that go-amqp, which stops at a
// remote incoming window of 0, never waits for us (docs/compatibility.md §2);
// link credit and max-message-size bound what is actually buffered.
const defaultSessionWindow = 1 << 20

// Session is one session of a connection (AMQP 1.0 §2.5). The engine never
// begins one itself; it answers the peer's begin.
type Session struct {
	conn       *Conn
	inChannel  uint16 // the channel the peer sends on
	outChannel uint16 // the channel we send on

	// Guarded by conn.mu.
	ending        bool   // our end is out; discard until the peer's (§2.5.4)
	peerHandleMax uint32 // bounds our output handles

	// Incoming transfer accounting (§2.5.6).
	nextIncomingID uint32
	inWindow       uint32 // frames the peer may still send before our next flow

	// Outgoing transfer accounting.
	nextOutgoingID       uint32
	remoteIncomingWindow uint32
	nextDeliveryID       uint32
	queue                []queuedTransfer // waiting for the peer's incoming window

	links    []*Link // by the peer's handle
	outLinks []*Link // by our handle

	inUnsettled  map[uint32]inDelivery  // incoming deliveries the handler holds
	outUnsettled map[uint32]outDelivery // our unsettled deliveries
}

// inDelivery tracks an incoming delivery until the handler settles it.
type inDelivery struct {
	link        *Link
	peerSettled bool // pre-settled, or settled by the peer since
}

// outDelivery is one of our unsettled deliveries.
type outDelivery struct {
	link    *Link
	awaited bool // the peer disposed of it unsettled and awaits our outcome
}

// queuedTransfer is the unsent rest of a delivery, or with flow set a
// flow (fl) for link that must not overtake its queued transfers: the
// peer counts the deliveries a flow's delivery-count covers as they
// arrive (§2.6.7), so a drain answer ahead of the transfer that used the
// credit would count it twice. The link's state in fl is taken when it is
// queued, the session's when it is written.
type queuedTransfer struct {
	link    *Link
	flow    bool
	t       frames.Transfer
	fl      frames.Flow
	payload []byte
}

// Conn returns the session's connection.
func (s *Session) Conn() *Conn { return s.conn }

// Channel is the channel the peer's begin arrived on.
func (s *Session) Channel() uint16 { return s.inChannel }

// onBegin maps a new session and answers it (§2.5.1, §2.7.2).
func (c *Conn) onBegin(channel uint16, perf []byte) *frames.Error {
	var b frames.Begin
	if err := b.Decode(perf); err != nil {
		return newError(CondDecodeError, err.Error())
	}
	if b.RemoteChannel.Present {
		// That would answer a begin of ours, and we never send one.
		return newError(CondNotAllowed, "begin with remote-channel: the server never begins sessions")
	}
	if c.session(channel) != nil {
		return newError(CondNotAllowed, "begin on a channel already in use")
	}
	out := -1
	peerMax := int(c.peerOpen.ChannelLimit())
	for i := 0; i <= peerMax; i++ {
		if i >= len(c.outChannels) || c.outChannels[i] == nil {
			out = i
			break
		}
	}
	if out < 0 {
		return newError(CondResourceLimit, "no free outgoing channel under the peer's channel-max")
	}
	s := &Session{
		conn:                 c,
		inChannel:            channel,
		outChannel:           uint16(out),
		peerHandleMax:        b.HandleLimit(),
		nextIncomingID:       b.NextOutgoingID,
		inWindow:             c.srv.sessionWindow,
		remoteIncomingWindow: b.IncomingWindow,
		inUnsettled:          make(map[uint32]inDelivery),
		outUnsettled:         make(map[uint32]outDelivery),
	}
	c.sessions = growTo(c.sessions, int(channel))
	c.sessions[channel] = s
	c.srv.sessions.Add(1)
	c.outChannels = growTo(c.outChannels, out)
	c.outChannels[out] = s
	c.appendFrame(s.outChannel, &frames.Begin{
		RemoteChannel:  frames.Some(channel),
		NextOutgoingID: s.nextOutgoingID,
		IncomingWindow: c.srv.sessionWindow,
		OutgoingWindow: c.srv.sessionWindow,
		HandleMax:      frames.Some(uint32(c.cfg.MaxLinksPerSession - 1)),
	})
	return nil
}

// growTo extends a slice indexed by channel or handle to hold index i.
func growTo[T any](v []*T, i int) []*T {
	for len(v) <= i {
		v = append(v, nil)
	}
	return v
}

// onEnd handles the peer's end: the answer to ours, or a request that we
// answer, which implicitly detaches every link (§2.6 intro; Service Bus
// clients rely on it, docs/compatibility.md §2).
func (s *Session) onEnd(perf []byte) *frames.Error {
	var e frames.End
	if err := e.Decode(perf); err != nil {
		return newError(CondDecodeError, err.Error())
	}
	c := s.conn
	if !s.ending {
		s.finishLinks(e.Error)
		c.appendFrame(s.outChannel, &frames.End{})
	}
	if c.sessions[s.inChannel] == s {
		c.srv.sessions.Add(-1)
	}
	c.sessions[s.inChannel] = nil
	c.outChannels[s.outChannel] = nil
	return nil
}

// endWith ends the session with a session error and discards its input
// until the peer's end (§2.5.4).
func (s *Session) endWith(err *frames.Error) {
	if s.ending {
		return
	}
	s.finishLinks(err)
	s.ending = true
	s.conn.appendFrame(s.outChannel, &frames.End{Error: err})
}

// finishLinks ends every link of the session, as its end or the
// connection's close implies.
func (s *Session) finishLinks(err *frames.Error) {
	for _, l := range s.links {
		if l != nil {
			s.conn.finishLink(l, err)
		}
	}
	for _, l := range s.outLinks {
		if l != nil {
			s.conn.finishLink(l, err)
		}
	}
	s.links, s.outLinks = nil, nil
	s.queue = nil
	clear(s.inUnsettled)
	clear(s.outUnsettled)
}

// onFlow applies the session part of a flow and hands the link part to
// the link (§2.7.4).
func (s *Session) onFlow(perf []byte) *frames.Error {
	fl := &s.conn.rxFlow
	if err := fl.Decode(perf); err != nil {
		return newError(CondDecodeError, err.Error())
	}
	// remote-incoming-window := next-incoming-id + incoming-window -
	// next-outgoing-id, with our initial id 0 when the peer gives none
	// (§2.5.6). Signed, because a peer acknowledging frames never sent is
	// nonsense that must not become a huge window.
	var nii uint32
	if fl.NextIncomingID.Present {
		nii = fl.NextIncomingID.Value
	}
	w := int64(int32(nii-s.nextOutgoingID)) + int64(fl.IncomingWindow)
	s.remoteIncomingWindow = uint32(min(max(w, 0), math.MaxUint32))
	s.flushQueue()
	if !fl.Handle.Present {
		if fl.Echo {
			s.appendFlow(nil)
		}
		return nil
	}
	l, e := s.linkFor(fl.Handle.Value)
	if e != nil || l == nil {
		return e
	}
	if l.inbound {
		l.peerFlowInbound(fl)
	} else {
		l.peerFlowOutbound(fl)
	}
	return nil
}

// linkFor finds the link the peer calls handle. An out-of-range handle is
// a connection framing error (§2.7.2 handle-max), an unknown one a session
// error (§2.7.3–2.7.7); both return nil. A link we already detached
// returns nil too: its frames are discarded until the peer's detach.
func (s *Session) linkFor(handle uint32) (*Link, *frames.Error) {
	if uint64(handle) >= uint64(s.conn.cfg.MaxLinksPerSession) {
		return nil, newError(CondFramingError, "handle above handle-max")
	}
	if int(handle) >= len(s.links) || s.links[handle] == nil {
		s.endWith(newError(CondUnattachedHandle, "no link attached with this handle"))
		return nil, nil
	}
	l := s.links[handle]
	if l.state != linkPending && l.state != linkAttached {
		return nil, nil
	}
	return l, nil
}

// appendFlow queues a flow carrying the session state (which every flow
// must have once the begins are exchanged, docs/compatibility.md §2) and,
// with l, that link's state. Sending it re-opens our incoming window.
func (s *Session) appendFlow(l *Link) {
	var fl frames.Flow
	if l != nil {
		l.fillFlow(&fl)
		if !l.inbound && s.queuedFor(l) {
			s.queue = append(s.queue, queuedTransfer{link: l, flow: true, fl: fl})
			return
		}
	}
	s.writeFlow(&fl)
}

// writeFlow adds the session state to fl and queues it for the writer.
func (s *Session) writeFlow(fl *frames.Flow) {
	window := s.conn.srv.sessionWindow
	fl.NextIncomingID = frames.Some(s.nextIncomingID)
	fl.IncomingWindow = window
	fl.NextOutgoingID = s.nextOutgoingID
	fl.OutgoingWindow = window
	s.inWindow = window
	s.conn.appendFlow(s.outChannel, fl)
}

// countIncomingFrame applies one incoming transfer frame to the window and
// reports false after ending the session for a window violation.
func (s *Session) countIncomingFrame() bool {
	if s.inWindow == 0 {
		s.endWith(newError(CondWindowViolation, "transfer beyond the incoming window"))
		return false
	}
	s.inWindow--
	s.nextIncomingID++
	if s.inWindow < s.conn.srv.sessionWindow/2 {
		s.appendFlow(nil)
	}
	return true
}
