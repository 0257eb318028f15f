package encoding

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/walbus/walbus/amqpserver/internal/hexbytes"
)

func TestAppendPicksSmallestEncoding(t *testing.T) {
	long := strings.Repeat("x", 256)
	cases := []struct {
		name string
		got  []byte
		want string
	}{
		{"null", AppendNull(nil), "40"},
		{"true", AppendBool(nil, true), "41"},
		{"false", AppendBool(nil, false), "42"},
		{"ubyte 0", AppendUbyte(nil, 0), "50 00"},
		{"ubyte max", AppendUbyte(nil, 255), "50 ff"},
		{"ushort 0", AppendUshort(nil, 0), "60 00 00"},
		{"ushort max", AppendUshort(nil, math.MaxUint16), "60 ff ff"},
		{"uint 0", AppendUint(nil, 0), "43"},
		{"uint 1", AppendUint(nil, 1), "52 01"},
		{"uint 255", AppendUint(nil, 255), "52 ff"},
		{"uint 256", AppendUint(nil, 256), "70 00 00 01 00"},
		{"uint max", AppendUint(nil, math.MaxUint32), "70 ff ff ff ff"},
		{"ulong 0", AppendUlong(nil, 0), "44"},
		{"ulong 255", AppendUlong(nil, 255), "53 ff"},
		{"ulong 256", AppendUlong(nil, 256), "80 00 00 00 00 00 00 01 00"},
		{"ulong max", AppendUlong(nil, math.MaxUint64), "80 ff ff ff ff ff ff ff ff"},
		{"byte min", AppendSignedByte(nil, math.MinInt8), "51 80"},
		{"byte max", AppendSignedByte(nil, math.MaxInt8), "51 7f"},
		{"short min", AppendShort(nil, math.MinInt16), "61 80 00"},
		{"short -1", AppendShort(nil, -1), "61 ff ff"},
		{"int 0", AppendInt(nil, 0), "54 00"},
		{"int -128", AppendInt(nil, -128), "54 80"},
		{"int 127", AppendInt(nil, 127), "54 7f"},
		{"int 128", AppendInt(nil, 128), "71 00 00 00 80"},
		{"int -129", AppendInt(nil, -129), "71 ff ff ff 7f"},
		{"int min", AppendInt(nil, math.MinInt32), "71 80 00 00 00"},
		{"int max", AppendInt(nil, math.MaxInt32), "71 7f ff ff ff"},
		{"long 0", AppendLong(nil, 0), "55 00"},
		{"long -128", AppendLong(nil, -128), "55 80"},
		{"long 255", AppendLong(nil, 255), "81 00 00 00 00 00 00 00 ff"},
		{"long min", AppendLong(nil, math.MinInt64), "81 80 00 00 00 00 00 00 00"},
		{"full long 1", AppendFullLong(nil, 1), "81 00 00 00 00 00 00 00 01"},
		{"float 1", AppendFloat(nil, 1), "72 3f 80 00 00"},
		{"double -2", AppendDouble(nil, -2), "82 c0 00 00 00 00 00 00 00"},
		{"decimal32", AppendDecimal32(nil, Decimal32{1, 2, 3, 4}), "74 01 02 03 04"},
		{"decimal64", AppendDecimal64(nil, Decimal64{1, 2, 3, 4, 5, 6, 7, 8}), "84 01 02 03 04 05 06 07 08"},
		{"decimal128", AppendDecimal128(nil, Decimal128{15: 9}), "94 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 09"},
		{"char heart", AppendChar(nil, '❤'), "73 00 00 27 64"},
		// The spec's own example: 2011-07-26T18:21:03.521Z (essentials §2.2).
		{"timestamp", AppendTimestamp(nil, 1311704463521), "83 00 00 01 31 67 ad b8 a1"},
		{"timestamp negative", AppendTimestamp(nil, -1), "83 ff ff ff ff ff ff ff ff"},
		{"uuid", AppendUUID(nil, UUID{0: 0xab, 15: 0xcd}), "98 ab 00 00 00 00 00 00 00 00 00 00 00 00 00 00 cd"},
		{"binary empty", AppendBinary(nil, nil), "a0 00"},
		{"binary", AppendBinary(nil, []byte{1, 2}), "a0 02 01 02"},
		{"string", AppendString(nil, "hi"), "a1 02 68 69"},
		{"string bytes", AppendStringBytes(nil, []byte("hi")), "a1 02 68 69"},
		{"symbol", AppendSymbol(nil, "ab"), "a3 02 61 62"},
		{"symbol bytes", AppendSymbolBytes(nil, []byte("ab")), "a3 02 61 62"},
		{"descriptor small", AppendDescriptor(nil, 0x10), "00 53 10"},
		{"descriptor big", AppendDescriptor(nil, 0x000000137000000C), "00 80 00 00 00 13 70 00 00 0c"},
		{"descriptor symbolic", AppendSymbolicDescriptor(nil, "a:b"), "00 a3 03 61 3a 62"},
	}
	for _, c := range cases {
		if !bytes.Equal(c.got, hexbytes.Parse(t, c.want)) {
			t.Errorf("%s: got %s, want %s", c.name, hexbytes.Spaced(c.got), c.want)
		}
	}

	// Variable-width values switch to the 32-bit form at 256 bytes.
	for name, got := range map[string][]byte{
		"str32": AppendString(nil, long), "sym32": AppendSymbol(nil, Symbol(long)), "vbin32": AppendBinary(nil, []byte(long)),
	} {
		code := map[string]byte{"str32": CodeStr32, "sym32": CodeSym32, "vbin32": CodeVbin32}[name]
		if got[0] != code || !bytes.Equal(got[1:5], []byte{0, 0, 1, 0}) || len(got) != 5+256 {
			t.Errorf("%s: header % x, length %d", name, got[:5], len(got))
		}
	}
	if got := AppendString(nil, long[:255]); got[0] != CodeStr8 || got[1] != 255 {
		t.Errorf("255-byte string should stay str8, got % x", got[:2])
	}
}

func TestAppendKeepsPrefix(t *testing.T) {
	dst := []byte{0xee}
	dst = AppendUint(dst, 7)
	if !bytes.Equal(dst, []byte{0xee, CodeSmallUint, 7}) {
		t.Fatalf("got % x", dst)
	}
}

func TestEncodersDoNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 4096)
	syms := []Symbol{"a", "bb"}
	uuids := []UUID{{1}, {2}}
	allocs := testing.AllocsPerRun(100, func() {
		b := buf[:0]
		b = AppendNull(b)
		b = AppendBool(b, true)
		b = AppendUbyte(b, 1)
		b = AppendUshort(b, 2)
		b = AppendUint(b, 70000)
		b = AppendUlong(b, 1<<40)
		b = AppendSignedByte(b, -1)
		b = AppendShort(b, -2)
		b = AppendInt(b, -70000)
		b = AppendLong(b, -1<<40)
		b = AppendFloat(b, 1.5)
		b = AppendDouble(b, 2.5)
		b = AppendDecimal128(b, Decimal128{})
		b = AppendChar(b, 'x')
		b = AppendTimestamp(b, 5)
		b = AppendUUID(b, UUID{})
		b = AppendBinary(b, []byte("bin"))
		b = AppendString(b, "str")
		b = AppendSymbol(b, "sym")
		b, l := BeginList(b)
		b = AppendUint(b, 1)
		b = EndList(b, l, 1)
		b, m := BeginMap(b)
		b = AppendSymbol(b, "k")
		b = AppendLong(b, 1)
		b = EndMap(b, m, 1)
		b = AppendSymbolArray(b, syms)
		b = AppendUUIDArray(b, uuids)
		b = AppendLongArray(b, []int64{1, 2})
		b = AppendDescriptor(b, 0x70)
		_ = b
	})
	if allocs != 0 {
		t.Fatalf("encoders allocated %.1f times per run", allocs)
	}
}

func TestTimestampMatchesSpecExample(t *testing.T) {
	got := Timestamp(1311704463521).Time().Format("2006-01-02T15:04:05.000Z07:00")
	if got != "2011-07-26T18:21:03.521Z" {
		t.Fatalf("got %s", got)
	}
	if back := TimestampOf(Timestamp(1311704463521).Time()); back != 1311704463521 {
		t.Fatalf("round trip gave %d", back)
	}
}
