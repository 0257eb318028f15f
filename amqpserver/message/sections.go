package message

import (
	"errors"
	"fmt"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// Section descriptors (AMQP 1.0 §3.2), in the order the grammar requires.
const (
	CodeHeader                uint64 = 0x70
	CodeDeliveryAnnotations   uint64 = 0x71
	CodeMessageAnnotations    uint64 = 0x72
	CodeProperties            uint64 = 0x73
	CodeApplicationProperties uint64 = 0x74
	CodeData                  uint64 = 0x75
	CodeAMQPSequence          uint64 = 0x76
	CodeAMQPValue             uint64 = 0x77
	CodeFooter                uint64 = 0x78
)

var sectionNames = map[string]uint64{
	"amqp:header:list":                CodeHeader,
	"amqp:delivery-annotations:map":   CodeDeliveryAnnotations,
	"amqp:message-annotations:map":    CodeMessageAnnotations,
	"amqp:properties:list":            CodeProperties,
	"amqp:application-properties:map": CodeApplicationProperties,
	"amqp:data:binary":                CodeData,
	"amqp:amqp-sequence:list":         CodeAMQPSequence,
	"amqp:amqp-value:*":               CodeAMQPValue,
	"amqp:footer:map":                 CodeFooter,
}

// Span is where one section sits in the message: Start is its descriptor,
// Value the encoded value after the descriptor, End just past it. A zero
// Span means the section is absent.
type Span struct {
	Start, Value, End int
}

// Present reports whether the section was found.
func (s Span) Present() bool { return s.End > s.Start }

// BodyKind says which of the three body forms a message uses (§3.2).
type BodyKind uint8

// Body kinds. BodyNone is a message without body sections, which the
// grammar forbids but Service Bus clients can produce; it is accepted.
const (
	BodyNone BodyKind = iota
	BodyData
	BodySequence
	BodyValue
)

// Sections locates the sections of one encoded message.
type Sections struct {
	Raw                   []byte
	Header                Span
	DeliveryAnnotations   Span
	MessageAnnotations    Span
	Properties            Span
	ApplicationProperties Span
	// Body spans every body section: Start of the first, End of the last.
	// Value is the value of the first, which is all of an amqp-value body.
	Body      Span
	BodyKind  BodyKind
	BodyCount int
	Footer    Span
}

// Bytes returns the encoded section at sp, descriptor included.
func (s *Sections) Bytes(sp Span) []byte {
	return s.Raw[sp.Start:sp.End:sp.End]
}

// ValueBytes returns the encoded value of the section at sp.
func (s *Sections) ValueBytes(sp Span) []byte {
	return s.Raw[sp.Value:sp.End:sp.End]
}

// BareStart and BareEnd delimit the bare message: properties through the
// body (§3.2). For a message with only annotations they are equal.
func (s *Sections) BareStart() int {
	switch {
	case s.Properties.Present():
		return s.Properties.Start
	case s.ApplicationProperties.Present():
		return s.ApplicationProperties.Start
	case s.Body.Present():
		return s.Body.Start
	}
	return s.BareEnd()
}

// BareEnd is where the footer, if any, begins.
func (s *Sections) BareEnd() int {
	if s.Footer.Present() {
		return s.Footer.Start
	}
	return len(s.Raw)
}

// Bare returns the bare message bytes.
func (s *Sections) Bare() []byte {
	return s.Raw[s.BareStart():s.BareEnd():s.BareEnd()]
}

// ErrInvalidMessage is matched by every Parse failure; it also matches
// encoding.ErrDecode, so the link can answer with amqp:decode-error.
var ErrInvalidMessage = fmt.Errorf("%w: invalid message", encoding.ErrDecode)

var errUnknownSection = errors.New("unknown section descriptor")

// ErrSectionOrder is matched by a Parse failure for sections out of
// grammar order, which Reorder may mend.
var ErrSectionOrder = fmt.Errorf("%w: sections out of order", ErrInvalidMessage)

// rank orders the sections as the grammar requires; body sections share
// one rank.
func rank(code uint64) int {
	switch code {
	case CodeData, CodeAMQPSequence, CodeAMQPValue:
		return int(CodeData)
	}
	return int(code)
}

// Parse locates the sections of raw and checks them loosely: known
// descriptors, each value well formed and of its section's type, sections
// in grammar order, at most one of each except repeated data or
// amqp-sequence sections, one body kind. A message without a body is
// accepted; an empty buffer or trailing garbage is not.
func Parse(raw []byte) (Sections, error) {
	s := Sections{Raw: raw}
	if len(raw) == 0 {
		return s, fmt.Errorf("%w: no sections", ErrInvalidMessage)
	}
	r := encoding.NewReader(raw)
	last := 0
	for r.Len() > 0 {
		code, sp, err := nextSection(&r)
		if err != nil {
			return s, err
		}
		if err := s.place(code, sp, last); err != nil {
			return s, err
		}
		last = rank(code)
	}
	return s, nil
}

// nextSection reads the section at r: its code and where it sits.
func nextSection(r *encoding.Reader) (uint64, Span, error) {
	start := r.Offset()
	code, err := readSectionCode(r)
	if err != nil {
		return 0, Span{}, fmt.Errorf("%w: section at %d: %w", ErrInvalidMessage, start, err)
	}
	value := r.Offset()
	if err := checkSectionValue(r, code); err != nil {
		return 0, Span{}, fmt.Errorf("%w: section 0x%x at %d: %w", ErrInvalidMessage, code, start, err)
	}
	return code, Span{Start: start, Value: value, End: r.Offset()}, nil
}

// place records a section, enforcing order and repetition rules.
func (s *Sections) place(code uint64, sp Span, last int) error {
	repeat := rank(code) == last
	if rank(code) < last || (repeat && !s.bodyContinues(code)) {
		return fmt.Errorf("%w: section 0x%x at %d is out of order or repeated", ErrSectionOrder, code, sp.Start)
	}
	switch code {
	case CodeHeader:
		s.Header = sp
	case CodeDeliveryAnnotations:
		s.DeliveryAnnotations = sp
	case CodeMessageAnnotations:
		s.MessageAnnotations = sp
	case CodeProperties:
		s.Properties = sp
	case CodeApplicationProperties:
		s.ApplicationProperties = sp
	case CodeFooter:
		s.Footer = sp
	default:
		kind := BodyValue
		switch code {
		case CodeData:
			kind = BodyData
		case CodeAMQPSequence:
			kind = BodySequence
		}
		if s.BodyCount == 0 {
			s.Body, s.BodyKind = sp, kind
		}
		s.Body.End = sp.End
		s.BodyCount++
	}
	return nil
}

// bodyContinues reports whether another body section with code may follow
// the ones seen: only data after data or sequence after sequence.
func (s *Sections) bodyContinues(code uint64) bool {
	return (code == CodeData && s.BodyKind == BodyData) || (code == CodeAMQPSequence && s.BodyKind == BodySequence)
}

// readSectionCode reads a section descriptor, numeric or symbolic.
func readSectionCode(r *encoding.Reader) (uint64, error) {
	d, err := r.ReadDescriptor()
	if err != nil {
		return 0, err
	}
	code := d.Code
	if d.Symbolic {
		code = sectionNames[string(d.Name)]
	}
	if code < CodeHeader || code > CodeFooter {
		return 0, errUnknownSection
	}
	return code, nil
}

// checkSectionValue skips a section's value, checking it is well formed
// and of the type its section requires (§3.2.1-3.2.9).
func checkSectionValue(r *encoding.Reader, code uint64) error {
	c, err := r.PeekCode()
	if err != nil {
		return err
	}
	var ok bool
	switch code {
	case CodeHeader, CodeProperties, CodeAMQPSequence:
		ok = c == encoding.CodeList0 || c == encoding.CodeList8 || c == encoding.CodeList32
	case CodeDeliveryAnnotations, CodeMessageAnnotations, CodeApplicationProperties, CodeFooter:
		ok = c == encoding.CodeMap8 || c == encoding.CodeMap32
	case CodeData:
		ok = c == encoding.CodeVbin8 || c == encoding.CodeVbin32
	case CodeAMQPValue:
		ok = true
	}
	if !ok {
		return fmt.Errorf("value has format code 0x%02x", c)
	}
	return r.Skip()
}
