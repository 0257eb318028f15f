package encoding

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/amqpserver/internal/hexbytes"
)

// sample holds one value of every type in the ReadAny mapping, nested
// compounds included.
func sample() []any {
	return []any{
		nil, true, false,
		uint8(0), uint8(255), uint16(65535),
		uint32(0), uint32(255), uint32(256), uint32(math.MaxUint32),
		uint64(0), uint64(255), uint64(256), uint64(math.MaxUint64),
		int8(-128), int16(-32768),
		int32(-128), int32(127), int32(128), int32(math.MinInt32),
		int64(-128), int64(math.MaxInt64), int64(math.MinInt64),
		float32(1.5), float64(-0.25),
		Decimal32{1, 2, 3, 4}, Decimal64{7: 3}, Decimal128{0: 7},
		Char('g'), Char('❤'),
		Timestamp(0), Timestamp(-62135596800000), Timestamp(253402300800000), Timestamp(math.MaxInt64),
		UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		[]byte{}, []byte{0, 1, 2}, bytes.Repeat([]byte{9}, 300),
		"", "hello", strings.Repeat("é", 200),
		Symbol("x-opt-sequence-number"),
		List{}, List{uint32(1), "two", List{Symbol("three")}},
		Map{},
		Map{{Key: Symbol("k"), Value: int64(1)}, {Key: "s", Value: nil}, {Key: uint64(7), Value: Map{{Key: int32(1), Value: true}}}},
		Array{Code: CodeUUID, Elements: []any{UUID{1}, UUID{2}}},
		Array{Code: CodeLong, Elements: []any{int64(1), int64(-1)}},
		Array{Code: CodeTimestamp, Elements: []any{Timestamp(1), Timestamp(2)}},
		Array{Code: CodeSym8, Elements: []any{Symbol("a"), Symbol("b")}},
		Array{Code: CodeSym32, Elements: []any{Symbol(strings.Repeat("s", 256))}},
		Array{Code: CodeStr8, Elements: []any{}},
		Array{Code: CodeBoolean, Elements: []any{true, false}},
		Array{Code: CodeNull, Elements: []any{nil, nil, nil}},
		Array{Code: CodeUint, Elements: []any{uint32(0), uint32(1 << 20)}},
		Array{Code: CodeList32, Elements: []any{List{int32(1)}, List{}}},
		Array{Code: CodeMap32, Elements: []any{Map{{Key: "a", Value: int64(1)}}, Map{}}},
		Array{Code: CodeArray32, Elements: []any{Array{Code: CodeUbyte, Elements: []any{uint8(1)}}, Array{Code: CodeStr8, Elements: []any{"x"}}}},
		Array{Code: CodeStr8, Descriptor: uint64(0x137000000C), Elements: []any{"a", "b"}},
		Array{Code: CodeList32, Descriptor: Symbol("amqp:accepted:list"), Elements: []any{List{}}},
		Described{Descriptor: uint64(0x000000137000000C), Value: "session-1"},
		Described{Descriptor: Symbol("apache.org:selector-filter:string"), Value: "a = 1"},
		Described{Descriptor: uint64(0x24), Value: List{}},
	}
}

func TestAnyRoundTrip(t *testing.T) {
	for _, v := range sample() {
		enc, err := AppendAny(nil, v)
		if err != nil {
			t.Errorf("%#v: %v", v, err)
			continue
		}
		r := NewReader(enc)
		got, err := r.ReadAny(Limits{})
		if err != nil {
			t.Errorf("%#v (% x): %v", v, enc, err)
			continue
		}
		if r.Len() != 0 {
			t.Errorf("%#v: %d bytes left", v, r.Len())
		}
		if !reflect.DeepEqual(normalise(got), normalise(v)) {
			t.Errorf("round trip of %#v gave %#v", v, got)
		}
		// Skip must agree with ReadAny on where the value ends.
		s := NewReader(enc)
		if err := s.Skip(); err != nil || s.Len() != 0 {
			t.Errorf("%#v: Skip left %d bytes: %v", v, s.Len(), err)
		}
	}
}

// normalise replaces the array codes a decoder may legitimately report
// (the encoder picks the canonical code of the type) so values compare.
func normalise(v any) any {
	switch x := v.(type) {
	case Array:
		code, _ := arrayElementCode(x.Code, x.Elements)
		elems := make([]any, len(x.Elements))
		for i, e := range x.Elements {
			elems[i] = normalise(e)
		}
		return Array{Code: code, Descriptor: x.Descriptor, Elements: elems}
	case List:
		out := make(List, len(x))
		for i, e := range x {
			out[i] = normalise(e)
		}
		return out
	case Map:
		out := make(Map, len(x))
		for i, e := range x {
			out[i] = MapEntry{Key: normalise(e.Key), Value: normalise(e.Value)}
		}
		return out
	case Described:
		return Described{Descriptor: normalise(x.Descriptor), Value: normalise(x.Value)}
	}
	return v
}

func TestReadAnyKeepsEncodingTypes(t *testing.T) {
	// Compact encodings decode to the type, not the encoding.
	for _, c := range []struct {
		hex  string
		want any
	}{
		{"43", uint32(0)}, {"52 05", uint32(5)}, {"44", uint64(0)}, {"53 05", uint64(5)},
		{"54 ff", int32(-1)}, {"55 ff", int64(-1)}, {"56 01", true}, {"45", List{}},
		{"c0 01 00", List{}}, {"d1 00 00 00 04 00 00 00 00", Map{}},
		{"e0 02 02 41", Array{Code: CodeTrue, Elements: []any{true, true}}},
		{"e0 02 02 43", Array{Code: CodeUint0, Elements: []any{uint32(0), uint32(0)}}},
		{"e0 04 02 52 01 02", Array{Code: CodeSmallUint, Elements: []any{uint32(1), uint32(2)}}},
	} {
		r := NewReader(hexbytes.Parse(t, c.hex))
		got, err := r.ReadAny(Limits{})
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %#v, %v; want %#v", c.hex, got, err, c.want)
		}
	}
}

func TestAppendAnyConveniences(t *testing.T) {
	when := time.Date(2000, 1, 1, 1, 2, 3, 0, time.UTC)
	for _, c := range []struct {
		v    any
		want any
	}{
		{int(400), int64(400)},
		{uint(7), uint64(7)},
		{when, TimestampOf(when)},
		{[]any{"a"}, List{"a"}},
	} {
		enc, err := AppendAny(nil, c.v)
		if err != nil {
			t.Fatal(err)
		}
		r := NewReader(enc)
		got, err := r.ReadAny(Limits{})
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%#v: got %#v, %v", c.v, got, err)
		}
	}
	for _, bad := range []any{
		struct{}{}, map[string]any{}, complex(1, 2),
		Array{Code: CodeUUID, Elements: []any{"not a uuid"}},
		Array{Code: 0x57, Elements: nil},
		List{make(chan int)},
	} {
		if _, err := AppendAny(nil, bad); !errors.Is(err, ErrUnsupportedValue) {
			t.Errorf("%#v: got %v, want ErrUnsupportedValue", bad, err)
		}
	}
}

func TestReadAnyCopiesBinary(t *testing.T) {
	in := hexbytes.Parse(t, "a0 02 01 02")
	r := NewReader(in)
	v, _ := r.ReadAny(Limits{})
	in[2] = 0xff
	if !bytes.Equal(v.([]byte), []byte{1, 2}) {
		t.Fatal("ReadAny aliased the input")
	}
}

func TestMapHelpers(t *testing.T) {
	m := Map{{Key: Symbol("x-opt-a"), Value: 1}, {Key: "b", Value: 2}, {Key: uint64(3), Value: 3}, {Key: []byte{1}, Value: 4}}
	if v, ok := m.Get("x-opt-a"); !ok || v != 1 {
		t.Fatal("symbol key not found by name")
	}
	if v, ok := m.Get("b"); !ok || v != 2 {
		t.Fatal("string key not found")
	}
	if _, ok := m.Get("c"); ok {
		t.Fatal("found a missing key")
	}
	m = m.Set("b", 20)
	m = m.Set(Symbol("b"), 21)
	m = m.Set(uint64(3), 30)
	m = m.Set([]byte{1}, 40)
	m = m.Set(List{}, 50)
	m = m.Set("new", 60)
	want := Map{{Key: Symbol("x-opt-a"), Value: 1}, {Key: "b", Value: 21}, {Key: uint64(3), Value: 30}, {Key: []byte{1}, Value: 40}, {Key: List{}, Value: 50}, {Key: "new", Value: 60}}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %#v", m)
	}
}

func TestUUIDString(t *testing.T) {
	u := UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	if got := u.String(); got != "01020304-0506-0708-090a-0b0c0d0e0f10" {
		t.Fatal(got)
	}
}
