package frames

import (
	"fmt"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// fieldReader walks the fields of a composite being decoded. Fields are
// read through in, a Reader cut off at the end of the list, so a field
// that claims more bytes than its list holds fails instead of reading the
// bytes that follow.
//
// fieldReader deliberately holds no pointer to the Reader it came from:
// skipping an unknown field hands f.in to the recursive skip code, and
// anything reachable from f would then be assumed to escape to the heap.
type fieldReader struct {
	in      encoding.Reader
	code    uint64
	count   int    // fields present in the list
	index   int    // field being decoded, -1 before the first
	end     int    // offset just past the list
	present uint32 // bit i set when field i was non-null
}

// openComposite reads a described list and checks its descriptor, numeric
// or symbolic, against code.
func openComposite(r *encoding.Reader, code uint64) (fieldReader, error) {
	at := r.Offset()
	got, err := readCompositeCode(r)
	if err != nil {
		return fieldReader{}, err
	}
	if got != code {
		return fieldReader{}, fmt.Errorf("%w: expected %s at offset %d, found descriptor 0x%x", encoding.ErrDecode, nameOf(code), at, got)
	}
	count, end, err := r.ReadListHeader()
	if err != nil {
		return fieldReader{}, fmt.Errorf("%s: %w", nameOf(code), err)
	}
	f := fieldReader{in: encoding.NewReader(r.Buffer()[:end]), code: code, count: count, end: end, index: -1}
	if err := f.in.Seek(r.Offset()); err != nil {
		return fieldReader{}, err
	}
	return f, nil
}

// readCompositeCode reads a descriptor and returns its numeric code,
// translating the symbolic form.
func readCompositeCode(r *encoding.Reader) (uint64, error) {
	d, err := r.ReadDescriptor()
	if err != nil {
		return 0, err
	}
	if !d.Symbolic {
		return d.Code, nil
	}
	code, ok := codeForName(d.Name)
	if !ok {
		return 0, fmt.Errorf("%w: unknown descriptor %q", ErrUnknownPerformative, d.Name)
	}
	return code, nil
}

// peekCompositeCode returns the descriptor code of the next value without
// consuming it.
func peekCompositeCode(r *encoding.Reader) (uint64, error) {
	peek := *r
	return readCompositeCode(&peek)
}

// next moves to the next non-null field and reports whether there is one.
// Null fields are consumed here, so callers only see values and keep the
// zero value (or Optional absent) for nulls.
func (f *fieldReader) next() bool {
	for {
		f.index++
		if f.index >= f.count {
			return false
		}
		if !f.in.TryNull() {
			if f.index < 32 {
				f.present |= 1 << f.index
			}
			return true
		}
	}
}

// skip passes over a field this version does not know: a newer peer may
// send more fields, which AMQP 1.0 §1.4 lets a decoder ignore.
func (f *fieldReader) skip() error {
	return f.in.Skip()
}

// wrap adds the composite and field position to a decode error.
func (f *fieldReader) wrap(err error) error {
	return fmt.Errorf("%s field %d: %w", nameOf(f.code), f.index, err)
}

// finish checks that the fields used exactly the list's bytes and that
// every mandatory field (bit i of mandatory for field i) was present, then
// moves r, the Reader the composite was opened on, past it.
func (f *fieldReader) finish(r *encoding.Reader, mandatory uint32) error {
	if f.in.Offset() != f.end {
		return fmt.Errorf("%w: %s list size does not match its fields", encoding.ErrDecode, nameOf(f.code))
	}
	if missing := mandatory &^ f.present; missing != 0 {
		field := 0
		for missing&1 == 0 {
			missing >>= 1
			field++
		}
		return fmt.Errorf("%s field %d: %w", nameOf(f.code), field, ErrMissingField)
	}
	return r.Seek(f.end)
}

// readFields reads a "fields" map (or any map-valued field) into a Map.
func readFields(r *encoding.Reader) (encoding.Map, error) {
	v, err := readAny(r)
	if err != nil {
		return nil, err
	}
	m, ok := v.(encoding.Map)
	if !ok {
		return nil, fmt.Errorf("%w: expected a map, found %T", encoding.ErrDecode, v)
	}
	return m, nil
}

// whole finishes a Decode: the composite must have filled its input
// exactly. Decode methods call it as whole(&in, x.decodeFrom(&in)) so the
// Reader stays on the stack.
func whole(in *encoding.Reader, err error) error {
	if err != nil {
		return err
	}
	if in.Len() != 0 {
		return fmt.Errorf("%w: %d bytes after the composite", encoding.ErrDecode, in.Len())
	}
	return nil
}

// fieldLimits bounds each dynamic value in a performative (fields maps,
// filters, error info, properties to modify). The SDKs put a few entries
// there, and some of these values live as long as their link, so a frame
// of a hundred bytes must not decode into megabytes: an array of nulls
// costs no bytes per element on the wire, and the default limits allow
// 64 MiB per value.
var fieldLimits = encoding.Limits{MaxDepth: 16, MaxElements: 4096, MaxBytes: 256 << 10}

// readAny decodes a dynamic value through a copy of r. ReadAny is
// recursive, so escape analysis assumes its Reader escapes; handing it a
// copy confines that heap allocation to the rare frames with dynamic
// fields instead of every decode of every performative.
func readAny(r *encoding.Reader) (any, error) {
	sub := *r
	v, err := sub.ReadAny(fieldLimits)
	if err != nil {
		return nil, err
	}
	return v, r.Seek(sub.Offset())
}
