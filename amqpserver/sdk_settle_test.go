package amqpserver

import (
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walbus/walbus/broker"
)

func sendBodies(t *testing.T, c *azservicebus.Client, queue string, bodies ...string) {
	t.Helper()
	s, err := c.NewSender(queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctxT(t))
	for _, b := range bodies {
		if err := s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte(b)}, nil); err != nil {
			t.Fatalf("send %q: %v", b, err)
		}
	}
}

func receiveN(t *testing.T, r *azservicebus.Receiver, n int) []*azservicebus.ReceivedMessage {
	t.Helper()
	var out []*azservicebus.ReceivedMessage
	for len(out) < n {
		msgs, err := r.ReceiveMessages(ctxT(t), n-len(out), nil)
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		out = append(out, msgs...)
	}
	return out
}

func TestSDKAbandonCountsDeliveries(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	sendBodies(t, c, "q1", "a")
	r, _ := c.NewReceiverForQueue("q1", nil)
	for want := uint32(1); want <= 3; want++ {
		m := receiveN(t, r, 1)[0]
		if m.DeliveryCount != want {
			t.Fatalf("delivery %d has DeliveryCount %d", want, m.DeliveryCount)
		}
		if err := r.AbandonMessage(ctxT(t), m, &azservicebus.AbandonMessageOptions{
			PropertiesToModify: map[string]any{"attempt": int64(want)}}); err != nil {
			t.Fatalf("abandon: %v", err)
		}
	}
	m := receiveN(t, r, 1)[0]
	if m.ApplicationProperties["attempt"] != int64(3) {
		t.Fatalf("properties to modify not applied: %v", m.ApplicationProperties)
	}
	if err := r.CompleteMessage(ctxT(t), m, nil); err != nil {
		t.Fatal(err)
	}
}

func TestSDKDeadLetterAndDeadLetterQueue(t *testing.T) {
	cfg := broker.DefaultConfig()
	cfg.MaxDeliveryCount = 2
	tb := startBroker(t, map[string]broker.Config{"q1": cfg})
	c := tb.client(t)
	sendBodies(t, c, "q1", "explicit", "exceeded")
	r, _ := c.NewReceiverForQueue("q1", nil)
	first := receiveN(t, r, 1)[0]
	err := r.DeadLetterMessage(ctxT(t), first, &azservicebus.DeadLetterOptions{
		Reason: to.Ptr("bad-order"), ErrorDescription: to.Ptr("no customer"),
		PropertiesToModify: map[string]any{"checked-by": "test"}})
	if err != nil {
		t.Fatalf("dead-letter: %v", err)
	}
	for range 2 {
		m := receiveN(t, r, 1)[0]
		if err := r.AbandonMessage(ctxT(t), m, nil); err != nil {
			t.Fatal(err)
		}
	}
	dlq, err := c.NewReceiverForQueue("q1", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	msgs := receiveN(t, dlq, 2)
	byBody := map[string]*azservicebus.ReceivedMessage{}
	for _, m := range msgs {
		byBody[string(m.Body)] = m
	}
	ex := byBody["explicit"]
	if ex == nil || *ex.DeadLetterReason != "bad-order" || *ex.DeadLetterErrorDescription != "no customer" ||
		ex.ApplicationProperties["checked-by"] != "test" {
		t.Fatalf("explicit dead-letter: %+v", ex)
	}
	mx := byBody["exceeded"]
	if mx == nil || *mx.DeadLetterReason != "MaxDeliveryCountExceeded" {
		t.Fatalf("max delivery dead-letter: %+v", mx)
	}
	for _, m := range msgs {
		if err := dlq.CompleteMessage(ctxT(t), m, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Every settlement succeeded at once over its receive link: a reply
	// the SDK reads as a failure makes it rebuild the connection and retry,
	// or fall back to $management.
	if n := tb.srv.OperationCounts()["com.microsoft:update-disposition"]; n != 0 {
		t.Fatalf("%d settlements fell back to $management", n)
	}

	if left, _ := dlq.PeekMessages(ctxT(t), 10, nil); len(left) != 0 {
		t.Fatalf("dead-letter queue not empty: %d", len(left))
	}
}

func TestSDKDeferAndReceiveDeferred(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	sendBodies(t, c, "q1", "later", "rad")
	r, _ := c.NewReceiverForQueue("q1", nil)
	msgs := receiveN(t, r, 2)
	var seqs []int64
	for _, m := range msgs {
		if err := r.DeferMessage(ctxT(t), m, nil); err != nil {
			t.Fatalf("defer: %v", err)
		}
		seqs = append(seqs, *m.SequenceNumber)
	}
	// Deferred messages are not received normally.
	short, cancel := contextWithTimeout(t, 300*time.Millisecond)
	defer cancel()
	if got, _ := r.ReceiveMessages(short, 1, nil); len(got) != 0 {
		t.Fatalf("a deferred message was received normally: %v", got)
	}
	deferred, err := r.ReceiveDeferredMessages(ctxT(t), seqs[:1], nil)
	if err != nil || len(deferred) != 1 || string(deferred[0].Body) != "later" {
		t.Fatalf("receive deferred: %v %v", deferred, err)
	}
	if deferred[0].State != azservicebus.MessageStateDeferred {
		t.Fatalf("state %v", deferred[0].State)
	}
	// Settled through $management, as the SDK does for deferred messages.
	if err := r.AbandonMessage(ctxT(t), deferred[0], nil); err != nil {
		t.Fatalf("abandon deferred: %v", err)
	}
	peeked, err := r.PeekMessages(ctxT(t), 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &seqs[0]})
	if err != nil || len(peeked) != 2 || peeked[0].DeliveryCount != 2 || peeked[0].State != azservicebus.MessageStateDeferred {
		t.Fatalf("peek after abandoning a deferred message: %v %v", peeked, err)
	}
	again, err := r.ReceiveDeferredMessages(ctxT(t), seqs[:1], nil)
	if err != nil || len(again) != 1 {
		t.Fatal(err)
	}
	if err := r.CompleteMessage(ctxT(t), again[0], nil); err != nil {
		t.Fatalf("complete deferred: %v", err)
	}
	// Receive-and-delete of a deferred message.
	rad, _ := c.NewReceiverForQueue("q1", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	gone, err := rad.ReceiveDeferredMessages(ctxT(t), seqs[1:], nil)
	if err != nil || len(gone) != 1 || string(gone[0].Body) != "rad" {
		t.Fatalf("receive-and-delete deferred: %v %v", gone, err)
	}
	if left, _ := r.PeekMessages(ctxT(t), 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr[int64](1)}); len(left) != 0 {
		t.Fatalf("left: %d", len(left))
	}
	// Unknown numbers: CodeNotFound (a 404 with message-not-found).
	_, err = r.ReceiveDeferredMessages(ctxT(t), []int64{999999}, nil)
	var sbErr *azservicebus.Error
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeNotFound {
		t.Fatalf("unknown deferred number: %v", err)
	}
}

func TestSDKReceiveAndDelete(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	sendBodies(t, c, "q1", "a", "b", "c")
	r, _ := c.NewReceiverForQueue("q1", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	msgs := receiveN(t, r, 3)
	for i, want := range []string{"a", "b", "c"} {
		if string(msgs[i].Body) != want {
			t.Fatalf("message %d is %q", i, msgs[i].Body)
		}
	}
	peek, _ := c.NewReceiverForQueue("q1", nil)
	if left, _ := peek.PeekMessages(ctxT(t), 10, nil); len(left) != 0 {
		t.Fatalf("%d messages left after receive-and-delete", len(left))
	}
}
