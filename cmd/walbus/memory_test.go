package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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
	client := p.sdkClient()
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

	heap := heapAfterGC(t, p)
	if heap >= size {
		t.Fatalf("after completing two %d MiB messages the heap holds %d MiB", size>>20, heap>>20)
	}
	t.Logf("heap after: %.1f MiB", float64(heap)/(1<<20))
}

// heapAfterGC is the heap a walbus serve --pprof holds after a collection:
// the heap profile's text form collects first and ends with the runtime's
// memory statistics.
func heapAfterGC(t *testing.T, p *proc) uint64 {
	t.Helper()
	text := getText(t, "http://"+p.http+"/debug/pprof/heap?gc=1&debug=1")
	m := regexp.MustCompile(`(?m)^# HeapAlloc = (\d+)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no HeapAlloc in the heap profile:\n%.2000s", text)
	}
	heap, _ := strconv.ParseUint(m[1], 10, 64)
	return heap
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
	client := p.sdkClient()
	defer client.Close(context.Background())
	s, _ := client.NewSender("big", nil)
	err := s.SendMessage(context.Background(), &azservicebus.Message{Body: make([]byte, 1<<20+1)}, nil)
	if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
		t.Fatalf("a message over the server's limit: %v", err)
	}
	p.kill()

	// The queue takes the file's smaller size when it changes: no warning,
	// and its links take only that.
	p = startWalbus(t, dir, "--config", writeConfig(t, "big", `"MaxMessageSizeInKilobytes": 512`))
	if logs := p.logs(); strings.Contains(logs, warning) || !strings.Contains(logs, "changed=MaxMessageSizeInKilobytes") {
		t.Fatalf("a queue changed to 512 KiB:\n%s", logs)
	}
	client = p.sdkClient()
	s, _ = client.NewSender("big", nil)
	if err := s.SendMessage(context.Background(), &azservicebus.Message{Body: make([]byte, 600<<10)}, nil); !errors.Is(err, azservicebus.ErrMessageTooLarge) {
		t.Fatalf("600 KiB to a 512 KiB queue: %v", err)
	}
	client.Close(context.Background())
	p.kill()

	p = startWalbus(t, t.TempDir(), "--config", cfg, "--max-message-size", "2MiB")
	if strings.Contains(p.logs(), warning) {
		t.Fatalf("a warning when the server allows the queue's size:\n%s", p.logs())
	}
}

// burstThroughQueues starts walbus serve (with args) on queues named
// prefix-0 and up, sends perQ messages of perMsg bytes through each with
// the Go SDK and receives them all (receive-and-delete), queue after queue.
func burstThroughQueues(t *testing.T, prefix string, queues, perQ, perMsg int, args ...string) *proc {
	t.Helper()
	var names []string
	for i := range queues {
		names = append(names, fmt.Sprintf(`{"Name": "%s-%d", "Properties": {}}`, prefix, i))
	}
	cfg := filepath.Join(t.TempDir(), "Config.json")
	body := `{"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [` + strings.Join(names, ",") + `]}]}}`
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startWalbus(t, t.TempDir(), append([]string{"--config", cfg}, args...)...)
	ctx := context.Background()
	client := p.sdkClient()
	defer client.Close(ctx)
	msg := bytes.Repeat([]byte("x"), perMsg)
	for i := range queues {
		q := fmt.Sprintf("%s-%d", prefix, i)
		s, _ := client.NewSender(q, nil)
		for range perQ {
			if err := s.SendMessage(ctx, &azservicebus.Message{Body: msg}, nil); err != nil {
				t.Fatal(err)
			}
		}
		r, _ := client.NewReceiverForQueue(q, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		for got := 0; got < perQ; {
			msgs, err := r.ReceiveMessages(ctx, perQ-got, nil)
			if err != nil {
				t.Fatal(err)
			}
			got += len(msgs)
		}
		r.Close(ctx)
		s.Close(ctx)
	}
	return p
}

// TestIdleQueuesHoldNoLogTail: queues that were written and drained, then
// left idle, give back the log tail tidwall keeps in memory. Before, each
// kept up to a segment (8 MiB, the default then) of bodies it would never
// read again until its segment filled: 100 such queues held 690 MB. The
// test keeps 8 MiB segments, so that only the idle roll can give the tails
// back.
func TestIdleQueuesHoldNoLogTail(t *testing.T) {
	const (
		queues  = 12
		perMsg  = 256 << 10
		perQ    = 16 // 4 MiB a queue, under the 8 MiB segment
		settled = queues * perQ * perMsg
	)
	p := burstThroughQueues(t, "idle", queues, perQ, perMsg, "--pprof", "--segment-size", "8MiB")

	// The queues roll their tails once idle for a couple of seconds.
	var heap uint64
	for deadline := time.Now().Add(20 * time.Second); ; {
		heap = heapAfterGC(t, p)
		if heap < settled/4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle, drained queues that took %d MiB hold a heap of %d MiB", queues, settled>>20, heap>>20)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("heap after: %.1f MiB", float64(heap)/(1<<20))
}

// TestKillAfterIdleRoll: a queue's log that rolled its tail while idle,
// then took more messages into the new segment, survives a kill -9: every
// acknowledged message comes back, in order, with its body.
func TestKillAfterIdleRoll(t *testing.T) {
	data := t.TempDir()
	p := startWalbus(t, data, "--config", writeConfig(t, "roll", ""))
	ctx := context.Background()
	send := func(from, n int) {
		t.Helper()
		client := p.sdkClient()
		defer client.Close(ctx)
		s, _ := client.NewSender("roll", nil)
		for i := from; i < from+n; i++ {
			body := bytes.Repeat([]byte{byte('a' + i)}, 64<<10+i)
			if err := s.SendMessage(ctx, &azservicebus.Message{Body: body}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(0, 8) // 512 KiB: over the 256 KiB a tail needs to be rolled
	logs, _ := filepath.Glob(filepath.Join(data, "*", "*", "log"))
	rolled := func() bool {
		for _, dir := range logs {
			segs, _ := filepath.Glob(filepath.Join(dir, strings.Repeat("[0-9]", 20)))
			if len(segs) >= 2 {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(20 * time.Second); !rolled(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no log among %v began a new segment while idle", logs)
		}
	}
	send(8, 8)
	p.kill()
	p.start()

	client := p.sdkClient()
	defer client.Close(ctx)
	r, _ := client.NewReceiverForQueue("roll", nil)
	// In SequenceNumber order: what one receive call returns of what was
	// delivered depends on timing, and the SDK releases the rest, to come
	// again after later messages.
	got := map[int64][]byte{}
	for len(got) < 16 {
		msgs, err := r.ReceiveMessages(ctx, 16-len(got), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if _, dup := got[*m.SequenceNumber]; dup {
				t.Fatalf("message %d delivered twice", *m.SequenceNumber)
			}
			got[*m.SequenceNumber] = m.Body
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, seq := range slices.Sorted(maps.Keys(got)) {
		if want := bytes.Repeat([]byte{byte('a' + i)}, 64<<10+i); !bytes.Equal(got[seq], want) {
			t.Fatalf("message %d after the kill: %d bytes, not the %d sent", i, len(got[seq]), len(want))
		}
	}
}
