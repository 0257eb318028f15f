package message

import (
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
)

func ptr[T any](v T) *T { return &v }

var sampleTime = time.Date(2000, 1, 1, 1, 2, 3, 0, time.UTC)

// clientMessage is what azservicebus's Message.toAMQPMessage produces for
// a message with every feature set, plus the application property types
// TestReceiverAMQPDataTypes round-trips.
func clientMessage() *amqp.Message {
	return &amqp.Message{
		Header: &amqp.MessageHeader{Durable: true, Priority: 7, TTL: 90 * time.Second, FirstAcquirer: true, DeliveryCount: 3},
		Annotations: amqp.Annotations{
			"x-opt-partition-key":          "pk",
			"x-opt-scheduled-enqueue-time": sampleTime,
			"x-opt-custom":                 int64(42),
			"x-opt-locked-until":           sampleTime, // clients may send it; the broker overwrites it
		},
		Properties: &amqp.MessageProperties{
			MessageID:          "message-1",
			UserID:             []byte("user"),
			To:                 ptr("queue"),
			Subject:            ptr("subject"),
			ReplyTo:            ptr("reply"),
			CorrelationID:      uint64(77),
			ContentType:        ptr("application/json"),
			ContentEncoding:    ptr("gzip"),
			AbsoluteExpiryTime: ptr(sampleTime.Add(time.Hour)),
			CreationTime:       ptr(sampleTime),
			GroupID:            ptr("session-1"),
			GroupSequence:      ptr(uint32(9)),
			ReplyToGroupID:     ptr("reply-session"),
		},
		ApplicationProperties: map[string]any{
			"timestamp": sampleTime,
			"byte":      byte(128),
			"uint8":     int8(101),
			"uint32":    int32(400),
			"uint64":    int64(400),
			"int":       400,
			"int8":      int8(-101),
			"int32":     int32(-400),
			"int64":     int64(-400),
			"float":     400.1,
			"float64":   float64(400.1),
			"string":    "hello world",
			"char":      'g',
			"char2":     '❤',
			"bool":      true,
			"uuid":      amqp.UUID([16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}),
		},
		Data: [][]byte{[]byte("hello, this is the body")},
	}
}

func marshal(t testing.TB, m *amqp.Message) []byte {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func unmarshal(t testing.TB, b []byte) *amqp.Message {
	t.Helper()
	var m amqp.Message
	if err := m.UnmarshalBinary(b); err != nil {
		t.Fatalf("go-amqp cannot read % x: %v", b, err)
	}
	return &m
}

func mustParse(t testing.TB, b []byte) Sections {
	t.Helper()
	s, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
