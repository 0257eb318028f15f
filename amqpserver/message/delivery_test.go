package message

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	"github.com/walbus/walbus/amqpserver/encoding"
)

func brokerDelivery(enqueued, lockedUntil time.Time) *Delivery {
	return &Delivery{
		DeliveryCount: 2,
		TTL:           60000, HasTTL: true,
		LockToken: encoding.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, HasLockToken: true,
		Annotations: []Annotation{
			{Key: AnnotationSequenceNumber, Value: LongValue(5)},
			{Key: AnnotationEnqueueSequenceNumber, Value: LongValue(1 << 40)},
			{Key: AnnotationEnqueuedTime, Value: TimestampValue(encoding.TimestampOf(enqueued))},
			{Key: AnnotationLockedUntil, Value: TimestampValue(encoding.TimestampOf(lockedUntil))},
			{Key: AnnotationMessageState, Value: IntValue(1)},
			{Key: AnnotationDeadLetterSource, Value: StringValue("orders")},
		},
	}
}

// TestDeliveryReadsInGoAMQP builds a delivery from a client's message and
// checks go-amqp hands azservicebus the exact Go types it asserts
// (message.go newReceivedMessage: .(int64), .(time.Time)) and the client's
// properties and application properties unchanged.
func TestDeliveryReadsInGoAMQP(t *testing.T) {
	sent := marshal(t, clientMessage())
	s := mustParse(t, sent)
	enqueued := time.Date(2024, 5, 6, 7, 8, 9, 123_000_000, time.UTC)
	lockedUntil := enqueued.Add(time.Minute)
	out, err := AppendDelivery(nil, &s, brokerDelivery(enqueued, lockedUntil))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(out, s.Bare()) || !bytes.HasSuffix(out, s.Bare()) {
		t.Fatal("bare message not copied unchanged")
	}
	got := unmarshal(t, out)
	original := unmarshal(t, sent)

	if *got.Header != (amqp.MessageHeader{Durable: true, Priority: 7, TTL: time.Minute, FirstAcquirer: true, DeliveryCount: 2}) {
		t.Errorf("header %+v", got.Header)
	}
	if token, ok := got.DeliveryAnnotations[AnnotationLockToken].(amqp.UUID); !ok || token != (amqp.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}) {
		t.Errorf("lock token %#v", got.DeliveryAnnotations)
	}
	a := got.Annotations
	if v, ok := a[AnnotationSequenceNumber].(int64); !ok || v != 5 {
		t.Errorf("sequence number %#v", a[AnnotationSequenceNumber])
	}
	if v, ok := a[AnnotationEnqueueSequenceNumber].(int64); !ok || v != 1<<40 {
		t.Errorf("enqueue sequence number %#v", a[AnnotationEnqueueSequenceNumber])
	}
	if v, ok := a[AnnotationEnqueuedTime].(time.Time); !ok || !v.Equal(enqueued) {
		t.Errorf("enqueued time %#v", a[AnnotationEnqueuedTime])
	}
	if v, ok := a[AnnotationLockedUntil].(time.Time); !ok || !v.Equal(lockedUntil) {
		t.Errorf("locked until %#v (the client's value must be overwritten)", a[AnnotationLockedUntil])
	}
	if v, ok := a[AnnotationMessageState].(int32); !ok || v != 1 {
		t.Errorf("message state %#v", a[AnnotationMessageState])
	}
	if v, ok := a[AnnotationDeadLetterSource].(string); !ok || v != "orders" {
		t.Errorf("dead-letter source %#v", a[AnnotationDeadLetterSource])
	}
	// The client's own annotations pass through.
	if a["x-opt-partition-key"] != "pk" || a["x-opt-custom"] != int64(42) {
		t.Errorf("client annotations lost: %#v", a)
	}
	if v, ok := a["x-opt-scheduled-enqueue-time"].(time.Time); !ok || !v.Equal(sampleTime) {
		t.Errorf("scheduled time %#v", a["x-opt-scheduled-enqueue-time"])
	}
	if len(a) != 9 {
		t.Errorf("%d annotations, want 9 (no duplicates): %#v", len(a), a)
	}
	if !reflect.DeepEqual(got.ApplicationProperties, original.ApplicationProperties) {
		t.Errorf("application properties changed:\n%#v\n%#v", got.ApplicationProperties, original.ApplicationProperties)
	}
	if !reflect.DeepEqual(got.Properties, original.Properties) || !reflect.DeepEqual(got.Data, original.Data) {
		t.Error("properties or body changed")
	}
}

func TestDeliveryOfMinimalMessage(t *testing.T) {
	// A message of a single data section: no header, no annotations.
	sent := marshal(t, &amqp.Message{Data: [][]byte{[]byte("x")}})
	s := mustParse(t, sent)
	out, err := AppendDelivery(nil, &s, &Delivery{})
	if err != nil {
		t.Fatal(err)
	}
	want := append(AppendHeader(nil, Header{Priority: 4}), sent...)
	if !bytes.Equal(out, want) {
		t.Fatalf("got % x\nwant % x", out, want)
	}
	got := unmarshal(t, out)
	if got.Header == nil || got.Header.Priority != 4 || got.Annotations != nil || got.DeliveryAnnotations != nil {
		t.Fatalf("%+v", got)
	}
}

// TestDeliveryKeepsClientDeliveryAnnotations: Service Bus hands a
// receiver the delivery annotations the sender set, beside its lock token
// (the Go SDK's sender_test.go TestSender_SendAMQPMessageWithMultipleByteSlicesInData);
// a client's own x-opt-lock-token never goes out.
func TestDeliveryKeepsClientDeliveryAnnotations(t *testing.T) {
	sent := marshal(t, &amqp.Message{
		DeliveryAnnotations: amqp.Annotations{"x-opt-hop": "previous", AnnotationLockToken: "forged"},
		Footer:              amqp.Annotations{"x-opt-hash": "h"},
		Value:               "v",
	})
	s := mustParse(t, sent)
	token := encoding.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	for _, locked := range []bool{true, false} {
		d := &Delivery{LockToken: token, HasLockToken: locked,
			Annotations: []Annotation{{Key: AnnotationSequenceNumber, Value: LongValue(1)}}}
		out, err := AppendDelivery(nil, &s, d)
		if err != nil {
			t.Fatal(err)
		}
		got := unmarshal(t, out)
		want := amqp.Annotations{"x-opt-hop": "previous"}
		if locked {
			want[AnnotationLockToken] = amqp.UUID(token)
		}
		if !reflect.DeepEqual(got.DeliveryAnnotations, want) {
			t.Errorf("locked %v: delivery annotations %#v, want %#v", locked, got.DeliveryAnnotations, want)
		}
		if got.Value != "v" || got.Footer["x-opt-hash"] != "h" || got.Annotations[AnnotationSequenceNumber] != int64(1) {
			t.Fatalf("%+v", got)
		}
	}
}

func TestValueEncodings(t *testing.T) {
	for _, c := range []struct {
		v    Value
		want []byte
	}{
		{NullValue(), encoding.AppendNull(nil)},
		{BoolValue(true), encoding.AppendBool(nil, true)},
		{BoolValue(false), encoding.AppendBool(nil, false)},
		{IntValue(-3), encoding.AppendInt(nil, -3)},
		{LongValue(1 << 33), encoding.AppendLong(nil, 1<<33)},
		{TimestampValue(-1), encoding.AppendTimestamp(nil, -1)},
		{StringValue("s"), encoding.AppendString(nil, "s")},
		{SymbolValue("y"), encoding.AppendSymbol(nil, "y")},
		{UUIDValue(encoding.UUID{3}), encoding.AppendUUID(nil, encoding.UUID{3})},
	} {
		if got := c.v.AppendTo(nil); !bytes.Equal(got, c.want) {
			t.Errorf("%+v: % x, want % x", c.v, got, c.want)
		}
	}
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	raw := marshal(t, clientMessage())
	d := brokerDelivery(sampleTime, sampleTime)
	buf := make([]byte, 0, 4096)
	batch := marshal(t, &amqp.Message{Data: [][]byte{raw, raw}})
	inner := make([][]byte, 0, 4)
	allocs := testing.AllocsPerRun(100, func() {
		s, err := Parse(raw)
		if err != nil {
			panic(err)
		}
		if _, err := s.ReadHeader(); err != nil {
			panic(err)
		}
		if _, err := s.ReadProperties(); err != nil {
			panic(err)
		}
		if _, err := s.ReadClientAnnotations(); err != nil {
			panic(err)
		}
		if _, _, err := s.ApplicationProperty("string"); err != nil {
			panic(err)
		}
		if _, err := AppendDelivery(buf[:0], &s, d); err != nil {
			panic(err)
		}
		if _, err := SplitBatch(batch, inner[:0]); err != nil {
			panic(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("hot path allocated %.1f times per message", allocs)
	}
}
