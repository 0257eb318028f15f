package encoding

// Format codes of the AMQP 1.0 primitive types (AMQP 1.0 §1.6). Where a type
// has several encodings, each one is listed; decoders accept them all.
const (
	CodeDescribed byte = 0x00 // constructor prefix of a described type (§1.2)

	CodeNull byte = 0x40

	CodeBoolean byte = 0x56 // one data byte, 0x00 or 0x01
	CodeTrue    byte = 0x41
	CodeFalse   byte = 0x42

	CodeUbyte      byte = 0x50
	CodeUshort     byte = 0x60
	CodeUint       byte = 0x70
	CodeSmallUint  byte = 0x52
	CodeUint0      byte = 0x43
	CodeUlong      byte = 0x80
	CodeSmallUlong byte = 0x53
	CodeUlong0     byte = 0x44

	CodeByte      byte = 0x51
	CodeShort     byte = 0x61
	CodeInt       byte = 0x71
	CodeSmallInt  byte = 0x54
	CodeLong      byte = 0x81
	CodeSmallLong byte = 0x55

	CodeFloat      byte = 0x72
	CodeDouble     byte = 0x82
	CodeDecimal32  byte = 0x74
	CodeDecimal64  byte = 0x84
	CodeDecimal128 byte = 0x94
	CodeChar       byte = 0x73
	CodeTimestamp  byte = 0x83
	CodeUUID       byte = 0x98

	CodeVbin8  byte = 0xa0
	CodeVbin32 byte = 0xb0
	CodeStr8   byte = 0xa1
	CodeStr32  byte = 0xb1
	CodeSym8   byte = 0xa3
	CodeSym32  byte = 0xb3

	CodeList0   byte = 0x45
	CodeList8   byte = 0xc0
	CodeList32  byte = 0xd0
	CodeMap8    byte = 0xc1
	CodeMap32   byte = 0xd1
	CodeArray8  byte = 0xe0
	CodeArray32 byte = 0xf0
)

// Subcategories are the high nibble of a format code. They fix the layout of
// the bytes that follow, so a decoder can skip a value whose exact type it
// does not know (AMQP 1.0 §1.2, "Format Code").
const (
	subFixed0    = 0x4
	subFixed1    = 0x5
	subFixed2    = 0x6
	subFixed4    = 0x7
	subFixed8    = 0x8
	subFixed16   = 0x9
	subVariable1 = 0xa
	subVariable4 = 0xb
	subCompound1 = 0xc
	subCompound4 = 0xd
	subArray1    = 0xe
	subArray4    = 0xf
)

// fixedWidth returns the number of data bytes after a fixed-width format
// code, and false when the code is not in a fixed-width subcategory.
func fixedWidth(code byte) (int, bool) {
	switch code >> 4 {
	case subFixed0:
		return 0, true
	case subFixed1:
		return 1, true
	case subFixed2:
		return 2, true
	case subFixed4:
		return 4, true
	case subFixed8:
		return 8, true
	case subFixed16:
		return 16, true
	}
	return 0, false
}

// hasExtType reports whether a format code is followed by an ext-type byte:
// a low nibble of 0xF is reserved for extension types (AMQP 1.0 §1.2).
func hasExtType(code byte) bool {
	return code&0x0f == 0x0f && code>>4 >= subFixed0
}
