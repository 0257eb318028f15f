package encoding

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// appendArray writes an Array as a standalone value.
func appendArray(dst []byte, a Array) ([]byte, error) {
	dst, start := BeginArray(dst)
	dst, err := appendArrayBody(dst, a)
	if err != nil {
		return dst, err
	}
	return EndArray(dst, start, len(a.Elements)), nil
}

// appendArrayBody writes the element constructor and the element data. The
// element code is normalised to the one encoding of its type that can hold
// any element (uint becomes 0x70, boolean 0x56, ...), because all elements
// share a single constructor (AMQP 1.0 §1.2.4).
func appendArrayBody(dst []byte, a Array) ([]byte, error) {
	code, ok := arrayElementCode(a.Code, a.Elements)
	if !ok {
		return dst, fmt.Errorf("%w: array element code 0x%02x", ErrUnsupportedValue, a.Code)
	}
	var err error
	if a.Descriptor != nil {
		dst = append(dst, CodeDescribed)
		if dst, err = AppendAny(dst, a.Descriptor); err != nil {
			return dst, err
		}
	}
	dst = append(dst, code)
	for _, e := range a.Elements {
		if dst, err = appendElement(dst, code, e); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// arrayElementCode maps any encoding of a type to the element code used to
// write it; variable-width types take the 8-bit form only when every
// element fits.
func arrayElementCode(code byte, elems []any) (byte, bool) {
	switch code {
	case CodeNull, CodeUbyte, CodeUshort, CodeByte, CodeShort,
		CodeFloat, CodeDouble, CodeDecimal32, CodeDecimal64, CodeDecimal128,
		CodeChar, CodeTimestamp, CodeUUID:
		return code, true
	case CodeBoolean, CodeTrue, CodeFalse:
		return CodeBoolean, true
	case CodeUint, CodeSmallUint, CodeUint0:
		return CodeUint, true
	case CodeUlong, CodeSmallUlong, CodeUlong0:
		return CodeUlong, true
	case CodeInt, CodeSmallInt:
		return CodeInt, true
	case CodeLong, CodeSmallLong:
		return CodeLong, true
	case CodeVbin8, CodeVbin32:
		return variableElementCode(CodeVbin8, CodeVbin32, elems), true
	case CodeStr8, CodeStr32:
		return variableElementCode(CodeStr8, CodeStr32, elems), true
	case CodeSym8, CodeSym32:
		return variableElementCode(CodeSym8, CodeSym32, elems), true
	case CodeList0, CodeList8, CodeList32:
		return CodeList32, true
	case CodeMap8, CodeMap32:
		return CodeMap32, true
	case CodeArray8, CodeArray32:
		return CodeArray32, true
	}
	return 0, false
}

func variableElementCode(code8, code32 byte, elems []any) byte {
	for _, e := range elems {
		if n, _ := textLen(e); n > math.MaxUint8 {
			return code32
		}
	}
	return code8
}

// textLen is the length of a binary, string or symbol element.
func textLen(v any) (int, bool) {
	switch x := v.(type) {
	case []byte:
		return len(x), true
	case string:
		return len(x), true
	case Symbol:
		return len(x), true
	}
	return 0, false
}

// appendElement writes one array element's data, without a constructor.
func appendElement(dst []byte, code byte, v any) ([]byte, error) {
	ok := true
	switch code {
	case CodeNull:
		ok = v == nil
	case CodeVbin8, CodeVbin32, CodeStr8, CodeStr32, CodeSym8, CodeSym32:
		var n int
		if n, ok = textLen(v); ok {
			dst = appendElementLength(dst, code>>4 == subVariable4, n)
			switch x := v.(type) {
			case []byte:
				dst = append(dst, x...)
			case string:
				dst = append(dst, x...)
			case Symbol:
				dst = append(dst, x...)
			}
		}
	case CodeList32:
		switch x := v.(type) {
		case List:
			return appendListElement(dst, x)
		case []any:
			return appendListElement(dst, x)
		}
		ok = false
	case CodeMap32:
		if m, isMap := v.(Map); isMap {
			return appendMapElement(dst, m)
		}
		ok = false
	case CodeArray32:
		if inner, isArray := v.(Array); isArray {
			start := len(dst)
			dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
			dst, err := appendArrayBody(dst, inner)
			if err != nil {
				return dst, err
			}
			return patchElement32(dst, start, len(inner.Elements)), nil
		}
		ok = false
	default:
		dst, ok = appendFixedElement(dst, code, v)
	}
	if !ok {
		return dst, fmt.Errorf("%w: %T in an array of code 0x%02x", ErrUnsupportedValue, v, code)
	}
	return dst, nil
}

// Compound elements of an array all use the 32-bit layout, since they
// share the outer constructor; their data is size and count (4 bytes each)
// followed by the items.
func appendListElement(dst []byte, items []any) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	var err error
	for _, item := range items {
		if dst, err = AppendAny(dst, item); err != nil {
			return dst, err
		}
	}
	return patchElement32(dst, start, len(items)), nil
}

func appendMapElement(dst []byte, m Map) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	dst, err := appendMapItems(dst, m)
	if err != nil {
		return dst, err
	}
	return patchElement32(dst, start, 2*len(m)), nil
}

func appendMapItems(dst []byte, m Map) ([]byte, error) {
	var err error
	for _, e := range m {
		if dst, err = AppendAny(dst, e.Key); err != nil {
			return dst, err
		}
		if dst, err = AppendAny(dst, e.Value); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

func patchElement32(dst []byte, start, count int) []byte {
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-4))
	binary.BigEndian.PutUint32(dst[start+4:], uint32(count))
	return dst
}

// appendFixedElement writes the data of a fixed-width element, checking
// that the Go type matches the array's element type.
func appendFixedElement(dst []byte, code byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case bool:
		if code == CodeBoolean {
			if x {
				return append(dst, 1), true
			}
			return append(dst, 0), true
		}
	case uint8:
		if code == CodeUbyte {
			return append(dst, x), true
		}
	case uint16:
		if code == CodeUshort {
			return binary.BigEndian.AppendUint16(dst, x), true
		}
	case uint32:
		if code == CodeUint {
			return binary.BigEndian.AppendUint32(dst, x), true
		}
	case uint64:
		if code == CodeUlong {
			return binary.BigEndian.AppendUint64(dst, x), true
		}
	case uint:
		if code == CodeUlong {
			return binary.BigEndian.AppendUint64(dst, uint64(x)), true
		}
	case int8:
		if code == CodeByte {
			return append(dst, byte(x)), true
		}
	case int16:
		if code == CodeShort {
			return binary.BigEndian.AppendUint16(dst, uint16(x)), true
		}
	case int32:
		if code == CodeInt {
			return binary.BigEndian.AppendUint32(dst, uint32(x)), true
		}
	case int64:
		if code == CodeLong {
			return binary.BigEndian.AppendUint64(dst, uint64(x)), true
		}
	case int:
		if code == CodeLong {
			return binary.BigEndian.AppendUint64(dst, uint64(x)), true
		}
	case float32:
		if code == CodeFloat {
			return binary.BigEndian.AppendUint32(dst, math.Float32bits(x)), true
		}
	case float64:
		if code == CodeDouble {
			return binary.BigEndian.AppendUint64(dst, math.Float64bits(x)), true
		}
	case Decimal32:
		if code == CodeDecimal32 {
			return append(dst, x[:]...), true
		}
	case Decimal64:
		if code == CodeDecimal64 {
			return append(dst, x[:]...), true
		}
	case Decimal128:
		if code == CodeDecimal128 {
			return append(dst, x[:]...), true
		}
	case Char:
		if code == CodeChar {
			return binary.BigEndian.AppendUint32(dst, uint32(x)), true
		}
	case Timestamp:
		if code == CodeTimestamp {
			return binary.BigEndian.AppendUint64(dst, uint64(x)), true
		}
	case time.Time:
		if code == CodeTimestamp {
			return binary.BigEndian.AppendUint64(dst, uint64(TimestampOf(x))), true
		}
	case UUID:
		if code == CodeUUID {
			return append(dst, x[:]...), true
		}
	}
	return dst, false
}
