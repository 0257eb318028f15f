package transport

import (
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/walbus/walbus/amqpserver/frames"
)

// connState is the connection's place in AMQP 1.0 §2.4.6, reduced to what
// a server that never opens first needs.
type connState uint8

const (
	stateHandshake connState = iota // protocol headers, SASL, open
	stateOpen                       // OPENED
	stateClosing                    // close sent, discarding until the peer's (DISCARDING/CLOSE_SENT)
	stateClosed                     // END: nothing more is written
)

// Conn is one AMQP connection. Its exported methods are safe for
// concurrent use.
type Conn struct {
	srv       *Server
	cfg       *Config
	nc        net.Conn
	id        uint64
	info      ConnInfo
	overLimit bool

	// Set by the handshake, read-only afterwards.
	identity     any
	peerOpen     *frames.Open
	outFrameSize uint32        // frames we send: the peer's max-frame-size, capped by ours
	heartbeat    time.Duration // send something at least this often (half the peer's idle-time-out)
	opened       bool          // ConnectionOpened was called

	mu            sync.Mutex
	state         connState
	closeErr      *frames.Error // the error in the close we sent
	peerClosed    bool
	peerErr       *frames.Error // the error in the peer's close
	closeDeadline time.Time
	out           []byte // frames waiting for the writer
	run           dispositionRun
	writeState               // who writes out, and when; assigned only in writestate.go
	deadlineAt    time.Time  // when the idle read deadline was last pushed out
	outDrained    *sync.Cond // on mu; see writeState.outWaiting
	inlineSpare   []byte     // out's next buffer after an inline write (writeInline)
	lastWrite     time.Time
	raw           syscall.RawConn
	ackRaw        syscall.RawConn // the TCP socket under TLS too; see ackSmallRead
	sessions      []*Session      // by the peer's channel
	outChannels   []*Session      // by our channel
	sendScratch   frames.Transfer

	wake       chan struct{} // something was appended to out
	stop       chan struct{} // closed at teardown: flush and exit
	writerDone chan struct{}
	done       chan struct{}
	err        error

	// Reader goroutine only.
	rbuf       []byte
	rpos, rend int
	rxTransfer frames.Transfer
	rxFlow     frames.Flow
	rxDisp     frames.Disposition
	events     []event
	finished   bool // the close exchange is complete
}

func newConn(s *Server, nc net.Conn) *Conn {
	c := &Conn{
		srv:        s,
		cfg:        &s.cfg,
		nc:         nc,
		id:         s.nextID.Add(1),
		info:       ConnInfo{LocalAddr: nc.LocalAddr(), RemoteAddr: nc.RemoteAddr()},
		wake:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		writerDone: make(chan struct{}),
		done:       make(chan struct{}),
		rbuf:       make([]byte, 0, initialReadBuffer),
	}
	c.rbuf = c.rbuf[:cap(c.rbuf)]
	c.outDrained = sync.NewCond(&c.mu)
	c.run.reset()
	return c
}

// ID is unique among the server's connections.
func (c *Conn) ID() uint64 { return c.id }

// Authorized tells the listener's Admission, if any, that the connection
// has authorized something: it is no longer pending.
func (c *Conn) Authorized() { Authorized(c.nc) }

// Info describes the socket.
func (c *Conn) Info() ConnInfo { return c.info }

// Identity is what Handler.Authenticate returned, nil without SASL.
func (c *Conn) Identity() any { return c.identity }

// PeerOpen is the peer's open performative (container-id, hostname,
// properties); nil before the handshake completes. Do not modify it.
func (c *Conn) PeerOpen() *frames.Open { return c.peerOpen }

// Done is closed when the connection is gone and every callback has run.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is the reason the connection ended, once Done is closed: nil for a
// clean close by the peer, the *frames.Error of either side's close, or
// the network error.
func (c *Conn) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// Close closes the connection with err (nil for a clean close) and returns
// at once; Done reports the end. Pending links and sessions end with it.
func (c *Conn) Close(err *frames.Error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case stateHandshake:
		// No open has been sent, so there is nothing to close politely:
		// fail the handshake's pending read or write.
		if c.closeErr == nil {
			c.closeErr = err
			if err == nil {
				c.closeErr = newError(CondConnectionForced, "closed by the server")
			}
		}
		_ = c.nc.SetDeadline(time.Now())
	case stateOpen:
		c.closeWith(err)
	}
}

// closeWith sends close (§2.7.9), after which only the peer's close is
// awaited (§2.4.3). Called with mu held.
func (c *Conn) closeWith(err *frames.Error) {
	if c.state != stateOpen {
		return
	}
	c.state = stateClosing
	c.closeErr = err
	if err != nil {
		c.cfg.Logger.Info("amqp connection closing", "conn", c.id, "remote", c.info.Peer(), "condition", err.Condition, "description", err.Description)
	}
	c.appendClose(err)
	c.closeDeadline = time.Now().Add(c.cfg.CloseTimeout)
	if c.peerClosed || c.cfg.CloseTimeout == 0 {
		c.closeDeadline = time.Now()
	}
	_ = c.nc.SetReadDeadline(c.closeDeadline)
	c.wakeWriter()
}

// serve runs the connection from the first byte to the last callback.
func (c *Conn) serve() error {
	if tc, ok := unwrap(c.nc).(*tls.Conn); ok {
		if c.cfg.HandshakeTimeout > 0 {
			_ = c.nc.SetDeadline(time.Now().Add(c.cfg.HandshakeTimeout))
		}
		if err := tc.Handshake(); err != nil {
			return c.abort(fmt.Errorf("tls handshake: %w", err))
		}
		st := tc.ConnectionState()
		c.info.TLS = &st
		if t, ok := unwrap(tc.NetConn()).(*net.TCPConn); ok {
			c.ackRaw, _ = t.SyscallConn()
		}
	}
	if err := c.handshake(); err != nil {
		return c.abort(err)
	}
	if tc, ok := unwrap(c.nc).(*net.TCPConn); ok {
		// Writes may go straight to the socket (tryWrite); reads go
		// through c.nc, which may hold bytes Split peeked at.
		c.raw, _ = tc.SyscallConn()
		c.ackRaw = c.raw
	}
	c.lastWrite = time.Now() // the handshake's
	// Its own goroutine: a write blocks while the peer does not read; the reader must go on.
	go c.writeLoop()
	if c.overLimit {
		c.Close(newError(CondResourceLimit, "too many connections"))
	} else {
		c.opened = true
		if e := c.srv.handler.ConnectionOpened(c); e != nil {
			c.Close(e)
		}
	}
	err := c.readLoop()
	return c.teardown(err)
}

// abort ends a connection that never got past the handshake.
func (c *Conn) abort(err error) error {
	c.cfg.Logger.Debug("amqp handshake failed", "conn", c.id, "remote", c.info.Peer(), "err", err)
	_ = c.nc.Close()
	c.err = err
	close(c.done)
	return err
}

// teardown ends every session and link, flushes the writer, closes the
// socket and runs the last callbacks.
func (c *Conn) teardown(cause error) error {
	c.mu.Lock()
	var linkErr *frames.Error
	switch {
	case c.closeErr != nil:
		linkErr = c.closeErr
		c.err = c.closeErr
	case c.peerErr != nil:
		linkErr = c.peerErr
		c.err = c.peerErr
	case c.peerClosed || c.state == stateClosing:
		// A clean close, by the peer or by us (Close(nil)).
		c.err = nil
	default:
		c.err = cause
		if cause == nil {
			c.err = ErrConnClosed
		}
		linkErr = newError(CondConnectionForced, fmt.Sprintf("connection lost: %v", c.err))
	}
	for _, s := range c.sessions {
		if s != nil {
			s.finishLinks(linkErr)
			c.srv.sessions.Add(-1)
		}
	}
	c.sessions, c.outChannels = nil, nil
	c.state = stateClosed
	c.outDrained.Broadcast()
	c.mu.Unlock()

	close(c.stop)
	<-c.writerDone
	_ = c.nc.Close()
	c.dispatch()
	if c.opened {
		c.srv.handler.ConnectionClosed(c, c.err)
	}
	c.cfg.Logger.Debug("amqp connection closed", "conn", c.id, "remote", c.info.Peer(), "err", c.err)
	close(c.done)
	return c.err
}
