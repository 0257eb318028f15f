package transport

import (
	"crypto/tls"
	"net"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/frames"
)

// Handler is the application behind the engine: it authenticates
// connections and decides about links. Its callbacks, and those of
// LinkHandler, InboundHandler and OutboundHandler, run on the
// connection's reader goroutine, one at a time, with no lock held: the
// package doc's Threading contract says what each may do.
type Handler interface {
	// Authenticate checks a SASL exchange (AMQP 1.0 §5.3). A nil error
	// accepts the connection and identity becomes Conn.Identity; an error
	// answers sasl-outcome code auth and closes the socket. It is not
	// called for connections that skip SASL (Config.AllowNoSASL).
	Authenticate(info ConnInfo, cred Credentials) (identity any, err error)

	// ConnectionOpened is called once the peer's open has arrived and
	// ours has been sent. A non-nil error closes the connection with it.
	ConnectionOpened(c *Conn) *frames.Error

	// Attach is called when the peer attaches a link. The handler must
	// eventually call exactly one of AcceptInbound, AcceptOutbound or
	// Refuse, either before returning or later from any goroutine. If
	// the peer detaches, or its session or connection ends, before that,
	// the link's Done channel closes and those calls return ErrLinkClosed.
	Attach(l *Link)

	// ConnectionClosed is called last, after every link's Detached, when
	// the connection is gone. err is nil for a clean close by the peer.
	ConnectionClosed(c *Conn, err error)
}

// LinkHandler receives the end of an accepted link.
type LinkHandler interface {
	// Detached is called once, when the link is finished: both detaches
	// were exchanged, or its session or connection ended. err is the
	// error that ended it (the peer's, the handler's Close, or the
	// engine's), nil for a clean close. Deliveries not yet settled are
	// forgotten; settling them returns ErrLinkClosed, except those whose
	// outcome the peer awaited when it detached (an unsettled transfer on
	// an inbound link, an unsettled disposition on an outbound one):
	// Settle still sends those, and our detach follows the last of them.
	Detached(l *Link, err *frames.Error)
}

// InboundHandler serves a link on which the peer sends messages (the peer
// attached as sender, AMQP 1.0 §2.6.3).
type InboundHandler interface {
	LinkHandler
	// Deliver hands over one complete delivery, reassembled from all its
	// transfer frames. Every delivery must be settled with d.Settle (from
	// any goroutine, in any order), pre-settled ones included: settling
	// is what returns credit to the peer, so a slow handler only slows
	// its own link. d.Tag and d.Payload are only valid until Deliver
	// returns.
	Deliver(d Delivery)
}

// OutboundHandler serves a link on which we send messages (the peer
// attached as receiver).
type OutboundHandler interface {
	LinkHandler
	// Credit reports that the peer's credit changed (AMQP 1.0 §2.6.7).
	// It is a hint: Link.Credit always has the current value, and Send
	// refuses once credit is used up. When c.Drain is set the peer wants
	// the credit used or given back now; send what is available, then
	// call Link.Drained (Service Bus JS clients wait 200 ms at most).
	Credit(l *Link, c Credit)
	// Disposition reports the peer's disposition of delivery id. When
	// settled is false (the peer's rcv-settle-mode is second) the handler
	// answers with Link.Settle; when true the delivery is already
	// forgotten on both sides.
	Disposition(l *Link, id uint32, state frames.DeliveryState, settled bool)
}

// ConnInfo describes the network side of a connection.
type ConnInfo struct {
	LocalAddr  net.Addr
	RemoteAddr net.Addr
	// TLS is set when the net.Conn is a *tls.Conn, after its handshake.
	TLS *tls.ConnectionState
}

// Peer is the remote address as text, for logs ("" if unknown).
func (i ConnInfo) Peer() string {
	if i.RemoteAddr == nil {
		return ""
	}
	return i.RemoteAddr.String()
}

// Credentials is what the client presented in sasl-init (AMQP 1.0
// §5.3.3.2).
type Credentials struct {
	// Mechanism is one of the configured mechanisms.
	Mechanism string
	// Response is the initial-response as sent. For ANONYMOUS it is a
	// free trace string ("anonymous" from go-amqp, "\x00"+keyName from
	// rhea); for MSSBCBS it is empty.
	Response []byte
	// Hostname is the sasl-init hostname, if any.
	Hostname string
	// AuthzID, Username and Password are the three PLAIN fields (RFC
	// 4616), already checked for shape; empty for other mechanisms.
	AuthzID, Username, Password string
}

// Credit is a peer receiver's credit as absolute 64-bit counts since the
// attach, so handlers never do 32-bit serial arithmetic.
type Credit struct {
	// Limit is the total number of deliveries the peer allows on the link
	// so far: delivery-count + link-credit from its last flow.
	Limit uint64
	// Sent is our delivery-count: the deliveries sent so far, plus the
	// credit given up by answering drains.
	Sent uint64
	// Drained is the part of Limit and Sent that drains gave up: credit
	// the delivery-count advanced by without a delivery (§2.6.7). Limit -
	// Drained counts deliveries only.
	Drained uint64
	// Drain is set while the peer's drain request is unanswered.
	Drain bool
}

// Available is how many more deliveries may be sent now.
func (c Credit) Available() uint64 {
	if c.Limit <= c.Sent {
		return 0
	}
	return c.Limit - c.Sent
}

// Delivery is one complete incoming message on an inbound link.
type Delivery struct {
	// Link is the link it arrived on.
	Link *Link
	// ID is the delivery-id, unique among the session's unsettled
	// incoming deliveries.
	ID uint32
	// Tag is the delivery-tag; valid only during Deliver.
	Tag []byte
	// MessageFormat is the transfer's message-format (0 for a plain
	// message, frames.MessageFormatBatch for a Service Bus batch).
	MessageFormat uint32
	// Settled reports a pre-settled transfer: no disposition is sent.
	Settled bool
	// State is the state carried on the transfer (a transactional-state
	// for a transactional post, AMQP 1.0 §4.4.1), usually nil.
	State frames.DeliveryState
	// Payload is the encoded message; valid only during Deliver.
	Payload []byte
}

// Settle records the handler's outcome. For an unsettled delivery it
// sends disposition(role=receiver, settled=true, state), in
// rcv-settle-mode second too, as Service Bus does (a peer's settlement
// would only confirm it, and uAMQP sends none); for a pre-settled one it
// only returns the credit. It may be called from any goroutine.
func (d Delivery) Settle(state frames.DeliveryState) error {
	return d.Link.Settle(d.ID, state)
}

// Reply is what a handler puts into the attach it answers with (AMQP 1.0
// §2.7.3). The zero value echoes the peer's terminus and uses the
// configured defaults. Settle modes are always echoed exactly as the peer
// requested them, because go-amqp fails the attach otherwise.
type Reply struct {
	// Source and Target replace the peer's terminus in the reply; nil
	// echoes it. A sender's source and a receiver's target are the
	// authoritative ones (§2.6.3), e.g. the filters actually applied.
	Source *frames.Source
	Target *frames.Target
	// MaxMessageSize is advertised in the reply. On inbound links it is
	// the limit the engine enforces: 0 or anything above
	// Config.MaxMessageSize means Config.MaxMessageSize, and it is never
	// omitted, as the Go SDK sizes batches by it (docs/compatibility.md §8).
	// On outbound links 0 omits it (no limit): go-amqp receivers adopt
	// the value as their own receive limit, and a broker's annotations
	// can make a delivered message larger than it was when sent.
	MaxMessageSize uint64
	// Credit bounds deliveries outstanding at the handler on an inbound
	// link; 0 uses Config.LinkCredit.
	Credit uint32
	// Properties, OfferedCapabilities and DesiredCapabilities go into the
	// reply, e.g. com.microsoft:locked-until-utc.
	Properties          encoding.Map
	OfferedCapabilities []encoding.Symbol
	DesiredCapabilities []encoding.Symbol
}
