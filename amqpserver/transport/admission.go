package transport

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Admission decides which accepted connections a listener keeps, so that
// connections that never finish their handshake cannot crowd out real
// clients. A connection is pending from accept until it is authorized:
// for AMQP, its first claim (a CBS token or SASL PLAIN); for HTTP, its
// first request line (each request carries its own authorization). A
// pending connection is closed when the handshake timeout runs out.
//
// Three limits apply at accept: the pending connections in all, the
// pending connections of one source address, and all connections of one
// source address. A connection over a limit is closed at once, before
// anything is read from it. Each limit, when it refuses, logs one warning
// naming it (then at most one every WarnEvery, with the count refused
// since) and counts in Stats.
type Admission struct {
	limits AdmissionLimits
	logger *slog.Logger

	mu      sync.Mutex
	pending int
	byAddr  map[netip.Addr]*addrCount
	warned  [numLimits]time.Time
	since   [numLimits]uint64 // refused since the last warning

	refused  [numLimits]atomic.Uint64
	timedOut atomic.Uint64
}

// AdmissionLimits are Admission's limits; 0 means no limit.
type AdmissionLimits struct {
	MaxPending           int           // pending connections in all
	MaxPendingPerAddress int           // pending connections of one source address
	MaxPerAddress        int           // connections of one source address, pending or not
	HandshakeTimeout     time.Duration // from accept to authorized
	// Flags name each limit in the warnings (e.g. "--max-pending-connections").
	Flags [numLimits]string
}

// The limits, as Stats and the warnings name them.
const (
	LimitPending = iota
	LimitPendingPerAddress
	LimitPerAddress
	numLimits
)

// LimitNames are the limits' names in metrics.
var LimitNames = [numLimits]string{"pending", "pending_per_address", "per_address"}

// WarnEvery is the least time between two warnings of one limit.
const WarnEvery = 10 * time.Second

type addrCount struct{ pending, all int }

// NewAdmission applies limits; logger receives the warnings.
func NewAdmission(limits AdmissionLimits, logger *slog.Logger) *Admission {
	if logger == nil {
		logger = slog.Default()
	}
	return &Admission{limits: limits, logger: logger, byAddr: make(map[netip.Addr]*addrCount)}
}

// AdmissionStats are counts since the start.
type AdmissionStats struct {
	Pending  int
	Refused  [numLimits]uint64 // by limit
	TimedOut uint64            // pending connections closed by the handshake timeout
}

// Stats returns the pending connections now and the counts so far.
func (a *Admission) Stats() AdmissionStats {
	a.mu.Lock()
	st := AdmissionStats{Pending: a.pending}
	a.mu.Unlock()
	for i := range st.Refused {
		st.Refused[i] = a.refused[i].Load()
	}
	st.TimedOut = a.timedOut.Load()
	return st
}

// Admit takes nc, just accepted, as pending, or closes it and reports
// false when a limit is reached. The connection it returns releases its
// place when closed; Authorized ends its pending time.
func (a *Admission) Admit(nc net.Conn) (net.Conn, bool) {
	addr := remoteAddr(nc)
	a.mu.Lock()
	c := a.byAddr[addr]
	if c == nil {
		c = &addrCount{}
	}
	limit := -1
	switch l := a.limits; {
	case l.MaxPerAddress > 0 && c.all >= l.MaxPerAddress:
		limit = LimitPerAddress
	case l.MaxPendingPerAddress > 0 && c.pending >= l.MaxPendingPerAddress:
		limit = LimitPendingPerAddress
	case l.MaxPending > 0 && a.pending >= l.MaxPending:
		limit = LimitPending
	}
	if limit >= 0 {
		a.refuse(limit, addr)
		a.mu.Unlock()
		nc.Close()
		return nil, false
	}
	c.pending++
	c.all++
	a.byAddr[addr] = c
	a.pending++
	a.mu.Unlock()
	ac := &admittedConn{Conn: nc, a: a, addr: addr, pending: true}
	if d := a.limits.HandshakeTimeout; d > 0 {
		ac.mu.Lock()
		ac.timer = time.AfterFunc(d, ac.expire)
		ac.mu.Unlock()
	}
	return ac, true
}

// refuse counts a refusal and warns, at most once every WarnEvery per
// limit. a.mu is held.
func (a *Admission) refuse(limit int, addr netip.Addr) {
	a.refused[limit].Add(1)
	a.since[limit]++
	now := time.Now()
	if now.Sub(a.warned[limit]) < WarnEvery {
		return
	}
	a.logger.Warn("connection refused: limit reached", "limit", a.limits.Flags[limit], "value", a.value(limit),
		"remote_address", addr.String(), "refused", a.since[limit], "pending", a.pending)
	a.warned[limit], a.since[limit] = now, 0
}

func (a *Admission) value(limit int) int {
	switch limit {
	case LimitPending:
		return a.limits.MaxPending
	case LimitPendingPerAddress:
		return a.limits.MaxPendingPerAddress
	}
	return a.limits.MaxPerAddress
}

// Authorized ends nc's pending time, if nc (or the connection under it)
// came from Admit; other connections are left alone.
func Authorized(nc net.Conn) {
	if ac := admitted(nc); ac != nil {
		ac.authorized()
	}
}

// admittedConn is a connection Admit took.
type admittedConn struct {
	net.Conn
	a    *Admission
	addr netip.Addr

	mu       sync.Mutex
	timer    *time.Timer
	pending  bool
	expiring bool // the handshake timeout ran out: too late to authorize
	closed   bool
}

func (c *admittedConn) authorized() {
	c.mu.Lock()
	was := c.pending && !c.closed && !c.expiring
	if was {
		c.pending = false
	}
	if was && c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	if !was {
		return
	}
	c.a.mu.Lock()
	c.a.pending--
	c.a.byAddr[c.addr].pending--
	c.a.mu.Unlock()
}

// expire closes the connection if it is still pending.
func (c *admittedConn) expire() {
	c.mu.Lock()
	pending := c.pending && !c.closed
	c.expiring = pending
	c.mu.Unlock()
	if pending {
		c.a.timedOut.Add(1)
		c.a.logger.Debug("connection closed: no authorization within the handshake timeout",
			"remote", c.RemoteAddr().String(), "handshake_timeout", c.a.limits.HandshakeTimeout)
		c.Close()
	}
}

func (c *admittedConn) Close() error {
	c.mu.Lock()
	first, pending := !c.closed, c.pending
	c.closed, c.pending = true, false
	if first && c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	if first {
		c.a.mu.Lock()
		n := c.a.byAddr[c.addr]
		n.all--
		if pending {
			n.pending--
			c.a.pending--
		}
		if n.all == 0 {
			delete(c.a.byAddr, c.addr)
		}
		c.a.mu.Unlock()
	}
	return c.Conn.Close()
}

// admitted finds the admittedConn under nc, through Split's wrappers and
// TLS.
func admitted(nc net.Conn) *admittedConn {
	for nc != nil {
		switch c := nc.(type) {
		case *admittedConn:
			return c
		case *peekedConn:
			nc = c.Conn
		case interface{ NetConn() net.Conn }: // *tls.Conn
			nc = c.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// remoteAddr is nc's peer address without its port (IPv4 in IPv6 as
// IPv4), the zero Addr when it has none (a pipe).
func remoteAddr(nc net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(nc.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}
