package amqpserver

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walbus/walbus/broker"
)

// The transfer dead-letter queue's address, "<queue>/$Transfer/$DeadLetterQueue",
// is where the Go SDK's SubQueueTransfer receivers attach, their
// $management link below it; before, walbus refused it with amqp:not-found,
// which the SDK reports as a fatal CodeNotFound. A sender to it is refused
// message by message, as one to the dead-letter queue is.
func TestSDKTransferDeadLetterQueueAddress(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	r, err := c.NewReceiverForQueue("q1", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueTransfer})
	if err != nil {
		t.Fatal(err)
	}
	if msgs, err := r.PeekMessages(ctxT(t), 10, nil); err != nil || len(msgs) != 0 {
		t.Fatalf("peek of an empty transfer dead-letter queue: %d messages, %v", len(msgs), err)
	}
	for _, address := range []string{"q1/$Transfer/$DeadLetterQueue", "Q1/$transfer/$deadletterqueue", "q1/$DeadLetterQueue"} {
		s, err := c.NewSender(address, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("x")}, nil)
		if err == nil || !strings.Contains(err.Error(), "not-allowed") {
			t.Fatalf("send to %s: %v", address, err)
		}
		s.Close(ctxT(t))
	}
	if msgs, err := r.PeekMessages(ctxT(t), 10, nil); err != nil || len(msgs) != 0 {
		t.Fatalf("the transfer dead-letter queue holds %d messages after refused sends (%v)", len(msgs), err)
	}
}

// A dead-lettered message that ForwardDeadLetteredMessagesTo cannot
// deliver (larger than the target allows) is in the source's transfer
// dead-letter queue, with DeadLetterReason and DeadLetterErrorDescription
// saying why, while the messages dead-lettered after it reach the target.
// A SubQueueTransfer receiver peeks it, receives, renews and completes
// it, receives one in receive-and-delete mode, and receives a deferred one
// by SequenceNumber and settles it through $management.
func TestSDKTransferDeadLetterQueue(t *testing.T) {
	tb := startBroker(t, nil)
	small, work := broker.DefaultConfig(), broker.DefaultConfig()
	small.MaxMessageSize = 1024
	work.ForwardDeadLetteredMessagesTo = "small"
	createQueues(t, tb, "small", small, "work", work)
	c := tb.client(t)
	big := strings.Repeat("x", 2000)
	sendBodies(t, c, "work", big+"1", "fits", big+"2", big+"3")
	r, _ := c.NewReceiverForQueue("work", nil)
	for _, m := range receiveN(t, r, 4) {
		if err := r.DeadLetterMessage(ctxT(t), m, &azservicebus.DeadLetterOptions{Reason: to.Ptr("bad")}); err != nil {
			t.Fatal(err)
		}
	}
	target, _ := c.NewReceiverForQueue("small", nil)
	if m := receiveN(t, target, 1)[0]; string(m.Body) != "fits" || *m.DeadLetterReason != "bad" {
		t.Fatalf("the target received %q (%v)", m.Body, m.DeadLetterReason)
	}

	tdlq, err := c.NewReceiverForQueue("work", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueTransfer})
	if err != nil {
		t.Fatal(err)
	}
	// The forwarder moves them one by one: wait for the third.
	var peeked []*azservicebus.ReceivedMessage
	for deadline := time.Now().Add(15 * time.Second); len(peeked) < 3; time.Sleep(10 * time.Millisecond) {
		if peeked, err = tdlq.PeekMessages(ctxT(t), 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr[int64](0)}); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the transfer dead-letter queue holds %d messages, want 3", len(peeked))
		}
	}
	for i, m := range peeked {
		if string(m.Body) != big+string(rune('1'+i)) || m.DeadLetterReason == nil || *m.DeadLetterReason != "MessageSizeExceeded" ||
			m.DeadLetterErrorDescription == nil || !strings.Contains(*m.DeadLetterErrorDescription, "small") {
			t.Fatalf("peeked %d: %d bytes, reason %v, description %v", i, len(m.Body), m.DeadLetterReason, m.DeadLetterErrorDescription)
		}
	}

	m := receiveN(t, tdlq, 1)[0]
	if string(m.Body) != big+"1" || m.LockedUntil == nil || *m.DeadLetterReason != "MessageSizeExceeded" {
		t.Fatalf("received %d bytes, reason %v", len(m.Body), m.DeadLetterReason)
	}
	if err := tdlq.RenewMessageLock(ctxT(t), m, nil); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if err := tdlq.DeferMessage(ctxT(t), m, nil); err != nil {
		t.Fatal(err)
	}
	deferred, err := tdlq.ReceiveDeferredMessages(ctxT(t), []int64{*m.SequenceNumber}, nil)
	if err != nil || len(deferred) != 1 || string(deferred[0].Body) != big+"1" {
		t.Fatalf("receive deferred by SequenceNumber: %d messages, %v", len(deferred), err)
	}
	if err := tdlq.CompleteMessage(ctxT(t), deferred[0], nil); err != nil { // update-disposition
		t.Fatalf("complete a deferred message: %v", err)
	}
	m = receiveN(t, tdlq, 1)[0]
	if err := tdlq.CompleteMessage(ctxT(t), m, nil); err != nil || string(m.Body) != big+"2" {
		t.Fatalf("complete %d bytes: %v", len(m.Body), err)
	}

	rd, err := c.NewReceiverForQueue("work", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueTransfer,
		ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	if m := receiveN(t, rd, 1)[0]; string(m.Body) != big+"3" || *m.DeadLetterReason != "MessageSizeExceeded" {
		t.Fatalf("receive and delete: %d bytes, reason %v", len(m.Body), m.DeadLetterReason)
	}
	if left, err := tdlq.PeekMessages(ctxT(t), 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr[int64](0)}); err != nil || len(left) != 0 {
		t.Fatalf("the transfer dead-letter queue still holds %d messages (%v)", len(left), err)
	}
}

// ForwardTo is refused on a queue that requires sessions, as Service Bus
// refuses it ("isn't supported for session-enabled queues"), when it is
// created and when it is changed; the queue keeps its messages for its
// session receivers.
func TestSDKSessionQueueCannotForward(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"target": broker.DefaultConfig()})
	cfg := broker.DefaultConfig()
	cfg.RequiresSession, cfg.ForwardTo = true, "target"
	if _, err := tb.b.CreateQueue("sessions", cfg); !errors.Is(err, broker.ErrForwarding) || !strings.Contains(err.Error(), "session") {
		t.Fatalf("create a session queue with ForwardTo: %v", err)
	}
	cfg.ForwardTo = ""
	createQueues(t, tb, "sessions", cfg)
	cfg.ForwardTo = "target"
	if err := tb.b.UpdateQueue("sessions", cfg); !errors.Is(err, broker.ErrForwarding) {
		t.Fatalf("give a session queue ForwardTo: %v", err)
	}

	c := tb.client(t)
	s, _ := c.NewSender("sessions", nil)
	if err := s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("kept"), SessionID: to.Ptr("s1")}, nil); err != nil {
		t.Fatal(err)
	}
	sr, err := c.AcceptSessionForQueue(ctxT(t), "sessions", "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := sr.ReceiveMessages(ctxT(t), 1, nil)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "kept" {
		t.Fatalf("session receive: %d messages, %v", len(msgs), err)
	}
	if err := sr.CompleteMessage(ctxT(t), msgs[0], nil); err != nil {
		t.Fatal(err)
	}
}

// Two queues whose dead-letter queues forward to each other, through the
// Go SDK: a message dead-lettered again and again goes back and forth four
// times, and the fifth dead-letter forward is refused: the message is in
// the transfer dead-letter queue of the queue it would have left, with
// DeadLetterReason MaxTransferHopCountExceeded.
func TestSDKDeadLetterForwardingStopsAtFourHops(t *testing.T) {
	tb := startBroker(t, nil)
	a := broker.DefaultConfig()
	a.ForwardDeadLetteredMessagesTo = "b"
	createQueues(t, tb, "b", broker.DefaultConfig(), "a", a)
	b := broker.DefaultConfig()
	b.ForwardDeadLetteredMessagesTo = "a"
	if err := tb.b.UpdateQueue("b", b); err != nil {
		t.Fatal(err)
	}
	c := tb.client(t)
	sendBodies(t, c, "a", "bounced")
	receivers := map[string]*azservicebus.Receiver{}
	for _, name := range []string{"a", "b"} {
		r, err := c.NewReceiverForQueue(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		receivers[name] = r
	}
	at := "a"
	for hop := 0; hop <= 4; hop++ {
		m := receiveN(t, receivers[at], 1)[0]
		if string(m.Body) != "bounced" {
			t.Fatalf("%s gave %q", at, m.Body)
		}
		if err := receivers[at].DeadLetterMessage(ctxT(t), m, &azservicebus.DeadLetterOptions{Reason: to.Ptr("again")}); err != nil {
			t.Fatal(err)
		}
		if hop < 4 {
			at = map[string]string{"a": "b", "b": "a"}[at]
		}
	}
	tdlq, err := c.NewReceiverForQueue(at, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueTransfer})
	if err != nil {
		t.Fatal(err)
	}
	m := receiveN(t, tdlq, 1)[0]
	if string(m.Body) != "bounced" || m.DeadLetterReason == nil || *m.DeadLetterReason != "MaxTransferHopCountExceeded" {
		t.Fatalf("the transfer dead-letter queue of %s gave %q with reason %v", at, m.Body, m.DeadLetterReason)
	}
	for _, name := range []string{"a", "b"} {
		if msgs, err := receivers[name].PeekMessages(ctxT(t), 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr[int64](0)}); err != nil || len(msgs) != 0 {
			t.Fatalf("%s still holds %d messages (%v)", name, len(msgs), err)
		}
	}
}
