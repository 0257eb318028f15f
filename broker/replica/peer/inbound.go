package peer

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// inbound is a connection a peer dialled, after its handshake: one
// goroutine (serve) reads it, delivers what it carries and answers
// snapshot acks on it.
type inbound struct {
	t    *Transport
	from uint64
	conn net.Conn
	done chan struct{} // closed when serve has stopped delivering

	items []item
	msgs  []*pb.Message
	snap  *assembly // the transfer under way, if any
}

// assembly is a MsgSnap being put together from its chunks.
type assembly struct {
	group, transfer, total uint64
	crc                    uint32
	data                   []byte
}

// serve runs an incoming connection: the handshake, then frames until
// the connection ends or sends something it must not.
func (t *Transport) serve(conn net.Conn) {
	defer t.wg.Done()
	defer func() {
		conn.Close()
		t.mu.Lock()
		delete(t.conns, conn)
		t.mu.Unlock()
	}()
	remote := conn.RemoteAddr().String()
	if t.handshakes.Add(1) > maxHandshakes {
		t.handshakes.Add(-1)
		t.stats.refused.Add(1)
		t.log.Warn("refused a connection: too many handshakes at once", "remote", remote)
		return
	}
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	br := bufio.NewReaderSize(conn, 64<<10)
	h, err := readHello(br)
	if err == nil {
		err = t.check(h)
	}
	t.handshakes.Add(-1)
	if err != nil {
		t.stats.refused.Add(1)
		t.log.Warn("refused a connection", "remote", remote, "err", err)
		return
	}
	t.stats.bytesReceived.Add(uint64(helloFixed + len(h.cluster)))
	b := appendHello(nil, hello{cluster: t.cfg.Cluster, from: t.cfg.ID, to: h.from})
	if _, err := conn.Write(b); err != nil {
		t.log.Debug("handshake failed", "remote", remote, "peer", h.from, "err", err)
		return
	}
	t.stats.bytesSent.Add(uint64(len(b)))
	conn.SetDeadline(time.Time{})

	in := &inbound{t: t, from: h.from, conn: conn, done: make(chan struct{})}
	defer close(in.done)
	// A peer dials again only once it has given up its old connection;
	// what that one still carries is older, so it ends before the new one
	// delivers anything, and each sender's order holds.
	t.mu.Lock()
	prev := t.incoming[h.from]
	t.incoming[h.from] = in
	t.mu.Unlock()
	if prev != nil {
		t.log.Info("a new connection from the peer replaces its last", "peer", h.from, "remote", remote)
		prev.conn.Close()
		<-prev.done
	}
	defer func() {
		t.mu.Lock()
		if t.incoming[h.from] == in {
			delete(t.incoming, h.from)
		}
		t.mu.Unlock()
	}()
	t.stats.accepts.Add(1)

	err = in.loop(&frameReader{r: br})
	switch {
	case errors.Is(err, errProtocol):
		t.stats.malformed.Add(1)
		t.log.Warn("closing a connection for bad input", "peer", h.from, "err", err)
	case !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
		t.log.Debug("connection ended", "peer", h.from, "err", err)
	}
}

// check decides whether to take a connection, from its hello.
func (t *Transport) check(h hello) error {
	switch {
	case h.cluster != t.cfg.Cluster:
		return fmt.Errorf("node %d is of cluster %q, not %q", h.from, h.cluster, t.cfg.Cluster)
	case h.to != t.cfg.ID:
		return fmt.Errorf("node %d meant to reach node %d", h.from, h.to)
	case !t.known(h.from):
		return fmt.Errorf("node %d is not a peer", h.from)
	}
	return nil
}

func (in *inbound) loop(fr *frameReader) error {
	for {
		typ, payload, err := fr.next()
		if err != nil {
			return err
		}
		in.t.stats.bytesReceived.Add(uint64(headerSize + len(payload)))
		switch typ {
		case frameMessages:
			err = in.messages(payload)
		case frameChunk:
			err = in.chunk(payload)
		default:
			err = protocolErr("a %s frame from the sender", typ)
		}
		if err != nil {
			return err
		}
	}
}

// messages delivers a messages frame: all of it, or none if any message
// does not decode.
func (in *inbound) messages(payload []byte) error {
	items, err := decodeMessages(in.items[:0], payload)
	in.items = items
	if err != nil {
		return err
	}
	msgs := in.msgs[:0]
	for _, it := range items {
		m := new(pb.Message)
		if err := proto.Unmarshal(it.data, m); err != nil {
			clear(msgs)
			in.msgs = msgs[:0]
			return protocolErr("group %d: a message that does not decode: %v", it.group, err)
		}
		msgs = append(msgs, m)
	}
	for i, m := range msgs {
		in.t.cfg.Deliver(items[i].group, m)
	}
	in.t.stats.messagesReceived.Add(uint64(len(msgs)))
	clear(msgs) // delivered: not ours to keep
	in.msgs = msgs[:0]
	clear(items)
	return nil
}

// chunk adds a chunk to the transfer under way, or starts one. A sender
// sends one transfer at a time on a connection, in order, so anything
// else is a fault.
func (in *inbound) chunk(payload []byte) error {
	c, err := decodeChunk(payload)
	if err != nil {
		return err
	}
	if c.offset == 0 {
		if in.snap != nil {
			return protocolErr("snapshot transfer %d of group %d began before transfer %d of group %d ended",
				c.transfer, c.group, in.snap.transfer, in.snap.group)
		}
		if c.total > uint64(in.t.cfg.MaxSnapshot) {
			return protocolErr("snapshot of %d bytes in group %d, the most is %d", c.total, c.group, in.t.cfg.MaxSnapshot)
		}
		// Room for what has come and a little more: the total is the
		// sender's word, and memory grows with the bytes that arrive.
		in.snap = &assembly{group: c.group, transfer: c.transfer, total: c.total, crc: c.crc,
			data: make([]byte, 0, min(c.total, 8<<20))}
	}
	a := in.snap
	switch {
	case a == nil:
		return protocolErr("snapshot chunk at %d of group %d with no transfer begun", c.offset, c.group)
	case c.group != a.group || c.transfer != a.transfer || c.total != a.total || c.crc != a.crc:
		return protocolErr("snapshot chunk of transfer %d (group %d) inside transfer %d (group %d)",
			c.transfer, c.group, a.transfer, a.group)
	case c.offset != uint64(len(a.data)):
		return protocolErr("snapshot chunk at %d, expected %d", c.offset, len(a.data))
	}
	a.data = append(a.data, c.data...)
	if uint64(len(a.data)) < a.total {
		return nil
	}
	in.snap = nil
	if got := crc32.Checksum(a.data, castagnoli); got != a.crc {
		return protocolErr("snapshot of group %d has CRC %08x, sent with %08x", a.group, got, a.crc)
	}
	m := new(pb.Message)
	if err := proto.Unmarshal(a.data, m); err != nil {
		return protocolErr("snapshot of group %d does not decode: %v", a.group, err)
	}
	if m.GetType() != pb.MessageType_MsgSnap {
		return protocolErr("a %s sent as a snapshot in group %d", m.GetType(), a.group)
	}
	in.t.cfg.Deliver(a.group, m)
	in.t.stats.snapshotsReceived.Add(1)
	b := appendHeader(nil, frameAck, ackSize)
	b = appendAck(b, ack{group: a.group, transfer: a.transfer})
	if err := in.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	if _, err := in.conn.Write(b); err != nil {
		return fmt.Errorf("acknowledge snapshot: %w", err)
	}
	in.t.stats.bytesSent.Add(uint64(len(b)))
	return nil
}
