package message

import (
	"fmt"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// Reorder writes the sections of raw in grammar order (§3.2): header,
// delivery-annotations, message-annotations, properties,
// application-properties, the body sections in the order they came, then
// the footer. Each section is copied byte for byte. uAMQP, the Python
// SDK's AMQP library, puts a footer and delivery annotations it is given
// after the application properties and before the body; Service Bus takes
// such messages. Reorder refuses what no order can mend: a section other
// than data or amqp-sequence twice, or two kinds of body.
func Reorder(raw []byte) ([]byte, error) {
	var (
		once   [CodeFooter + 1]Span // by section code; body codes unused
		bodies []Span
		kind   uint64
	)
	r := encoding.NewReader(raw)
	for r.Len() > 0 {
		code, sp, err := nextSection(&r)
		if err != nil {
			return nil, err
		}
		switch code {
		case CodeData, CodeAMQPSequence, CodeAMQPValue:
			if len(bodies) > 0 && (code != kind || code == CodeAMQPValue) {
				return nil, fmt.Errorf("%w: body section 0x%x at %d after body section 0x%x", ErrInvalidMessage, code, sp.Start, kind)
			}
			kind = code
			bodies = append(bodies, sp)
		default:
			if once[code].Present() {
				return nil, fmt.Errorf("%w: section 0x%x at %d is repeated", ErrInvalidMessage, code, sp.Start)
			}
			once[code] = sp
		}
	}
	out := make([]byte, 0, len(raw))
	for _, code := range []uint64{CodeHeader, CodeDeliveryAnnotations, CodeMessageAnnotations, CodeProperties, CodeApplicationProperties} {
		out = append(out, raw[once[code].Start:once[code].End]...)
	}
	for _, sp := range bodies {
		out = append(out, raw[sp.Start:sp.End]...)
	}
	return append(out, raw[once[CodeFooter].Start:once[CodeFooter].End]...), nil
}
