package frames

import (
	"errors"
	"fmt"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// ErrMalformedFrame is returned for a frame header that breaks AMQP 1.0
// §2.3.1 (size below 8, data offset below 2 or past the frame, unknown
// frame type). The connection answers it with amqp:connection:framing-error.
var ErrMalformedFrame = errors.New("malformed amqp frame")

// ErrMissingField is matched by a decode failure caused by a mandatory
// field that is absent or null. It also matches encoding.ErrDecode.
var ErrMissingField = fmt.Errorf("%w: mandatory field missing", encoding.ErrDecode)

// ErrUnknownPerformative is matched when a frame body's descriptor names no
// performative. It also matches encoding.ErrDecode.
var ErrUnknownPerformative = fmt.Errorf("%w: unknown performative", encoding.ErrDecode)

// ErrFrameTooSmall is returned when max-frame-size leaves no room for any
// payload after the transfer performative (amqp:frame-size-too-small).
var ErrFrameTooSmall = errors.New("max frame size too small for a transfer")
