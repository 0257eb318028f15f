package encoding

import (
	"encoding/binary"
	"math"
)

// The AppendX functions write one value, constructor included, at the end of
// dst and return the extended slice. Each picks the smallest encoding the
// spec allows for the value (AMQP 1.0 §1.6); none allocates when dst has
// room.

// AppendNull writes null (§1.6.1).
func AppendNull(dst []byte) []byte {
	return append(dst, CodeNull)
}

// AppendBool writes a boolean as the zero-width true/false codes (§1.6.2).
func AppendBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, CodeTrue)
	}
	return append(dst, CodeFalse)
}

// AppendUbyte writes a ubyte. It is always 0x50 plus one byte, which is also
// what strict peers (go-amqp) demand for settle modes and sasl codes.
func AppendUbyte(dst []byte, v uint8) []byte {
	return append(dst, CodeUbyte, v)
}

// AppendUshort writes a ushort (§1.6.4).
func AppendUshort(dst []byte, v uint16) []byte {
	return binary.BigEndian.AppendUint16(append(dst, CodeUshort), v)
}

// AppendUint writes a uint as uint0, smalluint or uint (§1.6.5).
func AppendUint(dst []byte, v uint32) []byte {
	switch {
	case v == 0:
		return append(dst, CodeUint0)
	case v <= math.MaxUint8:
		return append(dst, CodeSmallUint, byte(v))
	}
	return binary.BigEndian.AppendUint32(append(dst, CodeUint), v)
}

// AppendUlong writes a ulong as ulong0, smallulong or ulong (§1.6.6).
func AppendUlong(dst []byte, v uint64) []byte {
	switch {
	case v == 0:
		return append(dst, CodeUlong0)
	case v <= math.MaxUint8:
		return append(dst, CodeSmallUlong, byte(v))
	}
	return binary.BigEndian.AppendUint64(append(dst, CodeUlong), v)
}

// AppendSignedByte writes an AMQP byte, which is signed (§1.6.7).
func AppendSignedByte(dst []byte, v int8) []byte {
	return append(dst, CodeByte, byte(v))
}

// AppendShort writes a short (§1.6.8).
func AppendShort(dst []byte, v int16) []byte {
	return binary.BigEndian.AppendUint16(append(dst, CodeShort), uint16(v))
}

// AppendInt writes an int as smallint when it fits in a signed byte (§1.6.9).
func AppendInt(dst []byte, v int32) []byte {
	if v >= math.MinInt8 && v <= math.MaxInt8 {
		return append(dst, CodeSmallInt, byte(int8(v)))
	}
	return binary.BigEndian.AppendUint32(append(dst, CodeInt), uint32(v))
}

// AppendLong writes a long as smalllong when it fits in a signed byte
// (§1.6.10).
func AppendLong(dst []byte, v int64) []byte {
	if v >= math.MinInt8 && v <= math.MaxInt8 {
		return append(dst, CodeSmallLong, byte(int8(v)))
	}
	return binary.BigEndian.AppendUint64(append(dst, CodeLong), uint64(v))
}

// AppendFullLong writes a long always in its 8-byte form. Some peers read
// certain longs as raw 8-byte buffers (rhea hands large longs to the JS SDK
// as a Buffer, docs/compatibility.md §9), so callers can insist on the width.
func AppendFullLong(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, CodeLong), uint64(v))
}

// AppendFloat writes an IEEE 754 binary32 (§1.6.11).
func AppendFloat(dst []byte, v float32) []byte {
	return binary.BigEndian.AppendUint32(append(dst, CodeFloat), math.Float32bits(v))
}

// AppendDouble writes an IEEE 754 binary64 (§1.6.12).
func AppendDouble(dst []byte, v float64) []byte {
	return binary.BigEndian.AppendUint64(append(dst, CodeDouble), math.Float64bits(v))
}

// AppendDecimal32 writes a decimal32 from its raw bytes (§1.6.13).
func AppendDecimal32(dst []byte, v Decimal32) []byte {
	return append(append(dst, CodeDecimal32), v[:]...)
}

// AppendDecimal64 writes a decimal64 from its raw bytes (§1.6.14).
func AppendDecimal64(dst []byte, v Decimal64) []byte {
	return append(append(dst, CodeDecimal64), v[:]...)
}

// AppendDecimal128 writes a decimal128 from its raw bytes (§1.6.15).
func AppendDecimal128(dst []byte, v Decimal128) []byte {
	return append(append(dst, CodeDecimal128), v[:]...)
}

// AppendChar writes a char as its UTF-32BE code point (§1.6.16).
func AppendChar(dst []byte, v Char) []byte {
	return binary.BigEndian.AppendUint32(append(dst, CodeChar), uint32(v))
}

// AppendTimestamp writes a timestamp (§1.6.17).
func AppendTimestamp(dst []byte, v Timestamp) []byte {
	return binary.BigEndian.AppendUint64(append(dst, CodeTimestamp), uint64(v))
}

// AppendUUID writes a uuid (§1.6.18).
func AppendUUID(dst []byte, v UUID) []byte {
	return append(append(dst, CodeUUID), v[:]...)
}
