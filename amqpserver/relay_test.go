package amqpserver

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/message"
	"github.com/walbus/walbus/broker"
)

// throughGoAMQP is a message as a node passes it on: decoded by go-amqp
// and encoded again by encode (go-amqp gives no message's bytes as they
// came).
func throughGoAMQP(t *testing.T, b []byte, encode func(*amqp.Message) ([]byte, error)) []byte {
	t.Helper()
	var m amqp.Message
	if err := m.UnmarshalBinary(b); err != nil {
		t.Fatalf("go-amqp cannot read it: %v", err)
	}
	out, err := encode(&m)
	if err != nil {
		t.Fatalf("go-amqp cannot write it again: %v", err)
	}
	return out
}

// TestRelayKeepsRequestsAndResponses: $management requests and responses
// passed on through go-amqp read back as they were: the application
// properties and the body, down to the AMQP type of each value (a rule's
// described filters and its properties of every type, the arrays of
// timestamps, longs and strings the SDKs assert).
func TestRelayKeepsRequestsAndResponses(t *testing.T) {
	_, _, tgt := ruleTopic(t)
	y2k := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	props := map[string]any{"properties": encoding.Map{
		{Key: "s", Value: "v"}, {Key: "i", Value: int32(-3)}, {Key: "l", Value: int64(1) << 40}, {Key: "b", Value: true},
		{Key: "t", Value: encoding.TimestampOf(y2k)}, {Key: "d", Value: 1.5},
		{Key: "u", Value: encoding.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
		{Key: "span", Value: encoding.Described{Descriptor: ruleDescTimeSpan, Value: int64(600_000_000)}},
		{Key: "nothing", Value: nil},
	}, "label": "red"}
	requests := []encoding.Map{
		jsSQLRule("sqlWithAction", "sys.label = 'red'", "SET priority = 'high'"),
		jsCorrelationRule("correlation", props, ""),
	}
	for _, body := range requests {
		b := encodeRequest(encoding.Map{{Key: "operation", Value: "com.microsoft:add-rule"}}, body)
		sameRPC(t, b, throughGoAMQP(t, b, (*amqp.Message).MarshalBinary))
		if resp, _ := ruleCall(t, tgt, "com.microsoft:add-rule", body); resp.status != 200 {
			t.Fatalf("add-rule: %d %s", resp.status, resp.description)
		}
	}
	resp, _ := ruleCall(t, tgt, "com.microsoft:enumerate-rules", encoding.Map{{Key: "top", Value: int32(10)}, {Key: "skip", Value: int32(0)}})
	req := rpcRequest{messageID: message.ID{Kind: message.IDUUID, UUID: encoding.UUID{7}}}
	responses := []rpcResponse{resp,
		ok(200, encoding.Map{{Key: "expirations", Value: timestampArray([]int64{y2k.UnixNano(), y2k.UnixNano() + 1e6})}}),
		scheduled([]uint64{5, 6}),
		ok(200, encoding.Map{{Key: "skip", Value: int32(2)},
			{Key: "sessions-ids", Value: encoding.Array{Code: encoding.CodeStr8, Elements: []any{"a", "b"}}}}),
		ok(200, encoding.Map{{Key: "session-state", Value: nil}}),
		ok(200, encoding.Map{{Key: "messages", Value: encoding.List{encoding.Map{{Key: "message", Value: []byte{0, 0x53, 0x77, 0x40}},
			{Key: "lock-token", Value: encoding.UUID{9}}}}}}),
		failure(errSample),
	}
	for _, r := range responses {
		b, err := r.encode(&req)
		if err != nil {
			t.Fatal(err)
		}
		sameRPC(t, b, throughGoAMQP(t, b, encodeResponse))
	}
}

// sameRPC checks that two request or response messages carry the same
// message-id, reply-to, application properties and body. go-amqp keeps
// maps in Go maps, so their entries may come in another order, and writes
// an array of longs, ints or strings in the narrowest encoding that holds
// them: the same AMQP types.
func sameRPC(t *testing.T, want, got []byte) {
	t.Helper()
	w, err := parseRequest(want)
	if err != nil {
		t.Fatal(err)
	}
	g, err := parseRequest(got)
	if err != nil {
		t.Fatalf("the message passed on does not parse: %v", err)
	}
	w.props, g.props = canonical(w.props).(encoding.Map), canonical(g.props).(encoding.Map)
	w.body, g.body = canonical(w.body), canonical(g.body)
	if !reflect.DeepEqual(w, g) {
		t.Errorf("passed on through go-amqp, a message reads\n%#v\nwant\n%#v", g, w)
	}
}

// canonical is v with every map's entries in the order of their keys and
// every array's code the widest of its type's encodings.
func canonical(v any) any {
	switch x := v.(type) {
	case encoding.Map:
		out := make(encoding.Map, len(x))
		for i, e := range x {
			out[i] = encoding.MapEntry{Key: e.Key, Value: canonical(e.Value)}
		}
		slices.SortFunc(out, func(a, b encoding.MapEntry) int { return strings.Compare(fmt.Sprint(a.Key), fmt.Sprint(b.Key)) })
		return out
	case encoding.List:
		out := make(encoding.List, len(x))
		for i, e := range x {
			out[i] = canonical(e)
		}
		return out
	case encoding.Described:
		return encoding.Described{Descriptor: x.Descriptor, Value: canonical(x.Value)}
	case encoding.Array:
		widest := map[byte]byte{encoding.CodeSmallLong: encoding.CodeLong, encoding.CodeSmallInt: encoding.CodeInt,
			encoding.CodeSmallUint: encoding.CodeUint, encoding.CodeUint0: encoding.CodeUint,
			encoding.CodeSmallUlong: encoding.CodeUlong, encoding.CodeUlong0: encoding.CodeUlong,
			encoding.CodeStr8: encoding.CodeStr32, encoding.CodeSym8: encoding.CodeSym32, encoding.CodeVbin8: encoding.CodeVbin32}
		if code, narrow := widest[x.Code]; narrow {
			x.Code = code
		}
		return x
	}
	return v
}

var errSample = errorString("something failed")

type errorString string

func (e errorString) Error() string { return string(e) }

// TestGoAMQPOutcomes: the dispositions a client settles with reach
// go-amqp with their properties to modify and dead-letter reasons.
func TestGoAMQPOutcomes(t *testing.T) {
	annotations, err := goAMQPAnnotations(encoding.Map{{Key: encoding.Symbol("key"), Value: "v"}, {Key: "n", Value: int32(3)}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (amqp.Annotations{amqp.Symbol("key"): "v", amqp.Symbol("n"): int32(3)}); !reflect.DeepEqual(annotations, want) {
		t.Errorf("annotations %#v, want %#v", annotations, want)
	}
	reason, err := goAMQPError(&frames.Error{Condition: condDeadLetter, Info: encoding.Map{
		{Key: encoding.Symbol(propDeadLetterReason), Value: "bad"}, {Key: "custom", Value: int64(7)}}})
	if err != nil {
		t.Fatal(err)
	}
	want := &amqp.Error{Condition: condDeadLetter, Info: map[string]any{propDeadLetterReason: "bad", "custom": int64(7)}}
	if !reflect.DeepEqual(reason, want) {
		t.Errorf("dead-letter error %#v, want %#v", reason, want)
	}
	if e, err := goAMQPError(nil); e != nil || err != nil {
		t.Errorf("no error: %v, %v", e, err)
	}
}

// TestRelayError: the leader's own condition reaches the client; a link
// or connection that failed becomes detach-forced, which the SDKs answer by
// attaching again.
func TestRelayError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want encoding.Symbol
	}{
		{&amqp.Error{Condition: condLockLost, Description: "gone"}, condLockLost},
		{&amqp.LinkError{RemoteErr: &amqp.Error{Condition: condServerBusy}}, condServerBusy},
		{&amqp.LinkError{}, condDetachForced},
		{&amqp.ConnError{RemoteErr: &amqp.Error{Condition: condConnectionForced}}, condDetachForced},
		{&amqp.SessionError{}, condDetachForced},
		{errSample, condDetachForced},
	} {
		if got := relayError(2, c.err); got.Condition != c.want {
			t.Errorf("%#v: %s, want %s", c.err, got.Condition, c.want)
		}
	}
}

// TestRelayKeepsDeliveries: a message as the leader delivers it reads back
// the same after a node passes it on through go-amqp: header, properties,
// annotations, application properties of the types clients send, and the
// body.
func TestRelayKeepsDeliveries(t *testing.T) {
	when := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	body, err := (&amqp.Message{
		Properties: &amqp.MessageProperties{MessageID: "m-1", CorrelationID: uint64(9), ContentType: strPtr("application/json"),
			GroupID: strPtr("session"), CreationTime: &when},
		Annotations: amqp.Annotations{"x-opt-partition-key": "pk"},
		ApplicationProperties: map[string]any{"s": "v", "i32": int32(-3), "i64": int64(1) << 40, "u8": uint8(7),
			"f": 1.5, "b": true, "t": when, "u": amqp.UUID{1, 2}, "bin": []byte{1, 2}, "nil": nil},
		Data: [][]byte{[]byte("one"), []byte("two")},
	}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	d := broker.Delivery{Seq: 77, Token: broker.LockToken{0xa1, 2, 3}, LockedUntil: when.Add(time.Minute).UnixNano(),
		Deliveries: 2, State: broker.Locked, EnqueuedAt: when.UnixNano(), ExpiresAt: when.Add(time.Hour).UnixNano(), Message: body}
	want, err := outbound(nil, &d)
	if err != nil {
		t.Fatal(err)
	}
	got := throughGoAMQP(t, want, (*amqp.Message).MarshalBinary)
	w, g := mustSections(t, want), mustSections(t, got)
	if wh, gh := must2(w.ReadHeader()), must2(g.ReadHeader()); wh != gh {
		t.Errorf("header %+v, want %+v", gh, wh)
	}
	if wp, gp := must2(w.ReadProperties()), must2(g.ReadProperties()); !reflect.DeepEqual(wp, gp) {
		t.Errorf("properties %+v, want %+v", gp, wp)
	}
	for _, part := range []struct {
		name      string
		want, got message.Span
	}{
		{"delivery annotations", w.DeliveryAnnotations, g.DeliveryAnnotations},
		{"message annotations", w.MessageAnnotations, g.MessageAnnotations},
		{"application properties", w.ApplicationProperties, g.ApplicationProperties},
	} {
		wv := canonical(readValue(t, w.ValueBytes(part.want)))
		gv := canonical(readValue(t, g.ValueBytes(part.got)))
		if !reflect.DeepEqual(wv, gv) {
			t.Errorf("%s\n%#v\nwant\n%#v", part.name, gv, wv)
		}
	}
	if !bytes.Equal(w.Bytes(w.Body), g.Bytes(g.Body)) || g.BodyCount != 2 {
		t.Errorf("body % x, want % x", g.Bytes(g.Body), w.Bytes(w.Body))
	}
}

func mustSections(t *testing.T, b []byte) message.Sections {
	t.Helper()
	s, err := message.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func must2[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func readValue(t *testing.T, b []byte) any {
	t.Helper()
	r := encoding.NewReader(b)
	v, err := r.ReadAny(encoding.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRelayChanges pins what passing a message on through go-amqp
// changes, since go-amqp gives no message's bytes as they came: a symbol
// value becomes a string, and a char or a decimal cannot be read at all,
// so a send carrying one is rejected (decode-error) by a node that does
// not lead the entity.
func TestRelayChanges(t *testing.T) {
	props := encoding.Map{{Key: "sym", Value: encoding.Symbol("s")}}
	g, err := parseRequest(throughGoAMQP(t, encodeRequest(props, nil), (*amqp.Message).MarshalBinary))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := g.props, (encoding.Map{{Key: "sym", Value: "s"}}); !reflect.DeepEqual(got, want) {
		t.Errorf("passed on, %#v reads %#v, want %#v", props, got, want)
	}
	for _, v := range []any{encoding.Char('é'), encoding.Decimal128{}} {
		var m amqp.Message
		if err := m.UnmarshalBinary(encodeRequest(encoding.Map{{Key: "v", Value: v}}, nil)); err == nil {
			t.Errorf("go-amqp reads a %T now: sends carrying one can be passed on", v)
		}
	}
}
