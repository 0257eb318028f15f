package peer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// MaxAdvertise is the most Config.Advertise may hold: a node's URL or
// two, not a document.
const MaxAdvertise = 1024

// Config configures a Transport.
type Config struct {
	// Cluster is the cluster's name: both ends of a connection must agree
	// or it is refused, so that two clusters on one network never mix.
	Cluster string
	ID      uint64 // this node, not 0
	// Listen is the host:port to listen on ("127.0.0.1:0" picks a port).
	Listen string
	// Peers are the other nodes: id to address. Only they may connect.
	Peers map[uint64]string
	// Advertise is what this node tells its peers of itself in every
	// hello (walbus serve: its HTTP listener's URL), at most MaxAdvertise
	// bytes; the transport does not read it. The peers' Advertised
	// returns it.
	Advertise string

	// Deliver is called with every message received, in the order the
	// sender sent them per (sender, group), except that a message sent in
	// chunks (a MsgSnap, or one too big for a frame: a MsgApp with a large
	// entry) comes when its last chunk has arrived, after messages sent
	// behind it. Raft takes that as it would a network that reorders: a
	// follower rejects a MsgApp that does not follow its log, and the
	// leader probes and sends again. Messages sent in chunks to one peer
	// go one at a time, in the order sent (but a MsgSnap waits while its
	// group's last is not acknowledged). Each message comes once, whole,
	// or not at all. Deliver runs on the goroutine that reads that
	// sender's connection, so calls for different senders run at once; it
	// must not block for long (a Group's owner takes the message through a
	// channel). m is the callee's to keep.
	Deliver func(group uint64, m *pb.Message)
	// SnapshotDone, if set, reports whether a MsgSnap this node sent
	// reached its peer whole (the receiver acknowledged it) or failed
	// (connection lost, refused, not acknowledged in time, dropped): the
	// group's leader then calls Group.ReportSnapshot. It runs on the
	// peer's goroutine and must not block.
	SnapshotDone func(group, to uint64, ok bool)
	// Unreachable, if set, is called when a connection to a peer fails or
	// cannot be made, so that groups can call RawNode.ReportUnreachable.
	// It runs on the peer's goroutine and must not block.
	Unreachable func(to uint64)

	// TLS, if set, is used on both sides: as the server's configuration
	// for connections accepted and the client's for those dialled (its
	// ServerName defaults to the peer address's host).
	TLS    *tls.Config
	Logger *slog.Logger // nil: discard

	// QueueLength and QueueBytes bound each peer's queue of messages not
	// yet written; Send drops what does not fit (defaults 4096 messages,
	// 16 MiB).
	QueueLength, QueueBytes int
	// MaxTransfer bounds a message sent in chunks (a MsgSnap, or any
	// other too big for a frame), marshalled, sent or received, and those
	// waiting for their turn to one peer, together (default 1 GiB). Send
	// drops a larger one. A sender holds the one it writes to each peer
	// besides those waiting, a receiver one per connection at most, each
	// whole. A receiver closes a connection that sends it a larger one, so
	// all nodes should have the same.
	MaxTransfer int
	// MaxSnapshot is MaxTransfer's old name, used if MaxTransfer is 0.
	//
	// Deprecated: set MaxTransfer.
	MaxSnapshot int
}

// Stats are a Transport's counters since New.
type Stats struct {
	MessagesSent, MessagesReceived uint64 // Raft messages, MsgSnaps not counted
	BytesSent, BytesReceived       uint64 // on the wire, hellos and frames

	// Dropped counts messages Send took and that will not arrive: a full
	// queue, a peer unknown or down, a connection lost with them, a large
	// message as LargeDropped says. MsgSnaps are counted as failed.
	Dropped uint64

	// Large messages are those other than MsgSnaps too big for a frame,
	// sent in chunks. LargeSent counts those written whole, LargeReceived
	// those delivered, LargeDropped those Send dropped (over MaxTransfer,
	// no room beside those waiting, a MsgApp whose entries are on their
	// way already, the peer down) or whose connection ended midway; they
	// are in Dropped too.
	LargeSent, LargeReceived, LargeDropped uint64

	// SnapshotsSent counts MsgSnaps acknowledged, SnapshotsFailed those
	// reported failed.
	SnapshotsSent, SnapshotsReceived, SnapshotsFailed uint64

	Connects     uint64 // outgoing connections made
	DialFailures uint64 // outgoing connections that could not be made
	Accepts      uint64 // incoming connections that passed the handshake
	Refused      uint64 // incoming connections refused at the handshake
	Malformed    uint64 // connections closed for bad input after the handshake

	// Queued and QueuedBytes are what the peers' queues hold now.
	Queued, QueuedBytes uint64
}

// Timings. Dials and handshakes are bounded so that a peer that hangs
// costs a retry, not a stuck queue; a write that makes no progress for
// writeTimeout means the peer stopped reading.
const (
	dialTimeout        = 2 * time.Second
	handshakeTimeout   = 5 * time.Second
	writeTimeout       = 10 * time.Second
	snapshotAckTimeout = 10 * time.Second
	backoffMin         = 50 * time.Millisecond
	backoffMax         = 2 * time.Second
	// maxWaitingTransfers bounds the transfers waiting for their turn to
	// one peer.
	maxWaitingTransfers = 64
	// maxHandshakes bounds the incoming connections not yet past their
	// hello: a flood of idle clients costs no more than this many.
	maxHandshakes = 64
)

// Transport carries Raft messages between this node and its peers: one
// outgoing connection to each, dialled when there is something to send,
// and the connections the peers dial in.
type Transport struct {
	cfg    Config
	log    *slog.Logger
	ln     net.Listener
	ctx    context.Context // cancelled by Close: ends dials
	cancel context.CancelFunc
	closed atomic.Bool
	wg     sync.WaitGroup

	handshakes atomic.Int64 // incoming connections in their handshake

	mu         sync.RWMutex
	peers      map[uint64]*peer    // outgoing, one per known node
	incoming   map[uint64]*inbound // the connection from each peer that passed its handshake
	conns      map[net.Conn]bool   // every incoming connection, for Close
	advertised map[uint64]string   // what each peer's last hello advertised

	// largeAt is the size over which a marshalled message (not a MsgSnap)
	// is sent in chunks: one that does not fit a frame by itself or the
	// whole queue.
	largeAt int

	stats counters
}

type counters struct {
	messagesSent, messagesReceived                      atomic.Uint64
	bytesSent, bytesReceived                            atomic.Uint64
	dropped                                             atomic.Uint64
	largeSent, largeReceived, largeDropped              atomic.Uint64
	snapshotsSent, snapshotsReceived, snapshotsFailed   atomic.Uint64
	connects, dialFailures, accepts, refused, malformed atomic.Uint64
}

// New starts a transport: it listens at once and dials peers when there
// is something to send them.
func New(cfg Config) (*Transport, error) {
	if cfg.ID == 0 {
		return nil, errors.New("peer: a node's id cannot be 0")
	}
	if cfg.Deliver == nil {
		return nil, errors.New("peer: Config.Deliver is required")
	}
	if len(cfg.Cluster) > maxClusterName {
		return nil, fmt.Errorf("peer: cluster name of %d bytes, the most is %d", len(cfg.Cluster), maxClusterName)
	}
	if len(cfg.Advertise) > MaxAdvertise {
		return nil, fmt.Errorf("peer: Config.Advertise of %d bytes, the most is %d", len(cfg.Advertise), MaxAdvertise)
	}
	if cfg.QueueLength <= 0 {
		cfg.QueueLength = 4096
	}
	if cfg.QueueBytes <= 0 {
		cfg.QueueBytes = 16 << 20
	}
	if cfg.MaxTransfer <= 0 {
		cfg.MaxTransfer = cfg.MaxSnapshot
	}
	if cfg.MaxTransfer <= 0 {
		cfg.MaxTransfer = 1 << 30
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("node", cfg.ID)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("peer: listen: %w", err)
	}
	if cfg.TLS != nil {
		ln = tls.NewListener(ln, cfg.TLS)
	}
	t := &Transport{
		cfg:        cfg,
		log:        logger,
		ln:         ln,
		peers:      make(map[uint64]*peer),
		incoming:   make(map[uint64]*inbound),
		conns:      make(map[net.Conn]bool),
		advertised: make(map[uint64]string),
		largeAt:    min(maxMessage, cfg.QueueBytes),
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	for id, addr := range cfg.Peers {
		t.SetPeer(id, addr)
	}
	t.wg.Add(1)
	go t.accept()
	return t, nil
}

// Addr is the address the transport listens on.
func (t *Transport) Addr() string { return t.ln.Addr().String() }

// Send queues msgs for their peers (each message's To) and returns at
// once. What cannot be queued is dropped and counted: Raft sends again
// what matters. A dropped MsgSnap is reported to SnapshotDone as failed.
// A MsgSnap, and any other message too big for a frame or the whole
// queue, waits for its turn to be sent in chunks (see Config.Deliver and
// MaxTransfer). Send marshals the messages before it returns, so the
// caller may change them afterwards; a large one is held marshalled until
// it has been written. It is safe to call from any goroutine.
func (t *Transport) Send(group uint64, msgs []*pb.Message) {
	for _, m := range msgs {
		t.mu.RLock()
		p := t.peers[m.GetTo()]
		t.mu.RUnlock()
		if p == nil || t.closed.Load() {
			t.stats.dropped.Add(1)
			if m.GetType() != pb.MessageType_MsgSnap && proto.Size(m) > t.largeAt {
				t.stats.largeDropped.Add(1)
			}
			continue
		}
		b, err := proto.Marshal(m)
		if err != nil {
			t.log.Error("cannot marshal a Raft message", "group", group, "type", m.GetType(), "err", err)
			t.stats.dropped.Add(1)
			continue
		}
		switch {
		case m.GetType() == pb.MessageType_MsgSnap:
			p.queueTransfer(newTransfer(frameSnapshotChunk, group, m, b))
		case len(b) > t.largeAt:
			// Raft cuts appends at MaxSizePerMsg, but sends an entry
			// bigger than that alone: a large message or transaction.
			p.queueTransfer(newTransfer(frameMessageChunk, group, m, b))
		default:
			p.queueMessage(group, b)
		}
	}
}

// SetPeer adds a peer or changes its address. A connection to the old
// address is closed; the next message dials the new one.
func (t *Transport) SetPeer(id uint64, addr string) {
	if id == 0 || id == t.cfg.ID {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		return
	}
	if p := t.peers[id]; p != nil {
		p.setAddr(addr)
		return
	}
	p := newPeer(t, id, addr)
	t.peers[id] = p
	t.wg.Add(1)
	go p.run()
}

// RemovePeer forgets a peer: its queue and transfers are dropped, its
// snapshots in flight fail, and its connections both ways are closed. It does not wait
// for them to end, so a callback about it may still come.
func (t *Transport) RemovePeer(id uint64) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	delete(t.advertised, id)
	in := t.incoming[id]
	t.mu.Unlock()
	if p != nil {
		p.stop()
	}
	if in != nil {
		in.conn.Close()
	}
}

// Advertised is what node id advertised (its Config.Advertise) in the
// last hello this node had from it, on a connection either way: "" until
// the two have connected, and after RemovePeer. It is safe to call from
// any goroutine.
func (t *Transport) Advertised(id uint64) string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.advertised[id]
}

// heard records what a peer's hello advertised, once the hello passed
// the checks: only a peer's hello is kept.
func (t *Transport) heard(h hello) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.peers[h.from] != nil {
		t.advertised[h.from] = h.advertise
	}
}

// Stats reads the counters.
func (t *Transport) Stats() Stats {
	s := Stats{
		MessagesSent:      t.stats.messagesSent.Load(),
		MessagesReceived:  t.stats.messagesReceived.Load(),
		BytesSent:         t.stats.bytesSent.Load(),
		BytesReceived:     t.stats.bytesReceived.Load(),
		Dropped:           t.stats.dropped.Load(),
		LargeSent:         t.stats.largeSent.Load(),
		LargeReceived:     t.stats.largeReceived.Load(),
		LargeDropped:      t.stats.largeDropped.Load(),
		SnapshotsSent:     t.stats.snapshotsSent.Load(),
		SnapshotsReceived: t.stats.snapshotsReceived.Load(),
		SnapshotsFailed:   t.stats.snapshotsFailed.Load(),
		Connects:          t.stats.connects.Load(),
		DialFailures:      t.stats.dialFailures.Load(),
		Accepts:           t.stats.accepts.Load(),
		Refused:           t.stats.refused.Load(),
		Malformed:         t.stats.malformed.Load(),
	}
	t.mu.RLock()
	for _, p := range t.peers {
		n, b := p.queueSize()
		s.Queued += uint64(n)
		s.QueuedBytes += uint64(b)
	}
	t.mu.RUnlock()
	return s
}

// Close stops the transport: it closes the listener and every connection
// and waits for its goroutines. No callback runs once Close has begun
// waiting for them, and none after it returns; what was queued is
// dropped and not reported.
func (t *Transport) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	t.cancel()
	err := t.ln.Close()
	t.mu.Lock()
	peers := t.peers
	t.peers = map[uint64]*peer{}
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	for _, p := range peers {
		p.stop()
	}
	t.wg.Wait()
	return err
}

// snapshotDone and unreachable call the callbacks unless the transport
// is closing.
func (t *Transport) snapshotDone(group, to uint64, ok bool) {
	if ok {
		t.stats.snapshotsSent.Add(1)
	} else {
		t.stats.snapshotsFailed.Add(1)
	}
	if t.cfg.SnapshotDone != nil && !t.closed.Load() {
		t.cfg.SnapshotDone(group, to, ok)
	}
}

func (t *Transport) unreachable(to uint64) {
	if t.cfg.Unreachable != nil && !t.closed.Load() {
		t.cfg.Unreachable(to)
	}
}

// known reports whether id is a peer.
func (t *Transport) known(id uint64) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.peers[id] != nil
}

// accept takes incoming connections until the listener closes.
func (t *Transport) accept() {
	defer t.wg.Done()
	var delay time.Duration
	for {
		conn, err := t.ln.Accept()
		if err != nil {
			if t.closed.Load() {
				return
			}
			// Out of file descriptors, most likely: wait a little, as
			// net/http's server does, rather than spin.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			t.log.Warn("accept failed", "err", err, "retry in", delay)
			select {
			case <-time.After(delay):
			case <-t.ctx.Done():
				return
			}
			continue
		}
		delay = 0
		t.mu.Lock()
		if t.closed.Load() {
			t.mu.Unlock()
			conn.Close()
			return
		}
		t.conns[conn] = true
		t.wg.Add(1)
		t.mu.Unlock()
		go t.serve(conn)
	}
}
