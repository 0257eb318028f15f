package transport

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Server accepts AMQP 1.0 connections and drives them with a Handler.
type Server struct {
	cfg           Config
	handler       Handler
	sessionWindow uint32           // incoming-window per session; tests lower it
	quickAck      func(fd uintptr) // see Conn.ackSmallRead; tests count its calls

	nextID atomic.Uint64
	active atomic.Int64 // connections counted against MaxConnections
	// Open sessions and attached links, for metrics.
	sessions, links atomic.Int64

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[*Conn]struct{}
	wg        sync.WaitGroup // one per ServeConn
}

// NewServer returns a server with cfg's defaults applied.
func NewServer(cfg Config, h Handler) *Server {
	return &Server{
		cfg:           cfg.withDefaults(),
		handler:       h,
		sessionWindow: defaultSessionWindow,
		quickAck:      quickAck,
		listeners:     make(map[net.Listener]struct{}),
		conns:         make(map[*Conn]struct{}),
	}
}

// Stats counts what is open right now.
type Stats struct {
	Connections, Sessions, Links int64
}

// Stats returns the open connections, sessions and attached links.
func (s *Server) Stats() Stats {
	return Stats{Connections: s.active.Load(), Sessions: s.sessions.Load(), Links: s.links.Load()}
}

// Config returns the configuration in use, defaults applied.
func (s *Server) Config() Config { return s.cfg }

// Serve accepts connections on l until Shutdown, serving each on its own
// goroutines. It returns ErrServerClosed after Shutdown, or the listener's
// error.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.listeners[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.listeners, l)
		s.mu.Unlock()
	}()
	var backoff time.Duration
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.isClosed() {
				return ErrServerClosed
			}
			if temporary(err) {
				// Out of file descriptors and the like: wait and retry
				// rather than spin or give up.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.cfg.Logger.Warn("amqp accept failed, retrying", "err", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		go func() { _ = s.ServeConn(nc) }() // becomes the connection's reader; Accept goes on
	}
}

// ServeConn runs one connection, already accepted (for example from a
// TLS listener, or a net.Pipe in tests), until it ends, and closes nc.
// It returns nil after a clean close by the peer, or the error that ended
// the connection (a *frames.Error when either side closed with one).
func (s *Server) ServeConn(nc net.Conn) error {
	c := newConn(s, nc)
	if !s.track(c) {
		_ = nc.Close()
		return ErrServerClosed
	}
	defer s.untrack(c)
	return c.serve()
}

// Shutdown stops accepting, closes every connection with
// amqp:connection:forced and waits for them to finish. When ctx ends
// first, the remaining sockets are closed at once and ctx's error is
// returned after they are gone.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	for l := range s.listeners {
		_ = l.Close()
	}
	conns := make([]*Conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close(newError(CondConnectionForced, "server shutting down"))
	}
	done := make(chan struct{})
	go func() { // WaitGroup.Wait cannot be selected with ctx.Done
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	for c := range s.conns {
		_ = c.nc.Close()
	}
	s.mu.Unlock()
	<-done
	return ctx.Err()
}

// temporary reports accept errors worth retrying.
func temporary(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// track registers c, or reports false after Shutdown.
func (s *Server) track(c *Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	c.overLimit = s.active.Add(1) > int64(s.cfg.MaxConnections)
	return true
}

func (s *Server) untrack(c *Conn) {
	s.active.Add(-1)
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}
