package encoding

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
)

// amqpValuePrefix is the amqp-value section descriptor (AMQP 1.0 §3.2.8):
// go-amqp's Message.Value travels as one value after it.
var amqpValuePrefix = []byte{0x00, 0x53, 0x77}

// TestGoAMQPEncodesWhatWeDecode marshals values with go-amqp and checks that
// ReadAny yields the same AMQP types.
func TestGoAMQPEncodesWhatWeDecode(t *testing.T) {
	when := time.Date(2000, 1, 1, 1, 2, 3, 4_000_000, time.UTC)
	uuid := amqp.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	cases := []struct {
		in   any
		want any
	}{
		{true, true},
		{uint8(200), uint8(200)},
		{uint16(65000), uint16(65000)},
		{uint32(70000), uint32(70000)},
		{uint32(0), uint32(0)},
		{uint64(1 << 40), uint64(1 << 40)},
		{int8(-101), int8(-101)},
		{int16(-300), int16(-300)},
		{int32(-400), int32(-400)},
		{int64(-400), int64(-400)},
		{400, int64(400)},
		{'g', int32('g')},
		{float32(1.25), float32(1.25)},
		{400.1, 400.1},
		{"hello world", "hello world"},
		{amqp.Symbol("sym"), Symbol("sym")},
		{when, TimestampOf(when)},
		{uuid, UUID(uuid)},
		{[]byte{1, 2, 3}, []byte{1, 2, 3}},
		{[]any{int64(1), "a", nil}, List{int64(1), "a", nil}},
		{map[string]any{"k": int32(1)}, Map{{Key: "k", Value: int32(1)}}},
		{map[amqp.Symbol]any{"k": "v"}, Map{{Key: Symbol("k"), Value: "v"}}},
		{[]int64{1, -1}, Array{Code: CodeLong, Elements: []any{int64(1), int64(-1)}}},
		{[]int32{5}, Array{Code: CodeInt, Elements: []any{int32(5)}}},
		{[]uint32{5}, Array{Code: CodeUint, Elements: []any{uint32(5)}}},
		{[]uint64{5}, Array{Code: CodeUlong, Elements: []any{uint64(5)}}},
		{[]bool{true, false}, Array{Code: CodeBoolean, Elements: []any{true, false}}},
		{[]float64{1.5}, Array{Code: CodeDouble, Elements: []any{1.5}}},
		{[]string{"a", "b"}, Array{Code: CodeStr8, Elements: []any{"a", "b"}}},
		{[]amqp.Symbol{"a"}, Array{Code: CodeSym8, Elements: []any{Symbol("a")}}},
		{[][]byte{{1}}, Array{Code: CodeVbin8, Elements: []any{[]byte{1}}}},
		{[]time.Time{when}, Array{Code: CodeTimestamp, Elements: []any{TimestampOf(when)}}},
		{[]amqp.UUID{uuid}, Array{Code: CodeUUID, Elements: []any{UUID(uuid)}}},
	}
	for _, c := range cases {
		m := amqp.Message{Value: c.in}
		enc, err := m.MarshalBinary()
		if err != nil {
			t.Fatalf("go-amqp marshal %#v: %v", c.in, err)
		}
		if !bytes.HasPrefix(enc, amqpValuePrefix) {
			t.Fatalf("unexpected section % x", enc)
		}
		r := NewReader(enc[len(amqpValuePrefix):])
		got, err := r.ReadAny(Limits{})
		if err != nil {
			t.Errorf("%#v (% x): %v", c.in, enc, err)
			continue
		}
		if !reflect.DeepEqual(normalise(got), normalise(c.want)) {
			t.Errorf("%#v: ReadAny gave %#v, want %#v", c.in, got, c.want)
		}
	}
}

// TestGoAMQPDecodesWhatWeEncode checks the other direction: go-amqp's
// decoder turns our encodings into the Go types its users (azservicebus)
// assert on.
func TestGoAMQPDecodesWhatWeEncode(t *testing.T) {
	when := time.Date(2000, 1, 1, 1, 2, 3, 0, time.UTC)
	cases := []struct {
		in   any
		want any
	}{
		{int64(7), int64(7)},
		{int64(-1 << 40), int64(-1 << 40)},
		{int32(-1), int32(-1)},
		{uint32(300), uint32(300)},
		{uint64(0), uint64(0)},
		{uint8(1), uint8(1)},
		{TimestampOf(when), when},
		{UUID{1}, amqp.UUID{1}},
		{Symbol("s"), "s"},
		{"s", "s"},
		{[]byte{1}, []byte{1}},
		{List{int64(1), "x"}, []any{int64(1), "x"}},
		{Map{{Key: "statusCode", Value: int32(200)}, {Key: Symbol("k"), Value: true}}, map[string]any{"statusCode": int32(200), "k": true}},
		{Array{Code: CodeTimestamp, Elements: []any{TimestampOf(when)}}, []time.Time{when}},
		{Array{Code: CodeLong, Elements: []any{int64(1), int64(2)}}, []int64{1, 2}},
		{Array{Code: CodeUUID, Elements: []any{UUID{2}}}, []amqp.UUID{{2}}},
		{Array{Code: CodeStr8, Elements: []any{"a"}}, []string{"a"}},
		{encoded(AppendLongArray(nil, []int64{3})), []int64{3}},
		{encoded(AppendTimestampArray(nil, []Timestamp{TimestampOf(when)})), []time.Time{when}},
		{encoded(AppendUUIDArray(nil, []UUID{{3}})), []amqp.UUID{{3}}},
		{encoded(AppendStringArray(nil, []string{"x"})), []string{"x"}},
	}
	for _, c := range cases {
		enc := append([]byte{}, amqpValuePrefix...)
		if raw, ok := c.in.(rawValue); ok {
			enc = append(enc, raw...)
		} else {
			var err error
			if enc, err = AppendAny(enc, c.in); err != nil {
				t.Fatal(err)
			}
		}
		var m amqp.Message
		if err := m.UnmarshalBinary(enc); err != nil {
			t.Errorf("%#v: go-amqp: %v", c.in, err)
			continue
		}
		got := m.Value
		if tm, ok := got.(time.Time); ok {
			got = tm.UTC()
		}
		if ts, ok := got.([]time.Time); ok {
			for i := range ts {
				ts[i] = ts[i].UTC()
			}
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%#v: go-amqp gave %#v (%T), want %#v", c.in, got, got, c.want)
		}
	}
}

// rawValue marks already-encoded bytes in a test table.
type rawValue []byte

func encoded(b []byte) rawValue { return rawValue(b) }
