package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// TestLargeMessagesLeaveNoMemoryBehind: once large messages are completed
// and their client gone, the broker holds no copy of them. Before, the
// log's batch buffers, tidwall's batch and (through the done callbacks the
// log kept) the sending link's reassembly buffer stayed at their largest
// size: four or more copies of the biggest message sent, for good.
func TestLargeMessagesLeaveNoMemoryBehind(t *testing.T) {
	const size = 48 << 20
	cfg := writeConfig(t, "big", `"MaxMessageSizeInKilobytes": 65536`)
	p := startWalbus(t, t.TempDir(), "--config", cfg, "--max-message-size", "64MiB", "--pprof")
	ctx := context.Background()
	client, err := azservicebus.NewClientFromConnectionString(p.connString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := client.NewSender("big", nil)
	bodies := [][]byte{bytes.Repeat([]byte("a"), size), bytes.Repeat([]byte("b"), size-1)}
	for _, body := range bodies {
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: body}, nil); err != nil {
			t.Fatal(err)
		}
	}
	r, _ := client.NewReceiverForQueue("big", nil)
	for _, body := range bodies {
		msgs, err := r.ReceiveMessages(ctx, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 1 || !bytes.Equal(msgs[0].Body, body) {
			t.Fatalf("received %d messages, the first not the %d bytes sent", len(msgs), len(body))
		}
		if err := r.CompleteMessage(ctx, msgs[0], nil); err != nil {
			t.Fatal(err)
		}
	}
	client.Close(ctx)

	// The heap profile's text form collects first and ends with the
	// runtime's memory statistics.
	text := getText(t, "http://"+p.http+"/debug/pprof/heap?gc=1&debug=1")
	m := regexp.MustCompile(`(?m)^# HeapAlloc = (\d+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no HeapAlloc in the heap profile:\n%.2000s", text)
	}
	heap, _ := strconv.ParseUint(m[1], 10, 64)
	if heap >= size {
		t.Fatalf("after completing two %d MiB messages the heap holds %d MiB", size>>20, heap>>20)
	}
	t.Logf("heap after: %.1f MiB", float64(heap)/(1<<20))
}

// TestQueueAboveMaxMessageSizeWarns: a queue configured for larger
// messages than --max-message-size is created, with a warning that names
// both, since its links take only what the server allows.
func TestQueueAboveMaxMessageSizeWarns(t *testing.T) {
	cfg := writeConfig(t, "big", `"MaxMessageSizeInKilobytes": 2048`)
	const warning = "queue allows larger messages than --max-message-size"
	const named = "queue=big MaxMessageSizeInKilobytes=2048 max_message_size=1048576"
	dir := t.TempDir()
	p := startWalbus(t, dir, "--config", cfg)
	if logs := p.logs(); !strings.Contains(logs, warning) || !strings.Contains(logs, named) {
		t.Fatalf("no warning for a 2 MiB queue under the default 1 MiB limit:\n%s", logs)
	}
	client, err := azservicebus.NewClientFromConnectionString(p.connString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	s, _ := client.NewSender("big", nil)
	err = s.SendMessage(context.Background(), &azservicebus.Message{Body: make([]byte, 1<<20+1)}, nil)
	if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
		t.Fatalf("a message over the server's limit: %v", err)
	}
	p.kill()

	// The queue keeps its settings when the file changes: the warning is
	// about the queue as it is.
	p = startWalbus(t, dir, "--config", writeConfig(t, "big", `"MaxMessageSizeInKilobytes": 512`))
	if logs := p.logs(); !strings.Contains(logs, named) {
		t.Fatalf("no warning for the existing 2 MiB queue:\n%s", logs)
	}
	p.kill()

	p = startWalbus(t, t.TempDir(), "--config", cfg, "--max-message-size", "2MiB")
	if strings.Contains(p.logs(), warning) {
		t.Fatalf("a warning when the server allows the queue's size:\n%s", p.logs())
	}
}
