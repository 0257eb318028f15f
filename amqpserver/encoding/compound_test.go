package encoding

import (
	"bytes"
	"testing"

	"github.com/walbus/walbus/amqpserver/internal/hexbytes"
)

func TestEndListChoosesWidth(t *testing.T) {
	dst, start := BeginList([]byte{0xee})
	if got := EndList(dst, start, 0); !bytes.Equal(got, []byte{0xee, CodeList0}) {
		t.Fatalf("empty list: % x", got)
	}

	// 254 bytes of items make size 255: the largest list8.
	dst, start = BeginList(nil)
	dst = AppendBinary(dst, make([]byte, 252))
	got := EndList(dst, start, 1)
	if got[0] != CodeList8 || got[1] != 255 || got[2] != 1 || len(got) != 3+254 {
		t.Fatalf("list8 boundary: % x..., len %d", got[:3], len(got))
	}

	dst, start = BeginList(nil)
	dst = AppendBinary(dst, make([]byte, 253))
	got = EndList(dst, start, 1)
	if !bytes.Equal(got[:9], []byte{CodeList32, 0, 0, 1, 3, 0, 0, 0, 1}) || len(got) != 9+255 {
		t.Fatalf("list32 boundary: % x, len %d", got[:9], len(got))
	}

	// 256 items do not fit an 8-bit count even when the bytes would.
	dst, start = BeginList(nil)
	for range 256 {
		dst = AppendNull(dst)
	}
	got = EndList(dst, start, 256)
	if !bytes.Equal(got[:9], []byte{CodeList32, 0, 0, 1, 4, 0, 0, 1, 0}) {
		t.Fatalf("256 items: % x", got[:9])
	}
	r := NewReader(got)
	count, end, err := r.ReadListHeader()
	if err != nil || count != 256 || end != len(got) {
		t.Fatalf("read back: %d %d %v", count, end, err)
	}
}

func TestEndMapCountsItems(t *testing.T) {
	dst, start := BeginMap(nil)
	dst = AppendSymbol(dst, "k")
	dst = AppendUint(dst, 1)
	got := EndMap(dst, start, 1)
	if !bytes.Equal(got, hexbytes.Parse(t, "c1 06 02 a3 01 6b 52 01")) {
		t.Fatalf("got %s", hexbytes.Spaced(got))
	}
	dst, start = BeginMap(nil)
	if got := EndMap(dst, start, 0); !bytes.Equal(got, hexbytes.Parse(t, "c1 01 00")) {
		t.Fatalf("empty map: %s", hexbytes.Spaced(got))
	}
}

// The array example from AMQP 1.0 part 1, Figure 1.19.
func TestSpecArrayExample(t *testing.T) {
	want := append(append([]byte{0xe0, 0x25, 0x02, 0xa1, 0x0e}, "Rob J. Godfrey"...), append([]byte{0x13}, "Rafael H. Schloming"...)...)
	r := NewReader(want)
	v, err := r.ReadAny(Limits{})
	if err != nil {
		t.Fatal(err)
	}
	a, ok := v.(Array)
	if !ok || a.Code != CodeStr8 || len(a.Elements) != 2 || a.Elements[1] != "Rafael H. Schloming" {
		t.Fatalf("decoded %#v", v)
	}
	got, err := AppendAny(nil, a)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("re-encoded %s, %v", hexbytes.Spaced(got), err)
	}
	if got := AppendStringArray(nil, []string{"Rob J. Godfrey", "Rafael H. Schloming"}); !bytes.Equal(got, want) {
		t.Fatalf("AppendStringArray %s", hexbytes.Spaced(got))
	}
}

func TestTypedArrays(t *testing.T) {
	cases := []struct {
		name string
		got  []byte
		want string
	}{
		{"symbols", AppendSymbolArray(nil, []Symbol{"ANONYMOUS", "PLAIN"}), "e0 12 02 a3 09 41 4e 4f 4e 59 4d 4f 55 53 05 50 4c 41 49 4e"},
		{"empty symbols", AppendSymbolArray(nil, nil), "e0 02 00 a3"},
		{"uuids", AppendUUIDArray(nil, []UUID{{15: 1}}), "e0 12 01 98 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01"},
		{"longs", AppendLongArray(nil, []int64{-1}), "e0 0a 01 81 ff ff ff ff ff ff ff ff"},
		{"timestamps", AppendTimestampArray(nil, []Timestamp{1}), "e0 0a 01 83 00 00 00 00 00 00 00 01"},
	}
	for _, c := range cases {
		if !bytes.Equal(c.got, hexbytes.Parse(t, c.want)) {
			t.Errorf("%s: got %s, want %s", c.name, hexbytes.Spaced(c.got), c.want)
		}
	}
	long := make([]byte, 256)
	got := AppendSymbolArray(nil, []Symbol{"a", Symbol(long)})
	if got[0] != CodeArray32 || got[9] != CodeSym32 {
		t.Fatalf("a 256-byte symbol needs sym32 elements: % x", got[:10])
	}
	r := NewReader(got)
	syms, err := r.ReadSymbols(nil)
	if err != nil || len(syms) != 2 || syms[0] != "a" || len(syms[1]) != 256 {
		t.Fatalf("read back %d symbols, %v", len(syms), err)
	}
}
