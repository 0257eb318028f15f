package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// walbus dlq redrive and purge against a running walbus, checked through
// the Go SDK: a re-driven message is received from its queue again (a
// queue's and a subscription's) with its application properties and
// without its dead-letter reason; purge empties the dead-letter queue.
func TestDeadLetterCommands(t *testing.T) {
	p := startWalbus(t, t.TempDir())
	walbus := managing(t, p)
	walbus(0, "queue", "create", "orders")
	walbus(0, "topic", "create", "events")
	walbus(0, "subscription", "create", "events", "all")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := p.sdkClient()
	defer c.Close(ctx)

	// deadLetter sends bodies to entity and dead-letters them from the
	// receiver.
	deadLetter := func(entity string, r *azservicebus.Receiver, bodies ...string) {
		t.Helper()
		s, err := c.NewSender(entity, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		for _, b := range bodies {
			if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(b), ApplicationProperties: map[string]any{"kept": b}}, nil); err != nil {
				t.Fatal(err)
			}
		}
		for got := 0; got < len(bodies); {
			msgs, err := r.ReceiveMessages(ctx, len(bodies)-got, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if err := r.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: to.Ptr("bad")}); err != nil {
					t.Fatal(err)
				}
			}
			got += len(msgs)
		}
	}
	receiveBack := func(r *azservicebus.Receiver, n int) []string {
		t.Helper()
		var bodies []string
		for len(bodies) < n {
			msgs, err := r.ReceiveMessages(ctx, n-len(bodies), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if m.DeadLetterReason != nil || m.DeliveryCount != 1 || m.ApplicationProperties["kept"] != string(m.Body) {
					t.Fatalf("re-driven %s: reason %v, delivery count %d, properties %v", m.Body, m.DeadLetterReason,
						m.DeliveryCount, m.ApplicationProperties)
				}
				bodies = append(bodies, string(m.Body))
				if err := r.CompleteMessage(ctx, m, nil); err != nil {
					t.Fatal(err)
				}
			}
		}
		slices.Sort(bodies)
		return bodies
	}

	for _, tc := range []struct{ send, path string }{{"orders", "orders"}, {"events", "events/Subscriptions/all"}} {
		var r, dlq *azservicebus.Receiver
		var err error
		if tc.send == "orders" {
			r, err = c.NewReceiverForQueue("orders", nil)
			if err == nil {
				dlq, err = c.NewReceiverForQueue("orders", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
			}
		} else {
			r, err = c.NewReceiverForSubscription("events", "all", nil)
			if err == nil {
				dlq, err = c.NewReceiverForSubscription("events", "all", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		deadLetter(tc.send, r, "a", "b", "c")
		seqs := peekSeqs(t, ctx, dlq)
		if len(seqs) != 3 {
			t.Fatalf("%s: dead-letter queue %v", tc.path, seqs)
		}
		if out := walbus(0, "dlq", "redrive", tc.path, "--seq", fmt.Sprint(seqs[1])); !strings.Contains(out, "1 redriven") {
			t.Fatalf("redrive one:\n%s", out)
		}
		if got := receiveBack(r, 1); fmt.Sprint(got) != "[b]" {
			t.Fatalf("%s: re-driven %v", tc.path, got)
		}
		if out := walbus(0, "dlq", "redrive", tc.path, "--all"); !strings.Contains(out, "2 redriven") {
			t.Fatalf("redrive all:\n%s", out)
		}
		if got := receiveBack(r, 2); fmt.Sprint(got) != "[a c]" {
			t.Fatalf("%s: re-driven %v", tc.path, got)
		}
		deadLetter(tc.send, r, "d", "e")
		if out := walbus(0, "dlq", "purge", tc.path); !strings.Contains(out, "2 purged") {
			t.Fatalf("purge:\n%s", out)
		}
		if left := peekSeqs(t, ctx, dlq); len(left) != 0 {
			t.Fatalf("%s: after a purge the dead-letter queue holds %v", tc.path, left)
		}
	}
	// The messages themselves, through the HTTP API; a key that is not
	// the namespace's gets 401.
	s, err := c.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := postManage("http://"+p.http, "/$walbus/purge/orders", defaultKeyName, defaultKey, nil); err != nil || got["purged"] != 2 {
		t.Fatalf("purge of the queue: %v %v", got, err)
	}
	if _, err := postManage("http://"+p.http, "/$walbus/purge/orders", defaultKeyName, "not-the-key", nil); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("purge with a wrong key: %v", err)
	}
	if out := walbus(1, "dlq", "redrive", "missing", "--all"); !strings.Contains(out, "404") {
		t.Fatalf("a missing queue:\n%s", out)
	}
	if out := walbus(1, "dlq", "redrive", "events", "--all"); !strings.Contains(out, "400") {
		t.Fatalf("a topic:\n%s", out)
	}
	walbus(2, "dlq", "redrive", "orders")
	walbus(2, "dlq", "redrive", "orders", "--all", "--seq", "1")
}
