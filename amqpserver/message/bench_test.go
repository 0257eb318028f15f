package message

import (
	"testing"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// typicalMessage encodes a 1 KB message the way the Service Bus SDKs send
// one: header, annotations, properties, a few application properties, data.
func typicalMessage(dst []byte) []byte {
	dst = AppendHeader(dst, Header{Durable: true, Priority: 4, TTL: 3600000, HasTTL: true})
	dst = encoding.AppendDescriptor(dst, CodeMessageAnnotations)
	dst, ma := encoding.BeginMap(dst)
	dst = encoding.AppendSymbol(dst, AnnotationPartitionKey)
	dst = encoding.AppendString(dst, "customer-42")
	dst = encoding.EndMap(dst, ma, 1)
	dst = AppendProperties(dst, &Properties{
		MessageID: ID{Kind: IDString, Bytes: benchID}, ContentType: benchType, CorrelationID: ID{Kind: IDString, Bytes: benchID},
		Subject: benchType, CreationTime: 1311704463521, HasCreationTime: true,
	})
	dst = encoding.AppendDescriptor(dst, CodeApplicationProperties)
	dst, ap := encoding.BeginMap(dst)
	dst = encoding.AppendString(dst, "tenant")
	dst = encoding.AppendString(dst, "contoso")
	dst = encoding.AppendString(dst, "attempt")
	dst = encoding.AppendInt(dst, 3)
	dst = encoding.AppendString(dst, "created")
	dst = encoding.AppendTimestamp(dst, 1311704463521)
	dst = encoding.EndMap(dst, ap, 3)
	dst = encoding.AppendDescriptor(dst, CodeData)
	return encoding.AppendBinary(dst, benchBody)
}

var (
	benchID   = []byte("4f6b2a0e-6f0c-4d7e-9b1a-2c3d4e5f6a7b")
	benchType = []byte("application/json")
	benchBody = make([]byte, 800)
)

func BenchmarkEncodeMessage(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 2048)
	for b.Loop() {
		buf = typicalMessage(buf[:0])
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkDecodeMessage(b *testing.B) {
	b.ReportAllocs()
	raw := typicalMessage(nil)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		s, err := Parse(raw)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.ReadHeader(); err != nil {
			b.Fatal(err)
		}
		if _, err := s.ReadProperties(); err != nil {
			b.Fatal(err)
		}
		if _, err := s.ReadClientAnnotations(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendDelivery(b *testing.B) {
	b.ReportAllocs()
	raw := typicalMessage(nil)
	s, err := Parse(raw)
	if err != nil {
		b.Fatal(err)
	}
	d := brokerDelivery(sampleTime, sampleTime)
	buf := make([]byte, 0, 2048)
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if buf, err = AppendDelivery(buf[:0], &s, d); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMergeApplicationProperties(b *testing.B) {
	b.ReportAllocs()
	s, err := Parse(typicalMessage(nil))
	if err != nil {
		b.Fatal(err)
	}
	set := []Property{{Key: "DeadLetterReason", Value: "expired"}, {Key: "attempt", Value: int32(4)}}
	buf := make([]byte, 0, 2048)
	for b.Loop() {
		if buf, err = AppendWithApplicationProperties(buf[:0], &s, set); err != nil {
			b.Fatal(err)
		}
	}
}
