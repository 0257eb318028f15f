package event

import (
	"encoding/binary"
	"fmt"
)

// AppendRoutes appends the routing outcome of a Published event: the queue
// numbers that got the message, ascending, as a count and then the
// differences between neighbours (the first from zero).
func AppendRoutes(dst []byte, queues []uint32) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(queues)))
	prev := uint32(0)
	for _, q := range queues {
		dst = binary.AppendUvarint(dst, uint64(q-prev))
		prev = q
	}
	return dst
}

// DecodeRoutes reads what AppendRoutes wrote. The numbers must ascend.
func DecodeRoutes(b []byte) ([]uint32, error) {
	r := NewReader(b)
	n := r.Count(1)
	out := make([]uint32, 0, n)
	var prev uint64
	for i := 0; i < n && r.Err() == nil; i++ {
		d := r.Uvarint()
		if r.Err() == nil && (i > 0 && d == 0 || prev+d > 1<<32-1) {
			return nil, fmt.Errorf("%w: routes not ascending", ErrInvalidRecord)
		}
		prev += d
		out = append(out, uint32(prev))
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("%w: routes: %v", ErrInvalidRecord, err)
	}
	return out, nil
}
