package message

import (
	"fmt"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// SplitBatch returns the messages of a batch transfer (message-format
// 0x80013700, docs/compatibility.md §8): the payload is one envelope message
// whose data sections each hold one complete encoded message. The inner
// messages are appended to dst as sub-slices of payload; they are not
// parsed here. The envelope's own header and properties only copy the
// first message's and are ignored.
func SplitBatch(payload []byte, dst [][]byte) ([][]byte, error) {
	s, err := Parse(payload)
	if err != nil {
		return dst, fmt.Errorf("batch envelope: %w", err)
	}
	if s.BodyKind != BodyData {
		return dst, fmt.Errorf("%w: batch envelope has no data sections", ErrInvalidMessage)
	}
	r := encoding.NewReader(s.Raw[:s.Body.End])
	if err := r.Seek(s.Body.Start); err != nil {
		return dst, err
	}
	for r.Len() > 0 {
		if _, err := r.ReadDescriptor(); err != nil {
			return dst, err
		}
		inner, err := r.ReadBinary()
		if err != nil {
			return dst, err
		}
		dst = append(dst, inner)
	}
	return dst, nil
}
