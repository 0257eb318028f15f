package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
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

// completeAll receives n messages with r and completes each.
func completeAll(t *testing.T, r *azservicebus.Receiver, n int) {
	t.Helper()
	ctx := context.Background()
	for got := 0; got < n; {
		msgs, err := r.ReceiveMessages(ctx, min(n-got, 200), nil)
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
	full := logBytes(t, data) // nothing settled yet: nothing can have been cut
	if full < n*size {
		t.Fatalf("log holds %d bytes after %d x %d were sent", full, n, size)
	}
	completeAll(t, r, n)
	keeper := []byte("still here after the cut")
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: keeper}, nil); err != nil {
		t.Fatal(err)
	}
	peeked, err := r.PeekMessages(ctx, 1, nil)
	if err != nil || len(peeked) != 1 {
		t.Fatalf("peek: %v %v", peeked, err)
	}
	keeperSeq := *peeked[0].SequenceNumber
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

// TestKillAroundIdleCheckpoints: kill -9 at random moments after bursts,
// while the queue rolls its tail, checkpoints, snapshots and cuts its log:
// after every restart the queue holds exactly the acknowledged sends not
// yet completed, byte for byte, and nothing completed comes back.
func TestKillAroundIdleCheckpoints(t *testing.T) {
	data := t.TempDir()
	p := startWalbus(t, data, "--config", writeConfig(t, "cut", ""), "--segment-size", "64KiB",
		"--idle-checkpoint", "20ms")
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2))
	left := map[string][]byte{} // acknowledged and not completed
	next := 0
	check := func(r *azservicebus.Receiver) {
		t.Helper()
		seen := 0
		var from int64 = 1
		for {
			msgs, err := r.PeekMessages(ctx, 100, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) == 0 {
				break
			}
			for _, m := range msgs {
				if want, ok := left[m.MessageID]; !ok || !bytes.Equal(m.Body, want) {
					t.Fatalf("message %s in the queue: known %v, body as sent %v", m.MessageID, ok, bytes.Equal(m.Body, want))
				}
				seen++
			}
			from = *msgs[len(msgs)-1].SequenceNumber + 1
		}
		if seen != len(left) {
			t.Fatalf("the queue holds %d messages, %d were acknowledged and not completed", seen, len(left))
		}
	}
	for round := range 12 {
		client := p.sdkClient()
		s, _ := client.NewSender("cut", nil)
		r, _ := client.NewReceiverForQueue("cut", nil)
		check(r)
		for range 40 {
			id := fmt.Sprint("m", next)
			next++
			body := make([]byte, 2048+rng.IntN(4096))
			for i := range body {
				body[i] = byte(rng.Uint32())
			}
			if err := s.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: body}, nil); err != nil {
				t.Fatal(err)
			}
			left[id] = body
		}
		for todo := len(left); todo > 0; {
			msgs, err := r.ReceiveMessages(ctx, todo, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if _, ok := left[m.MessageID]; !ok {
					t.Fatalf("round %d: completed message %s delivered again", round, m.MessageID)
				}
				if rng.IntN(8) == 0 {
					err = r.AbandonMessage(ctx, m, nil) // stays for a later round
				} else if err = r.CompleteMessage(ctx, m, nil); err == nil {
					delete(left, m.MessageID)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			todo -= len(msgs)
		}
		client.Close(ctx)
		time.Sleep(time.Duration(rng.IntN(120)) * time.Millisecond)
		p.kill()
		p.start()
	}
	client := p.sdkClient()
	defer client.Close(ctx)
	r, _ := client.NewReceiverForQueue("cut", nil)
	check(r)
	// Drained, the queue cuts its log to almost nothing.
	completeAll(t, r, len(left))
	for deadline := time.Now().Add(10 * time.Second); logBytes(t, data) > 128<<10; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes of log for an empty queue", logBytes(t, data))
		}
	}
}
