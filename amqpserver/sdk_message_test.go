package amqpserver

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/broker"
)

// Every message property and every application-property type survives the
// broker, with the exact Go types azservicebus's own TestReceiverAMQPDataTypes
// expects.
func TestSDKMessagePropertiesRoundTrip(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	s, _ := c.NewSender("q1", nil)
	stamp := time.Date(2000, 1, 1, 1, 2, 3, 0, time.UTC)
	sent := &azservicebus.Message{
		Body:             []byte("hello, this is the body"),
		MessageID:        to.Ptr("id-1"),
		CorrelationID:    to.Ptr("corr-1"),
		Subject:          to.Ptr("subject-1"),
		To:               to.Ptr("to-1"),
		ReplyTo:          to.Ptr("reply-1"),
		ReplyToSessionID: to.Ptr("reply-session-1"),
		ContentType:      to.Ptr("application/test"),
		TimeToLive:       to.Ptr(time.Hour),
		PartitionKey:     to.Ptr("pk-1"),
		ApplicationProperties: map[string]any{
			"timestamp": stamp,
			"byte":      byte(128), "uint8": int8(101), "uint32": int32(400), "uint64": int64(400),
			"int": 400, "int8": int8(-101), "int32": int32(-400), "int64": int64(-400),
			"float": 400.1, "float64": float64(400.1),
			"string": "hello world", "char": 'g', "char2": '❤', "bool": true,
			"uuid": amqp.UUID([16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}),
		},
	}
	before := time.Now().Add(-time.Second)
	if err := s.SendMessage(ctxT(t), sent, nil); err != nil {
		t.Fatal(err)
	}
	r, _ := c.NewReceiverForQueue("q1", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	m := receiveN(t, r, 1)[0]
	if string(m.Body) != string(sent.Body) || m.MessageID != "id-1" || *m.CorrelationID != "corr-1" || *m.Subject != "subject-1" ||
		*m.To != "to-1" || *m.ReplyTo != "reply-1" || *m.ReplyToSessionID != "reply-session-1" ||
		*m.ContentType != "application/test" || *m.TimeToLive != time.Hour || *m.PartitionKey != "pk-1" {
		t.Fatalf("system properties changed: %+v", m)
	}
	if m.EnqueuedTime == nil || m.EnqueuedTime.Before(before) || m.ExpiresAt == nil ||
		!m.ExpiresAt.Equal(m.EnqueuedTime.Add(time.Hour)) || m.SequenceNumber == nil || m.State != azservicebus.MessageStateActive {
		t.Fatalf("broker properties: enqueued %v expires %v seq %v state %v", m.EnqueuedTime, m.ExpiresAt, m.SequenceNumber, m.State)
	}
	got := m.ApplicationProperties
	if d := stamp.Sub(got["timestamp"].(time.Time)); d != 0 {
		t.Fatalf("timestamp off by %v", d)
	}
	delete(got, "timestamp")
	want := map[string]any{
		"byte": byte(128), "uint8": int8(101), "uint32": int32(400), "uint64": int64(400),
		"int": int64(400), "int8": int8(-101), "int32": int32(-400), "int64": int64(-400),
		"float": float64(400.1), "float64": float64(400.1),
		"string": "hello world", "char": 'g', "char2": '❤', "bool": true,
		"uuid": amqp.UUID([16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("application properties\n got %#v\nwant %#v", got, want)
	}
}

// A message sent without an id gets one (Service Bus assigns it).
func TestSDKMessageIDAssigned(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	sendBodies(t, c, "q1", "x")
	r, _ := c.NewReceiverForQueue("q1", nil)
	if m := receiveN(t, r, 1)[0]; len(m.MessageID) != 36 {
		t.Fatalf("message id %q", m.MessageID)
	}
}

func TestSDKBatchSend(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	s, _ := c.NewSender("q1", nil)
	batch, err := s.NewMessageBatch(ctxT(t), nil)
	if err != nil {
		t.Fatalf("new batch (needs max-message-size on the sender attach): %v", err)
	}
	for _, b := range []string{"one", "two", "three"} {
		if err := batch.AddMessage(&azservicebus.Message{Body: []byte(b)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SendMessageBatch(ctxT(t), batch, nil); err != nil {
		t.Fatal(err)
	}
	r, _ := c.NewReceiverForQueue("q1", nil)
	msgs := receiveN(t, r, 3)
	for i, want := range []string{"one", "two", "three"} {
		if string(msgs[i].Body) != want || i > 0 && *msgs[i].SequenceNumber <= *msgs[i-1].SequenceNumber {
			t.Fatalf("batch message %d: %q seq %d", i, msgs[i].Body, *msgs[i].SequenceNumber)
		}
	}
}

// Peek in SequenceNumber order, paging with last+1, including locked,
// deferred and scheduled messages.
func TestSDKPeekPagingAndStates(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	sendBodies(t, c, "q1", "0", "1", "2", "3", "4", "5", "6")
	s, _ := c.NewSender("q1", nil)
	if _, err := s.ScheduleMessages(ctxT(t), []*azservicebus.Message{{Body: []byte("later")}}, time.Now().Add(time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	r, _ := c.NewReceiverForQueue("q1", nil)
	locked := receiveN(t, r, 2)
	if err := r.DeferMessage(ctxT(t), locked[1], nil); err != nil {
		t.Fatal(err)
	}
	var bodies []string
	states := map[string]azservicebus.MessageState{}
	var from *int64
	for page := 0; page < 10; page++ {
		msgs, err := r.PeekMessages(ctxT(t), 3, &azservicebus.PeekMessagesOptions{FromSequenceNumber: from})
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			bodies = append(bodies, string(m.Body))
			states[string(m.Body)] = m.State
		}
		from = to.Ptr(*msgs[len(msgs)-1].SequenceNumber + 1)
	}
	if want := []string{"0", "1", "2", "3", "4", "5", "6", "later"}; !reflect.DeepEqual(bodies, want) {
		t.Fatalf("peeked %v, want %v", bodies, want)
	}
	if states["1"] != azservicebus.MessageStateDeferred || states["later"] != azservicebus.MessageStateScheduled || states["0"] != azservicebus.MessageStateActive {
		t.Fatalf("states %v", states)
	}
}

func TestSDKScheduleAndCancel(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	s, _ := c.NewSender("q1", nil)
	soon := time.Now().Add(700 * time.Millisecond)
	seqs, err := s.ScheduleMessages(ctxT(t), []*azservicebus.Message{{Body: []byte("soon")}, {Body: []byte("cancelled")}}, soon, nil)
	if err != nil || len(seqs) != 2 {
		t.Fatalf("schedule: %v %v", seqs, err)
	}
	if err := s.CancelScheduledMessages(ctxT(t), seqs[1:], nil); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	// Sent with ScheduledEnqueueTime set, a message is scheduled too.
	if err := s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("annotated"), ScheduledEnqueueTime: &soon}, nil); err != nil {
		t.Fatal(err)
	}
	r, _ := c.NewReceiverForQueue("q1", nil)
	msgs := receiveN(t, r, 2)
	got := map[string]*azservicebus.ReceivedMessage{}
	for _, m := range msgs {
		got[string(m.Body)] = m
	}
	if got["soon"] == nil || got["annotated"] == nil {
		t.Fatalf("received %v", msgs)
	}
	// The wire carries the time in whole milliseconds.
	if time.Now().Before(soon.Truncate(time.Millisecond)) {
		t.Fatal("a scheduled message arrived before its time")
	}
	if *got["soon"].SequenceNumber == seqs[0] {
		t.Fatal("an activated message keeps its scheduling SequenceNumber; it should get a new one")
	}
	short, cancel := contextWithTimeout(t, 500*time.Millisecond)
	defer cancel()
	if extra, _ := r.ReceiveMessages(short, 1, nil); len(extra) != 0 {
		t.Fatalf("the cancelled message arrived: %q", extra[0].Body)
	}
}

// A message scheduled beyond what unix nanoseconds hold (the year 2262)
// stays scheduled, through ScheduleMessages and through a send with
// ScheduledEnqueueTime; the time once overflowed into the past, and the
// messages were enqueued at once.
func TestSDKScheduleFarFuture(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	s, _ := c.NewSender("q1", nil)
	far := time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.ScheduleMessages(ctxT(t), []*azservicebus.Message{{Body: []byte("scheduled")}}, far, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("annotated"), ScheduledEnqueueTime: &far}, nil); err != nil {
		t.Fatal(err)
	}
	r, _ := c.NewReceiverForQueue("q1", nil)
	peeked, err := r.PeekMessages(ctxT(t), 10, nil)
	if err != nil || len(peeked) != 2 {
		t.Fatalf("peek: %d messages, %v", len(peeked), err)
	}
	for _, m := range peeked {
		if m.State != azservicebus.MessageStateScheduled || m.ScheduledEnqueueTime == nil || m.ScheduledEnqueueTime.Year() < 2262 {
			t.Fatalf("%s: state %v, scheduled for %v", m.Body, m.State, m.ScheduledEnqueueTime)
		}
	}
	short, cancel := contextWithTimeout(t, 300*time.Millisecond)
	defer cancel()
	if got, _ := r.ReceiveMessages(short, 1, nil); len(got) != 0 {
		t.Fatalf("%q arrived, scheduled for the year 3000", got[0].Body)
	}
}

// The annotations only the broker sets never go out with the client's
// value: azservicebus's TestNilPartitionKey sends x-opt-locked-until,
// x-opt-sequence-number and x-opt-enqueued-time null, which Service Bus
// accepts and ignores, while x-opt-partition-key and
// x-opt-deadletter-source pass through null. A peek and a
// receive-and-delete carry no lock, so the broker sets no locked-until of
// its own there; the client's null would make the SDK panic
// (lockedUntil.(time.Time)).
func TestSDKClientCannotSetBrokerAnnotations(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	s, _ := c.NewSender("q1", nil)
	for range 3 {
		err := s.SendAMQPAnnotatedMessage(ctxT(t), &azservicebus.AMQPAnnotatedMessage{
			MessageAnnotations: map[any]any{
				"x-opt-partition-key":     nil,
				"x-opt-deadletter-source": nil,
				"x-opt-locked-until":      nil,
				"x-opt-sequence-number":   nil,
				"x-opt-enqueued-time":     nil,
			},
			Body: azservicebus.AMQPAnnotatedMessageBody{Value: "hello"},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	check := func(how string, receive func() ([]*azservicebus.ReceivedMessage, error)) {
		t.Helper()
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%s: the SDK panicked: %v", how, r)
			}
		}()
		msgs, err := receive()
		if err != nil || len(msgs) != 1 {
			t.Fatalf("%s: %d messages, %v", how, len(msgs), err)
		}
		m := msgs[0]
		raw := m.RawAMQPMessage.MessageAnnotations
		if v, ok := raw["x-opt-partition-key"]; !ok || v != nil {
			t.Fatalf("%s: x-opt-partition-key %v (present %v), want the client's null", how, v, ok)
		}
		if m.SequenceNumber == nil || *m.SequenceNumber <= 0 || m.EnqueuedTime == nil || m.EnqueuedTime.IsZero() {
			t.Fatalf("%s: sequence number %v, enqueued time %v", how, m.SequenceNumber, m.EnqueuedTime)
		}
	}
	r, _ := c.NewReceiverForQueue("q1", nil)
	check("peek", func() ([]*azservicebus.ReceivedMessage, error) { return r.PeekMessages(ctxT(t), 1, nil) })
	check("peek-lock", func() ([]*azservicebus.ReceivedMessage, error) {
		msgs, err := r.ReceiveMessages(ctxT(t), 1, nil)
		if err == nil && (msgs[0].LockedUntil == nil || time.Until(*msgs[0].LockedUntil) <= 0) {
			t.Fatalf("peek-lock: locked until %v", msgs[0].LockedUntil)
		}
		return msgs, err
	})
	rad, _ := c.NewReceiverForQueue("q1", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	check("receive-and-delete", func() ([]*azservicebus.ReceivedMessage, error) { return rad.ReceiveMessages(ctxT(t), 1, nil) })
}

// A null x-opt-scheduled-enqueue-time, x-opt-message-state or
// x-opt-enqueue-sequence-number is refused, as Service Bus refuses it
// (TestNilPartitionKey's comment), at once and for good: stored, it would
// make every Go receiver of the message panic.
func TestSDKNullServiceBusAnnotationsRefused(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	s, _ := c.NewSender("q1", nil)
	for _, key := range []string{"x-opt-scheduled-enqueue-time", "x-opt-message-state", "x-opt-enqueue-sequence-number"} {
		err := s.SendAMQPAnnotatedMessage(ctxT(t), &azservicebus.AMQPAnnotatedMessage{
			MessageAnnotations: map[any]any{key: nil},
			Body:               azservicebus.AMQPAnnotatedMessageBody{Value: key},
		}, nil)
		var amqpErr *amqp.Error
		if !errors.As(err, &amqpErr) || amqpErr.Condition != amqp.ErrCondNotAllowed || !strings.Contains(amqpErr.Description, key) {
			t.Fatalf("a message with a null %s: %v", key, err)
		}
	}
	peeked, err := (func() ([]*azservicebus.ReceivedMessage, error) {
		r, _ := c.NewReceiverForQueue("q1", nil)
		return r.PeekMessages(ctxT(t), 10, nil)
	})()
	if err != nil || len(peeked) != 0 {
		t.Fatalf("the queue holds %d messages (%v)", len(peeked), err)
	}
}

// What a sender puts in an AMQP message comes back as Service Bus hands it
// over (the SDK's sender_test.go
// TestSender_SendAMQPMessageWithMultipleByteSlicesInData): its delivery
// annotations beside the lock token, its message annotations, footer and
// every data section; and x-opt-message-state only for a message that is
// not active (deferred 1, scheduled 2), which the SDKs read as active when
// it is absent.
func TestSDKAnnotatedMessageRoundTrip(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	s, _ := c.NewSender("q1", nil)
	err := s.SendAMQPAnnotatedMessage(ctxT(t), &azservicebus.AMQPAnnotatedMessage{
		DeliveryAnnotations: map[any]any{"x-opt-delivery-annotation-test": "test-value"},
		MessageAnnotations:  map[any]any{"x-opt-message-annotation-test": "test-value"},
		Footer:              map[any]any{"x-opt-footer-test": "footer-value"},
		Body:                azservicebus.AMQPAnnotatedMessageBody{Data: [][]byte{[]byte("one"), []byte("two")}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ScheduleMessages(ctxT(t), []*azservicebus.Message{{Body: []byte("later")}}, time.Now().Add(time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	r, _ := c.NewReceiverForQueue("q1", nil)
	m := receiveN(t, r, 1)[0]
	raw := m.RawAMQPMessage
	if raw.DeliveryAnnotations["x-opt-delivery-annotation-test"] != "test-value" || raw.DeliveryAnnotations["x-opt-lock-token"] == nil ||
		len(raw.DeliveryAnnotations) != 2 {
		t.Fatalf("delivery annotations %v", raw.DeliveryAnnotations)
	}
	if state, sent := raw.MessageAnnotations["x-opt-message-state"]; sent || m.State != azservicebus.MessageStateActive {
		t.Fatalf("an active message carries x-opt-message-state %v (state %v)", state, m.State)
	}
	if raw.MessageAnnotations["x-opt-message-annotation-test"] != "test-value" || raw.Footer["x-opt-footer-test"] != "footer-value" ||
		!reflect.DeepEqual(raw.Body.Data, [][]byte{[]byte("one"), []byte("two")}) {
		t.Fatalf("annotations %v, footer %v, data %q", raw.MessageAnnotations, raw.Footer, raw.Body.Data)
	}

	if err := r.DeferMessage(ctxT(t), m, nil); err != nil {
		t.Fatal(err)
	}
	peeked, err := r.PeekMessages(ctxT(t), 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(int64(1))})
	if err != nil || len(peeked) != 2 {
		t.Fatalf("peek: %d messages, %v", len(peeked), err)
	}
	for i, want := range []int32{1, 2} {
		if got := peeked[i].RawAMQPMessage.MessageAnnotations["x-opt-message-state"]; got != any(want) {
			t.Fatalf("peeked %q: x-opt-message-state %#v, want %d", peeked[i].Body, got, want)
		}
	}
	deferred, err := r.ReceiveDeferredMessages(ctxT(t), []int64{*m.SequenceNumber}, nil)
	if err != nil || len(deferred) != 1 || deferred[0].State != azservicebus.MessageStateDeferred {
		t.Fatalf("receive deferred: %v %v", deferred, err)
	}
}
