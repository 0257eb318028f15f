package transport

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Split serves AMQP and HTTP on one listener, as Service Bus does on 443
// and as the SDKs' administration clients expect: the Go admin client
// dials https:// on the AMQP endpoint's own host and port. A connection
// is told by its first bytes:
//
//   - a TLS record (0x16) is answered with the server's certificate, and
//     what comes inside is told apart the same way;
//   - "AMQP" is the AMQP protocol header;
//   - upper-case letters and a space begin an HTTP request line.
//
// Anything else is closed with a log line saying what arrived. Each kind
// goes to its own net.Listener (AMQP and HTTP), which the AMQP server and
// an http.Server accept from as from any listener.
type Split struct {
	ln      net.Listener
	tls     *tls.Config // nil: no TLS here
	adm     *Admission  // nil: every connection is kept
	logger  *slog.Logger
	timeout time.Duration

	amqp, http *chanListener
	once       sync.Once
}

// sniffTimeout bounds how long a new connection may take to send its first
// bytes (and to finish a TLS handshake) before it is told apart.
const sniffTimeout = 10 * time.Second

// NewSplit starts accepting on ln. cfg, if not nil, lets clients speak
// TLS. adm, if not nil, decides which connections are kept (a connection
// is pending until AMQP authorizes it or HTTP sends its request line); its
// handshake timeout also bounds the wait for the first bytes.
func NewSplit(ln net.Listener, cfg *tls.Config, adm *Admission, logger *slog.Logger) *Split {
	s := &Split{ln: ln, tls: cfg, adm: adm, logger: logger, timeout: sniffTimeout,
		amqp: newChanListener(ln.Addr()), http: newChanListener(ln.Addr())}
	if adm != nil && adm.limits.HandshakeTimeout > 0 {
		s.timeout = adm.limits.HandshakeTimeout
	}
	go s.run()
	return s
}

// AMQP is the listener of connections that speak AMQP.
func (s *Split) AMQP() net.Listener { return s.amqp }

// HTTP is the listener of connections that speak HTTP.
func (s *Split) HTTP() net.Listener { return s.http }

// Close stops accepting; both listeners return net.ErrClosed.
func (s *Split) Close() error {
	err := s.ln.Close()
	s.once.Do(func() {
		s.amqp.close()
		s.http.close()
	})
	return err
}

func (s *Split) run() {
	var backoff time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				s.Close()
				return
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.logger.Warn("accept failed, retrying", "addr", s.ln.Addr().String(), "err", err, "backoff", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		if s.adm != nil {
			var ok bool
			if nc, ok = s.adm.Admit(nc); !ok {
				continue
			}
		}
		go s.route(nc)
	}
}

// route tells what nc speaks and hands it on.
func (s *Split) route(nc net.Conn) {
	nc.SetDeadline(time.Now().Add(s.timeout))
	c, first, err := peek(nc)
	if err == nil && first[0] == 0x16 {
		if s.tls == nil {
			s.refuse(nc, "a TLS handshake, but this listener has no certificate (--tls-cert, --tls-key)")
			return
		}
		t := tls.Server(c, s.tls)
		if err := t.Handshake(); err != nil {
			s.logger.Info("TLS handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
			nc.Close()
			return
		}
		c, first, err = peek(t)
	}
	if err != nil {
		nc.Close()
		return
	}
	nc.SetDeadline(time.Time{})
	switch {
	case bytes.Equal(first, []byte("AMQP")):
		s.amqp.push(c)
	case httpStart(first):
		Authorized(c) // each request carries its own authorization
		s.http.push(c)
	default:
		s.refuse(nc, "neither AMQP nor HTTP: "+quoteBytes(first))
	}
}

func (s *Split) refuse(nc net.Conn, what string) {
	s.logger.Warn("connection closed: it speaks another protocol", "addr", s.ln.Addr().String(),
		"remote", nc.RemoteAddr().String(), "got", what)
	nc.Close()
}

// peek reads the first four bytes of c without consuming them.
func peek(c net.Conn) (net.Conn, []byte, error) {
	br := bufio.NewReaderSize(c, 512)
	first, err := br.Peek(4)
	if err != nil {
		return nil, nil, err
	}
	return &peekedConn{Conn: c, r: br}, first, nil
}

// httpStart says whether b can begin an HTTP/1 request line: a method
// (upper-case letters) and then a space.
func httpStart(b []byte) bool {
	for i, c := range b {
		if c == ' ' && i > 0 {
			return true
		}
		if c < 'A' || c > 'Z' {
			return false
		}
	}
	return true
}

func quoteBytes(b []byte) string {
	out := make([]byte, 0, 4*len(b))
	for _, c := range b {
		if c >= 0x20 && c < 0x7f {
			out = append(out, c)
		} else {
			out = append(out, '\\', 'x', "0123456789abcdef"[c>>4], "0123456789abcdef"[c&15])
		}
	}
	return string(out)
}

// peekedConn reads first what peek buffered.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// TLSState is the TLS state of a connection Split handed out, nil if it
// is not over TLS.
func TLSState(nc net.Conn) *tls.ConnectionState {
	if tc, ok := unwrap(nc).(*tls.Conn); ok {
		st := tc.ConnectionState()
		return &st
	}
	return nil
}

// unwrap is the connection under Split's wrappers (a peekedConn, an
// admittedConn), or nc: a *tls.Conn or a *net.TCPConn for connections
// Split handed out.
func unwrap(nc net.Conn) net.Conn {
	for {
		switch c := nc.(type) {
		case *peekedConn:
			nc = c.Conn
		case *admittedConn:
			nc = c.Conn
		default:
			return nc
		}
	}
}

// chanListener is a net.Listener fed by Split.
type chanListener struct {
	addr   net.Addr
	conns  chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) push(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		c.Close()
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) close() { l.closed.Do(func() { close(l.done) }) }

// Close closes this side only; the Split goes on accepting for the other.
func (l *chanListener) Close() error {
	l.close()
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
