package amqpserver

import (
	"slices"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/message"
	"github.com/walbus/walbus/broker"
)

// FuzzFilterMessage reads arbitrary bytes as a stored message the way a
// topic's rules see it. Whatever the bytes, FilterMessage returns a
// message or an error and never panics; a message it reads has one
// property per string-keyed application property, each of a known kind,
// and reading it again gives the same. The seeds are messages with every
// system property and every AMQP type as an application property.
func FuzzFilterMessage(f *testing.F) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	full := marshal(f, &amqp.Message{
		Header:      &amqp.MessageHeader{TTL: time.Minute},
		Annotations: amqp.Annotations{"x-opt-scheduled-enqueue-time": at, "x-opt-partition-key": "pk"},
		Properties: &amqp.MessageProperties{MessageID: "m", CorrelationID: uint64(1), To: ptr("t"), Subject: ptr("s"),
			ReplyTo: ptr("r"), GroupID: ptr("g"), ReplyToGroupID: ptr("rg"), ContentType: ptr("ct")},
		Data: [][]byte{[]byte("body")},
	})
	f.Add(full)
	f.Add(withProperties(f, full, encoding.Map{
		{Key: "i", Value: int32(1)}, {Key: "u", Value: uint64(1 << 63)}, {Key: "d", Value: 1.5},
		{Key: "dec", Value: encoding.Decimal128{0x30, 0x40, 15: 1}}, {Key: "c", Value: encoding.Char('x')},
		{Key: "ts", Value: encoding.TimestampOf(at)}, {Key: "uuid", Value: encoding.UUID{1}},
		{Key: "span", Value: encoding.Described{Descriptor: encoding.Symbol(timespanDescriptor), Value: int64(10)}},
		{Key: "list", Value: encoding.List{nil, "x"}}, {Key: "null", Value: nil},
	}))
	f.Add(marshal(f, &amqp.Message{Value: "no properties"}))
	f.Add([]byte{0x00, 0x53, 0x74, 0xc1, 0x03, 0x02, 0x40, 0x40}) // a null key
	f.Fuzz(func(t *testing.T, body []byte) {
		fm, err := FilterMessage(body)
		if err != nil {
			return
		}
		if fm == nil {
			t.Fatal("no message and no error")
		}
		for _, p := range fm.Properties {
			if p.Value.Kind() > broker.KindOpaque {
				t.Fatalf("property %q of kind %v", p.Name, p.Value.Kind())
			}
		}
		if s, err := message.Parse(body); err == nil && s.ApplicationProperties.Present() {
			entries := 0
			for it := message.NewMapIter(s.ValueBytes(s.ApplicationProperties)); it.Next(); {
				if _, isText := message.KeyText(it.Key()); isText {
					entries++
				}
			}
			if entries != len(fm.Properties) {
				t.Fatalf("%d string-keyed application properties read as %d", entries, len(fm.Properties))
			}
		}
		again, err := FilterMessage(body)
		if err != nil || !slices.Equal(again.Properties, fm.Properties) || again.MessageID != fm.MessageID {
			t.Fatalf("read twice, differently: %v", err)
		}
	})
}
