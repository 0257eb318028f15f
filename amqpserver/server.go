// Package amqpserver is walbus's Azure Service Bus surface over AMQP 1.0:
// it runs the transport engine and maps its links onto the broker: entity
// send and receive links, the $cbs node for SAS tokens and each entity's
// $management node (docs/compatibility.md).
package amqpserver

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/amqpserver/transport"
	"github.com/walbus/walbus/broker"
)

// Config configures a Server.
type Config struct {
	// Keys are the SAS keys clients authenticate with, through $cbs tokens
	// or SASL PLAIN (key name and key as user and password).
	Keys sas.Keys
	// Transport configures the AMQP engine (limits, idle time-out, SASL).
	Transport transport.Config
	// AuthTimeout closes connections that hold no claim this long after
	// opening. Default 20 s.
	AuthTimeout time.Duration
	// SessionWait is how long an accept-next-session waits when the client
	// sends no com.microsoft:timeout. Default 60 s.
	SessionWait time.Duration
	// TxnTimeout rolls back a transaction not discharged this long after
	// its declare. Default 2 minutes, as Service Bus.
	TxnTimeout time.Duration
	Logger     *slog.Logger
	// Now is the clock tokens are checked against; default time.Now.
	Now func() time.Time
	// Leader, in a cluster, is the AMQP address ("amqp://host:port", or
	// amqps) of node, to which the links and $management requests for the
	// entities it leads are passed on (relay.go); false for this node and
	// for a node whose address is not known. It is called from any
	// goroutine. Nil on a single node: every entity is served here.
	Leader func(node uint64) (addr string, ok bool)
	// RelayKey is the key the connections to the leaders authenticate
	// with (SASL PLAIN): one with Manage rights, since this node has
	// authorized the client's link before passing it on. Needed with
	// Leader.
	RelayKey sas.Key
}

// Server serves the Service Bus AMQP surface of a broker.
type Server struct {
	b      *broker.Broker
	cfg    Config
	engine *transport.Server
	logger *slog.Logger
	relays *relays // nil on a single node

	opsMu sync.Mutex
	ops   map[string]uint64 // $management requests by operation
	conns atomic.Uint64     // connections opened
}

// Stats returns the open connections, sessions and links.
func (s *Server) Stats() transport.Stats { return s.engine.Stats() }

// ConnectionsOpened counts the connections opened since start.
func (s *Server) ConnectionsOpened() uint64 { return s.conns.Load() }

// countOp counts a $management request.
func (s *Server) countOp(op string) {
	s.opsMu.Lock()
	if s.ops == nil {
		s.ops = make(map[string]uint64)
	}
	s.ops[op]++
	s.opsMu.Unlock()
}

// OperationCounts returns how many $management requests of each operation
// the server has handled.
func (s *Server) OperationCounts() map[string]uint64 {
	s.opsMu.Lock()
	defer s.opsMu.Unlock()
	return maps.Clone(s.ops)
}

// New returns a server for b.
func New(b *broker.Broker, cfg Config) *Server {
	if cfg.AuthTimeout <= 0 {
		cfg.AuthTimeout = 20 * time.Second
	}
	if cfg.SessionWait <= 0 {
		cfg.SessionWait = time.Minute
	}
	if cfg.TxnTimeout <= 0 {
		cfg.TxnTimeout = 2 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Transport.Logger == nil {
		cfg.Transport.Logger = cfg.Logger
	}
	s := &Server{b: b, cfg: cfg, logger: cfg.Logger}
	if cfg.Leader != nil {
		s.relays = newRelays(cfg.Leader, cfg.RelayKey)
	}
	s.engine = transport.NewServer(cfg.Transport, s)
	return s
}

// Serve accepts connections on l until Shutdown.
func (s *Server) Serve(l net.Listener) error { return s.engine.Serve(l) }

// ServeConn serves one connection (a TLS connection, say) until it ends.
func (s *Server) ServeConn(c net.Conn) error { return s.engine.ServeConn(c) }

// Shutdown closes every connection with amqp:connection:forced, and those
// to the leaders of entities passed on.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.engine.Shutdown(ctx)
	if s.relays != nil {
		s.relays.close()
	}
	return err
}

// Authenticate accepts ANONYMOUS and MSSBCBS (the client authorises later
// through $cbs) and PLAIN with a configured key name and key, which
// authorises the whole namespace with that key's rights.
func (s *Server) Authenticate(info transport.ConnInfo, cred transport.Credentials) (any, error) {
	cs := &connState{s: s}
	if cred.Mechanism != "PLAIN" {
		return cs, nil
	}
	key, ok := s.cfg.Keys.Lookup(cred.Username)
	if !ok || subtle.ConstantTimeCompare([]byte(key.Value), []byte(cred.Password)) != 1 {
		return nil, errors.New("unknown key name or wrong key")
	}
	_ = cs.claims.put(claim{path: "", rights: key.Rights}, time.Time{}) // the first claim: never too many
	return cs, nil
}

// ConnectionOpened starts the grace period in which the connection must
// authorise something.
func (s *Server) ConnectionOpened(c *transport.Conn) *frames.Error {
	cs := state(c)
	cs.conn = c
	if _, found := c.PeerOpen().Properties.Get(relayedProp); found {
		cs.relayed = true // another node passes links on (relay.go)
	}
	s.conns.Add(1)
	s.logger.Info("connection opened", "conn", c.ID(), "peer", c.Info().Peer())
	if cs.claims.any(s.cfg.Now()) {
		c.Authorized() // SASL PLAIN authorized it
	}
	cs.authTimer = time.AfterFunc(s.cfg.AuthTimeout, func() {
		if !cs.claims.any(s.cfg.Now()) {
			c.Close(&frames.Error{Condition: condUnauthorized,
				Description: fmt.Sprintf("no authorization was presented within %v", s.cfg.AuthTimeout)})
		}
	})
	return nil
}

// ConnectionClosed is the last call for a connection.
func (s *Server) ConnectionClosed(c *transport.Conn, err error) {
	cs := state(c)
	if cs.authTimer != nil {
		cs.authTimer.Stop()
	}
	cs.stopExpiry()
	s.logger.Info("connection closed", "conn", c.ID(), "peer", c.Info().Peer(), "reason", errString(err))
}

// state returns the connection's Service Bus state. Connections that skip
// SASL have no identity yet; they get theirs here, once, on the reader
// goroutine that makes every handler call for the connection.
func state(c *transport.Conn) *connState {
	if cs, ok := c.Identity().(*connState); ok {
		return cs
	}
	noSASL.Lock()
	defer noSASL.Unlock()
	cs, ok := noSASL.m[c]
	if !ok {
		cs = &connState{}
		noSASL.m[c] = cs
		go func() {
			<-c.Done()
			noSASL.Lock()
			delete(noSASL.m, c)
			noSASL.Unlock()
		}()
	}
	return cs
}

var noSASL = struct {
	sync.Mutex
	m map[*transport.Conn]*connState
}{m: make(map[*transport.Conn]*connState)}

// connState is what a connection holds beyond the transport: its claims,
// its reply links and its receive links.
type connState struct {
	s         *Server
	conn      *transport.Conn
	claims    claims
	authTimer *time.Timer
	relayed   bool // the connection is another node's, passing links on

	mu        sync.Mutex
	replies   map[string]*replyLink    // by target address and by link name
	receivers map[string]*receiverLink // by link name
	passedOn  map[string]string        // receive links passed on: their names at the leader, by name
	guarded   map[*transport.Link]guard
	expiry    *time.Timer
	txns      txnTable
}

// Attach routes a link by its address: $cbs, a $management node, or an
// entity (a queue, a topic or a subscription, optionally a dead-letter
// subqueue).
func (s *Server) Attach(l *transport.Link) {
	cs := state(l.Conn())
	if cs.s == nil {
		cs.s = s
	}
	a := l.PeerAttach()
	if a.Coordinator != nil {
		cs.attachCoordinator(l)
		return
	}
	address := ""
	if l.Inbound() && a.Target != nil {
		address = a.Target.Address
	} else if !l.Inbound() && a.Source != nil {
		address = a.Source.Address
	}
	address = strings.TrimPrefix(addressPath(address), "/")
	switch {
	case address == "$cbs":
		cs.attachNode(l, nil)
	case strings.HasSuffix(address, "/$management"):
		cs.attachNode(l, cs.managementTarget(l, address))
	case l.Inbound():
		cs.attachSender(l, address)
	default:
		cs.attachReceiver(l, address)
	}
}

// addressPath strips a scheme and host that some clients put in addresses.
func addressPath(address string) string {
	if i := strings.Index(address, "://"); i >= 0 {
		rest := address[i+3:]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			return rest[j:]
		}
		return ""
	}
	return address
}

// resolve returns the entity and queue number a link address names
// (broker.Resolve).
func (cs *connState) resolve(address string) (*broker.Entity, uint32, error) {
	return cs.s.b.Resolve(address)
}

func errString(err error) string {
	if err == nil {
		return "closed by peer"
	}
	return err.Error()
}
