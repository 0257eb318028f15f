package encoding

import (
	"encoding/binary"
	"math"
)

// AppendBinary writes binary data as vbin8 or vbin32 (§1.6.19).
func AppendBinary(dst []byte, v []byte) []byte {
	return append(appendVariableHeader(dst, CodeVbin8, CodeVbin32, len(v)), v...)
}

// AppendString writes UTF-8 text as str8 or str32 (§1.6.20). The bytes are
// copied as given; the caller is responsible for valid UTF-8.
func AppendString(dst []byte, v string) []byte {
	return append(appendVariableHeader(dst, CodeStr8, CodeStr32, len(v)), v...)
}

// AppendStringBytes is AppendString for text held in a byte slice, such as
// a sub-slice returned by Reader.
func AppendStringBytes(dst []byte, v []byte) []byte {
	return append(appendVariableHeader(dst, CodeStr8, CodeStr32, len(v)), v...)
}

// AppendSymbol writes a symbol as sym8 or sym32 (§1.6.21).
func AppendSymbol(dst []byte, v Symbol) []byte {
	return append(appendVariableHeader(dst, CodeSym8, CodeSym32, len(v)), v...)
}

// AppendSymbolBytes is AppendSymbol for a symbol held in a byte slice.
func AppendSymbolBytes(dst []byte, v []byte) []byte {
	return append(appendVariableHeader(dst, CodeSym8, CodeSym32, len(v)), v...)
}

func appendVariableHeader(dst []byte, code8, code32 byte, n int) []byte {
	if n <= math.MaxUint8 {
		return append(dst, code8, byte(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, code32), uint32(n))
}
