package frames

import (
	"fmt"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// Performative is the body of an AMQP or SASL frame.
type Performative interface {
	Descriptor() uint64
	AppendTo(dst []byte) []byte
	Decode(b []byte) error
}

// SplitBody separates a frame body into its performative and the payload
// after it (only transfer has one, §2.7.5), and returns the performative's
// numeric descriptor. It reads only the descriptor and list header, so a
// hot path can then Decode into a reused struct.
func SplitBody(body []byte) (code uint64, performative, payload []byte, err error) {
	r := encoding.NewReader(body)
	code, err = readCompositeCode(&r)
	if err != nil {
		return 0, nil, nil, err
	}
	_, end, err := r.ReadListHeader()
	if err != nil {
		return 0, nil, nil, fmt.Errorf("%s: %w", nameOf(code), err)
	}
	return code, body[:end:end], body[end:], nil
}

// ParseBody decodes a frame body into a newly allocated performative,
// dispatching on its descriptor, and returns the payload that follows.
func ParseBody(body []byte) (Performative, []byte, error) {
	code, perf, payload, err := SplitBody(body)
	if err != nil {
		return nil, nil, err
	}
	p := NewPerformative(code)
	if p == nil {
		return nil, nil, fmt.Errorf("%w: descriptor 0x%x", ErrUnknownPerformative, code)
	}
	if err := p.Decode(perf); err != nil {
		return nil, nil, err
	}
	return p, payload, nil
}

// NewPerformative returns an empty performative for an AMQP or SASL frame
// descriptor, or nil when code names none.
func NewPerformative(code uint64) Performative {
	switch code {
	case CodeOpen:
		return new(Open)
	case CodeBegin:
		return new(Begin)
	case CodeAttach:
		return new(Attach)
	case CodeFlow:
		return new(Flow)
	case CodeTransfer:
		return new(Transfer)
	case CodeDisposition:
		return new(Disposition)
	case CodeDetach:
		return new(Detach)
	case CodeEnd:
		return new(End)
	case CodeClose:
		return new(Close)
	case CodeSASLMechanisms:
		return new(SASLMechanisms)
	case CodeSASLInit:
		return new(SASLInit)
	case CodeSASLChallenge:
		return new(SASLChallenge)
	case CodeSASLResponse:
		return new(SASLResponse)
	case CodeSASLOutcome:
		return new(SASLOutcome)
	}
	return nil
}
