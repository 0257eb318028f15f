package amqpserver

import (
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walbus/walbus/broker"
)

// createQueues creates queues in the order given (forwarding targets
// before the queues that forward to them).
func createQueues(t *testing.T, tb *testBroker, queues ...any) {
	t.Helper()
	for i := 0; i < len(queues); i += 2 {
		if _, err := tb.b.CreateQueue(queues[i].(string), queues[i+1].(broker.Config)); err != nil {
			t.Fatal(err)
		}
	}
}

// ForwardTo: what is sent to a forwarding queue arrives in the queue at the
// end of the chain, properties and all, and never shows in the ones before;
// a message scheduled through the first queue is cancelled through it.
func TestSDKForwardTo(t *testing.T) {
	tb := startBroker(t, nil)
	first, middle := broker.DefaultConfig(), broker.DefaultConfig()
	first.ForwardTo, middle.ForwardTo = "middle", "last"
	createQueues(t, tb, "last", broker.DefaultConfig(), "middle", middle, "first", first)
	c := tb.client(t)
	s, err := c.NewSender("first", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		err := s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte{'a' + byte(i)}, Subject: to.Ptr("fwd"),
			ApplicationProperties: map[string]any{"i": int64(i)}}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	seqs, err := s.ScheduleMessages(ctxT(t), []*azservicebus.Message{{Body: []byte("later")}}, time.Now().Add(time.Hour), nil)
	if err != nil || len(seqs) != 1 {
		t.Fatalf("schedule through the forwarding queue: %v %v", seqs, err)
	}
	if err := s.CancelScheduledMessages(ctxT(t), seqs, nil); err != nil {
		t.Fatalf("cancel through the forwarding queue: %v", err)
	}

	r, _ := c.NewReceiverForQueue("last", nil)
	for i, m := range receiveN(t, r, 3) {
		if string(m.Body) != string(rune('a'+i)) || *m.Subject != "fwd" || m.ApplicationProperties["i"] != int64(i) {
			t.Fatalf("message %d arrived as %q %v %v", i, m.Body, m.Subject, m.ApplicationProperties)
		}
		if err := r.CompleteMessage(ctxT(t), m, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"first", "middle", "last"} {
		rcv, _ := c.NewReceiverForQueue(q, nil)
		if left, err := rcv.PeekMessages(ctxT(t), 10, nil); err != nil || len(left) != 0 {
			t.Fatalf("%s holds %d messages (%v)", q, len(left), err)
		}
	}
}

// ForwardDeadLetteredMessagesTo: a message dead-lettered by a receiver and
// one that ran out of deliveries arrive in the target's queue with their
// reasons, their properties and DeadLetterSource; the source's dead-letter
// queue ends up empty.
func TestSDKForwardDeadLettered(t *testing.T) {
	tb := startBroker(t, nil)
	work := broker.DefaultConfig()
	work.MaxDeliveryCount = 2
	work.ForwardDeadLetteredMessagesTo = "parking"
	createQueues(t, tb, "parking", broker.DefaultConfig(), "work", work)
	c := tb.client(t)
	sendBodies(t, c, "work", "explicit", "exceeded")
	r, _ := c.NewReceiverForQueue("work", nil)
	first := receiveN(t, r, 1)[0]
	if err := r.AbandonMessage(ctxT(t), first, &azservicebus.AbandonMessageOptions{
		PropertiesToModify: map[string]any{"abandoned-by": "test"}}); err != nil {
		t.Fatal(err)
	}
	first = receiveN(t, r, 1)[0]
	if string(first.Body) != "explicit" {
		first = receiveN(t, r, 1)[0]
	}
	err := r.DeadLetterMessage(ctxT(t), first, &azservicebus.DeadLetterOptions{
		Reason: to.Ptr("bad-order"), ErrorDescription: to.Ptr("no customer"),
		PropertiesToModify: map[string]any{"checked-by": "test"}})
	if err != nil {
		t.Fatal(err)
	}
	for {
		msgs, err := r.ReceiveMessages(ctxT(t), 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(msgs[0].Body) != "exceeded" {
			t.Fatalf("received %q again after dead-lettering it", msgs[0].Body)
		}
		if err := r.AbandonMessage(ctxT(t), msgs[0], nil); err != nil {
			t.Fatal(err)
		}
		if msgs[0].DeliveryCount == 2 {
			break
		}
	}

	parking, _ := c.NewReceiverForQueue("parking", nil)
	byBody := map[string]*azservicebus.ReceivedMessage{}
	for _, m := range receiveN(t, parking, 2) {
		byBody[string(m.Body)] = m
		if m.DeadLetterSource == nil || *m.DeadLetterSource != "work" {
			t.Fatalf("%q has DeadLetterSource %v", m.Body, m.DeadLetterSource)
		}
		if m.DeliveryCount != 1 {
			t.Fatalf("%q arrived with DeliveryCount %d", m.Body, m.DeliveryCount)
		}
	}
	ex := byBody["explicit"]
	if ex == nil || *ex.DeadLetterReason != "bad-order" || *ex.DeadLetterErrorDescription != "no customer" ||
		ex.ApplicationProperties["checked-by"] != "test" || ex.ApplicationProperties["abandoned-by"] != "test" {
		t.Fatalf("explicit dead-letter: %+v", ex)
	}
	if mx := byBody["exceeded"]; mx == nil || *mx.DeadLetterReason != "MaxDeliveryCountExceeded" {
		t.Fatalf("max delivery dead-letter: %+v", mx)
	}
	// The source completes each message once the target has it, just after
	// the target could hand it out.
	dlq, _ := c.NewReceiverForQueue("work", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left, err := dlq.PeekMessages(ctxT(t), 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr[int64](0)})
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source's dead-letter queue still holds %d messages", len(left))
		}
	}
}

// A forwarding queue with duplicate detection drops a MessageId it has
// seen, although it stores nothing: the repeat of a single send and the
// repeat inside a batch never reach the target.
func TestSDKForwardToDuplicateDetection(t *testing.T) {
	tb := startBroker(t, nil)
	first := broker.DefaultConfig()
	first.ForwardTo, first.RequiresDuplicateDetection = "last", true
	createQueues(t, tb, "last", broker.DefaultConfig(), "first", first)
	c := tb.client(t)
	s, err := c.NewSender("first", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"x1", "x2"} {
		if err := s.SendMessage(ctxT(t), &azservicebus.Message{MessageID: to.Ptr("x"), Body: []byte(body)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := s.NewMessageBatch(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"y1", "y2", "x3"} {
		if err := batch.AddMessage(&azservicebus.Message{MessageID: to.Ptr(body[:1]), Body: []byte(body)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SendMessageBatch(ctxT(t), batch, nil); err != nil {
		t.Fatal(err)
	}
	r, _ := c.NewReceiverForQueue("last", nil)
	got, err := r.PeekMessages(ctxT(t), 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b := bodies(got); fmt.Sprint(b) != "[x1 y1]" {
		t.Fatalf("last holds %v, want [x1 y1]", b)
	}
}
