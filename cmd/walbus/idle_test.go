package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// logBytes is the size of every entity log's segment files under data.
func logBytes(t *testing.T, data string) int64 {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(data, "entities", "*", "log", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// TestIdleQueueGivesBackItsDisk: a queue that took a few MiB, had them
// received and went quiet deletes the log it no longer needs (no snapshot
// was due, so before this it kept every byte until its next burst), keeps
// the one message still in it, and all of it survives a kill -9.
func TestIdleQueueGivesBackItsDisk(t *testing.T) {
	data := t.TempDir()
	p := startWalbus(t, data, "--config", writeConfig(t, "idle", ""), "--segment-size", "256KiB",
		"--idle-checkpoint", "300ms")
	ctx := context.Background()
	client := p.sdkClient()
	s, _ := client.NewSender("idle", nil)
	r, _ := client.NewReceiverForQueue("idle", nil)
	const n, size = 48, 64 << 10
	for i := range n {
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: bytes.Repeat([]byte{byte(i)}, size)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for got := 0; got < n; {
		msgs, err := r.ReceiveMessages(ctx, n-got, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := r.CompleteMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
		}
		got += len(msgs)
	}
	keeper := []byte("still here after the cut")
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: keeper}, nil); err != nil {
		t.Fatal(err)
	}
	peeked, err := r.PeekMessages(ctx, 1, nil)
	if err != nil || len(peeked) != 1 {
		t.Fatalf("peek: %v %v", peeked, err)
	}
	keeperSeq := *peeked[0].SequenceNumber
	full := logBytes(t, data)
	if full < n*size {
		t.Fatalf("log holds %d bytes after %d x %d were sent", full, n, size)
	}
	client.Close(ctx)

	deadline := time.Now().Add(20 * time.Second)
	for logBytes(t, data) > 512<<10 {
		if time.Now().After(deadline) {
			t.Fatalf("an idle queue holding one small message keeps %d bytes of log (had %d)", logBytes(t, data), full)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("log %d -> %d bytes", full, logBytes(t, data))

	p.kill()
	p.start()
	client = p.sdkClient()
	defer client.Close(ctx)
	r, _ = client.NewReceiverForQueue("idle", nil)
	msgs, err := r.ReceiveMessages(ctx, 2, nil)
	if err != nil || len(msgs) != 1 || !bytes.Equal(msgs[0].Body, keeper) || *msgs[0].SequenceNumber != keeperSeq {
		t.Fatalf("after kill -9: %d messages, err %v (want the one sent last, sequence number %d)", len(msgs), err, keeperSeq)
	}
	if err := r.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}
	s, _ = client.NewSender("idle", nil)
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("next")}, nil); err != nil {
		t.Fatal(err)
	}
	msgs, err = r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 || *msgs[0].SequenceNumber <= keeperSeq {
		t.Fatalf("a message sent after the restart: %v, err %v (sequence numbers must carry on past %d)", msgs, err, keeperSeq)
	}
}
