package peer

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// peer is the sending side towards one node: a bounded queue that Send
// fills, and one goroutine (run) that owns the connection and every
// snapshot transfer on it. Only run touches the connection's state; Send
// and the Transport's methods reach it through the queue under mu and the
// wake and quit channels.
type peer struct {
	t   *Transport
	id  uint64
	log *slog.Logger

	mu       sync.Mutex
	addr     string
	queue    []item
	spare    []item     // the queue's other buffer: run drains one while Send fills the other
	queued   int        // bytes in queue
	snaps    []*outSnap // waiting for their turn
	snapped  int        // bytes in snaps
	rejected []uint64   // groups whose MsgSnap Send could not queue: run reports them
	conn     net.Conn   // the connection being made or used, for stop to cut
	stopped  bool

	transfers uint64 // the last transfer's number; run's alone

	wake chan struct{} // a token: there is something to do
	quit chan struct{} // closed by stop
}

var errStopped = errors.New("stopped")

// outSnap is one MsgSnap on its way.
type outSnap struct {
	group    uint64
	transfer uint64
	data     []byte // the marshalled message
	crc      uint32
	sent     int       // bytes written so far
	deadline time.Time // for the ack, once all is written
}

// outConn is a connection run made, and the transfers on it: they fail
// with it.
type outConn struct {
	conn     net.Conn // what run reads and writes (TLS, if used)
	raw      net.Conn // the TCP connection under it, closed to cut it
	addr     string
	w        *bufio.Writer
	acks     chan ack
	gone     chan struct{} // closed by the reader when it ends
	readErr  error         // why the reader ended; read after gone
	quit     chan struct{} // closed by run when it drops the connection
	active   *outSnap
	awaiting map[uint64]*outSnap // sent whole, by group, waiting for the ack
}

func newPeer(t *Transport, id uint64, addr string) *peer {
	return &peer{
		t:    t,
		id:   id,
		log:  t.log.With("peer", id),
		addr: addr,
		wake: make(chan struct{}, 1),
		quit: make(chan struct{}),
	}
}

func (p *peer) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *peer) queueMessage(group uint64, b []byte) {
	p.mu.Lock()
	if p.stopped || len(p.queue) >= p.t.cfg.QueueLength || p.queued+len(b) > p.t.cfg.QueueBytes {
		p.mu.Unlock()
		p.t.stats.dropped.Add(1)
		return
	}
	p.queue = append(p.queue, item{group: group, data: b})
	p.queued += len(b)
	p.mu.Unlock()
	p.signal()
}

func (p *peer) queueSnapshot(group uint64, b []byte) {
	p.mu.Lock()
	switch {
	case p.stopped:
	case len(b) > p.t.cfg.MaxSnapshot:
		p.log.Warn("a snapshot too big to send was dropped", "group", group, "bytes", len(b), "max", p.t.cfg.MaxSnapshot)
		p.rejected = append(p.rejected, group)
	case len(p.snaps) >= maxPendingSnapshots || p.snapped+len(b) > p.t.cfg.MaxSnapshot:
		p.rejected = append(p.rejected, group)
	default:
		p.snaps = append(p.snaps, &outSnap{group: group, data: b, crc: crc32.Checksum(b, castagnoli)})
		p.snapped += len(b)
	}
	p.mu.Unlock()
	p.signal()
}

func (p *peer) setAddr(addr string) {
	p.mu.Lock()
	p.addr = addr
	p.mu.Unlock()
	p.signal()
}

func (p *peer) queueSize() (n, bytes int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue), p.queued
}

// stop ends run: it closes the connection under a blocked write, and run
// sees quit at its next step.
func (p *peer) stop() {
	p.mu.Lock()
	if !p.stopped {
		p.stopped = true
		close(p.quit)
		if p.conn != nil {
			p.conn.Close()
		}
	}
	p.mu.Unlock()
}

// take swaps the queue out for run to write.
func (p *peer) take() []item {
	p.mu.Lock()
	defer p.mu.Unlock()
	items := p.queue
	p.queue, p.spare = p.spare[:0], nil
	p.queued = 0
	return items
}

// giveBack returns a drained buffer for the next take.
func (p *peer) giveBack(items []item) {
	clear(items) // let the messages go
	p.mu.Lock()
	p.spare = items[:0]
	p.mu.Unlock()
}

func (p *peer) idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) == 0
}

func (p *peer) hasWork() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) > 0 || len(p.snaps) > 0
}

// run is the peer's goroutine: it dials when there is something to send,
// writes, takes acks, and backs off after a failure.
func (p *peer) run() {
	defer p.t.wg.Done()
	var (
		c       *outConn
		backoff time.Duration
		retryAt time.Time
		timer   = time.NewTimer(time.Hour)
		down    bool // the last connection failed: said once in the log
	)
	defer timer.Stop()
	fail := func(err error) {
		select {
		case <-p.quit:
			return // stopped: the connection was cut on purpose
		default:
		}
		if !down {
			p.log.Warn("peer unreachable", "err", err)
			down = true
		} else {
			p.log.Debug("peer still unreachable", "err", err)
		}
		backoff = min(max(2*backoff, backoffMin), backoffMax)
		retryAt = time.Now().Add(backoff)
		p.t.unreachable(p.id)
	}
	for {
		select {
		case <-p.quit:
			if c != nil {
				p.drop(c)
			}
			p.dropAll()
			return
		default:
		}
		p.reportRejected()
		if c != nil && c.addr != p.currentAddr() {
			p.log.Info("peer address changed", "from", c.addr, "to", p.currentAddr())
			p.drop(c)
			c = nil
		}
		if c == nil && p.hasWork() && !time.Now().Before(retryAt) {
			var err error
			if c, err = p.dial(); err != nil {
				p.t.stats.dialFailures.Add(1)
				p.dropAll() // a peer that is down gets nothing: Raft resends
				fail(err)
			} else {
				backoff, down = 0, false
				p.log.Info("connected", "addr", c.addr)
			}
		}
		if c != nil {
			if err := p.write(c); err != nil {
				p.drop(c)
				c = nil
				fail(err)
			}
		}

		// Wait for work, an ack, the connection's end, a retry or an
		// ack's deadline.
		var acks <-chan ack
		var gone <-chan struct{}
		wakeAt := time.Time{}
		if c != nil {
			acks, gone = c.acks, c.gone
			for _, s := range c.awaiting {
				if wakeAt.IsZero() || s.deadline.Before(wakeAt) {
					wakeAt = s.deadline
				}
			}
		} else if p.hasWork() {
			wakeAt = retryAt
		}
		var timeout <-chan time.Time
		if !wakeAt.IsZero() {
			timer.Reset(time.Until(wakeAt))
			timeout = timer.C
		}
		select {
		case <-p.quit:
		case <-p.wake:
		case a := <-acks:
			p.acked(c, a)
		case <-gone:
			err := c.readErr
			if errors.Is(err, io.EOF) {
				err = errors.New("closed by the peer")
			}
			p.drop(c)
			c = nil
			fail(err)
		case <-timeout:
			if c != nil {
				p.expire(c)
			}
		}
		timer.Stop()
	}
}

func (p *peer) currentAddr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.addr
}

// dial makes a connection and exchanges hellos: the acceptor answers only
// if it takes the connection, and its answer must name the node meant.
func (p *peer) dial() (*outConn, error) {
	addr := p.currentAddr()
	d := net.Dialer{Timeout: dialTimeout}
	raw, err := d.DialContext(p.t.ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		raw.Close()
		return nil, errStopped
	}
	p.conn = raw
	p.mu.Unlock()
	conn := raw
	if cfg := p.t.cfg.TLS; cfg != nil {
		if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
			cfg = cfg.Clone()
			cfg.ServerName, _, _ = net.SplitHostPort(addr)
		}
		conn = tls.Client(raw, cfg)
	}
	c := &outConn{conn: conn, raw: raw, addr: addr}
	if err := p.handshake(c); err != nil {
		p.mu.Lock()
		p.conn = nil
		p.mu.Unlock()
		raw.Close()
		return nil, fmt.Errorf("handshake with %s: %w", addr, err)
	}
	p.t.stats.connects.Add(1)
	c.w = bufio.NewWriterSize(conn, 64<<10)
	c.acks = make(chan ack, 16)
	c.gone = make(chan struct{})
	c.quit = make(chan struct{})
	c.awaiting = make(map[uint64]*outSnap)
	p.t.wg.Add(1)
	go p.read(c)
	return c, nil
}

func (p *peer) handshake(c *outConn) error {
	cfg := p.t.cfg
	c.conn.SetDeadline(time.Now().Add(handshakeTimeout))
	b := appendHello(nil, hello{cluster: cfg.Cluster, from: cfg.ID, to: p.id})
	if _, err := c.conn.Write(b); err != nil {
		return err
	}
	p.t.stats.bytesSent.Add(uint64(len(b)))
	h, err := readHello(c.conn)
	if err != nil {
		return err
	}
	p.t.stats.bytesReceived.Add(uint64(helloFixed + len(h.cluster)))
	if h.cluster != cfg.Cluster || h.from != p.id || h.to != cfg.ID {
		return fmt.Errorf("answered by node %d of cluster %q for node %d", h.from, h.cluster, h.to)
	}
	return c.conn.SetDeadline(time.Time{})
}

// read takes the acks that come back on an outgoing connection; nothing
// else may.
func (p *peer) read(c *outConn) {
	defer p.t.wg.Done()
	defer close(c.gone)
	fr := frameReader{r: bufio.NewReaderSize(c.conn, 4<<10)}
	for {
		t, payload, err := fr.next()
		if err == nil && t != frameAck {
			err = protocolErr("a %s frame from the receiver", t)
		}
		var a ack
		if err == nil {
			a, err = decodeAck(payload)
		}
		if err != nil {
			if errors.Is(err, errProtocol) {
				p.t.stats.malformed.Add(1)
				p.log.Warn("closing a connection for bad input", "err", err)
			}
			c.readErr = err
			return
		}
		p.t.stats.bytesReceived.Add(uint64(headerSize + len(payload)))
		select {
		case c.acks <- a:
		case <-c.quit:
			c.readErr = errStopped
			return
		}
	}
}

// write sends what is queued, interleaved with the chunks of a snapshot
// transfer one at a time so that heartbeats keep flowing beside it, and
// flushes whenever the queue is empty.
func (p *peer) write(c *outConn) error {
	for {
		select {
		case <-p.quit:
			return errStopped
		default:
		}
		if err := c.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
			return err
		}
		items := p.take()
		err := p.writeMessages(c, items)
		p.giveBack(items)
		if err != nil {
			return err
		}
		if c.active == nil {
			c.active = p.nextSnapshot(c)
		}
		if c.active != nil {
			if err := p.writeChunk(c); err != nil {
				return err
			}
		}
		if p.idle() {
			if err := c.w.Flush(); err != nil {
				return err
			}
			if c.active == nil {
				return nil
			}
		}
	}
}

// writeMessages writes items as messages frames, as many to a frame as
// fit. It writes the pieces straight to the buffered writer, so a message
// is copied once on its way out.
func (p *peer) writeMessages(c *outConn, items []item) error {
	var hdr [runHeader]byte
	for len(items) > 0 {
		n, size := 0, 0
		for n < len(items) {
			add := msgHeader + len(items[n].data)
			if n == 0 || items[n].group != items[n-1].group {
				add += runHeader
			}
			if size+add > maxPayload {
				break
			}
			size += add
			n++
		}
		// bufio.Writer's error sticks: the frame's last Write reports
		// any before it.
		c.w.Write(appendHeader(hdr[:0], frameMessages, size))
		var err error
		for i, it := range items[:n] {
			if i == 0 || it.group != items[i-1].group {
				run := 1
				for i+run < n && items[i+run].group == it.group {
					run++
				}
				c.w.Write(appendRunHeader(hdr[:0], it.group, run))
			}
			c.w.Write(appendMsgHeader(hdr[:0], len(it.data)))
			_, err = c.w.Write(it.data)
		}
		if err != nil {
			p.t.stats.dropped.Add(uint64(len(items)))
			return err
		}
		p.t.stats.messagesSent.Add(uint64(n))
		p.t.stats.bytesSent.Add(uint64(headerSize + size))
		items = items[n:]
	}
	return nil
}

// nextSnapshot takes the first waiting MsgSnap for a group that has none
// waiting for its ack on c.
func (p *peer) nextSnapshot(c *outConn) *outSnap {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, s := range p.snaps {
		if c.awaiting[s.group] == nil {
			p.snaps = append(p.snaps[:i], p.snaps[i+1:]...)
			p.snapped -= len(s.data)
			p.transfers++
			s.transfer = p.transfers
			return s
		}
	}
	return nil
}

func (p *peer) writeChunk(c *outConn) error {
	s := c.active
	n := min(chunkSize, len(s.data)-s.sent)
	ch := chunk{group: s.group, transfer: s.transfer, total: uint64(len(s.data)), offset: uint64(s.sent), crc: s.crc,
		data: s.data[s.sent : s.sent+n]}
	var hdr [headerSize + chunkHeader]byte
	c.w.Write(appendChunkHeader(appendHeader(hdr[:0], frameChunk, chunkHeader+n), ch))
	if _, err := c.w.Write(ch.data); err != nil {
		return err
	}
	p.t.stats.bytesSent.Add(uint64(headerSize + chunkHeader + n))
	s.sent += n
	if s.sent == len(s.data) {
		s.deadline = time.Now().Add(snapshotAckTimeout)
		c.awaiting[s.group] = s
		c.active = nil
	}
	return nil
}

func (p *peer) acked(c *outConn, a ack) {
	s := c.awaiting[a.group]
	if s == nil || s.transfer != a.transfer {
		p.log.Debug("an ack for no transfer waiting", "group", a.group, "transfer", a.transfer)
		return
	}
	delete(c.awaiting, a.group)
	p.t.snapshotDone(s.group, p.id, true)
	p.signal() // another snapshot for the group may wait for this one
}

// expire fails the transfers whose acks are late.
func (p *peer) expire(c *outConn) {
	now := time.Now()
	for g, s := range c.awaiting {
		if !now.Before(s.deadline) {
			p.log.Warn("snapshot not acknowledged in time", "group", g)
			delete(c.awaiting, g)
			p.t.snapshotDone(g, p.id, false)
		}
	}
}

// drop closes c and fails its transfers.
func (p *peer) drop(c *outConn) {
	p.mu.Lock()
	if p.conn == c.raw {
		p.conn = nil
	}
	p.mu.Unlock()
	close(c.quit)
	c.raw.Close()
	<-c.gone
	if c.active != nil {
		c.awaiting[c.active.group] = c.active
		c.active = nil
	}
	for g := range c.awaiting {
		p.t.snapshotDone(g, p.id, false)
	}
	clear(c.awaiting)
}

// dropAll empties the queue and fails the waiting snapshots.
func (p *peer) dropAll() {
	p.mu.Lock()
	p.t.stats.dropped.Add(uint64(len(p.queue)))
	clear(p.queue)
	p.queue, p.queued = p.queue[:0], 0
	snaps := p.snaps
	p.snaps, p.snapped = nil, 0
	p.mu.Unlock()
	for _, s := range snaps {
		p.t.snapshotDone(s.group, p.id, false)
	}
	p.reportRejected()
}

func (p *peer) reportRejected() {
	p.mu.Lock()
	groups := p.rejected
	p.rejected = nil
	p.mu.Unlock()
	for _, g := range groups {
		p.t.snapshotDone(g, p.id, false)
	}
}
