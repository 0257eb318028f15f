// Package floor is a Service Bus that keeps nothing: the least a broker can
// do for the official SDKs, used as the control for `walbus bench`.
//
// It speaks enough AMQP 1.0 for the Go SDK and go-amqp to send (singly or in
// batches), receive in peek-lock or receive-and-delete, and settle: any SASL
// mechanism and any $cbs token are accepted, every queue exists, a message
// lives in memory until it is delivered and is gone from then on, a
// settlement is answered at once whatever it says, and a peek finds nothing.
// Each connection has one goroutine, which reads a frame and writes what it
// causes before reading the next; a send that finds a receiver with credit
// is written to that receiver's socket by the sender's goroutine, so no
// message crosses a goroutine inside the server. Benchmarks run the same
// load against walbus and against the floor, side by side: what the floor
// costs, and the latency clients see through it, is what the machine and
// the client cost before any broker does real work.
//
// NewDurable gives the durable floor: the same, except that every message
// sent to a queue, and every settlement a receiver asks an answer for, is
// appended to one file and fsynced (in group commits) before it is answered
// or delivered: the least a broker that acknowledges only what is on disk
// can do (docs/architecture.md).
// Between the two floors and walbus, a benchmark tells what the machine and
// client cost, what durability costs on this disk, and what walbus adds.
// Receive-and-delete deliveries are not held for a sync.
//
// It is not a broker: nothing is kept past a delivery, nothing is checked,
// and a receiver that stops reading its socket stalls whoever sends to it.
package floor

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/message"
)

const (
	maxFrameSize = 256 << 10
	// senderCredit is what each sending link is granted, topped up when
	// half is used.
	senderCredit = 1000
	// window is every session's incoming and outgoing window; a
	// benchmark never uses it up.
	window = 1 << 31
)

// Server holds the queues shared by all connections.
type Server struct {
	mu     sync.Mutex // queues, and every link's credit and session ids
	queues map[string]*queue
	log    *syncer // the durable floor's file; nil for the plain floor
}

type queue struct {
	msgs  [][]byte
	recvs []*link // links with credit receive in turn
	next  int
}

// New returns an empty floor.
func New() *Server { return &Server{queues: map[string]*queue{}} }

// Write says how a durable floor writes its file.
type Write int

const (
	// Append appends and fsyncs, as walbus's log does through tidwall/wal.
	Append Write = iota
	// Overwrite fills the file with zeros at start and then writes over
	// them, round and round, with fdatasync: on ext4 that commits no
	// metadata, which makes it the cheapest durable write there is.
	Overwrite
)

// NewDurable returns an empty durable floor that syncs to the file at path,
// which it creates or empties.
func NewDurable(path string, how Write) (*Server, error) {
	limit := int64(appendLimit)
	if how == Overwrite {
		limit = ringSize
	}
	w, err := openSyncer(path, how == Overwrite, limit)
	if err != nil {
		return nil, err
	}
	s := New()
	s.log = w
	return s, nil
}

// Close makes what a durable floor was given durable, answers it, and
// closes the file, returning the first error the file gave. A plain floor
// has nothing to close.
func (s *Server) Close() error {
	if s.log == nil {
		return nil
	}
	return s.log.close()
}

// Serve accepts connections until ln is closed or, on a durable floor,
// until its file fails, which closes ln and is the error returned.
func (s *Server) Serve(ln net.Listener) error {
	if s.log != nil {
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			select {
			case <-s.log.failed:
				ln.Close()
			case <-stop:
			}
		}()
	}
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.log != nil {
				if ferr := s.log.failure(); ferr != nil {
					return ferr
				}
			}
			return err
		}
		go s.serveConn(nc)
	}
}

func (s *Server) queue(name string) *queue {
	q := s.queues[name]
	if q == nil {
		q = &queue{}
		s.queues[name] = q
	}
	return q
}

type conn struct {
	srv *Server
	nc  net.Conn
	r   *bufio.Reader

	wmu sync.Mutex
	out []byte // frames made, in order, not written yet

	done        chan struct{} // closed when the connection ends
	maxFrame    uint32        // the peer's
	sessions    map[uint16]*session
	lastChannel uint16 // of the frame being handled
	buf         []byte // the frame being handled; reused
}

type session struct {
	ch      uint16
	inNext  uint32 // the peer's next transfer id
	outNext uint32 // ours; under srv.mu
	nextID  uint32 // our next delivery id; under srv.mu
	links   map[uint32]*link
}

type link struct {
	c         *conn
	s         *session
	handle    uint32
	peerSends bool // the peer's role is sender
	presettle bool // the peer asked for settled transfers (receive-and-delete)
	addr      string
	q         *queue // nil for a link the peer sends requests to $cbs or $management on

	// the peer receives: under srv.mu
	credit, count uint32
	tag           uint64
	// the peer sends: reader only
	received uint32 // delivery count
	left     uint32 // credit
	partial  []byte // the delivery being received
	firstID  uint32
	settled  bool
	batch    bool // Service Bus's batch format: messages in data sections
	more     bool
}

func (s *Server) serveConn(nc net.Conn) {
	c := &conn{srv: s, nc: nc, r: bufio.NewReaderSize(nc, 64<<10), done: make(chan struct{}), maxFrame: frames.MinMaxFrameSize, sessions: map[uint16]*session{}}
	defer func() {
		s.mu.Lock()
		for _, ss := range c.sessions {
			for _, l := range ss.links {
				s.detach(l)
			}
		}
		s.mu.Unlock()
		close(c.done)
		nc.Close()
	}()
	if err := c.handshake(); err != nil {
		return
	}
	for {
		body, err := c.readFrame()
		if err != nil {
			return
		}
		if len(body) == 0 {
			continue // heartbeat
		}
		if err := c.handle(body); err != nil {
			return
		}
		c.flush()
	}
}

// handshake runs SASL, if the peer starts with it, accepting whatever
// it offers, then exchanges the AMQP protocol headers.
func (c *conn) handshake() error {
	var hdr [8]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return err
	}
	ph, err := frames.ParseProtocolHeader(hdr[:])
	if err != nil {
		return err
	}
	if ph.ID == frames.ProtocolSASL {
		out := frames.AppendProtocolHeader(nil, frames.ProtocolSASL)
		out = frames.AppendFrame(out, frames.TypeSASL, 0, &frames.SASLMechanisms{
			Mechanisms: []encoding.Symbol{"ANONYMOUS", "PLAIN", "MSSBCBS"}}, nil)
		if _, err := c.nc.Write(out); err != nil {
			return err
		}
		if _, err := c.readFrame(); err != nil { // sasl-init
			return err
		}
		out = frames.AppendFrame(nil, frames.TypeSASL, 0, &frames.SASLOutcome{Code: frames.SASLOK}, nil)
		if _, err := c.nc.Write(out); err != nil {
			return err
		}
		if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
			return err
		}
		if ph, err = frames.ParseProtocolHeader(hdr[:]); err != nil {
			return err
		}
	}
	if ph.ID != frames.ProtocolAMQP {
		return fmt.Errorf("protocol %d", ph.ID)
	}
	_, err = c.nc.Write(frames.AppendProtocolHeader(nil, frames.ProtocolAMQP))
	return err
}

// readFrame returns the next frame's body, valid until the next call, and
// remembers its channel.
func (c *conn) readFrame() ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(c.r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < frames.HeaderSize || n > maxFrameSize {
		return nil, frames.ErrMalformedFrame
	}
	if cap(c.buf) < int(n) {
		c.buf = make([]byte, n)
	}
	c.buf = c.buf[:n]
	copy(c.buf, size[:])
	if _, err := io.ReadFull(c.r, c.buf[4:]); err != nil {
		return nil, err
	}
	h, body, err := frames.ParseFrame(c.buf)
	if err != nil {
		return nil, err
	}
	c.lastChannel = h.Channel
	return body, nil
}

func (c *conn) send(ch uint16, p frames.Performative) {
	c.wmu.Lock()
	c.out = frames.AppendFrame(c.out, frames.TypeAMQP, ch, p, nil)
	c.wmu.Unlock()
}

// sendBytes queues frames encoded earlier.
func (c *conn) sendBytes(b []byte) {
	c.wmu.Lock()
	c.out = append(c.out, b...)
	c.wmu.Unlock()
}

// flush writes what the connection's frames have piled up. Frames are
// appended in order under wmu, whoever made them, so concurrent flushes
// keep that order.
func (c *conn) flush() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(c.out) > 0 {
		c.nc.Write(c.out) // a failed write shows as the reader's next error
		c.out = c.out[:0]
	}
}

func (c *conn) handle(body []byte) error {
	p, payload, err := frames.ParseBody(body)
	if err != nil {
		return err
	}
	ch := c.lastChannel
	switch p := p.(type) {
	case *frames.Open:
		if p.MaxFrameSize.Present {
			c.maxFrame = min(p.MaxFrameSize.Value, maxFrameSize)
		} else {
			c.maxFrame = maxFrameSize
		}
		c.send(0, &frames.Open{ContainerID: "floor", MaxFrameSize: frames.Some[uint32](maxFrameSize), ChannelMax: frames.Some[uint16](1023)})
		if p.IdleTimeout > 0 {
			go c.heartbeat(time.Duration(p.IdleTimeout) * time.Millisecond / 2)
		}
	case *frames.Begin:
		c.sessions[ch] = &session{ch: ch, inNext: p.NextOutgoingID, links: map[uint32]*link{}}
		c.send(ch, &frames.Begin{RemoteChannel: frames.Some(ch), IncomingWindow: window, OutgoingWindow: window})
	case *frames.Attach:
		return c.attach(ch, p)
	case *frames.Flow:
		c.flow(ch, p)
	case *frames.Transfer:
		return c.transfer(ch, p, payload)
	case *frames.Disposition:
		if !p.Settled {
			reply := &frames.Disposition{Role: frames.RoleSender, First: p.First, Last: p.Last, Settled: true, State: p.State}
			if c.srv.log == nil {
				c.send(ch, reply)
				break
			}
			// The state may point into the frame being read: encode
			// the answer now, and record it as the settlement.
			b := frames.AppendFrame(nil, frames.TypeAMQP, ch, reply, nil)
			c.srv.log.add(b, func() {
				c.sendBytes(b)
				c.flush()
			})
		}
	case *frames.Detach:
		if ss := c.sessions[ch]; ss != nil {
			if l := ss.links[p.Handle]; l != nil {
				c.srv.mu.Lock()
				c.srv.detach(l)
				c.srv.mu.Unlock()
				delete(ss.links, p.Handle)
			}
		}
		c.send(ch, &frames.Detach{Handle: p.Handle, Closed: p.Closed})
	case *frames.End:
		if ss := c.sessions[ch]; ss != nil {
			c.srv.mu.Lock()
			for _, l := range ss.links {
				c.srv.detach(l)
			}
			c.srv.mu.Unlock()
			delete(c.sessions, ch)
		}
		c.send(ch, &frames.End{})
	case *frames.Close:
		c.send(0, &frames.Close{})
		c.flush()
		return io.EOF
	}
	return nil
}

func (c *conn) heartbeat(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		c.wmu.Lock()
		c.out = frames.AppendEmptyFrame(c.out)
		c.wmu.Unlock()
		c.flush()
	}
}

func (c *conn) attach(ch uint16, a *frames.Attach) error {
	ss := c.sessions[ch]
	if ss == nil {
		return errors.New("attach on no session")
	}
	l := &link{c: c, s: ss, handle: a.Handle, peerSends: a.Role == frames.RoleSender,
		presettle: a.SndSettleMode.Present && a.SndSettleMode.Value == frames.SenderSettleSettled}
	reply := frames.Attach{Name: a.Name, Handle: a.Handle, Role: !a.Role, SndSettleMode: a.SndSettleMode,
		RcvSettleMode: a.RcvSettleMode, Source: a.Source, Target: a.Target, MaxMessageSize: frames.Some[uint64](100 << 20)}
	if l.peerSends {
		if a.Target != nil {
			l.addr = a.Target.Address
		}
	} else {
		if a.Source != nil {
			l.addr = a.Source.Address
		}
		reply.InitialDeliveryCount = frames.Some[uint32](0)
	}
	switch {
	case !isRPC(l.addr):
		c.srv.mu.Lock()
		l.q = c.srv.queue(l.addr)
		c.srv.mu.Unlock()
	case !l.peerSends:
		l.q = &queue{} // the responses to this connection's requests
	}
	ss.links[a.Handle] = l
	c.send(ch, &reply)
	if l.peerSends {
		l.grant(senderCredit)
	}
	return nil
}

func isRPC(addr string) bool { return addr == "$cbs" || strings.HasSuffix(addr, "$management") }

// grant gives a link the peer sends on n credit from its current count.
func (l *link) grant(n uint32) {
	l.c.srv.mu.Lock()
	fl := l.s.flowLocked()
	l.c.srv.mu.Unlock()
	fl.Handle = frames.Some(l.handle)
	fl.DeliveryCount = frames.Some(l.received)
	fl.LinkCredit = frames.Some(n)
	l.left = n
	l.c.send(l.s.ch, &fl)
}

func (ss *session) flowLocked() frames.Flow {
	return frames.Flow{NextIncomingID: frames.Some(ss.inNext), IncomingWindow: window, NextOutgoingID: ss.outNext, OutgoingWindow: window}
}

func (c *conn) flow(ch uint16, fl *frames.Flow) {
	ss := c.sessions[ch]
	if ss == nil || !fl.Handle.Present {
		return
	}
	l := ss.links[fl.Handle.Value]
	if l == nil || l.peerSends || !fl.LinkCredit.Present {
		return
	}
	s := c.srv
	s.mu.Lock()
	l.credit = fl.DeliveryCount.Value + fl.LinkCredit.Value - l.count
	var others []*conn
	if l.q != nil {
		l.q.addReceiver(l)
		others = s.dispatch(l.q, c)
	}
	if fl.Drain && l.credit > 0 {
		l.count += l.credit
		l.credit = 0
		reply := ss.flowLocked()
		reply.Handle, reply.DeliveryCount, reply.LinkCredit, reply.Drain = fl.Handle, frames.Some(l.count), frames.Some[uint32](0), true
		c.send(ch, &reply)
	}
	s.mu.Unlock()
	flushAll(others)
}

func flushAll(cs []*conn) {
	for _, c := range cs {
		c.flush()
	}
}

func (q *queue) addReceiver(l *link) {
	for _, r := range q.recvs {
		if r == l {
			return
		}
	}
	q.recvs = append(q.recvs, l)
}

// dispatch hands queued messages to receivers with credit, in turn, and
// returns the connections other than self it wrote to. The caller holds
// s.mu, and flushes them once it lets go.
func (s *Server) dispatch(q *queue, self *conn) (others []*conn) {
	for len(q.msgs) > 0 && len(q.recvs) > 0 {
		if q.next >= len(q.recvs) {
			q.next = 0
		}
		l := q.recvs[q.next]
		if l.credit == 0 {
			q.recvs = slices.Delete(q.recvs, q.next, q.next+1)
			continue
		}
		q.next++
		m := q.msgs[0]
		q.msgs[0] = nil
		q.msgs = q.msgs[1:]
		l.deliver(m)
		if l.c != self && !slices.Contains(others, l.c) {
			others = append(others, l.c)
		}
	}
	return others
}

// detach forgets l; the caller holds s.mu.
func (s *Server) detach(l *link) {
	if l.q == nil {
		return
	}
	if i := slices.Index(l.q.recvs, l); i >= 0 {
		l.q.recvs = slices.Delete(l.q.recvs, i, i+1)
	}
}

// deliver writes m to the peer on l; the caller holds srv.mu.
func (l *link) deliver(m []byte) {
	l.credit--
	l.count++
	l.tag++
	var tag [16]byte
	binary.BigEndian.PutUint64(tag[8:], l.tag)
	t := frames.Transfer{Handle: l.handle, DeliveryID: frames.Some(l.s.nextID), DeliveryTag: tag[:],
		MessageFormat: frames.Some[uint32](0), Settled: l.presettle}
	c := l.c
	c.wmu.Lock()
	out, n, err := frames.AppendTransferFrames(c.out, l.s.ch, &t, m, c.maxFrame)
	if err == nil {
		c.out = out
		l.s.outNext += uint32(n)
		l.s.nextID++
	}
	c.wmu.Unlock()
}

// transfer takes a frame of a delivery from the peer. A whole message to a
// queue is stored, answered accepted unless the peer settled it, and
// handed to a receiver if one has credit; one to $cbs or $management is
// answered on the peer's receiving link for the same node.
func (c *conn) transfer(ch uint16, t *frames.Transfer, payload []byte) error {
	ss := c.sessions[ch]
	if ss == nil {
		return errors.New("transfer on no session")
	}
	ss.inNext++
	l := ss.links[t.Handle]
	if l == nil || !l.peerSends {
		return errors.New("transfer on no link")
	}
	if !l.more {
		l.received++
		l.partial = l.partial[:0]
		if t.DeliveryID.Present {
			l.firstID = t.DeliveryID.Value
		}
		l.settled = t.Settled
		l.batch = t.MessageFormat.Present && t.MessageFormat.Value == frames.MessageFormatBatch
	}
	l.partial = append(l.partial, payload...)
	l.more = t.More
	if t.More {
		return nil
	}
	if l.q == nil {
		if !l.settled {
			c.send(ch, accepted(l.firstID))
		}
		return c.answer(ss, l)
	}
	msgs := [][]byte{l.partial}
	if l.batch {
		var err error
		if msgs, err = message.SplitBatch(l.partial, nil); err != nil {
			return err
		}
	}
	for i, m := range msgs {
		msgs[i] = slices.Clone(m)
	}
	s := c.srv
	var others []*conn
	if s.log == nil {
		if !l.settled {
			c.send(ch, accepted(l.firstID))
		}
		others = s.store(l.q, msgs, c)
	} else {
		var answer []byte
		if !l.settled {
			answer = frames.AppendFrame(nil, frames.TypeAMQP, ch, accepted(l.firstID), nil)
		}
		q := l.q
		s.log.add(l.partial, func() {
			c.sendBytes(answer)
			others := s.store(q, msgs, c)
			c.flush()
			flushAll(others)
		})
	}
	if l.left--; l.left <= senderCredit/2 {
		l.grant(senderCredit)
	}
	c.flush()
	flushAll(others)
	return nil
}

func accepted(id uint32) *frames.Disposition {
	return &frames.Disposition{Role: frames.RoleReceiver, First: id, Settled: true, State: &frames.Accepted{}}
}

// store queues msgs on q and hands what it can to receivers with credit;
// it returns the connections other than self that it wrote to.
func (s *Server) store(q *queue, msgs [][]byte, self *conn) []*conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	q.msgs = append(q.msgs, msgs...)
	return s.dispatch(q, self)
}

// answer replies to a request on $cbs or $management: a token is
// accepted (202), a peek finds nothing (204), anything else succeeds with
// an empty map.
func (c *conn) answer(ss *session, req *link) error {
	m, err := message.Parse(req.partial)
	if err != nil {
		return err
	}
	props, err := m.ReadProperties()
	if err != nil {
		return err
	}
	var op string
	if v, ok, _ := m.ApplicationProperty("operation"); ok {
		r := encoding.NewReader(v)
		if x, err := r.ReadAny(encoding.Limits{}); err == nil {
			op, _ = x.(string)
		}
	}
	status, body := int32(200), any(encoding.Map{})
	switch op {
	case "put-token":
		status, body = 202, nil
	case "com.microsoft:peek-message":
		status, body = 204, nil
	}
	resp, err := message.AppendResponse(nil, &message.Response{CorrelationID: props.MessageID, Status: status, Description: "OK", Body: body})
	if err != nil {
		return err
	}
	for _, l := range ss.links {
		if !l.peerSends && l.addr == req.addr {
			c.srv.mu.Lock()
			l.q.msgs = append(l.q.msgs, resp)
			c.srv.dispatch(l.q, c)
			c.srv.mu.Unlock()
			return nil
		}
	}
	return errors.New("a request with no link to answer on")
}
