package encoding

import (
	"fmt"
	"time"
)

// AppendAny encodes v, one of the Go types listed in the package
// documentation, at the end of dst. It fails with ErrUnsupportedValue for
// any other type and when an Array's elements do not match its code.
func AppendAny(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return AppendNull(dst), nil
	case bool:
		return AppendBool(dst, x), nil
	case uint8:
		return AppendUbyte(dst, x), nil
	case uint16:
		return AppendUshort(dst, x), nil
	case uint32:
		return AppendUint(dst, x), nil
	case uint64:
		return AppendUlong(dst, x), nil
	case uint:
		return AppendUlong(dst, uint64(x)), nil
	case int8:
		return AppendSignedByte(dst, x), nil
	case int16:
		return AppendShort(dst, x), nil
	case int32:
		return AppendInt(dst, x), nil
	case int64:
		return AppendLong(dst, x), nil
	case int:
		return AppendLong(dst, int64(x)), nil
	case float32:
		return AppendFloat(dst, x), nil
	case float64:
		return AppendDouble(dst, x), nil
	case Decimal32:
		return AppendDecimal32(dst, x), nil
	case Decimal64:
		return AppendDecimal64(dst, x), nil
	case Decimal128:
		return AppendDecimal128(dst, x), nil
	case Char:
		return AppendChar(dst, x), nil
	case Timestamp:
		return AppendTimestamp(dst, x), nil
	case time.Time:
		return AppendTimestamp(dst, TimestampOf(x)), nil
	case UUID:
		return AppendUUID(dst, x), nil
	case []byte:
		return AppendBinary(dst, x), nil
	case string:
		return AppendString(dst, x), nil
	case Symbol:
		return AppendSymbol(dst, x), nil
	case List:
		return appendList(dst, x)
	case []any:
		return appendList(dst, x)
	case Map:
		return appendMap(dst, x)
	case Array:
		return appendArray(dst, x)
	case Described:
		dst = append(dst, CodeDescribed)
		dst, err := AppendAny(dst, x.Descriptor)
		if err != nil {
			return dst, err
		}
		return AppendAny(dst, x.Value)
	}
	return dst, fmt.Errorf("%w: %T", ErrUnsupportedValue, v)
}

func appendList(dst []byte, items []any) ([]byte, error) {
	dst, start := BeginList(dst)
	var err error
	for _, item := range items {
		if dst, err = AppendAny(dst, item); err != nil {
			return dst, err
		}
	}
	return EndList(dst, start, len(items)), nil
}

func appendMap(dst []byte, m Map) ([]byte, error) {
	dst, start := BeginMap(dst)
	dst, err := appendMapItems(dst, m)
	if err != nil {
		return dst, err
	}
	return EndMap(dst, start, len(m)), nil
}
