package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// The emulator caps a namespace at 50 entities and 10 connections; walbus
// has no such caps. Many queues from one Config.json, many clients at
// once, each using several queues, and all of it still there after a
// crash.
func TestBeyondTheEmulatorsCaps(t *testing.T) {
	const (
		queues  = 500 // ten times the emulator's entities
		clients = 40  // four times its connections
	)
	var defs []queueDef
	for i := range queues {
		// A delivery count and a time to live the emulator refuses.
		defs = append(defs, queueDef{fmt.Sprintf("queue-%03d", i), `"MaxDeliveryCount": 50, "DefaultMessageTimeToLive": "P3D"`})
	}
	cfg := writeConfigQueues(t, defs...)
	p := startWalbus(t, t.TempDir(), "--config", cfg)
	if n := healthEntities(t, p); n != queues {
		t.Fatalf("/health counts %d entities, want %d", n, queues)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Every client keeps its connection open while the others work: each
	// sends two messages to each of its queues, and receives and completes
	// one of them, so one stays behind in every queue.
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	start := make(chan struct{})
	for c := range clients {
		wg.Go(func() {
			client := p.sdkClient()
			defer client.Close(context.Background())
			<-start
			if err := useQueues(ctx, client, c, clients, queues); err != nil {
				errs <- fmt.Errorf("client %d: %w", c, err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	p.kill()
	p.start()
	if n := healthEntities(t, p); n != queues {
		t.Fatalf("after a crash /health counts %d entities, want %d", n, queues)
	}
	client := p.sdkClient()
	defer client.Close(context.Background())
	for i := range queues {
		name := fmt.Sprintf("queue-%03d", i)
		r, err := client.NewReceiverForQueue(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := r.PeekMessages(ctx, 10, nil)
		if err != nil {
			t.Fatalf("peek %s: %v", name, err)
		}
		if len(msgs) != 1 || string(msgs[0].Body) != name+"/1" {
			t.Fatalf("%s holds %d messages after the crash, want its second (%s/1): %v", name, len(msgs), name, bodies(msgs))
		}
		// The queue's own time to live (three days) applies, not the
		// emulator's hour.
		if ttl := msgs[0].TimeToLive; ttl == nil || *ttl != 72*time.Hour {
			t.Fatalf("%s: time to live %v, want 72h", name, ttl)
		}
		_ = r.Close(ctx)
	}
}

// useQueues sends two messages to each of client c's queues (queue-c,
// queue-(c+clients), ... below queues) and receives and completes the
// first of each.
func useQueues(ctx context.Context, client *azservicebus.Client, c, clients, queues int) error {
	for q := c; q < queues; q += clients {
		name := fmt.Sprintf("queue-%03d", q)
		s, err := client.NewSender(name, nil)
		if err != nil {
			return err
		}
		for n := range 2 {
			if err := s.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "%s/%d", name, n)}, nil); err != nil {
				return fmt.Errorf("send to %s: %w", name, err)
			}
		}
		_ = s.Close(ctx)
		r, err := client.NewReceiverForQueue(name, nil)
		if err != nil {
			return err
		}
		msgs, err := r.ReceiveMessages(ctx, 1, nil)
		if err != nil {
			return fmt.Errorf("receive from %s: %w", name, err)
		}
		if len(msgs) != 1 || string(msgs[0].Body) != name+"/0" {
			return fmt.Errorf("%s gave %v, want its first message", name, bodies(msgs))
		}
		if err := r.CompleteMessage(ctx, msgs[0], nil); err != nil {
			return fmt.Errorf("complete on %s: %w", name, err)
		}
		_ = r.Close(ctx)
	}
	return nil
}

func bodies(msgs []*azservicebus.ReceivedMessage) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Body))
	}
	return out
}

// healthEntities is the entity count /health reports.
func healthEntities(t *testing.T, p *proc) int {
	t.Helper()
	resp, err := p.healthClient().Get(p.scheme() + "://" + p.http + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct{ Entities int }
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		t.Fatal(err)
	}
	return h.Entities
}

// A process that runs out of file descriptors while it creates queues (each
// keeps its log segment open) stops with the reason and what to raise, not
// only the failed open.
func TestOutOfFileDescriptorsIsExplained(t *testing.T) {
	var defs []queueDef
	for i := range 200 {
		defs = append(defs, queueDef{fmt.Sprintf("q%d", i), ""})
	}
	cfg := writeConfigQueues(t, defs...)
	// The hard limit too: Go raises the soft one to it at start.
	cmd := exec.Command("sh", "-c", `ulimit -Sn 100 && ulimit -Hn 100 && exec "$0" "$@"`, walbusBin, "serve",
		"--data", t.TempDir(), "--amqp", "127.0.0.1:0", "--http", "", "--config", cfg)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("exit %v, want 2:\n%s", err, out)
	}
	for _, want := range []string{"too many open files", "out of file descriptors", "limit=100"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
}
