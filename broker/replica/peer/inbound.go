package peer

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// inbound is a connection a peer dialled, after its handshake: one
// goroutine (serve) reads it, delivers what it carries and answers
// snapshot acks on it. A transfer it has begun ends with it.
type inbound struct {
	t    *Transport
	from uint64
	conn net.Conn
	done chan struct{} // closed when serve has stopped delivering

	items     []item
	msgs      []*pb.Message
	transfers reassembler
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
	t.stats.bytesReceived.Add(uint64(h.size()))
	t.heard(h)
	b := appendHello(nil, hello{cluster: t.cfg.Cluster, from: t.cfg.ID, to: h.from, advertise: t.cfg.Advertise})
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
		case frameSnapshotChunk, frameMessageChunk:
			err = in.chunk(typ, payload)
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

// chunk takes a chunk of kind (frameSnapshotChunk or frameMessageChunk),
// and delivers the message when its last one comes: a MsgSnap in
// snapshot chunks, acknowledged; any other in message chunks, not.
func (in *inbound) chunk(kind frameType, payload []byte) error {
	c, err := decodeChunk(payload)
	if err != nil {
		return err
	}
	a, err := in.transfers.add(kind, c, uint64(in.t.cfg.MaxTransfer))
	if err != nil || a == nil {
		return err
	}
	group, transfer := a.group, a.transfer
	m := new(pb.Message)
	err = proto.Unmarshal(a.data, m)
	a.data = nil // m has its own copy: let the chunks go before Deliver
	if err != nil {
		return protocolErr("a %s transfer of group %d does not decode: %v", kind, group, err)
	}
	if snap := m.GetType() == pb.MessageType_MsgSnap; snap != (kind == frameSnapshotChunk) {
		return protocolErr("a %s sent in %ss in group %d", m.GetType(), kind, group)
	}
	in.t.cfg.Deliver(group, m)
	if kind == frameMessageChunk {
		in.t.stats.largeReceived.Add(1)
		return nil
	}
	in.t.stats.snapshotsReceived.Add(1)
	b := appendHeader(nil, frameAck, ackSize)
	b = appendAck(b, ack{group: group, transfer: transfer})
	if err := in.conn.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	if _, err := in.conn.Write(b); err != nil {
		return fmt.Errorf("acknowledge snapshot: %w", err)
	}
	in.t.stats.bytesSent.Add(uint64(len(b)))
	return nil
}
