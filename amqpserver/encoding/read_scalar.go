package encoding

import (
	"encoding/binary"
	"math"
)

// Each ReadX accepts every encoding of its type (AMQP 1.0 §1.2 requires
// decoders to) and, for integers, also the encodings of narrower types of
// the same signedness: a peer that writes a uint field as a ubyte has sent a
// value that fits, and go-amqp's readers are equally forgiving.

// ReadBool reads a boolean in any of its three encodings (§1.6.2).
func (r *Reader) ReadBool() (bool, error) {
	at := r.off
	code, err := r.readCode()
	if err != nil {
		return false, err
	}
	switch code {
	case CodeTrue:
		return true, nil
	case CodeFalse:
		return false, nil
	case CodeBoolean:
		b, err := r.take(1)
		if err != nil {
			return false, err
		}
		switch b[0] {
		case 0:
			return false, nil
		case 1:
			return true, nil
		}
		return false, decodeErr(at, "boolean byte is neither 0x00 nor 0x01")
	}
	return false, unexpectedCode(at, "boolean", code)
}

// ReadUbyte reads a ubyte (§1.6.3).
func (r *Reader) ReadUbyte() (uint8, error) {
	at := r.off
	code, err := r.readCode()
	if err != nil {
		return 0, err
	}
	if code != CodeUbyte {
		return 0, unexpectedCode(at, "ubyte", code)
	}
	b, err := r.take(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

// ReadUshort reads a ushort, or a ubyte (§1.6.4).
func (r *Reader) ReadUshort() (uint16, error) {
	v, err := r.readUnsigned(CodeUshort, "ushort")
	return uint16(v), err
}

// ReadUint reads a uint in any encoding, or a ubyte or ushort (§1.6.5).
func (r *Reader) ReadUint() (uint32, error) {
	v, err := r.readUnsigned(CodeUint, "uint")
	return uint32(v), err
}

// ReadUlong reads a ulong in any encoding, or any narrower unsigned integer
// (§1.6.6).
func (r *Reader) ReadUlong() (uint64, error) {
	v, err := r.readUnsigned(CodeUlong, "ulong")
	return v, err
}

// readUnsigned reads any unsigned integer encoding no wider than widest
// (one of CodeUshort, CodeUint, CodeUlong); any other code is an error
// naming what, with nothing consumed.
func (r *Reader) readUnsigned(widest byte, what string) (uint64, error) {
	if r.off >= len(r.buf) {
		return 0, decodeErr(r.off, "unexpected end of data")
	}
	code := r.buf[r.off]
	rank, width := unsignedRank(code)
	if widestRank, _ := unsignedRank(widest); rank == 0 || rank > widestRank {
		return 0, unexpectedCode(r.off, what, code)
	}
	r.off++
	b, err := r.take(width)
	if err != nil {
		return 0, err
	}
	switch width {
	case 0:
		return 0, nil
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(b)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(b)), nil
	}
	return binary.BigEndian.Uint64(b), nil
}

// unsignedRank orders the unsigned types by width (ubyte 1 ... ulong 4) and
// gives the data width of each encoding; rank 0 means "not unsigned".
func unsignedRank(code byte) (rank, width int) {
	switch code {
	case CodeUbyte:
		return 1, 1
	case CodeUshort:
		return 2, 2
	case CodeUint0:
		return 3, 0
	case CodeSmallUint:
		return 3, 1
	case CodeUint:
		return 3, 4
	case CodeUlong0:
		return 4, 0
	case CodeSmallUlong:
		return 4, 1
	case CodeUlong:
		return 4, 8
	}
	return 0, 0
}

// ReadSignedByte reads an AMQP byte, which is signed (§1.6.7).
func (r *Reader) ReadSignedByte() (int8, error) {
	v, err := r.readSigned(CodeByte, "byte")
	return int8(v), err
}

// ReadShort reads a short, or a byte (§1.6.8).
func (r *Reader) ReadShort() (int16, error) {
	v, err := r.readSigned(CodeShort, "short")
	return int16(v), err
}

// ReadInt reads an int in either encoding, or a byte or short (§1.6.9).
func (r *Reader) ReadInt() (int32, error) {
	v, err := r.readSigned(CodeInt, "int")
	return int32(v), err
}

// ReadLong reads a long in either encoding, or any narrower signed integer
// (§1.6.10).
func (r *Reader) ReadLong() (int64, error) {
	v, err := r.readSigned(CodeLong, "long")
	return v, err
}

// readSigned is readUnsigned for the signed integer types.
func (r *Reader) readSigned(widest byte, what string) (int64, error) {
	if r.off >= len(r.buf) {
		return 0, decodeErr(r.off, "unexpected end of data")
	}
	code := r.buf[r.off]
	rank, width := signedRank(code)
	if widestRank, _ := signedRank(widest); rank == 0 || rank > widestRank {
		return 0, unexpectedCode(r.off, what, code)
	}
	r.off++
	b, err := r.take(width)
	if err != nil {
		return 0, err
	}
	switch width {
	case 1:
		return int64(int8(b[0])), nil
	case 2:
		return int64(int16(binary.BigEndian.Uint16(b))), nil
	case 4:
		return int64(int32(binary.BigEndian.Uint32(b))), nil
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

func signedRank(code byte) (rank, width int) {
	switch code {
	case CodeByte:
		return 1, 1
	case CodeShort:
		return 2, 2
	case CodeSmallInt:
		return 3, 1
	case CodeInt:
		return 3, 4
	case CodeSmallLong:
		return 4, 1
	case CodeLong:
		return 4, 8
	}
	return 0, 0
}

// readFixed consumes a value of exactly the given code and returns its data.
func (r *Reader) readFixed(code byte, width int, what string) ([]byte, error) {
	at := r.off
	c, err := r.readCode()
	if err != nil {
		return nil, err
	}
	if c != code {
		r.off = at
		return nil, unexpectedCode(at, what, c)
	}
	return r.take(width)
}

// ReadFloat reads a float (§1.6.11).
func (r *Reader) ReadFloat() (float32, error) {
	b, err := r.readFixed(CodeFloat, 4, "float")
	if err != nil {
		return 0, err
	}
	return math.Float32frombits(binary.BigEndian.Uint32(b)), nil
}

// ReadDouble reads a double (§1.6.12).
func (r *Reader) ReadDouble() (float64, error) {
	b, err := r.readFixed(CodeDouble, 8, "double")
	if err != nil {
		return 0, err
	}
	return math.Float64frombits(binary.BigEndian.Uint64(b)), nil
}

// ReadDecimal32 reads a decimal32 as raw bytes (§1.6.13).
func (r *Reader) ReadDecimal32() (Decimal32, error) {
	var v Decimal32
	b, err := r.readFixed(CodeDecimal32, len(v), "decimal32")
	copy(v[:], b)
	return v, err
}

// ReadDecimal64 reads a decimal64 as raw bytes (§1.6.14).
func (r *Reader) ReadDecimal64() (Decimal64, error) {
	var v Decimal64
	b, err := r.readFixed(CodeDecimal64, len(v), "decimal64")
	copy(v[:], b)
	return v, err
}

// ReadDecimal128 reads a decimal128 as raw bytes (§1.6.15).
func (r *Reader) ReadDecimal128() (Decimal128, error) {
	var v Decimal128
	b, err := r.readFixed(CodeDecimal128, len(v), "decimal128")
	copy(v[:], b)
	return v, err
}

// ReadChar reads a char (§1.6.16). The code point is not validated so that
// whatever a peer sent can be passed on unchanged.
func (r *Reader) ReadChar() (Char, error) {
	b, err := r.readFixed(CodeChar, 4, "char")
	if err != nil {
		return 0, err
	}
	return Char(binary.BigEndian.Uint32(b)), nil
}

// ReadTimestamp reads a timestamp (§1.6.17).
func (r *Reader) ReadTimestamp() (Timestamp, error) {
	b, err := r.readFixed(CodeTimestamp, 8, "timestamp")
	if err != nil {
		return 0, err
	}
	return Timestamp(binary.BigEndian.Uint64(b)), nil
}

// ReadUUID reads a uuid (§1.6.18).
func (r *Reader) ReadUUID() (UUID, error) {
	var v UUID
	b, err := r.readFixed(CodeUUID, len(v), "uuid")
	copy(v[:], b)
	return v, err
}
