package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walbus/walbus/admin/emuconfig"
)

func queue(name, forwardTo, forwardDLQ string) emuconfig.Queue {
	q := emuconfig.Queue{Name: name}
	if forwardTo != "" {
		q.Properties.ForwardTo = &forwardTo
	}
	if forwardDLQ != "" {
		q.Properties.ForwardDeadLetteredMessagesTo = &forwardDLQ
	}
	return q
}

// Queues are created after the queues they forward to, in the file's order
// otherwise; a forwarding cycle cannot be created and is an error.
func TestForwardTargetsFirst(t *testing.T) {
	got, err := forwardTargetsFirst([]emuconfig.Queue{
		queue("a", "b", ""), queue("c", "", ""), queue("b", "", "D"), queue("d", "", ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, q := range got {
		names = append(names, q.Name)
	}
	if fmt.Sprint(names) != "[d b a c]" {
		t.Fatalf("order %v", names)
	}
	_, err = forwardTargetsFirst([]emuconfig.Queue{queue("a", "b", ""), queue("b", "", "a")})
	if err == nil || !strings.Contains(err.Error(), "comes back") {
		t.Fatalf("a cycle: %v", err)
	}
}

// TestConfigChangesReachExistingQueues: a queue that exists takes the
// settings of the file it is started with, keeps its messages, says what
// changed, and a change Service Bus forbids stops the start with the
// queue and the reason. Before, an existing queue kept its first settings
// for good, whatever the file said.
func TestConfigChangesReachExistingQueues(t *testing.T) {
	data := t.TempDir()
	ctx := context.Background()
	p := startWalbus(t, data, "--config", writeConfig(t, "orders", `"LockDuration": "PT5S", "MaxDeliveryCount": 3`))
	client := p.sdkClient()
	s, _ := client.NewSender("orders", nil)
	for _, body := range []string{"one", "two"} {
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	client.Close(ctx)
	p.kill()

	changed := writeConfig(t, "orders", `"LockDuration": "PT45S", "MaxDeliveryCount": 7`)
	p = startWalbus(t, data, "--config", changed)
	if logs := p.logs(); !strings.Contains(logs, "queue settings changed to the file's") ||
		!strings.Contains(logs, "changed=LockDuration,MaxDeliveryCount") {
		t.Fatalf("no word of the changed settings:\n%s", logs)
	}
	client = p.sdkClient()
	r, _ := client.NewReceiverForQueue("orders", nil)
	// Delivered four times: the old MaxDeliveryCount of 3 would have
	// dead-lettered it after the third.
	for delivery := 1; delivery <= 4; delivery++ {
		msgs, err := r.ReceiveMessages(ctx, 1, nil)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("delivery %d: %d messages, %v", delivery, len(msgs), err)
		}
		m := msgs[0]
		if string(m.Body) != "one" || int(m.DeliveryCount) != delivery {
			t.Fatalf("delivery %d: %q with delivery count %d", delivery, m.Body, m.DeliveryCount)
		}
		if left := time.Until(*m.LockedUntil); left < 30*time.Second {
			t.Fatalf("locked for %v more: the queue's lock duration is still the old 5 s", left)
		}
		if delivery < 4 {
			if err := r.AbandonMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	client.Close(ctx)
	p.kill()

	p = startWalbus(t, data, "--config", changed)
	if strings.Contains(p.logs(), "queue settings changed") {
		t.Fatalf("settings reported changed on a start with the same file:\n%s", p.logs())
	}
	p.kill()

	code, stdout, stderr := runWalbus(t, nil, "serve", "--data", data, "--amqp", "127.0.0.1:0", "--http", "",
		"--config", writeConfig(t, "orders", `"RequiresSession": true`))
	if out := stdout + stderr; code != 2 || !strings.Contains(out, "queue orders") ||
		!strings.Contains(out, "RequiresSession cannot change after creation") {
		t.Fatalf("exit %d for a queue made to require sessions:\n%s", code, out)
	}
}

// TestForwardingQueueDetectsDuplicatesAcrossKill: a queue from Config.json
// that forwards and detects duplicates drops a MessageId it accepted
// before a kill -9, although it stores no message itself; the target holds
// each MessageId once.
func TestForwardingQueueDetectsDuplicatesAcrossKill(t *testing.T) {
	data := t.TempDir()
	ctx := context.Background()
	cfg := writeConfigQueues(t, queueDef{"inbox", `"ForwardTo": "work", "RequiresDuplicateDetection": true`},
		queueDef{"work", ""})
	p := startWalbus(t, data, "--config", cfg)
	send := func(ids ...string) {
		t.Helper()
		client := p.sdkClient()
		defer client.Close(ctx)
		s, err := client.NewSender("inbox", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if err := s.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: []byte(id)}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	send("a", "b", "a")
	p.kill()
	p.start()
	send("b", "c", "a")

	client := p.sdkClient()
	defer client.Close(ctx)
	r, err := client.NewReceiverForQueue("work", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := r.PeekMessages(ctx, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := bodies(msgs); fmt.Sprint(got) != "[a b c]" {
		t.Fatalf("work holds %v, want each MessageId once: [a b c]", got)
	}
	inbox, _ := client.NewReceiverForQueue("inbox", nil)
	if left, err := inbox.PeekMessages(ctx, 10, nil); err != nil || len(left) != 0 {
		t.Fatalf("inbox holds %d messages (%v)", len(left), err)
	}
}
