package message

import (
	"reflect"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	"github.com/walbus/walbus/amqpserver/encoding"
)

// TestParseGoAMQPMessage parses what go-amqp (and so azservicebus) sends
// and checks every field against the values that went in.
func TestParseGoAMQPMessage(t *testing.T) {
	in := clientMessage()
	s := mustParse(t, marshal(t, in))

	h, err := s.ReadHeader()
	if err != nil {
		t.Fatal(err)
	}
	if h != (Header{Durable: true, Priority: 7, TTL: 90000, HasTTL: true, FirstAcquirer: true, DeliveryCount: 3}) {
		t.Errorf("header %+v", h)
	}

	p, err := s.ReadProperties()
	if err != nil {
		t.Fatal(err)
	}
	want := Properties{
		MessageID: StringID("message-1"), UserID: []byte("user"), To: []byte("queue"), Subject: []byte("subject"),
		ReplyTo: []byte("reply"), CorrelationID: ID{Kind: IDUlong, Ulong: 77},
		ContentType: []byte("application/json"), ContentEncoding: []byte("gzip"),
		AbsoluteExpiryTime: encoding.TimestampOf(sampleTime.Add(time.Hour)), HasAbsoluteExpiryTime: true,
		CreationTime: encoding.TimestampOf(sampleTime), HasCreationTime: true,
		GroupID: []byte("session-1"), GroupSequence: 9, HasGroupSequence: true, ReplyToGroupID: []byte("reply-session"),
	}
	if !propertiesEqual(p, want) {
		t.Errorf("properties\n got %+v\nwant %+v", p, want)
	}

	a, err := s.ReadClientAnnotations()
	if err != nil {
		t.Fatal(err)
	}
	if !a.HasScheduledEnqueueTime || a.ScheduledEnqueueTime.Time() != sampleTime || string(a.PartitionKey) != "pk" || a.ViaPartitionKey != nil {
		t.Errorf("annotations %+v", a)
	}

	r := encoding.NewReader(s.ValueBytes(s.ApplicationProperties))
	got, err := r.ReadAny(encoding.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	props := map[string]any{}
	for _, e := range got.(encoding.Map) {
		props[e.Key.(string)] = e.Value
	}
	wantProps := map[string]any{
		"timestamp": encoding.TimestampOf(sampleTime),
		"byte":      uint8(128), "uint8": int8(101), "uint32": int32(400), "uint64": int64(400),
		"int": int64(400), "int8": int8(-101), "int32": int32(-400), "int64": int64(-400),
		"float": 400.1, "float64": 400.1, "string": "hello world",
		"char": int32('g'), "char2": int32('❤'), "bool": true,
		"uuid": encoding.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
	}
	if !reflect.DeepEqual(props, wantProps) {
		t.Errorf("application properties\n got %#v\nwant %#v", props, wantProps)
	}
	if s.BodyKind != BodyData || s.BodyCount != 1 {
		t.Errorf("body %d x%d", s.BodyKind, s.BodyCount)
	}
}

func TestGoAMQPIDTypes(t *testing.T) {
	for _, c := range []struct {
		id   any
		want ID
	}{
		{uint64(1 << 40), ID{Kind: IDUlong, Ulong: 1 << 40}},
		{amqp.UUID{9}, ID{Kind: IDUUID, UUID: encoding.UUID{9}}},
		{[]byte{1, 2}, ID{Kind: IDBinary, Bytes: []byte{1, 2}}},
		{"s", StringID("s")},
	} {
		s := mustParse(t, marshal(t, &amqp.Message{Properties: &amqp.MessageProperties{MessageID: c.id, CorrelationID: c.id}}))
		p, err := s.ReadProperties()
		if err != nil {
			t.Fatal(err)
		}
		if !propertiesEqual(p, Properties{MessageID: c.want, CorrelationID: c.want}) {
			t.Errorf("%#v: %+v", c.id, p)
		}
	}
}

// TestGoAMQPReadsOurMessage encodes a message with this package and the
// encoding primitives and checks go-amqp decodes the same values.
func TestGoAMQPReadsOurMessage(t *testing.T) {
	when := encoding.TimestampOf(sampleTime)
	raw := AppendHeader(nil, Header{Durable: true, Priority: 4, TTL: 5000, HasTTL: true, DeliveryCount: 2})
	raw = AppendProperties(raw, &Properties{
		MessageID: ID{Kind: IDUUID, UUID: encoding.UUID{7}}, UserID: []byte("u"), To: []byte("t"), Subject: []byte("s"),
		ReplyTo: []byte("r"), CorrelationID: StringID("c"), ContentType: []byte("ct"), ContentEncoding: []byte("ce"),
		AbsoluteExpiryTime: when, HasAbsoluteExpiryTime: true, CreationTime: when, HasCreationTime: true,
		GroupID: []byte("g"), GroupSequence: 3, HasGroupSequence: true, ReplyToGroupID: []byte("rg"),
	})
	raw = encoding.AppendDescriptor(raw, CodeApplicationProperties)
	raw, err := encoding.AppendAny(raw, encoding.Map{
		{Key: "statusCode", Value: int32(200)}, {Key: "long", Value: int64(-1)}, {Key: "ts", Value: when},
		{Key: "uuid", Value: encoding.UUID{1}}, {Key: "ubyte", Value: uint8(1)}, {Key: "str", Value: "x"},
	})
	if err != nil {
		t.Fatal(err)
	}
	raw = encoding.AppendDescriptor(raw, CodeData)
	raw = encoding.AppendBinary(raw, []byte("body"))

	m := unmarshal(t, raw)
	if *m.Header != (amqp.MessageHeader{Durable: true, Priority: 4, TTL: 5 * time.Second, DeliveryCount: 2}) {
		t.Errorf("header %+v", m.Header)
	}
	p := m.Properties
	if p.MessageID != (amqp.UUID{7}) || string(p.UserID) != "u" || *p.To != "t" || *p.Subject != "s" || *p.ReplyTo != "r" ||
		p.CorrelationID != "c" || *p.ContentType != "ct" || *p.ContentEncoding != "ce" ||
		!p.AbsoluteExpiryTime.Equal(sampleTime) || !p.CreationTime.Equal(sampleTime) ||
		*p.GroupID != "g" || *p.GroupSequence != 3 || *p.ReplyToGroupID != "rg" {
		t.Errorf("properties %+v", p)
	}
	wantProps := map[string]any{"statusCode": int32(200), "long": int64(-1), "ts": sampleTime, "uuid": amqp.UUID{1}, "ubyte": uint8(1), "str": "x"}
	if ts, ok := m.ApplicationProperties["ts"].(time.Time); ok {
		m.ApplicationProperties["ts"] = ts.UTC()
	}
	if !reflect.DeepEqual(m.ApplicationProperties, wantProps) {
		t.Errorf("application properties %#v", m.ApplicationProperties)
	}
	if len(m.Data) != 1 || string(m.Data[0]) != "body" {
		t.Errorf("data %q", m.Data)
	}
}
