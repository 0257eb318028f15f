package amqpserver

import (
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walbus/walbus/broker"
)

func TestSDKDuplicateDetection(t *testing.T) {
	cfg := broker.DefaultConfig()
	cfg.RequiresDuplicateDetection = true
	cfg.DuplicateWindow = time.Minute
	tb := startBroker(t, map[string]broker.Config{"q1": cfg})
	c := tb.client(t)
	s, _ := c.NewSender("q1", nil)
	for _, id := range []string{"a", "b", "a", "a"} {
		// Duplicates are acknowledged like any send.
		if err := s.SendMessage(ctxT(t), &azservicebus.Message{MessageID: to.Ptr(id), Body: []byte(id)}, nil); err != nil {
			t.Fatalf("send %s: %v", id, err)
		}
	}
	batch, _ := s.NewMessageBatch(ctxT(t), nil)
	batch.AddMessage(&azservicebus.Message{MessageID: to.Ptr("b"), Body: []byte("b again")}, nil)
	batch.AddMessage(&azservicebus.Message{MessageID: to.Ptr("c"), Body: []byte("c")}, nil)
	if err := s.SendMessageBatch(ctxT(t), batch, nil); err != nil {
		t.Fatal(err)
	}
	r, _ := c.NewReceiverForQueue("q1", nil)
	peek, err := r.PeekMessages(ctxT(t), 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := bodies(peek); fmt.Sprint(got) != "[a b c]" {
		t.Fatalf("stored %v, want [a b c]", got)
	}
}

func TestSDKTimeToLive(t *testing.T) {
	capped := broker.DefaultConfig()
	capped.DefaultTTL = time.Hour
	short := broker.DefaultConfig()
	short.DefaultTTL = 500 * time.Millisecond
	toDLQ := broker.DefaultConfig()
	toDLQ.DefaultTTL = 500 * time.Millisecond
	toDLQ.DeadLetterOnExpiry = true
	tb := startBroker(t, map[string]broker.Config{"capped": capped, "short": short, "dlq": toDLQ})
	c := tb.client(t)

	// The entity default is the default and the ceiling.
	s, _ := c.NewSender("capped", nil)
	s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("default")}, nil)
	s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("longer"), TimeToLive: to.Ptr(48 * time.Hour)}, nil)
	s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("shorter"), TimeToLive: to.Ptr(time.Minute)}, nil)
	r, _ := c.NewReceiverForQueue("capped", nil)
	for _, m := range receiveN(t, r, 3) {
		want := time.Hour
		if string(m.Body) == "shorter" {
			want = time.Minute
		}
		if got := m.ExpiresAt.Sub(*m.EnqueuedTime); got != want {
			t.Errorf("%s expires %v after enqueue, want %v", m.Body, got, want)
		}
	}

	// Expired messages are never received; with dead-lettering on
	// expiration they go to the dead-letter queue.
	for _, q := range []string{"short", "dlq"} {
		sendBodies(t, c, q, "stale")
	}
	time.Sleep(time.Second)
	for _, q := range []string{"short", "dlq"} {
		r, _ := c.NewReceiverForQueue(q, nil)
		ctx, cancel := contextWithTimeout(t, 300*time.Millisecond)
		got, _ := r.ReceiveMessages(ctx, 1, nil)
		cancel()
		if len(got) != 0 {
			t.Fatalf("%s: an expired message was received", q)
		}
	}
	dead, _ := c.NewReceiverForQueue("dlq", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	m := receiveN(t, dead, 1)[0]
	if string(m.Body) != "stale" || m.DeadLetterReason == nil || *m.DeadLetterReason != "TTLExpiredException" {
		t.Fatalf("expired to the dead-letter queue: %q %v", m.Body, m.DeadLetterReason)
	}
	shortDead, _ := c.NewReceiverForQueue("short", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if peek, _ := shortDead.PeekMessages(ctxT(t), 1, nil); len(peek) != 0 {
		t.Fatal("without dead-lettering on expiration an expired message is dropped")
	}
}
