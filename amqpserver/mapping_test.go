package amqpserver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/message"
	"github.com/walbus/walbus/broker"
)

func marshal(t testing.TB, m *amqp.Message) []byte {
	t.Helper()
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func unmarshal(t *testing.T, b []byte) *amqp.Message {
	t.Helper()
	var m amqp.Message
	if err := m.UnmarshalBinary(b); err != nil {
		t.Fatalf("go-amqp cannot read our message: %v", err)
	}
	return &m
}

func ptr[T any](v T) *T { return &v }

func TestInboundExtractsWhatTheBrokerActsOn(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6_000_000, time.UTC)
	raw := marshal(t, &amqp.Message{
		Header:      &amqp.MessageHeader{TTL: 90 * time.Second},
		Annotations: amqp.Annotations{"x-opt-scheduled-enqueue-time": at, "x-opt-partition-key": "pk"},
		Properties:  &amqp.MessageProperties{MessageID: "m-1", GroupID: ptr("session-7")},
		Data:        [][]byte{[]byte("hello")},
	})
	msgs, err := inbound(raw, 0)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("inbound: %v %v", msgs, err)
	}
	m := msgs[0]
	if m.MessageID != "m-1" || m.SessionID != "session-7" || m.TTL != 90*time.Second || m.ScheduledAt != at.UnixNano() {
		t.Fatalf("extracted %+v", m)
	}
	if string(m.Body) != string(raw) {
		t.Fatal("a message with an id must be stored byte for byte")
	}

	// Ids of every allowed type become their text form.
	for _, tc := range []struct {
		id   any
		want string
	}{{uint64(42), "42"}, {amqp.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, "01020304-0506-0708-090a-0b0c0d0e0f10"}} {
		msgs, err := inbound(marshal(t, &amqp.Message{Properties: &amqp.MessageProperties{MessageID: tc.id}, Value: "x"}), 0)
		if err != nil || msgs[0].MessageID != tc.want {
			t.Errorf("id %v: got %q, %v", tc.id, msgs[0].MessageID, err)
		}
	}
}

func TestInboundAssignsAMessageID(t *testing.T) {
	raw := marshal(t, &amqp.Message{ApplicationProperties: map[string]any{"k": int32(1)}, Data: [][]byte{[]byte("x")}})
	msgs, err := inbound(raw, 0)
	if err != nil {
		t.Fatal(err)
	}
	m := msgs[0]
	if len(m.MessageID) != 36 {
		t.Fatalf("assigned id %q", m.MessageID)
	}
	stored := unmarshal(t, m.Body)
	if stored.Properties == nil || stored.Properties.MessageID != m.MessageID {
		t.Fatalf("stored message id %+v, want %q", stored.Properties, m.MessageID)
	}
	if stored.ApplicationProperties["k"] != int32(1) || string(stored.GetData()) != "x" {
		t.Fatal("the rest of the message changed")
	}
}

// Assigned ids are version 4 (random) UUIDs in the usual text form, and
// never repeat: with duplicate detection on, a repeat would drop a message.
func TestAssignedMessageIDsAreRandomUUIDs(t *testing.T) {
	seen := make(map[string]bool)
	for range 100_000 {
		id := newMessageID()
		if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
			t.Fatalf("id %q is not a UUID's text form", id)
		}
		if id[14] != '4' || !strings.ContainsRune("89ab", rune(id[19])) {
			t.Fatalf("id %q: want version 4, RFC 4122 variant", id)
		}
		if seen[id] {
			t.Fatalf("id %q assigned twice", id)
		}
		seen[id] = true
	}
}

// The batch format of the Go and JS SDKs: an envelope copying the first
// message's sections, then one data section per complete encoded message.
func TestInboundUnpacksBatches(t *testing.T) {
	var inner [][]byte
	for _, id := range []string{"a", "b", "c"} {
		inner = append(inner, marshal(t, &amqp.Message{Properties: &amqp.MessageProperties{MessageID: id}, Value: id}))
	}
	envelope := marshal(t, &amqp.Message{Properties: &amqp.MessageProperties{MessageID: "a"}, Data: inner})
	msgs, err := inbound(envelope, frames.MessageFormatBatch)
	if err != nil || len(msgs) != 3 {
		t.Fatalf("batch: %d messages, %v", len(msgs), err)
	}
	for i, id := range []string{"a", "b", "c"} {
		if msgs[i].MessageID != id || unmarshal(t, msgs[i].Body).Value != id {
			t.Errorf("inner %d: %+v", i, msgs[i])
		}
	}
	if _, err := inbound([]byte{0x00, 0x53, 0x77, 0x40, 0xff}, 0); err == nil {
		t.Fatal("garbage accepted as a message")
	}
}

// A group-id absent is no session; present and empty it is the session "",
// which the broker holds as broker.EmptySessionID; text that is not UTF-8
// cannot become that id. A session filter of null asks for the next
// available session, of "" for the session "", and the filter sent back
// names "" again.
func TestSessionIDsAtTheBoundary(t *testing.T) {
	for _, c := range []struct {
		groupID *string
		want    string
	}{
		{nil, ""},
		{ptr(""), broker.EmptySessionID},
		{ptr("s"), "s"},
	} {
		raw := marshal(t, &amqp.Message{Properties: &amqp.MessageProperties{MessageID: "m", GroupID: c.groupID}, Value: "v"})
		msgs, err := inbound(raw, 0)
		if err != nil || msgs[0].SessionID != c.want {
			t.Errorf("group-id %v: session %q (%v), want %q", c.groupID, msgs[0].SessionID, err, c.want)
		}
	}
	// go-amqp writes only UTF-8; our reader takes any bytes.
	if got := sessionIDOf([]byte(broker.EmptySessionID)); got != "\uFFFD" {
		t.Errorf("group-id %q: session %q", broker.EmptySessionID, got)
	}
	described := func(v any) any { return encoding.Described{Descriptor: uint64(0x137000000C), Value: v} }
	for _, c := range []struct {
		filter any
		want   string
	}{
		{nil, ""}, {described(nil), ""},
		{"", broker.EmptySessionID}, {described(""), broker.EmptySessionID},
		{"s", "s"}, {described("s"), "s"},
	} {
		if got := sessionFilterID(c.filter); got != c.want {
			t.Errorf("filter %#v names session %q, want %q", c.filter, got, c.want)
		}
	}
	if got := echoFilter(described(nil), broker.ClientSessionID(broker.EmptySessionID)); got != described("") {
		t.Errorf("filter sent back %#v", got)
	}
}

// What the Go SDK reads from a delivery, with the exact Go types it asserts
// (docs/compatibility.md §5: a wrong type panics the client).
func TestOutboundAsTheGoSDKReadsIt(t *testing.T) {
	body := marshal(t, &amqp.Message{
		Annotations:           amqp.Annotations{"x-opt-partition-key": "pk", "x-opt-locked-until": "stale"},
		Properties:            &amqp.MessageProperties{MessageID: "m-1"},
		ApplicationProperties: map[string]any{"kept": "yes", "changed": int64(1)},
		Data:                  [][]byte{[]byte("payload")},
	})
	enqueued := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	props := encoding.Map{{Key: "changed", Value: int64(2)}, {Key: "added", Value: true}}
	propBytes, err := encoding.AppendAny(nil, props)
	if err != nil {
		t.Fatal(err)
	}
	token := broker.LockToken{0xa1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	d := broker.Delivery{
		Seq: 77, Token: token, LockedUntil: enqueued.Add(time.Minute).UnixNano(), Deliveries: 2,
		State: broker.Locked, EnqueuedAt: enqueued.UnixNano(), ExpiresAt: enqueued.Add(time.Hour).UnixNano(),
		Message: body,
		Overlays: []broker.Overlay{
			{Type: broker.Abandoned, Props: propBytes},
			{Type: broker.DeadLettered, Reason: "bad", Description: "really bad"},
		},
	}
	out, err := outbound(nil, &d)
	if err != nil {
		t.Fatal(err)
	}
	m := unmarshal(t, out)
	if seq, ok := m.Annotations["x-opt-sequence-number"].(int64); !ok || seq != 77 {
		t.Errorf("sequence number %#v", m.Annotations["x-opt-sequence-number"])
	}
	if at, ok := m.Annotations["x-opt-enqueued-time"].(time.Time); !ok || !at.Equal(enqueued) {
		t.Errorf("enqueued time %#v", m.Annotations["x-opt-enqueued-time"])
	}
	if at, ok := m.Annotations["x-opt-locked-until"].(time.Time); !ok || !at.Equal(enqueued.Add(time.Minute)) {
		t.Errorf("locked until %#v (the client's stale value must be overwritten)", m.Annotations["x-opt-locked-until"])
	}
	if state, ok := m.Annotations["x-opt-message-state"]; ok {
		t.Errorf("message state %#v on an active message: Service Bus sends none", state)
	}
	if m.Annotations["x-opt-partition-key"] != "pk" {
		t.Error("client annotations must pass through")
	}
	if lt, ok := m.DeliveryAnnotations["x-opt-lock-token"].(amqp.UUID); !ok || lt != amqp.UUID(token) {
		t.Errorf("lock token %#v", m.DeliveryAnnotations["x-opt-lock-token"])
	}
	if m.Header == nil || m.Header.DeliveryCount != 2 || m.Header.TTL != time.Hour {
		t.Errorf("header %+v", m.Header)
	}
	want := map[string]any{"kept": "yes", "changed": int64(2), "added": true,
		"DeadLetterReason": "bad", "DeadLetterErrorDescription": "really bad"}
	for k, v := range want {
		if m.ApplicationProperties[k] != v {
			t.Errorf("application property %s = %#v, want %#v", k, m.ApplicationProperties[k], v)
		}
	}
	if string(m.GetData()) != "payload" || m.Properties.MessageID != "m-1" {
		t.Error("bare message changed")
	}

	// Deferred and scheduled states; no lock, no locked-until.
	d.Token, d.Overlays, d.Deferred = broker.LockToken{}, nil, true
	m = unmarshal(t, must(outbound(nil, &d)))
	if m.Annotations["x-opt-message-state"] != int32(1) || m.DeliveryAnnotations["x-opt-lock-token"] != nil {
		t.Errorf("deferred delivery: %#v %#v", m.Annotations, m.DeliveryAnnotations)
	}
	d.Deferred, d.State = false, broker.Scheduled
	if m = unmarshal(t, must(outbound(nil, &d))); m.Annotations["x-opt-message-state"] != int32(2) {
		t.Errorf("scheduled state %#v", m.Annotations["x-opt-message-state"])
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestDeliveryTagIsDotNetOrder(t *testing.T) {
	// docs/compatibility.md §5: RFC 01020304-0506-0708-090a-0b0c0d0e0f10 goes
	// on the wire as 04 03 02 01 06 05 08 07 09 0a 0b 0c 0d 0e 0f 10.
	token := broker.LockToken{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	tag := deliveryTag(token)
	want := [16]byte{4, 3, 2, 1, 6, 5, 8, 7, 9, 10, 11, 12, 13, 14, 15, 16}
	if tag != want {
		t.Fatalf("tag % x", tag)
	}
	back, ok := tokenFromTag(tag[:])
	if !ok || back != token {
		t.Fatal("tag does not map back to the token")
	}
	if _, ok := tokenFromTag(binary.BigEndian.AppendUint64(nil, 1)); ok {
		t.Fatal("an 8-byte tag is not a lock token")
	}
}

// TestRequestDecodingIsBoundedBySize: a $management request decodes into
// at most a few MiB more than its size. Nested arrays of nulls cost 9
// bytes per inner array on the wire and a MiB each decoded; this 90 KB
// request would be gigabytes, and a fixed 256 MiB budget let one request
// allocate that much before failing.
func TestRequestDecodingIsBoundedBySize(t *testing.T) {
	const inner = 10000
	arr := []byte{0xf0}
	arr = binary.BigEndian.AppendUint32(arr, uint32(4+1+inner*9))
	arr = binary.BigEndian.AppendUint32(arr, inner)
	arr = append(arr, 0xf0)
	for range inner {
		arr = binary.BigEndian.AppendUint32(arr, 5)
		arr = binary.BigEndian.AppendUint32(arr, 1<<16)
		arr = append(arr, 0x40)
	}
	props := []byte{0x00, 0x53, 0x74, 0xd1}
	props = binary.BigEndian.AppendUint32(props, uint32(4+3+len(arr)))
	props = binary.BigEndian.AppendUint32(props, 2)
	props = append(props, 0xa3, 1, 'a')
	props = append(props, arr...)
	payload := append([]byte{0x00, 0x53, 0x73, 0x45}, props...) // empty properties, then these

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := parseRequest(payload)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, encoding.ErrLimitExceeded) {
		t.Fatalf("parse: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 32<<20 {
		t.Fatalf("a %d KB request allocated %d MiB before it was refused", len(payload)>>10, got>>20)
	}
}

// A topic's copy made by a rule action carries the rule's name and the
// action's changes: application properties set, with their types, or
// removed; system properties set or cleared in the properties section.
// What came later (a dead-lettering) still applies on top.
func TestOutboundAppliesRuleActions(t *testing.T) {
	body := marshal(t, &amqp.Message{
		Properties: &amqp.MessageProperties{MessageID: "m-1", Subject: ptr("old"), To: ptr("somewhere"),
			CorrelationID: "corr", GroupID: ptr("session"), UserID: []byte("user")},
		ApplicationProperties: map[string]any{"color": "red", "keep": int32(7), "count": int64(1)},
		Data:                  [][]byte{[]byte("payload")},
	})
	at := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	u := broker.FilterUUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	d := broker.Delivery{Seq: 9, EnqueuedAt: at.UnixNano(), Message: body, Overlays: []broker.Overlay{
		{Type: broker.Copied, Rule: "tag", Changes: []broker.RuleChange{
			{Sys: broker.SysLabel, Value: broker.StringValue("tagged")},
			{Name: "extra", Value: broker.IntValue(1)},
			{Name: "color", Remove: true},
			{Name: "count", Value: broker.IntValue(2)},
			{Name: "ratio", Value: broker.DoubleValue(0.5)},
			{Name: "price", Value: broker.DecimalValue(1.25)},
			{Name: "flag", Value: broker.BoolValue(true)},
			{Name: "when", Value: broker.TimestampMillis(at.UnixMilli())},
			{Name: "span", Value: broker.DurationValue(time.Second)},
			{Name: "id", Value: broker.UUIDValue(u)},
			{Name: "nothing", Value: broker.NullValue()},
			{Sys: broker.SysCorrelationID, Remove: true},
			{Sys: broker.SysTo, Value: broker.NullValue()},
			{Sys: broker.SysReplyTo, Value: broker.StringValue("reply")},
			{Sys: broker.SysMessageID, Value: broker.StringValue("m-2")},
			{Sys: broker.SysSessionID, Value: broker.StringValue("other")},
			{Sys: broker.SysReplyToSessionID, Value: broker.StringValue("rs")},
			{Sys: broker.SysContentType, Value: broker.StringValue("text/plain")},
			{Sys: broker.SysScheduledEnqueueTimeUtc, Value: broker.TimestampMillis(at.UnixMilli())}, // ignored
			{Sys: broker.SysTimeToLive, Value: broker.DurationValue(time.Minute)},                   // the header's, from the broker
		}},
		{Type: broker.DeadLettered, Reason: "r", Description: "d"},
	}}
	m := unmarshal(t, must(outbound(nil, &d)))
	want := map[string]any{"keep": int32(7), "count": int64(2), "RuleName": "tag", "extra": int64(1), "ratio": 0.5,
		"price": 1.25, "flag": true, "when": at, "span": int64(10_000_000), "id": amqp.UUID(u), "nothing": nil,
		"DeadLetterReason": "r", "DeadLetterErrorDescription": "d"}
	if len(m.ApplicationProperties) != len(want) {
		t.Errorf("application properties %#v", m.ApplicationProperties)
	}
	for k, v := range want {
		got, found := m.ApplicationProperties[k]
		if tm, isTime := got.(time.Time); isTime {
			got = tm.UTC()
		}
		if !found || got != v {
			t.Errorf("application property %s = %#v, want %#v", k, got, v)
		}
	}
	p := m.Properties
	if p == nil || p.MessageID != "m-2" || p.CorrelationID != nil || p.To != nil || p.Subject == nil || *p.Subject != "tagged" ||
		p.ReplyTo == nil || *p.ReplyTo != "reply" || p.GroupID == nil || *p.GroupID != "other" ||
		p.ReplyToGroupID == nil || *p.ReplyToGroupID != "rs" || p.ContentType == nil || *p.ContentType != "text/plain" ||
		string(p.UserID) != "user" {
		t.Errorf("properties %+v", p)
	}
	if m.Annotations["x-opt-scheduled-enqueue-time"] != nil || string(m.GetData()) != "payload" {
		t.Errorf("annotations %#v, body %q", m.Annotations, m.GetData())
	}

	// A copy dead-lettered on arrival says why, and names no rule.
	d.Overlays = []broker.Overlay{{Type: broker.Copied, Reason: "Session id is null.", Description: "no session"}}
	m = unmarshal(t, must(outbound(nil, &d)))
	if m.ApplicationProperties["DeadLetterReason"] != "Session id is null." ||
		m.ApplicationProperties["DeadLetterErrorDescription"] != "no session" || m.ApplicationProperties["RuleName"] != nil ||
		m.ApplicationProperties["color"] != "red" || m.Properties.MessageID != "m-1" {
		t.Errorf("dead-lettered copy: %#v %+v", m.ApplicationProperties, m.Properties)
	}
}

// A delivery without overlays is the stored bare message byte for byte,
// written without allocating.
func TestOutboundWithoutOverlaysAllocatesNothing(t *testing.T) {
	body := marshal(t, &amqp.Message{
		Properties:            &amqp.MessageProperties{MessageID: "m-1", Subject: ptr("s")},
		ApplicationProperties: map[string]any{"k": "v"},
		Data:                  [][]byte{[]byte("payload")},
	})
	d := broker.Delivery{Seq: 1, Token: broker.LockToken{1}, LockedUntil: 2e18, EnqueuedAt: 1e18, Message: body}
	buf := make([]byte, 0, 1024)
	out := must(outbound(buf, &d))
	s, err := message.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.Bare(), body) {
		t.Fatal("the bare message changed")
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = outbound(buf[:0], &d) }); n != 0 {
		t.Fatalf("%v allocations per delivery", n)
	}
}
