package encoding

import (
	"errors"
	"math"
	"testing"

	"github.com/walbus/walbus/amqpserver/internal/hexbytes"
)

// readAll runs read on b and checks that it consumed every byte.
func readAll[T comparable](t *testing.T, name string, b []byte, read func(*Reader) (T, error), want T) {
	t.Helper()
	r := NewReader(b)
	got, err := read(&r)
	if err != nil {
		t.Errorf("%s on % x: %v", name, b, err)
		return
	}
	if got != want {
		t.Errorf("%s on % x: got %v, want %v", name, b, got, want)
	}
	if r.Len() != 0 {
		t.Errorf("%s on % x: %d bytes left", name, b, r.Len())
	}
}

func TestReadersAcceptEveryEncoding(t *testing.T) {
	type u32 = uint32
	for _, c := range []struct {
		hex  string
		want bool
	}{{"41", true}, {"42", false}, {"56 01", true}, {"56 00", false}} {
		readAll(t, "ReadBool", hexbytes.Parse(t, c.hex), (*Reader).ReadBool, c.want)
	}
	readAll(t, "ReadUbyte", hexbytes.Parse(t, "50 ff"), (*Reader).ReadUbyte, uint8(255))
	readAll(t, "ReadUshort", hexbytes.Parse(t, "60 01 02"), (*Reader).ReadUshort, uint16(0x102))
	readAll(t, "ReadUshort(ubyte)", hexbytes.Parse(t, "50 07"), (*Reader).ReadUshort, uint16(7))
	for _, c := range []struct {
		hex  string
		want u32
	}{{"43", 0}, {"52 07", 7}, {"70 00 00 01 00", 256}, {"50 07", 7}, {"60 01 00", 256}} {
		readAll(t, "ReadUint", hexbytes.Parse(t, c.hex), (*Reader).ReadUint, c.want)
	}
	for _, c := range []struct {
		hex  string
		want uint64
	}{
		{"44", 0}, {"53 ff", 255}, {"80 ff ff ff ff ff ff ff ff", math.MaxUint64},
		{"43", 0}, {"52 09", 9}, {"70 ff ff ff ff", math.MaxUint32}, {"50 01", 1}, {"60 00 02", 2},
	} {
		readAll(t, "ReadUlong", hexbytes.Parse(t, c.hex), (*Reader).ReadUlong, c.want)
	}
	readAll(t, "ReadSignedByte", hexbytes.Parse(t, "51 80"), (*Reader).ReadSignedByte, int8(-128))
	readAll(t, "ReadShort", hexbytes.Parse(t, "61 80 00"), (*Reader).ReadShort, int16(math.MinInt16))
	readAll(t, "ReadShort(byte)", hexbytes.Parse(t, "51 ff"), (*Reader).ReadShort, int16(-1))
	for _, c := range []struct {
		hex  string
		want int32
	}{{"54 80", -128}, {"71 80 00 00 00", math.MinInt32}, {"51 fe", -2}, {"61 ff fe", -2}} {
		readAll(t, "ReadInt", hexbytes.Parse(t, c.hex), (*Reader).ReadInt, c.want)
	}
	for _, c := range []struct {
		hex  string
		want int64
	}{
		{"55 ff", -1}, {"81 7f ff ff ff ff ff ff ff", math.MaxInt64}, {"54 05", 5},
		{"71 ff ff ff ff", -1}, {"51 80", -128}, {"61 00 01", 1},
	} {
		readAll(t, "ReadLong", hexbytes.Parse(t, c.hex), (*Reader).ReadLong, c.want)
	}
	readAll(t, "ReadFloat", hexbytes.Parse(t, "72 3f 80 00 00"), (*Reader).ReadFloat, float32(1))
	readAll(t, "ReadDouble", hexbytes.Parse(t, "82 c0 00 00 00 00 00 00 00"), (*Reader).ReadDouble, float64(-2))
	readAll(t, "ReadDecimal32", hexbytes.Parse(t, "74 01 02 03 04"), (*Reader).ReadDecimal32, Decimal32{1, 2, 3, 4})
	readAll(t, "ReadDecimal64", hexbytes.Parse(t, "84 01 02 03 04 05 06 07 08"), (*Reader).ReadDecimal64, Decimal64{1, 2, 3, 4, 5, 6, 7, 8})
	readAll(t, "ReadDecimal128", hexbytes.Parse(t, "94 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 09"), (*Reader).ReadDecimal128, Decimal128{15: 9})
	readAll(t, "ReadChar", hexbytes.Parse(t, "73 00 00 27 64"), (*Reader).ReadChar, Char('❤'))
	readAll(t, "ReadTimestamp", hexbytes.Parse(t, "83 ff ff ff ff ff ff ff fe"), (*Reader).ReadTimestamp, Timestamp(-2))
	readAll(t, "ReadUUID", hexbytes.Parse(t, "98 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 02"), (*Reader).ReadUUID, UUID{0: 1, 15: 2})
	readAll(t, "ReadString(str8)", hexbytes.Parse(t, "a1 02 68 69"), (*Reader).ReadString, "hi")
	readAll(t, "ReadString(str32)", hexbytes.Parse(t, "b1 00 00 00 02 68 69"), (*Reader).ReadString, "hi")
	readAll(t, "ReadSymbol(sym8)", hexbytes.Parse(t, "a3 01 78"), (*Reader).ReadSymbol, Symbol("x"))
	readAll(t, "ReadSymbol(sym32)", hexbytes.Parse(t, "b3 00 00 00 01 78"), (*Reader).ReadSymbol, Symbol("x"))
	str := func(r *Reader) (string, error) { b, err := r.ReadBinary(); return string(b), err }
	readAll(t, "ReadBinary(vbin8)", hexbytes.Parse(t, "a0 01 ff"), str, "\xff")
	readAll(t, "ReadBinary(vbin32)", hexbytes.Parse(t, "b0 00 00 00 01 ff"), str, "\xff")
	text := func(r *Reader) (string, error) { b, err := r.ReadStringOrSymbolBytes(); return string(b), err }
	readAll(t, "ReadStringOrSymbolBytes(sym)", hexbytes.Parse(t, "a3 01 78"), text, "x")
	readAll(t, "ReadStringOrSymbolBytes(str)", hexbytes.Parse(t, "b1 00 00 00 01 78"), text, "x")
}

func TestReadersRejectOtherTypes(t *testing.T) {
	cases := []struct {
		name string
		hex  string
		read func(*Reader) error
	}{
		{"bool from uint", "43", func(r *Reader) error { _, err := r.ReadBool(); return err }},
		{"bool byte 2", "56 02", func(r *Reader) error { _, err := r.ReadBool(); return err }},
		{"ubyte from smalluint", "52 01", func(r *Reader) error { _, err := r.ReadUbyte(); return err }},
		{"ushort from uint", "52 01", func(r *Reader) error { _, err := r.ReadUshort(); return err }},
		{"uint from ulong", "53 01", func(r *Reader) error { _, err := r.ReadUint(); return err }},
		{"uint from int", "54 01", func(r *Reader) error { _, err := r.ReadUint(); return err }},
		{"ulong from long", "55 01", func(r *Reader) error { _, err := r.ReadUlong(); return err }},
		{"int from long", "55 01", func(r *Reader) error { _, err := r.ReadInt(); return err }},
		{"long from ulong", "53 01", func(r *Reader) error { _, err := r.ReadLong(); return err }},
		{"string from symbol", "a3 01 78", func(r *Reader) error { _, err := r.ReadString(); return err }},
		{"symbol from string", "a1 01 78", func(r *Reader) error { _, err := r.ReadSymbol(); return err }},
		{"timestamp from long", "81 00 00 00 00 00 00 00 00", func(r *Reader) error { _, err := r.ReadTimestamp(); return err }},
		{"uuid truncated", "98 01 02", func(r *Reader) error { _, err := r.ReadUUID(); return err }},
		{"str8 truncated", "a1 05 68", func(r *Reader) error { _, err := r.ReadString(); return err }},
		{"str32 huge", "b1 ff ff ff ff 68", func(r *Reader) error { _, err := r.ReadString(); return err }},
		{"empty", "", func(r *Reader) error { _, err := r.ReadUint(); return err }},
		{"list from map", "c1 01 00", func(r *Reader) error { _, _, err := r.ReadListHeader(); return err }},
		{"odd map", "c1 02 01 40", func(r *Reader) error { _, _, err := r.ReadMapHeader(); return err }},
		{"list count beyond size", "c0 02 05 40", func(r *Reader) error { _, _, err := r.ReadListHeader(); return err }},
		{"list32 size beyond data", "d0 00 00 01 00 00 00 00 01 40", func(r *Reader) error { _, _, err := r.ReadListHeader(); return err }},
		{"list8 size zero", "c0 00 00", func(r *Reader) error { _, _, err := r.ReadListHeader(); return err }},
		{"array without constructor", "e0 01 00", func(r *Reader) error { _, err := r.ReadArrayHeader(); return err }},
		{"array count beyond size", "e0 03 05 98 00", func(r *Reader) error { _, err := r.ReadArrayHeader(); return err }},
		{"descriptor of string type", "00 a1 01 78 45", func(r *Reader) error { _, err := r.ReadDescriptor(); return err }},
		{"descriptor missing", "45", func(r *Reader) error { _, err := r.ReadDescriptor(); return err }},
	}
	for _, c := range cases {
		r := NewReader(hexbytes.Parse(t, c.hex))
		err := c.read(&r)
		if err == nil {
			t.Errorf("%s: accepted", c.name)
			continue
		}
		if !errors.Is(err, ErrDecode) {
			t.Errorf("%s: error %v does not match ErrDecode", c.name, err)
		}
	}
}

func TestReadStringsDoNotCopy(t *testing.T) {
	b := hexbytes.Parse(t, "a1 02 68 69")
	r := NewReader(b)
	s, err := r.ReadStringBytes()
	if err != nil {
		t.Fatal(err)
	}
	b[2] = 'H'
	if string(s) != "Hi" {
		t.Fatalf("ReadStringBytes copied: %q", s)
	}
	if cap(s) != 2 {
		t.Fatalf("sub-slice capacity %d lets appends overwrite the input", cap(s))
	}
}

func TestReadDescriptor(t *testing.T) {
	for _, c := range []struct {
		hex  string
		want Descriptor
	}{
		{"00 53 10 45", Descriptor{Code: 0x10}},
		{"00 80 00 00 00 13 70 00 00 0c 45", Descriptor{Code: 0x137000000C}},
		{"00 44 45", Descriptor{Code: 0}},
	} {
		r := NewReader(hexbytes.Parse(t, c.hex))
		d, err := r.ReadDescriptor()
		if err != nil || d.Code != c.want.Code || d.Symbolic {
			t.Errorf("%s: got %+v, %v", c.hex, d, err)
		}
		if code, _ := r.PeekCode(); code != CodeList0 {
			t.Errorf("%s: not left at the described value", c.hex)
		}
	}
	r := NewReader(append([]byte{0, CodeSym8, 14}, "amqp:open:list\x45"...))
	d, err := r.ReadDescriptor()
	if err != nil || !d.Symbolic || string(d.Name) != "amqp:open:list" {
		t.Fatalf("symbolic: %+v %v", d, err)
	}
}

func TestReadSymbolsAcceptsOneOrMany(t *testing.T) {
	for _, c := range []struct {
		hex  string
		want []Symbol
	}{
		{"40", nil},
		{"a3 01 78", []Symbol{"x"}},
		{"e0 06 02 a3 01 78 01 79", []Symbol{"x", "y"}},
		{"f0 00 00 00 0e 00 00 00 02 b3 00 00 00 01 78 00 00 00 00", []Symbol{"x", ""}},
		{"e0 02 00 a3", nil},
	} {
		r := NewReader(hexbytes.Parse(t, c.hex))
		got, err := r.ReadSymbols(nil)
		if err != nil || len(got) != len(c.want) || r.Len() != 0 {
			t.Errorf("%s: got %q, %v, %d left", c.hex, got, err, r.Len())
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: got %q", c.hex, got)
			}
		}
	}
	for _, bad := range []string{"a1 01 78", "e0 03 01 a1 00", "e0 04 01 a3 05 78"} {
		r := NewReader(hexbytes.Parse(t, bad))
		if _, err := r.ReadSymbols(nil); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

func TestTryNullAndSeek(t *testing.T) {
	r := NewReader(hexbytes.Parse(t, "40 c0 03 02 43 43 52 01"))
	if !r.TryNull() || r.TryNull() {
		t.Fatal("TryNull should consume exactly one null")
	}
	count, end, err := r.ReadListHeader()
	if err != nil || count != 2 || end != 6 {
		t.Fatalf("list header: %d %d %v", count, end, err)
	}
	if err := r.Seek(end); err != nil {
		t.Fatal(err)
	}
	if v, err := r.ReadUint(); err != nil || v != 1 {
		t.Fatalf("after seek: %d %v", v, err)
	}
	if err := r.Seek(100); err == nil {
		t.Fatal("seek past the end accepted")
	}
}
