package event

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Reader decodes the varint-and-length-prefixed fields used by record
// payloads and snapshots. The first failure sticks: later reads return zero
// values and Err reports it, so decoders check once at the end. It never
// reads past its input, whatever the input says.
type Reader struct {
	b   []byte
	err error
}

// NewReader reads from b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Err is the first decoding failure, or nil.
func (r *Reader) Err() error { return r.err }

// Len is the number of unread bytes.
func (r *Reader) Len() int { return len(r.b) }

// Fail records a failure found by the caller (a value out of range).
func (r *Reader) Fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
	r.b = nil
}

func (r *Reader) Uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.Fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *Reader) Varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.Fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Uint32 reads a uvarint that must fit in 32 bits.
func (r *Reader) Uint32() uint32 {
	v := r.Uvarint()
	if v > 1<<32-1 {
		r.Fail("value %d does not fit in 32 bits", v)
		return 0
	}
	return uint32(v)
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	b := r.Fixed(1)
	if b == nil {
		return 0
	}
	return b[0]
}

// Fixed reads exactly n bytes, aliasing the input.
func (r *Reader) Fixed(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.Fail("need %d bytes, have %d", n, len(r.b))
		return nil
	}
	b := r.b[:n:n]
	r.b = r.b[n:]
	return b
}

// Bytes reads a uvarint length and that many bytes, aliasing the input.
func (r *Reader) Bytes() []byte {
	n := r.Uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.Fail("length %d beyond the %d bytes left", n, len(r.b))
		return nil
	}
	return r.Fixed(int(n))
}

// String reads a length-prefixed string (copied).
func (r *Reader) String() string { return string(r.Bytes()) }

// Count reads an element count and checks that at least minSize bytes per
// element remain, so a corrupt count cannot make the caller allocate wildly.
func (r *Reader) Count(minSize int) int {
	n := r.Uvarint()
	if r.err != nil {
		return 0
	}
	if n > uint64(len(r.b)/max(minSize, 1)) {
		r.Fail("count %d cannot fit in %d bytes", n, len(r.b))
		return 0
	}
	return int(n)
}

// ErrTrailing is reported by Done when input is left over.
var ErrTrailing = errors.New("trailing bytes")

// Done reports the first failure, or ErrTrailing if input is left unread.
func (r *Reader) Done() error {
	if r.err == nil && len(r.b) != 0 {
		return fmt.Errorf("%w: %d", ErrTrailing, len(r.b))
	}
	return r.err
}

// AppendBytes appends a uvarint length and b.
func AppendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// AppendString appends a uvarint length and s.
func AppendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}
