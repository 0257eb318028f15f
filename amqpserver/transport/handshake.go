package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/walbus/walbus/amqpserver/frames"
)

// saslFrameLimit bounds SASL frames we accept. The spec caps them at 512
// (§5.3.1) but a PLAIN response may carry three 255-octet fields, so we
// are lenient on input and strict on output.
const saslFrameLimit = 4096

// minPeerIdleTimeout is the smallest idle-time-out we can honour; a peer
// asking for less is refused, as §2.4.5 suggests.
const minPeerIdleTimeout = 10 * time.Millisecond

var (
	errProtocolHeader = errors.New("unsupported protocol header")
	errSASLFailed     = errors.New("sasl authentication failed")
	errBadOpen        = errors.New("invalid open")
)

// handshake runs AMQP 1.0 §2.2 and §5.3 up to the exchange of opens,
// writing straight to the socket: the writer goroutine starts after it.
func (c *Conn) handshake() error {
	if c.cfg.HandshakeTimeout > 0 {
		_ = c.nc.SetDeadline(time.Now().Add(c.cfg.HandshakeTimeout))
	}
	hdr, err := c.readProtocolHeader()
	if err != nil {
		return err
	}
	switch {
	case hdr.Supported() && hdr.ID == frames.ProtocolSASL && len(c.cfg.SASLMechanisms) > 0:
		if err := c.saslExchange(); err != nil {
			return err
		}
		hdr, err = c.readProtocolHeader()
		if err != nil {
			return err
		}
		if !hdr.Supported() || hdr.ID != frames.ProtocolAMQP {
			// After SASL only plain AMQP may follow (§5.3.3.5).
			return c.refuseHeader(frames.ProtocolAMQP)
		}
	case hdr.Supported() && hdr.ID == frames.ProtocolAMQP && c.cfg.AllowNoSASL:
	default:
		// §2.2: answer with a header we support, then close.
		return c.refuseHeader(c.preferredProtocol())
	}
	if err := c.writeDirect(frames.AppendProtocolHeader(nil, frames.ProtocolAMQP)); err != nil {
		return err
	}
	return c.exchangeOpen()
}

func (c *Conn) preferredProtocol() frames.ProtocolID {
	if len(c.cfg.SASLMechanisms) == 0 && c.cfg.AllowNoSASL {
		return frames.ProtocolAMQP
	}
	return frames.ProtocolSASL
}

func (c *Conn) readProtocolHeader() (frames.ProtocolHeader, error) {
	if err := c.fill(8); err != nil {
		return frames.ProtocolHeader{}, err
	}
	b := c.rbuf[c.rpos : c.rpos+8]
	c.rpos += 8
	hdr, err := frames.ParseProtocolHeader(b)
	if err != nil {
		_ = c.refuseHeader(c.preferredProtocol())
		return hdr, err
	}
	return hdr, nil
}

// refuseHeader sends our header and gives up on the connection (§2.2).
func (c *Conn) refuseHeader(id frames.ProtocolID) error {
	_ = c.writeDirect(frames.AppendProtocolHeader(nil, id))
	c.lingerEOF()
	return errProtocolHeader
}

// saslExchange answers a SASL header: mechanisms, init, outcome (§5.3.2).
func (c *Conn) saslExchange() error {
	out := frames.AppendProtocolHeader(nil, frames.ProtocolSASL)
	out = frames.AppendFrame(out, frames.TypeSASL, 0, &frames.SASLMechanisms{Mechanisms: c.mechanisms()}, nil)
	if err := c.writeDirect(out); err != nil {
		return err
	}
	h, body, err := c.readFrame(saslFrameLimit)
	if err != nil {
		return err
	}
	var init frames.SASLInit
	if h.Type != frames.TypeSASL || h.IsEmpty() {
		// An empty SASL frame is an unrecoverable error (§5.3.1).
		return c.saslFail(frames.SASLSys)
	}
	if code, perf, _, err := frames.SplitBody(body); err != nil || code != frames.CodeSASLInit || init.Decode(perf) != nil {
		return c.saslFail(frames.SASLSys)
	}
	cred, ok := c.credentials(&init)
	if !ok {
		return c.saslFail(frames.SASLAuth)
	}
	identity, err := c.srv.handler.Authenticate(c.info, cred)
	if err != nil {
		return c.saslFail(frames.SASLAuth)
	}
	c.identity = identity
	return c.writeDirect(frames.AppendFrame(nil, frames.TypeSASL, 0, &frames.SASLOutcome{Code: frames.SASLOK}, nil))
}

// saslFail sends a failed outcome and closes our side (§5.3.3.6).
func (c *Conn) saslFail(code frames.SASLCode) error {
	_ = c.writeDirect(frames.AppendFrame(nil, frames.TypeSASL, 0, &frames.SASLOutcome{Code: code}, nil))
	c.lingerEOF()
	return errSASLFailed
}

// exchangeOpen reads the peer's open and answers with ours (§2.4.1).
func (c *Conn) exchangeOpen() error {
	h, body, err := c.readFrame(c.cfg.MaxFrameSize)
	if err != nil {
		if errors.Is(err, errFrameTooLarge) || errors.Is(err, frames.ErrMalformedFrame) {
			return c.refuseOpen(newError(CondFramingError, err.Error()))
		}
		return err
	}
	open := new(frames.Open)
	if h.Type != frames.TypeAMQP || h.IsEmpty() {
		return c.refuseOpen(newError(CondNotAllowed, "the first frame must be open"))
	}
	code, perf, _, err := frames.SplitBody(body)
	if err == nil && code != frames.CodeOpen {
		return c.refuseOpen(newError(CondNotAllowed, "the first frame must be open"))
	}
	if err == nil {
		err = open.Decode(perf)
	}
	if err != nil {
		return c.refuseOpen(newError(CondDecodeError, err.Error()))
	}
	peerIdle := time.Duration(open.IdleTimeout) * time.Millisecond
	if peerIdle > 0 && peerIdle < minPeerIdleTimeout {
		return c.refuseOpen(newError(CondInvalidField, fmt.Sprintf("idle-time-out %v is below %v", peerIdle, minPeerIdleTimeout)))
	}
	c.peerOpen = open
	c.outFrameSize = min(max(open.FrameSizeLimit(), frames.MinMaxFrameSize), c.cfg.MaxFrameSize)
	c.heartbeat = peerIdle / 2
	if err := c.writeDirect(c.appendOpen(nil)); err != nil {
		return err
	}
	c.mu.Lock()
	pending := c.closeErr
	c.state = stateOpen
	c.closeErr = nil
	if pending != nil {
		c.closeWith(pending)
	}
	c.mu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Time{})
	return nil
}

// refuseOpen sends our open and then close(e): a peer must see an open
// before a close (§2.4.1), and this way it learns why.
func (c *Conn) refuseOpen(e *frames.Error) error {
	c.outFrameSize = frames.MinMaxFrameSize
	out := c.appendOpen(nil)
	out = frames.AppendFrame(out, frames.TypeAMQP, 0, &frames.Close{Error: e}, nil)
	_ = c.writeDirect(out)
	c.lingerEOF()
	return fmt.Errorf("%w: %s", errBadOpen, e.Error())
}

// appendOpen writes our open. It announces as our max-frame-size the
// frame size both sides allow (outFrameSize), not our own limit alone: we
// read frames up to that limit anyway, and uAMQP (the Python SDK) splits
// its transfers at the size we announce but cannot encode a frame above
// its own, so every message larger than its 64 KiB failed when we
// announced 256 KiB.
func (c *Conn) appendOpen(dst []byte) []byte {
	open := frames.Open{
		ContainerID:  c.cfg.ContainerID,
		MaxFrameSize: frames.Some(c.outFrameSize),
		ChannelMax:   frames.Some(uint16(c.cfg.MaxSessions - 1)),
		IdleTimeout:  uint32(c.cfg.IdleTimeout / 2 / time.Millisecond),
		Properties:   c.cfg.Properties,
	}
	return frames.AppendFrame(dst, frames.TypeAMQP, 0, &open, nil)
}

// writeDirect writes during the handshake, before the writer exists.
func (c *Conn) writeDirect(b []byte) error {
	_, err := c.nc.Write(b)
	return err
}

// lingerEOF shuts our side and reads until the peer closes or CloseTimeout
// passes, so what we just wrote is not lost to a reset caused by unread
// input (§5.1: close the outgoing stream, then read to the end).
func (c *Conn) lingerEOF() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(c.cfg.CloseTimeout))
	var scratch [512]byte
	for {
		if _, err := c.nc.Read(scratch[:]); err != nil {
			return
		}
	}
}
