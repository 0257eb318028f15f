package amqpserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/message"
	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/amqpserver/transport"
	"github.com/walbus/walbus/broker"
)

// In a cluster, the links and $management requests for an entity another
// node leads are passed on to that node (docs/cluster.md, "Clients: any
// node, proxied to leaders"): the client's connection, its SASL and its
// CBS tokens stay here, and each link passed on is a go-amqp link at the
// leader, on one connection per leader node. That connection authenticates
// with SASL PLAIN and a key with every right: this node has authorized the
// client's link before passing it on.

// relayedProp, in the open of a connection another node made to pass links
// on, makes this node serve them or refuse them, never pass them on again:
// two nodes that each believe the other leads would pass a link back and
// forth.
const relayedProp = "com.walbus:relayed"

const (
	// relayAttachTimeout bounds connecting to the leader and attaching a
	// link there; a session receiver's wait for a session comes on top.
	relayAttachTimeout = 15 * time.Second
	// relayOpTimeout bounds one send, settlement or drain at the leader.
	relayOpTimeout = 30 * time.Second
	// relayIdleTimeout is how long the leader may stay silent before its
	// connection is taken for dead (it sends heartbeats at half that): a
	// paused node, or one cut off, is noticed.
	relayIdleTimeout = 10 * time.Second
)

// relays holds the connections to the nodes that lead entities, each
// opened on first need and opened again after it failed.
type relays struct {
	leader func(node uint64) (string, bool) // Config.Leader
	key    sas.Key

	mu     sync.Mutex
	nodes  map[uint64]*relayConn
	closed bool
}

// relayConn is the connection to one node.
type relayConn struct {
	mu   sync.Mutex // held while dialing: the links waiting share one dial
	addr string
	conn *amqp.Conn
}

func newRelays(leader func(uint64) (string, bool), key sas.Key) *relays {
	return &relays{leader: leader, key: key, nodes: make(map[uint64]*relayConn)}
}

// session begins a session at node, for one link passed on.
func (rs *relays) session(ctx context.Context, node uint64) (*amqp.Session, error) {
	conn, err := rs.conn(ctx, node)
	if err != nil {
		return nil, err
	}
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin a session at node %d: %w", node, err)
	}
	return s, nil
}

// conn is the open connection to node, dialed if there is none, the last
// one failed, or the node now advertises another address.
func (rs *relays) conn(ctx context.Context, node uint64) (*amqp.Conn, error) {
	addr, ok := rs.leader(node)
	if !ok {
		return nil, fmt.Errorf("node %d has told no AMQP address", node)
	}
	rs.mu.Lock()
	if rs.closed {
		rs.mu.Unlock()
		return nil, broker.ErrClosed
	}
	rc := rs.nodes[node]
	if rc == nil {
		rc = &relayConn{}
		rs.nodes[node] = rc
	}
	rs.mu.Unlock()

	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.conn != nil && rc.addr == addr && !closed(rc.conn.Done()) {
		return rc.conn, nil
	}
	if rc.conn != nil {
		rc.conn.Close()
		rc.conn = nil
	}
	conn, err := amqp.Dial(ctx, addr, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain(rs.key.Name, rs.key.Value),
		IdleTimeout: relayIdleTimeout, Properties: map[string]any{relayedProp: true}})
	if err != nil {
		return nil, fmt.Errorf("connect to node %d at %s: %w", node, addr, err)
	}
	rs.mu.Lock()
	shut := rs.closed
	rs.mu.Unlock()
	if shut {
		conn.Close()
		return nil, broker.ErrClosed
	}
	rc.conn, rc.addr = conn, addr
	return conn, nil
}

// close closes every connection; the links on them fail.
func (rs *relays) close() {
	rs.mu.Lock()
	rs.closed = true
	conns := make([]*relayConn, 0, len(rs.nodes))
	for _, rc := range rs.nodes {
		conns = append(conns, rc)
	}
	rs.mu.Unlock()
	for _, rc := range conns {
		rc.mu.Lock()
		if rc.conn != nil {
			rc.conn.Close()
		}
		rc.mu.Unlock()
	}
}

func closed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// closeSession ends a session of a link passed on, without waiting for it.
func closeSession(s *amqp.Session) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	}()
}

// route says where a link or a $management request for e is served: here
// (0, nil), by node (node, nil), or nowhere now (0, error): this node does
// not lead e and cannot pass it on. On a single node every entity is served
// here, without asking.
func (cs *connState) route(e *broker.Entity) (uint64, *frames.Error) {
	if cs.s.relays == nil {
		return 0, nil
	}
	leading, leader := e.LeaderNode()
	if leading {
		return 0, nil
	}
	busy := func(format string, args ...any) (uint64, *frames.Error) {
		return 0, &frames.Error{Condition: condServerBusy, Description: fmt.Sprintf(format, args...)}
	}
	switch {
	case cs.relayed:
		return busy("this node no longer leads %s; the node that passed this on must find its leader again", e.Name())
	case leader == 0:
		return busy("no node leads %s now (an election is under way); try again", e.Name())
	}
	if _, ok := cs.s.cfg.Leader(leader); !ok {
		// This node itself, before it serves, or a node not heard from.
		return busy("node %d is taking the lead of %s, or has not told this node where to reach it; try again", leader, e.Name())
	}
	return leader, nil
}

// relayElectionWait is how long the attach of a link passed on waits for
// its entity to have a leader this node can reach: an election takes a
// few of Raft's ticks, and a client refused would wait its SDK's retry
// delay (4 s by default for Go) before it attaches again.
const relayElectionWait = 5 * time.Second

// servedHere reports whether links and requests for e are served by this
// node (route).
func (cs *connState) servedHere(e *broker.Entity) bool {
	node, ferr := cs.route(e)
	return node == 0 && ferr == nil
}

// passOn answers the attach of link l to e, which this node does not
// lead, from a goroutine of its own: attach passes the link on to the
// node that leads e. While no node is known to lead e, or the one known
// cannot be reached or no longer leads, it tries again every 100 ms for
// relayElectionWait, then refuses the link with the last error; if this
// node comes to lead e meanwhile, the link is attached here. On a
// connection another node made it refuses at once: that node looks for
// the leader itself.
func (cs *connState) passOn(l *transport.Link, e *broker.Entity, attach func(ctx context.Context, node uint64) error) {
	if cs.relayed {
		_, ferr := cs.route(e)
		cs.refuse(l, ferr)
		return
	}
	go func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-l.Done(): // the client gave up its attach
				cancel()
			case <-ctx.Done():
			}
		}()
		deadline := time.Now().Add(relayElectionWait)
		for {
			node, ferr := cs.route(e)
			if node == 0 && ferr == nil {
				cs.unguard(l)
				cs.s.Attach(l) // this node leads e now
				return
			}
			if node != 0 {
				err := attach(ctx, node)
				if err == nil {
					return
				}
				if ferr = relayError(node, err); ferr.Condition != condServerBusy && ferr.Condition != condDetachForced {
					cs.refuse(l, ferr) // the leader's own answer: not found, no session, ...
					return
				}
			}
			if time.Now().After(deadline) {
				cs.refuse(l, ferr)
				return
			}
			select {
			case <-ctx.Done():
				cs.refuse(l, ferr)
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// relayName is the name a client's link has at the leader: the client's
// own, which its $management requests name, made unique among the links
// this node passes on.
func relayName(l *transport.Link) string {
	return fmt.Sprintf("%s/relay-%d", l.Name(), l.Conn().ID())
}

// relayError is the error a client's link or delivery gets for a failure
// at the leader: the leader's own condition when it refused, detached or
// rejected with one, else amqp:link:detach-forced, which the SDKs answer
// by attaching again (and the new attach finds the leader again).
func relayError(node uint64, err error) *frames.Error {
	var connErr *amqp.ConnError
	var sessionErr *amqp.SessionError
	var amqpErr *amqp.Error
	if !errors.As(err, &connErr) && !errors.As(err, &sessionErr) && errors.As(err, &amqpErr) {
		return &frames.Error{Condition: encoding.Symbol(amqpErr.Condition), Description: amqpErr.Description}
	}
	return &frames.Error{Condition: condDetachForced,
		Description: fmt.Sprintf("the link to node %d, which leads the entity, failed: %v; attach again", node, err)}
}

// notPassedOn refuses a transaction's work on an entity another node leads.
func notPassedOn(node uint64) *frames.Error {
	return &frames.Error{Condition: condNotImplemented, Description: fmt.Sprintf(
		"transactions are not passed on to the entity's leader, node %d: connect to that node to use one", node)}
}

// goAMQPValue is v, a value as our decoder reads it, as go-amqp reads it:
// our encoding of v, decoded by go-amqp as the amqp-value body of a
// message.
func goAMQPValue(v any) (any, error) {
	b, err := encoding.AppendAny(nil, encoding.Described{Descriptor: message.CodeAMQPValue, Value: v})
	if err != nil {
		return nil, err
	}
	var m amqp.Message
	if err := m.UnmarshalBinary(b); err != nil {
		return nil, err
	}
	return m.Value, nil
}

// goAMQPAnnotations is a modified outcome's message-annotations for
// go-amqp.
func goAMQPAnnotations(m encoding.Map) (amqp.Annotations, error) {
	if len(m) == 0 {
		return nil, nil
	}
	v, err := goAMQPValue(m)
	if err != nil {
		return nil, err
	}
	out := amqp.Annotations{}
	switch v := v.(type) {
	case map[string]any:
		for k, val := range v {
			out[amqp.Symbol(k)] = val
		}
	case map[any]any:
		for k, val := range v {
			out[k] = val
		}
	}
	return out, nil
}

// goAMQPError is a rejected outcome's error for go-amqp (the dead-letter
// reason and description are in its info).
func goAMQPError(e *frames.Error) (*amqp.Error, error) {
	if e == nil {
		return nil, nil
	}
	out := &amqp.Error{Condition: amqp.ErrCond(e.Condition), Description: e.Description}
	if len(e.Info) == 0 {
		return out, nil
	}
	v, err := goAMQPValue(e.Info)
	if err != nil {
		return nil, err
	}
	info, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("error info with keys other than strings and symbols")
	}
	out.Info = info
	return out, nil
}

// serial runs functions one after another, in the order given, on a
// goroutine of its own while any are waiting.
type serial struct {
	mu      sync.Mutex
	queue   []func()
	running bool
}

func (s *serial) do(f func()) {
	s.mu.Lock()
	s.queue = append(s.queue, f)
	start := !s.running
	s.running = true
	s.mu.Unlock()
	if start {
		go s.run()
	}
}

func (s *serial) run() {
	for {
		s.mu.Lock()
		if len(s.queue) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		f := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.mu.Unlock()
		f()
	}
}
