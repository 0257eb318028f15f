package encoding

// Reader decodes AMQP values from a byte slice without copying. It keeps an
// offset into the slice; each ReadX consumes one complete value or, on
// error, leaves the offset unspecified (callers give up on the buffer).
//
// Slices returned by Reader alias the input and stay valid only as long as
// the caller keeps the input unchanged.
type Reader struct {
	buf []byte
	off int
}

// NewReader returns a Reader positioned at the start of b.
func NewReader(b []byte) Reader {
	return Reader{buf: b}
}

// Reset points r at the start of b.
func (r *Reader) Reset(b []byte) {
	r.buf, r.off = b, 0
}

// Offset is the position of the next unread byte.
func (r *Reader) Offset() int { return r.off }

// Len is the number of unread bytes.
func (r *Reader) Len() int { return len(r.buf) - r.off }

// Rest returns the unread bytes.
func (r *Reader) Rest() []byte { return r.buf[r.off:] }

// Buffer returns the whole input, so offsets such as a compound's end can be
// turned back into slices.
func (r *Reader) Buffer() []byte { return r.buf }

// Seek moves to an absolute offset, typically the end returned by a
// ReadXHeader call, to skip the items not read.
func (r *Reader) Seek(off int) error {
	if off < 0 || off > len(r.buf) {
		return decodeErr(r.off, "seek outside the buffer")
	}
	r.off = off
	return nil
}

// PeekCode returns the next format code without consuming it. For a
// described value it returns CodeDescribed.
func (r *Reader) PeekCode() (byte, error) {
	if r.off >= len(r.buf) {
		return 0, decodeErr(r.off, "unexpected end of data")
	}
	return r.buf[r.off], nil
}

// IsNull reports whether the next value is null, without consuming it.
func (r *Reader) IsNull() bool {
	return r.off < len(r.buf) && r.buf[r.off] == CodeNull
}

// TryNull consumes the next value if it is null and reports whether it did.
func (r *Reader) TryNull() bool {
	if r.IsNull() {
		r.off++
		return true
	}
	return false
}

// take consumes n bytes and returns them, or fails without moving when
// fewer than n remain.
func (r *Reader) take(n int) ([]byte, error) {
	if n < 0 || n > len(r.buf)-r.off {
		return nil, decodeErr(r.off, "value runs past the end of data")
	}
	b := r.buf[r.off : r.off+n : r.off+n]
	r.off += n
	return b, nil
}

// readCode consumes one format code byte.
func (r *Reader) readCode() (byte, error) {
	if r.off >= len(r.buf) {
		return 0, decodeErr(r.off, "unexpected end of data")
	}
	c := r.buf[r.off]
	r.off++
	return c, nil
}
