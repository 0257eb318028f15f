package amqpserver

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/message"
	"github.com/walbus/walbus/broker"
)

// withProperties returns raw with its application properties replaced by
// props, in their order (go-amqp writes a Go map's, which is random), of
// any type our encoder writes (go-amqp writes no decimal, char or
// described value).
func withProperties(t testing.TB, raw []byte, props encoding.Map) []byte {
	t.Helper()
	s, err := message.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	set := make([]message.Property, 0, len(props))
	for _, e := range props {
		set = append(set, message.Property{Key: e.Key.(string), Value: e.Value})
	}
	out, err := message.AppendWithApplicationProperties(nil, &s, set)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func decimal64Bits(b uint64) encoding.Decimal64 {
	var d encoding.Decimal64
	binary.BigEndian.PutUint64(d[:], b)
	return d
}

// The system properties come from the AMQP fields Service Bus reads them
// from, and every application property keeps its place and gets the kind
// a filter compares it as.
func TestFilterMessageReadsWhatRulesSee(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	id := amqp.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	raw := marshal(t, &amqp.Message{
		Header: &amqp.MessageHeader{TTL: 90 * time.Second},
		Annotations: amqp.Annotations{"x-opt-scheduled-enqueue-time": at, "x-opt-partition-key": "pk",
			"x-opt-via-partition-key": "vpk"},
		Properties: &amqp.MessageProperties{MessageID: id, CorrelationID: uint64(42), To: ptr("to"),
			Subject: ptr("label"), ReplyTo: ptr("reply"), GroupID: ptr("session"), ReplyToGroupID: ptr("reply-session"),
			ContentType: ptr("application/json")},
		Data: [][]byte{[]byte("the body is never read")},
	})
	uuid := encoding.UUID{0xff, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	props := encoding.Map{
		{Key: "byte", Value: int8(-3)},
		{Key: "ubyte", Value: uint8(200)},
		{Key: "short", Value: int16(-300)},
		{Key: "ushort", Value: uint16(60000)},
		{Key: "int", Value: int32(-70000)},
		{Key: "uint", Value: uint32(4_000_000_000)},
		{Key: "long", Value: int64(-1 << 40)},
		{Key: "ulong", Value: uint64(5)},
		{Key: "huge", Value: uint64(1<<63 + 5)},
		{Key: "float", Value: float32(1.5)},
		{Key: "double", Value: 2.25},
		{Key: "dec32", Value: encoding.Decimal32{0x32, 0x80, 0x00, 0x01}}, // 1
		{Key: "dec64", Value: decimal64Bits(1<<63 | 397<<53 | 15)},        // -1.5
		{Key: "dec64big", Value: decimal64Bits(3<<61 | 398<<51)},          // 2^53, large form
		{Key: "dec128", Value: encoding.Decimal128{0x30, 0x40, 15: 0x07}}, // 7
		{Key: "decinf", Value: decimal64Bits(0x78 << 56)},                 // infinity
		{Key: "char", Value: encoding.Char('é')},
		{Key: "string", Value: "red"},
		{Key: "symbol", Value: encoding.Symbol("sym")},
		{Key: "true", Value: true},
		{Key: "false", Value: false},
		{Key: "time", Value: encoding.TimestampOf(at)},
		{Key: "uuid", Value: uuid},
		{Key: "span", Value: encoding.Described{Descriptor: encoding.Symbol(timespanDescriptor), Value: int64(36_000_000_000)}},
		{Key: "binary", Value: []byte{1, 2}},
		{Key: "list", Value: encoding.List{int32(1), "x"}},
		{Key: "map", Value: encoding.Map{{Key: "k", Value: "v"}}},
		{Key: "array", Value: encoding.Array{Code: encoding.CodeInt, Elements: []any{int32(1), int32(2)}}},
		{Key: "described", Value: encoding.Described{Descriptor: encoding.Symbol("com.microsoft:uri"), Value: "http://x"}},
		{Key: "badspan", Value: encoding.Described{Descriptor: encoding.Symbol(timespanDescriptor), Value: "1h"}},
		{Key: "null", Value: nil},
		{Key: "String", Value: "second of the same name in another case"},
	}
	fm, err := FilterMessage(withProperties(t, raw, props))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want broker.FilterValue
	}{
		{"MessageId", fm.MessageID, broker.StringValue("01020304-0506-0708-090a-0b0c0d0e0f10")},
		{"CorrelationId", fm.CorrelationID, broker.StringValue("42")},
		{"To", fm.To, broker.StringValue("to")},
		{"ReplyTo", fm.ReplyTo, broker.StringValue("reply")},
		{"Label", fm.Label, broker.StringValue("label")},
		{"SessionId", fm.SessionID, broker.StringValue("session")},
		{"ReplyToSessionId", fm.ReplyToSessionID, broker.StringValue("reply-session")},
		{"ContentType", fm.ContentType, broker.StringValue("application/json")},
		{"TimeToLive", fm.TimeToLive, broker.DurationValue(90 * time.Second)},
		{"ScheduledEnqueueTimeUtc", fm.ScheduledEnqueueTimeUtc, broker.TimestampMillis(at.UnixMilli())},
		{"PartitionKey", fm.PartitionKey, broker.StringValue("pk")},
		{"ViaPartitionKey", fm.ViaPartitionKey, broker.StringValue("vpk")},
	} {
		if c.got != c.want {
			t.Errorf("sys.%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	want := []broker.FilterValue{
		broker.IntValue(-3), broker.IntValue(200), broker.IntValue(-300), broker.IntValue(60000),
		broker.IntValue(-70000), broker.IntValue(4_000_000_000), broker.IntValue(-1 << 40), broker.IntValue(5),
		broker.UintValue(1<<63 + 5), broker.DoubleValue(1.5), broker.DoubleValue(2.25),
		broker.DecimalValue(1), broker.DecimalValue(-1.5), broker.DecimalValue(1 << 53), broker.DecimalValue(7),
		broker.OpaqueValue(), broker.StringValue("é"), broker.StringValue("red"), broker.StringValue("sym"),
		broker.BoolValue(true), broker.BoolValue(false), broker.TimestampMillis(at.UnixMilli()),
		broker.UUIDValue(broker.FilterUUID(uuid)), broker.DurationValue(time.Hour),
		broker.OpaqueValue(), broker.OpaqueValue(), broker.OpaqueValue(), broker.OpaqueValue(), broker.OpaqueValue(),
		broker.OpaqueValue(), broker.NullValue(), broker.StringValue("second of the same name in another case"),
	}
	if len(fm.Properties) != len(props) {
		t.Fatalf("%d application properties, want %d: %v", len(fm.Properties), len(props), fm.Properties)
	}
	for i, p := range fm.Properties {
		if p.Name != props[i].Key || p.Value != want[i] {
			t.Errorf("property %d: %s = %v (%v), want %s = %v (%v)", i, p.Name, p.Value, p.Value.Kind(),
				props[i].Key, want[i], want[i].Kind())
		}
	}
}

// Ids of every type are text, as inbound makes a message-id; absent fields
// are null, and a ttl of 0 is no time to live.
func TestFilterMessageIDsAndAbsentFields(t *testing.T) {
	for _, c := range []struct {
		id   any
		want string
	}{{"text", "text"}, {uint64(7), "7"}, {[]byte{0xab, 0x01}, "ab01"}} {
		fm, err := FilterMessage(marshal(t, &amqp.Message{Properties: &amqp.MessageProperties{MessageID: c.id, CorrelationID: c.id}, Value: "v"}))
		if err != nil {
			t.Fatal(err)
		}
		if fm.MessageID != broker.StringValue(c.want) || fm.CorrelationID != broker.StringValue(c.want) {
			t.Errorf("id %#v: %v %v, want %q", c.id, fm.MessageID, fm.CorrelationID, c.want)
		}
	}
	fm, err := FilterMessage(marshal(t, &amqp.Message{Header: &amqp.MessageHeader{Durable: true}, Data: [][]byte{[]byte("x")}}))
	if err != nil {
		t.Fatal(err)
	}
	if fm.MessageID != broker.NullValue() || fm.Label != broker.NullValue() || fm.TimeToLive != broker.NullValue() ||
		fm.ScheduledEnqueueTimeUtc != broker.NullValue() || fm.PartitionKey != broker.NullValue() || fm.Properties != nil {
		t.Errorf("a bare message: %+v", fm)
	}
	// An empty subject is there, and empty.
	fm, err = FilterMessage(marshal(t, &amqp.Message{Properties: &amqp.MessageProperties{Subject: ptr("")}, Value: "v"}))
	if err != nil || fm.Label != broker.StringValue("") {
		t.Errorf("empty subject: %v %v", fm, err)
	}
	if _, err := FilterMessage([]byte{0x00, 0x53, 0x77, 0x40, 0xff}); err == nil {
		t.Error("garbage read as a message")
	}
}

// Decimals in the binary integer encoding, each width, both forms.
func TestDecimalValue(t *testing.T) {
	for _, c := range []struct {
		raw  []byte
		want broker.FilterValue
	}{
		{[]byte{0x32, 0x80, 0x00, 0x01}, broker.DecimalValue(1)},
		{[]byte{0xb2, 0x80, 0x00, 0x0c}, broker.DecimalValue(-12)},
		{[]byte{0x31, 0x80, 0x00, 0x7b}, broker.DecimalValue(1.23)},                 // 123e-2
		{[]byte{0x6c, 0xb8, 0x96, 0x7f}, broker.DecimalValue(9999999)},              // large form
		{[]byte{0x6c, 0xff, 0xff, 0xff}, broker.DecimalValue(0)},                    // non-canonical coefficient
		{binary.BigEndian.AppendUint64(nil, 398<<53|5), broker.DecimalValue(5)},     // decimal64
		{binary.BigEndian.AppendUint64(nil, 0x7c<<56), broker.OpaqueValue()},        // NaN
		{append([]byte{0x30, 0x3e, 14: 0}, 0x19), broker.DecimalValue(2.5)},         // decimal128: 25e-1
		{append([]byte{0x5f, 0xfe, 14: 0}, 0x01), broker.DecimalValue(math.Inf(1))}, // 1e6111, beyond a double
		{append([]byte{0x00, 0x00, 14: 0}, 0x01), broker.DecimalValue(0)},           // 1e-6176: 0
		{append([]byte{0x78}, make([]byte, 15)...), broker.OpaqueValue()},           // decimal128 infinity
		{append([]byte{0x30, 0x41}, bytesOf(0xff, 14)...), broker.DecimalValue(0)},  // 2^113-1: beyond 34 digits
		{append([]byte{0x30, 0x40, 0x00, 0x01}, bytesOf(0, 12)...), broker.DecimalValue(1 << 96)},
	} {
		var got broker.FilterValue
		switch len(c.raw) {
		case 4:
			got = decimalValue(c.raw, 8, 101, 7)
		case 8:
			got = decimalValue(c.raw, 10, 398, 16)
		case 16:
			got = decimalValue(c.raw, 14, 6176, 34)
		default:
			continue
		}
		if got != c.want {
			t.Errorf("% x: %v (%v), want %v", c.raw, got, got.Kind(), c.want)
		}
	}
}

func bytesOf(b byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = b
	}
	return out
}
