package transport

import (
	"fmt"

	"github.com/walbus/walbus/amqpserver/frames"
)

// handleFrame applies one frame received after the opens were exchanged.
// It returns a connection error to close with; session and link errors
// are dealt with inside. Called by the reader with mu held.
func (c *Conn) handleFrame(h frames.Header, body []byte) *frames.Error {
	if h.Type != frames.TypeAMQP {
		return newError(CondFramingError, "SASL frame after the SASL layer")
	}
	if h.IsEmpty() {
		return nil // a heartbeat: reading it already reset the idle timer
	}
	code, perf, payload, err := frames.SplitBody(body)
	if err != nil {
		return newError(CondDecodeError, err.Error())
	}
	if code < frames.CodeOpen || code > frames.CodeClose {
		return newError(CondDecodeError, fmt.Sprintf("descriptor 0x%x is not an AMQP performative", code))
	}
	if c.state != stateOpen {
		// After our close only the peer's close matters (§2.4.3).
		if code == frames.CodeClose {
			c.peerClosed = true
			c.finished = true
		}
		return nil
	}
	if int(h.Channel) >= c.cfg.MaxSessions {
		return newError(CondFramingError, fmt.Sprintf("channel %d above channel-max %d", h.Channel, c.cfg.MaxSessions-1))
	}
	switch code {
	case frames.CodeClose:
		return c.onClose(perf)
	case frames.CodeBegin:
		return c.onBegin(h.Channel, perf)
	case frames.CodeOpen:
		return newError(CondNotAllowed, "second open")
	}
	s := c.session(h.Channel)
	if s == nil && code == frames.CodeEnd {
		// go-amqp ends a session it gave up on before its begin was
		// written (its context ran out), with its next begin: nothing to
		// end here, and closing the connection would take the client's
		// other links with it.
		return nil
	}
	if s == nil {
		return newError(CondNotAllowed, fmt.Sprintf("%s on channel %d, which has no session", frameName(code), h.Channel))
	}
	if code == frames.CodeEnd {
		return s.onEnd(perf)
	}
	if s.ending {
		return nil // discarding until the peer's end (§2.5.4)
	}
	switch code {
	case frames.CodeTransfer:
		return s.onTransfer(perf, payload)
	case frames.CodeFlow:
		return s.onFlow(perf)
	case frames.CodeDisposition:
		return s.onDisposition(perf)
	case frames.CodeAttach:
		return s.onAttach(perf)
	}
	return s.onDetach(perf)
}

// onClose answers the peer's close with ours (§2.4.3).
func (c *Conn) onClose(perf []byte) *frames.Error {
	var cl frames.Close
	c.peerClosed = true
	c.finished = true
	if err := cl.Decode(perf); err != nil {
		return newError(CondDecodeError, err.Error())
	}
	c.peerErr = cl.Error
	c.closeWith(nil)
	return nil
}

// session returns the session the peer maps to channel, or nil.
func (c *Conn) session(channel uint16) *Session {
	if int(channel) < len(c.sessions) {
		return c.sessions[channel]
	}
	return nil
}

func frameName(code uint64) string {
	switch code {
	case frames.CodeAttach:
		return "attach"
	case frames.CodeFlow:
		return "flow"
	case frames.CodeTransfer:
		return "transfer"
	case frames.CodeDisposition:
		return "disposition"
	case frames.CodeDetach:
		return "detach"
	case frames.CodeEnd:
		return "end"
	}
	return fmt.Sprintf("performative 0x%x", code)
}
