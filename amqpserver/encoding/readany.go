package encoding

import (
	"encoding/binary"
	"math"
)

// ReadAny decodes the next value into the Go types listed in the package
// documentation, within lim (zero fields take DefaultLimits). Strings and
// binaries are copied, so the result does not alias the input.
func (r *Reader) ReadAny(lim Limits) (any, error) {
	d := anyDecoder{lim: lim.orDefault()}
	d.budget = d.lim.MaxBytes
	return d.value(r, 0)
}

// slotCost is what one decoded value costs against Limits.MaxBytes: the
// size of the interface slot that holds it.
const slotCost = 16

type anyDecoder struct {
	lim    Limits
	budget int
}

func (d *anyDecoder) charge(at, n int) error {
	if n > d.budget {
		return limitErr(at, "decoded value exceeds the byte limit")
	}
	d.budget -= n
	return nil
}

func (d *anyDecoder) value(r *Reader, depth int) (any, error) {
	at := r.off
	code, err := r.readCode()
	if err != nil {
		return nil, err
	}
	if code != CodeDescribed {
		return d.data(r, at, code, depth)
	}
	if depth >= d.lim.MaxDepth {
		return nil, limitErr(at, "values nested too deeply")
	}
	descriptor, err := d.value(r, depth+1)
	if err != nil {
		return nil, err
	}
	v, err := d.value(r, depth+1)
	if err != nil {
		return nil, err
	}
	return Described{Descriptor: descriptor, Value: v}, nil
}

// data decodes what follows a non-described format code: a whole value, or
// one element of an array whose shared constructor is code.
func (d *anyDecoder) data(r *Reader, at int, code byte, depth int) (any, error) {
	if err := d.charge(at, slotCost); err != nil {
		return nil, err
	}
	if w, ok := fixedWidth(code); ok {
		b, err := r.take(w)
		if err != nil {
			return nil, err
		}
		return fixedValue(at, code, b)
	}
	switch code {
	case CodeVbin8, CodeVbin32, CodeStr8, CodeStr32, CodeSym8, CodeSym32:
		b, err := r.variableData(at, code>>4 == subVariable4)
		if err != nil {
			return nil, err
		}
		if err := d.charge(at, len(b)); err != nil {
			return nil, err
		}
		switch code {
		case CodeStr8, CodeStr32:
			return string(b), nil
		case CodeSym8, CodeSym32:
			return Symbol(b), nil
		}
		return append([]byte{}, b...), nil
	case CodeList8, CodeList32:
		return d.list(r, at, code == CodeList32, depth)
	case CodeMap8, CodeMap32:
		return d.mapValue(r, at, code == CodeMap32, depth)
	case CodeArray8, CodeArray32:
		return d.array(r, at, code == CodeArray32, depth)
	}
	return nil, unexpectedCode(at, "a known type", code)
}

// variableData reads a length prefix (1 or 4 bytes) and that many bytes.
func (r *Reader) variableData(at int, wide bool) ([]byte, error) {
	if !wide {
		b, err := r.take(1)
		if err != nil {
			return nil, err
		}
		return r.take(int(b[0]))
	}
	b, err := r.take(4)
	if err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n) > uint64(r.Len()) {
		return nil, decodeErr(at, "value length exceeds the data present")
	}
	return r.take(int(n))
}

// fixedValue converts the data of a fixed-width code into its Go value.
func fixedValue(at int, code byte, b []byte) (any, error) {
	switch code {
	case CodeNull:
		return nil, nil
	case CodeTrue:
		return true, nil
	case CodeFalse:
		return false, nil
	case CodeBoolean:
		if b[0] > 1 {
			return nil, decodeErr(at, "boolean byte is neither 0x00 nor 0x01")
		}
		return b[0] == 1, nil
	case CodeUbyte:
		return b[0], nil
	case CodeUshort:
		return binary.BigEndian.Uint16(b), nil
	case CodeUint0:
		return uint32(0), nil
	case CodeSmallUint:
		return uint32(b[0]), nil
	case CodeUint:
		return binary.BigEndian.Uint32(b), nil
	case CodeUlong0:
		return uint64(0), nil
	case CodeSmallUlong:
		return uint64(b[0]), nil
	case CodeUlong:
		return binary.BigEndian.Uint64(b), nil
	case CodeByte:
		return int8(b[0]), nil
	case CodeShort:
		return int16(binary.BigEndian.Uint16(b)), nil
	case CodeSmallInt:
		return int32(int8(b[0])), nil
	case CodeInt:
		return int32(binary.BigEndian.Uint32(b)), nil
	case CodeSmallLong:
		return int64(int8(b[0])), nil
	case CodeLong:
		return int64(binary.BigEndian.Uint64(b)), nil
	case CodeFloat:
		return math.Float32frombits(binary.BigEndian.Uint32(b)), nil
	case CodeDouble:
		return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
	case CodeDecimal32:
		return Decimal32(b), nil
	case CodeDecimal64:
		return Decimal64(b), nil
	case CodeDecimal128:
		return Decimal128(b), nil
	case CodeChar:
		return Char(binary.BigEndian.Uint32(b)), nil
	case CodeTimestamp:
		return Timestamp(binary.BigEndian.Uint64(b)), nil
	case CodeUUID:
		return UUID(b), nil
	case CodeList0:
		return List{}, nil
	}
	return nil, unexpectedCode(at, "a known type", code)
}

// items prepares to decode count items from a compound: it enforces the
// limits before the caller allocates.
func (d *anyDecoder) items(at, count, slot, depth int) error {
	if depth >= d.lim.MaxDepth {
		return limitErr(at, "values nested too deeply")
	}
	if count > d.lim.MaxElements {
		return limitErr(at, "too many elements in one compound")
	}
	return d.charge(at, count*slot)
}

func (d *anyDecoder) list(r *Reader, at int, wide bool, depth int) (any, error) {
	count, end, err := r.readCompoundSizes(at, wide, "list")
	if err != nil {
		return nil, err
	}
	if err := d.items(at, count, slotCost, depth); err != nil {
		return nil, err
	}
	items := Reader{buf: r.buf[:end], off: r.off}
	out := make(List, count)
	for i := range out {
		if out[i], err = d.value(&items, depth+1); err != nil {
			return nil, err
		}
	}
	if items.off != end {
		return nil, decodeErr(at, "list size does not match its items")
	}
	r.off = end
	return out, nil
}

func (d *anyDecoder) mapValue(r *Reader, at int, wide bool, depth int) (any, error) {
	count, end, err := r.readCompoundSizes(at, wide, "map")
	if err != nil {
		return nil, err
	}
	if count%2 != 0 {
		return nil, decodeErr(at, "map has an odd number of items")
	}
	if err := d.items(at, count, slotCost, depth); err != nil {
		return nil, err
	}
	items := Reader{buf: r.buf[:end], off: r.off}
	out := make(Map, count/2)
	for i := range out {
		if out[i].Key, err = d.value(&items, depth+1); err != nil {
			return nil, err
		}
		if out[i].Value, err = d.value(&items, depth+1); err != nil {
			return nil, err
		}
	}
	if items.off != end {
		return nil, decodeErr(at, "map size does not match its items")
	}
	r.off = end
	return out, nil
}

func (d *anyDecoder) array(r *Reader, at int, wide bool, depth int) (any, error) {
	h, off, err := arrayBody(r.buf, at, r.off, wide, depth, d.lim.MaxDepth)
	if err != nil {
		return nil, err
	}
	r.off = off
	// An empty array of an unknown type is well formed, but it has no Go
	// value that AppendAny could write back, so reject it like any unknown
	// type.
	if _, known := arrayElementCode(h.ElementCode, nil); !known {
		return nil, unexpectedCode(at, "a known array element type", h.ElementCode)
	}
	if err := d.items(at, h.Count, slotCost, depth); err != nil {
		return nil, err
	}
	out := Array{Code: h.ElementCode}
	if h.Descriptor != nil {
		desc := Reader{buf: h.Descriptor}
		if out.Descriptor, err = d.value(&desc, depth+1); err != nil {
			return nil, err
		}
	}
	elems := Reader{buf: r.buf[:h.End], off: r.off}
	out.Elements = make([]any, h.Count)
	for i := range out.Elements {
		if out.Elements[i], err = d.data(&elems, elems.off, h.ElementCode, depth+1); err != nil {
			return nil, err
		}
	}
	if elems.off != h.End {
		return nil, decodeErr(at, "array size does not match its elements")
	}
	r.off = h.End
	return out, nil
}
