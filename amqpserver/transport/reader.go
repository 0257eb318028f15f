package transport

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/walbus/walbus/amqpserver/frames"
)

const (
	initialReadBuffer = 64 << 10
	// outHighWater is how much unwritten output makes the reader stop
	// reading: a peer that does not read its dispositions is not allowed
	// to make us buffer them without bound.
	outHighWater = 4 << 20
)

var (
	errFrameTooLarge = errors.New("frame larger than max-frame-size")
	errIdleTimeout   = errors.New("idle timeout")
)

// readLoop reads and handles frames until the close exchange completes or
// the socket fails.
func (c *Conn) readLoop() error {
	for !c.finished {
		h, body, err := c.readFrame(c.cfg.MaxFrameSize)
		if err != nil {
			return c.readFailed(err)
		}
		c.mu.Lock()
		if e := c.handleFrame(h, body); e != nil {
			c.closeWith(e)
		}
		backlog := len(c.out) > outHighWater
		c.mu.Unlock()
		c.dispatch()
		if backlog {
			c.waitForWriter()
		}
	}
	return nil
}

// readFailed turns a read error into the connection's fate.
func (c *Conn) readFailed(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ne net.Error
	switch {
	case c.state == stateClosing:
		// Our close went out; the peer's answer is optional once the
		// deadline passed or the socket went away (§2.4.3).
		return nil
	case errors.As(err, &ne) && ne.Timeout():
		// §2.4.5 names no condition; qpid-proton uses this one.
		c.closeWith(newError(CondResourceLimit, "idle timeout"))
		c.finished = true
		return errIdleTimeout
	case errors.Is(err, errFrameTooLarge), errors.Is(err, frames.ErrMalformedFrame):
		// The stream cannot be parsed any further (§2.3.1, §2.7.1).
		c.closeWith(newError(CondFramingError, err.Error()))
		return err
	}
	return err
}

// waitForWriter blocks the reader while the output backlog is too large.
func (c *Conn) waitForWriter() {
	c.mu.Lock()
	c.releaseWriter()
	for len(c.out) > outHighWater && c.writeState.alive() && c.state != stateClosed {
		c.writeState.awaitDrain()
		c.outDrained.Wait()
	}
	c.mu.Unlock()
}

// readFrame returns the next frame; its body aliases the read buffer and
// is valid until the next call.
func (c *Conn) readFrame(limit uint32) (frames.Header, []byte, error) {
	if err := c.fill(frames.HeaderSize); err != nil {
		return frames.Header{}, nil, err
	}
	h, err := frames.ParseHeader(c.rbuf[c.rpos:c.rend])
	if err != nil {
		return h, nil, err
	}
	if h.Size > limit {
		return h, nil, fmt.Errorf("%w: %d bytes, limit %d", errFrameTooLarge, h.Size, limit)
	}
	if err := c.fill(int(h.Size)); err != nil {
		return h, nil, err
	}
	body := c.rbuf[c.rpos+h.BodyOffset() : c.rpos+int(h.Size) : c.rpos+int(h.Size)]
	c.rpos += int(h.Size)
	return h, body, nil
}

// fill makes at least need unread bytes available, reading as much as the
// socket has in one call so that many small frames cost one syscall.
func (c *Conn) fill(need int) error {
	if c.rend-c.rpos >= need {
		return nil
	}
	if c.rpos == c.rend {
		c.rpos, c.rend = 0, 0
	}
	if len(c.rbuf)-c.rpos < need {
		buf := c.rbuf
		if need > len(buf) {
			buf = make([]byte, max(need, 2*len(buf)))
		}
		c.rend = copy(buf, c.rbuf[c.rpos:c.rend])
		c.rpos = 0
		c.rbuf = buf
	}
	for c.rend-c.rpos < need {
		c.armReadDeadline()
		n, err := c.nc.Read(c.rbuf[c.rend:])
		c.ackSmallRead(n)
		c.rend += n
		if err != nil && c.rend-c.rpos < need {
			return err
		}
	}
	c.holdWriter()
	return nil
}

// smallRead is the size under which a read is acknowledged at once.
const smallRead = 512

// ackSmallRead acknowledges a read of fewer than smallRead bytes at once.
// Those are the frames a peer may send without getting data back: its
// disposition of our response, a flow, a request the broker takes time
// over. Linux delays the ACK of such a read up to 40 ms, and a client
// that keeps Nagle's algorithm on (uAMQP, the Python SDK's) holds its
// next frame until that ACK comes: each of its management requests took
// 44 ms instead of half a millisecond. Larger reads are message traffic,
// whose ACKs our dispositions carry, and skipping them keeps the syscall
// off the bulk path.
func (c *Conn) ackSmallRead(n int) {
	if n <= 0 || n >= smallRead || c.ackRaw == nil {
		return
	}
	_ = c.ackRaw.Control(c.srv.quickAck)
}

// armReadDeadline runs before every blocking read: it releases held
// writer wakes and applies our idle time-out (§2.4.5) or, once our close
// is out, the wait for the peer's close. The handshake sets its own.
func (c *Conn) armReadDeadline() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.releaseWriter()
	switch c.state {
	case stateHandshake:
		return
	case stateClosing:
		_ = c.nc.SetReadDeadline(c.closeDeadline)
		c.deadlineAt = time.Time{}
	default:
		if c.cfg.IdleTimeout <= 0 {
			return
		}
		// Pushing the deadline out costs a timer update; doing it only
		// when an eighth of the time-out has passed closes a silent peer
		// after 7/8 to 8/8 of it, still well past the half we advertise.
		now := time.Now()
		if now.Sub(c.deadlineAt) >= c.cfg.IdleTimeout/8 {
			c.deadlineAt = now
			_ = c.nc.SetReadDeadline(now.Add(c.cfg.IdleTimeout))
		}
	}
}
