package transport

import (
	"errors"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/frames"
)

// Error conditions the engine sends (AMQP 1.0 §2.8.15–2.8.18). They are
// exported so handlers refusing links or closing connections use the same
// spelling.
const (
	CondInternalError       encoding.Symbol = "amqp:internal-error"
	CondNotFound            encoding.Symbol = "amqp:not-found"
	CondUnauthorizedAccess  encoding.Symbol = "amqp:unauthorized-access"
	CondDecodeError         encoding.Symbol = "amqp:decode-error"
	CondResourceLimit       encoding.Symbol = "amqp:resource-limit-exceeded"
	CondNotAllowed          encoding.Symbol = "amqp:not-allowed"
	CondInvalidField        encoding.Symbol = "amqp:invalid-field"
	CondNotImplemented      encoding.Symbol = "amqp:not-implemented"
	CondIllegalState        encoding.Symbol = "amqp:illegal-state"
	CondConnectionForced    encoding.Symbol = "amqp:connection:forced"
	CondFramingError        encoding.Symbol = "amqp:connection:framing-error"
	CondWindowViolation     encoding.Symbol = "amqp:session:window-violation"
	CondErrantLink          encoding.Symbol = "amqp:session:errant-link"
	CondHandleInUse         encoding.Symbol = "amqp:session:handle-in-use"
	CondUnattachedHandle    encoding.Symbol = "amqp:session:unattached-handle"
	CondDetachForced        encoding.Symbol = "amqp:link:detach-forced"
	CondTransferLimit       encoding.Symbol = "amqp:link:transfer-limit-exceeded"
	CondMessageSizeExceeded encoding.Symbol = "amqp:link:message-size-exceeded"
	CondLinkStolen          encoding.Symbol = "amqp:link:stolen"
)

// Errors returned by the methods handlers call.
var (
	// ErrServerClosed is returned by Serve and ServeConn after Shutdown.
	ErrServerClosed = errors.New("transport: server closed")
	// ErrConnClosed is returned for work on a connection that is closing
	// or closed.
	ErrConnClosed = errors.New("transport: connection closed")
	// ErrLinkClosed is returned for work on a link that is detaching or
	// detached, or was refused.
	ErrLinkClosed = errors.New("transport: link closed")
	// ErrAttached is returned by a second Accept or Refuse of one link.
	ErrAttached = errors.New("transport: link attach already completed")
	// ErrNotAttached is returned by Send and Settle before Accept.
	ErrNotAttached = errors.New("transport: link not attached yet")
	// ErrWrongRole is returned when an inbound-only method is used on an
	// outbound link or the other way round.
	ErrWrongRole = errors.New("transport: wrong link direction")
	// ErrNoCredit is returned by Send when the peer has granted no credit
	// (AMQP 1.0 §2.6.7).
	ErrNoCredit = errors.New("transport: no link credit")
	// ErrMessageTooLarge is returned by Send for a payload over the peer's
	// max-message-size (AMQP 1.0 §2.7.3).
	ErrMessageTooLarge = errors.New("transport: message larger than the peer's max-message-size")
	// ErrSettleMode is returned by Send when settled contradicts the
	// link's negotiated sender settle mode (AMQP 1.0 §2.8.2).
	ErrSettleMode = errors.New("transport: settled flag contradicts the link's settle mode")
	// ErrInvalidTag is returned by Send for a delivery-tag over 32 octets
	// (AMQP 1.0 §2.8.7).
	ErrInvalidTag = errors.New("transport: delivery-tag longer than 32 octets")
	// ErrUnknownDelivery is returned by Settle for a delivery that is
	// already settled or never existed on the link.
	ErrUnknownDelivery = errors.New("transport: unknown or already settled delivery")
)

// newError builds a protocol error for close, end or detach.
func newError(cond encoding.Symbol, description string) *frames.Error {
	return &frames.Error{Condition: cond, Description: description}
}
