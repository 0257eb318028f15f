package peer

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"
)

// peer is the sending side towards one node: a bounded queue that Send
// fills, the transfers waiting for their turn, and one goroutine (run)
// that owns the connection and every transfer on it. Only run touches the
// connection's state; Send and the Transport's methods reach it through
// the queue and the waiting transfers under mu and the wake and quit
// channels.
type peer struct {
	t   *Transport
	id  uint64
	log *slog.Logger

	mu        sync.Mutex
	addr      string
	queue     []item
	spare     []item         // the queue's other buffer: run drains one while Send fills the other
	queued    int            // bytes in queue
	waiting   []*outTransfer // transfers waiting for their turn, in the order sent
	waitBytes int            // bytes in waiting
	writing   *outTransfer   // the transfer run is writing, for Send to see a copy of it
	rejected  []uint64       // groups whose MsgSnap Send could not queue: run reports them
	conn      net.Conn       // the connection being made or used, for stop to cut
	stopped   bool

	transfers uint64 // the last transfer's number; run's alone

	wake chan struct{} // a token: there is something to do
	quit chan struct{} // closed by stop
}

var errStopped = errors.New("stopped")

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
	active   *outTransfer
	awaiting map[uint64]*outTransfer // MsgSnaps sent whole, by group, waiting for the ack
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

// queueTransfer queues a message to go in chunks, or drops it: one too
// big, a copy of a MsgApp that waits or is being written, one that does
// not fit beside those waiting. A dropped MsgSnap is left for run to
// report (SnapshotDone runs on run's goroutine); another message is
// counted and logged here.
func (p *peer) queueTransfer(s *outTransfer) {
	limit := p.t.cfg.MaxTransfer
	var why string
	level := slog.LevelWarn
	p.mu.Lock()
	switch {
	case p.stopped:
		why, level = "the peer was removed or the transport closed", slog.LevelDebug
	case len(s.data) > limit:
		why = fmt.Sprintf("over the most a transfer may be (%d bytes)", limit)
	case s.keyed && p.carries(s.key):
		why, level = "a copy of it is on its way", slog.LevelDebug
	case len(p.waiting) >= maxWaitingTransfers || p.waitBytes+len(s.data) > limit:
		why = fmt.Sprintf("no room beside the transfers waiting (%d, of %d bytes)", len(p.waiting), p.waitBytes)
	default:
		p.waiting = append(p.waiting, s)
		p.waitBytes += len(s.data)
	}
	if why != "" && s.kind == frameSnapshotChunk && !p.stopped {
		p.rejected = append(p.rejected, s.group)
	}
	p.mu.Unlock()
	switch {
	case why == "":
	case s.kind == frameSnapshotChunk:
		p.log.Log(context.Background(), level, "a snapshot was dropped: "+why, "group", s.group, "bytes", len(s.data))
	default:
		p.lose(s, level, why)
	}
	p.signal()
}

// carries reports whether a MsgApp with key's entries waits or is being
// written. p.mu is held.
func (p *peer) carries(key appendKey) bool {
	if w := p.writing; w != nil && w.keyed && w.key == key {
		return true
	}
	for _, s := range p.waiting {
		if s.keyed && s.key == key {
			return true
		}
	}
	return false
}

// lose counts a message sent in chunks (not a MsgSnap) that will not
// arrive, and says why, once. Raft sends its entries again.
func (p *peer) lose(s *outTransfer, level slog.Level, why string) {
	p.t.stats.dropped.Add(1)
	p.t.stats.largeDropped.Add(1)
	p.log.Log(context.Background(), level, "a large message was dropped: "+why, "group", s.group,
		"bytes", len(s.data))
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
	return len(p.queue) > 0 || len(p.waiting) > 0
}

func (p *peer) setWriting(s *outTransfer) {
	p.mu.Lock()
	p.writing = s
	p.mu.Unlock()
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
			p.dropAll(slog.LevelDebug, "the peer was removed or the transport closed")
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
				// A peer that is down gets nothing: Raft resends.
				p.dropAll(slog.LevelWarn, "the peer is unreachable")
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
	c.awaiting = make(map[uint64]*outTransfer)
	p.t.wg.Add(1)
	go p.read(c)
	return c, nil
}

func (p *peer) handshake(c *outConn) error {
	cfg := p.t.cfg
	c.conn.SetDeadline(time.Now().Add(handshakeTimeout))
	b := appendHello(nil, hello{cluster: cfg.Cluster, from: cfg.ID, to: p.id, advertise: cfg.Advertise})
	if _, err := c.conn.Write(b); err != nil {
		return err
	}
	p.t.stats.bytesSent.Add(uint64(len(b)))
	h, err := readHello(c.conn)
	if err != nil {
		return err
	}
	p.t.stats.bytesReceived.Add(uint64(h.size()))
	if h.cluster != cfg.Cluster || h.from != p.id || h.to != cfg.ID {
		return fmt.Errorf("answered by node %d of cluster %q for node %d", h.from, h.cluster, h.to)
	}
	p.t.heard(h)
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

// write sends what is queued, interleaved with the chunks of one
// transfer at a time so that heartbeats keep flowing beside it, and
// flushes whenever the queue is empty. It takes the acks that come
// meanwhile, so that a long transfer does not hold another's.
func (p *peer) write(c *outConn) error {
	for {
		select {
		case <-p.quit:
			return errStopped
		case a := <-c.acks:
			p.acked(c, a)
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
			c.active = p.nextTransfer(c)
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
			// A transfer that ended wakes no one: the next goes on
			// here.
			if c.active == nil && !p.transferReady(c) {
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

// nextTransfer takes the first waiting transfer that may go on c.
func (p *peer) nextTransfer(c *outConn) *outTransfer {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := p.readyAt(c); i >= 0 {
		s := p.waiting[i]
		p.waiting = slices.Delete(p.waiting, i, i+1)
		p.waitBytes -= len(s.data)
		p.transfers++
		s.transfer = p.transfers
		p.writing = s
		return s
	}
	return nil
}

// transferReady reports whether a waiting transfer may go on c.
func (p *peer) transferReady(c *outConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.readyAt(c) >= 0
}

// readyAt is the first waiting transfer that may go on c, or -1: any
// but a MsgSnap for a group that has one waiting for its ack. p.mu is
// held.
func (p *peer) readyAt(c *outConn) int {
	return slices.IndexFunc(p.waiting, func(s *outTransfer) bool {
		return s.kind == frameMessageChunk || c.awaiting[s.group] == nil
	})
}

func (p *peer) writeChunk(c *outConn) error {
	s := c.active
	n := min(chunkSize, len(s.data)-s.sent)
	ch := chunk{group: s.group, transfer: s.transfer, total: uint64(len(s.data)), offset: uint64(s.sent), crc: s.crc,
		data: s.data[s.sent : s.sent+n]}
	var hdr [headerSize + chunkHeader]byte
	c.w.Write(appendChunkHeader(appendHeader(hdr[:0], s.kind, chunkHeader+n), ch))
	if _, err := c.w.Write(ch.data); err != nil {
		return err
	}
	p.t.stats.bytesSent.Add(uint64(headerSize + chunkHeader + n))
	s.sent += n
	if s.sent < len(s.data) {
		return nil
	}
	c.active = nil
	p.setWriting(nil)
	if s.kind == frameSnapshotChunk {
		s.deadline = time.Now().Add(snapshotAckTimeout)
		c.awaiting[s.group] = s
	} else {
		p.t.stats.largeSent.Add(1)
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

// drop closes c and fails its transfers: the one being written is not
// written again on the next connection, and the receiver forgets what it
// had of it when its end of c closes.
func (p *peer) drop(c *outConn) {
	p.mu.Lock()
	if p.conn == c.raw {
		p.conn = nil
	}
	p.writing = nil
	stopped := p.stopped
	p.mu.Unlock()
	close(c.quit)
	c.raw.Close()
	<-c.gone
	if s := c.active; s != nil {
		c.active = nil
		if s.kind == frameSnapshotChunk {
			c.awaiting[s.group] = s
		} else {
			level := slog.LevelWarn
			if stopped {
				level = slog.LevelDebug
			}
			p.lose(s, level, fmt.Sprintf("its connection ended after %d of its %d bytes", s.sent, len(s.data)))
		}
	}
	for g := range c.awaiting {
		p.t.snapshotDone(g, p.id, false)
	}
	clear(c.awaiting)
}

// dropAll empties the queue and drops the waiting transfers, the
// snapshots reported failed.
func (p *peer) dropAll(level slog.Level, why string) {
	p.mu.Lock()
	p.t.stats.dropped.Add(uint64(len(p.queue)))
	clear(p.queue)
	p.queue, p.queued = p.queue[:0], 0
	waiting := p.waiting
	p.waiting, p.waitBytes = nil, 0
	p.mu.Unlock()
	for _, s := range waiting {
		if s.kind == frameSnapshotChunk {
			p.t.snapshotDone(s.group, p.id, false)
		} else {
			p.lose(s, level, why)
		}
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
