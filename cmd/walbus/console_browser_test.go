package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// The web console in a real browser: walbus serve, messages put in place
// through the Go SDK, and the node scripts of admin/console/e2e driving
// chromium through the console (each checks what the page shows and
// saves screenshots); after each action the Go SDK or the CLI checks what
// the broker holds.
//
// It runs when WALBUS_CONSOLE_E2E names the e2e directory with its
// node_modules installed (make test-console does that). WALBUS_ARTIFACTS
// names where the screenshots go (a temporary directory by default).
// Relative paths are from the repository's root.
func TestConsoleInBrowser(t *testing.T) {
	e2e := consoleE2E(t)
	shots := t.TempDir()
	if dir := os.Getenv("WALBUS_ARTIFACTS"); dir != "" {
		shots = fromRoot(t, dir)
	}

	p := startWalbus(t, t.TempDir(), "--test-clock")
	walbus := managing(t, p)
	walbus(0, "queue", "create", "orders")
	walbus(0, "topic", "create", "news")
	walbus(0, "subscription", "create", "news", "s1")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := p.sdkClient()
	defer c.Close(ctx)
	browser := browserSteps(t, e2e, "http://"+p.http, shots)

	// Five orders, three of them dead-lettered; two news items.
	orders, err := c.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer orders.Close(ctx)
	dlq, err := c.NewReceiverForQueue("orders", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	defer dlq.Close(ctx)
	sendBodies(t, ctx, c, "orders", "order-1", "order-2", "order-3", "order-4", "order-5")
	deadLetterN(t, ctx, orders, 3, "bad order", "no such customer")
	sendBodies(t, ctx, c, "news", "news-1", "news-2")
	s1, err := c.NewReceiverForSubscription("news", "s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close(ctx)
	s1DLQ, err := c.NewReceiverForSubscription("news", "s1", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	defer s1DLQ.Close(ctx)
	deadLetterN(t, ctx, s1, 2, "stale", "")

	browser("overview", "orders:active=2", "orders:deadLetter=3", "news/Subscriptions/s1:deadLetter=2")
	browser("deadletter", "orders", "3", "bad order", "kept=order-1")

	// Re-drive order-2 from its row: it is back in orders, as it was sent.
	seqs := peekSeqs(t, ctx, dlq)
	if len(seqs) != 3 {
		t.Fatalf("dead-letter queue %v, want 3 messages", seqs)
	}
	browser("redrive", "orders", fmt.Sprint(seqs[1]))
	back := receiveAll(t, ctx, orders, 3)
	i := slices.IndexFunc(back, func(m *azservicebus.ReceivedMessage) bool { return string(m.Body) == "order-2" })
	if i < 0 {
		t.Fatalf("order-2 is not back in orders: %v", bodiesOf(back))
	}
	if m := back[i]; m.DeadLetterReason != nil || m.ApplicationProperties["kept"] != "order-2" {
		t.Fatalf("re-driven order-2: reason %v, properties %v", m.DeadLetterReason, m.ApplicationProperties)
	}

	browser("purge", "orders", "2")
	if left := peekSeqs(t, ctx, dlq); len(left) != 0 {
		t.Fatalf("after the purge the dead-letter queue holds %v", left)
	}

	// Tick a subscription's two dead letters and re-drive them together.
	subSeqs := peekSeqs(t, ctx, s1DLQ)
	browser("redrive", append([]string{"news/Subscriptions/s1", "--select"}, int64Strings(subSeqs)...)...)
	if got := receiveAll(t, ctx, s1, 2); got[0].DeadLetterReason != nil || got[1].DeadLetterReason != nil {
		t.Fatalf("re-driven news items keep their reasons: %v, %v", got[0].DeadLetterReason, got[1].DeadLetterReason)
	}

	browser("send", "orders", `{"hello":"console"}`, "region=west", "priority:number=7",
		"--message-id=console-1", "--subject=greeting", "--content-type=application/json")
	got := receiveAll(t, ctx, orders, 1)[0]
	if string(got.Body) != `{"hello":"console"}` || got.MessageID != "console-1" || deref(got.Subject) != "greeting" ||
		deref(got.ContentType) != "application/json" || got.ApplicationProperties["region"] != "west" ||
		fmt.Sprint(got.ApplicationProperties["priority"]) != "7" {
		t.Fatalf("the console's message: body %s, id %s, subject %v, content type %v, properties %v",
			got.Body, got.MessageID, deref(got.Subject), deref(got.ContentType), got.ApplicationProperties)
	}

	browser("create", "queue", "invoices")
	if out := walbus(0, "queue", "get", "invoices"); !strings.Contains(out, "invoices") {
		t.Fatalf("queue get invoices:\n%s", out)
	}
	browser("create", "subscription", "audit", "news")
	if out := walbus(0, "subscription", "list", "news"); !strings.Contains(out, "audit") {
		t.Fatalf("subscription list news:\n%s", out)
	}

	// Edit a setting; a bad one shows the server's reason.
	browser("properties", "orders", "MaxDeliveryCount=7", "LockDuration=PT10M")
	if out := walbus(0, "queue", "get", "orders", "--format", "json"); !strings.Contains(out, `"MaxDeliveryCount": 7`) ||
		!strings.Contains(out, `"LockDuration": "PT1M"`) {
		t.Fatalf("orders after the console's update:\n%s", out)
	}

	browser("rules", "news/Subscriptions/s1")
	if out := walbus(0, "rule", "list", "news", "s1"); !strings.Contains(out, "\nvip ") || strings.Contains(out, "\nbig ") ||
		strings.Contains(out, "SET") {
		t.Fatalf("rules of news/s1 after the console's changes:\n%s", out)
	}

	// A scheduled message, cancelled from its row; a session queue's sessions.
	browser("schedule", "orders")
	browser("create", "queue", "chats", "--session")
	browser("sessions", "chats", "room-1")

	// Page through a queue, purge it, delete it.
	walbus(0, "queue", "create", "bulk")
	var bulk []string
	for i := range 23 {
		bulk = append(bulk, fmt.Sprintf("bulk-%d", i))
	}
	sendBodies(t, ctx, c, "bulk", bulk...)
	browser("paging", "bulk", "23", "10")
	browser("purge", "bulk", "23", "active")
	bulkReceiver, err := c.NewReceiverForQueue("bulk", nil)
	if err != nil {
		t.Fatal(err)
	}
	if left := peekSeqs(t, ctx, bulkReceiver); len(left) != 0 {
		t.Fatalf("after the purge bulk holds %v", left)
	}
	bulkReceiver.Close(ctx)
	browser("delete", "bulk")
	walbus(1, "queue", "get", "bulk")

	browser("clock", "2h")
	browser("signin", "RootManageSharedAccessKey", "SAS_KEY_VALUE")
	t.Logf("screenshots in %s", shots)
}

// The README's picture of the console: with WALBUS_CONSOLE_SCREENSHOT
// naming the file (docs/console.png), the overview under live traffic.
func TestConsoleReadmePicture(t *testing.T) {
	e2e := consoleE2E(t)
	file := os.Getenv("WALBUS_CONSOLE_SCREENSHOT")
	if file == "" {
		t.Skip("WALBUS_CONSOLE_SCREENSHOT names no file for the picture")
	}
	readmePicture(t, e2e, fromRoot(t, file))
}

// consoleE2E is the e2e directory WALBUS_CONSOLE_E2E names; the test is
// skipped without it.
func consoleE2E(t *testing.T) string {
	e2e := os.Getenv("WALBUS_CONSOLE_E2E")
	if e2e == "" {
		t.Skip("the console's browser test needs WALBUS_CONSOLE_E2E=<admin/console/e2e with node_modules>: run make test-console")
	}
	e2e = fromRoot(t, e2e)
	if _, err := os.Stat(filepath.Join(e2e, "node_modules", "playwright-core")); err != nil {
		t.Fatalf("WALBUS_CONSOLE_E2E=%s has no node_modules/playwright-core (npm ci there first): %v", e2e, err)
	}
	return e2e
}

// browserSteps returns a runner of the e2e scripts: step names the script
// (step.mjs), run as node step.mjs <base> <shots> args...
func browserSteps(t *testing.T, dir, base, shots string) func(step string, args ...string) string {
	return func(step string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", append([]string{step + ".mjs", base, shots}, args...)...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("browser step %s %v: %v\n%s", step, args, err, out)
		}
		t.Logf("%s", strings.TrimSpace(string(out)))
		return string(out)
	}
}

// fromRoot makes a path the environment gave relative to the
// repository's root (where make runs), not to this test's directory.
func fromRoot(t *testing.T, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(repoRoot(t), path)
}

// repoRoot is the directory of go.mod above the test's.
func repoRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

func sendBodies(t *testing.T, ctx context.Context, c *azservicebus.Client, entity string, bodies ...string) {
	t.Helper()
	s, err := c.NewSender(entity, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	for _, b := range bodies {
		m := &azservicebus.Message{Body: []byte(b), ApplicationProperties: map[string]any{"kept": b}}
		if err := s.SendMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// deadLetterN receives n messages and dead-letters them with reason and
// description.
func deadLetterN(t *testing.T, ctx context.Context, r *azservicebus.Receiver, n int, reason, description string) {
	t.Helper()
	for _, m := range receiveN(t, ctx, r, n) {
		err := r.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: to.Ptr(reason), ErrorDescription: to.Ptr(description)})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// messageReceiver is a receiver or a session receiver of the Go SDK.
type messageReceiver interface {
	ReceiveMessages(ctx context.Context, n int, o *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}

// receiveN receives n messages and holds their locks.
func receiveN(t *testing.T, ctx context.Context, r messageReceiver, n int) []*azservicebus.ReceivedMessage {
	t.Helper()
	var got []*azservicebus.ReceivedMessage
	for len(got) < n {
		msgs, err := r.ReceiveMessages(ctx, n-len(got), nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msgs...)
	}
	return got
}

// receiveAll receives n messages and completes them.
func receiveAll(t *testing.T, ctx context.Context, r *azservicebus.Receiver, n int) []*azservicebus.ReceivedMessage {
	t.Helper()
	got := receiveN(t, ctx, r, n)
	for _, m := range got {
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	return got
}

func peekSeqs(t *testing.T, ctx context.Context, r *azservicebus.Receiver) []int64 {
	t.Helper()
	msgs, err := r.PeekMessages(ctx, 100, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(int64(1))})
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, m := range msgs {
		seqs = append(seqs, *m.SequenceNumber)
	}
	return seqs
}

func int64Strings(ns []int64) []string {
	var out []string
	for _, n := range ns {
		out = append(out, fmt.Sprint(n))
	}
	return out
}

func bodiesOf(msgs []*azservicebus.ReceivedMessage) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Body))
	}
	return out
}

// readmePicture saves the overview to file, from a walbus of its own
// (without the test clock's control) under live traffic: queues and a
// topic with messages waiting, deferred, scheduled and dead-lettered, and
// senders and receivers whose rates rise and fall, so the charts have a
// shape.
func readmePicture(t *testing.T, e2e, file string) {
	p := startWalbus(t, t.TempDir())
	walbus := managing(t, p)
	for _, q := range []string{"orders", "payments", "emails"} {
		walbus(0, "queue", "create", q)
	}
	walbus(0, "queue", "create", "chats", "--sessions")
	walbus(0, "topic", "create", "events")
	for _, s := range []string{"billing", "analytics", "archive"} {
		walbus(0, "subscription", "create", "events", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := p.sdkClient()
	defer c.Close(ctx)

	sendBodies(t, ctx, c, "payments", "p-1", "p-2", "p-3", "p-4", "p-5", "p-6")
	payments, err := c.NewReceiverForQueue("payments", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer payments.Close(ctx)
	deadLetterN(t, ctx, payments, 3, "MaxDeliveryCountExceeded", "the card was declined 10 times")
	for _, m := range receiveN(t, ctx, payments, 2) {
		if err := payments.DeferMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.NewSender("payments", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	for i := range 4 {
		at := time.Now().Add(time.Duration(i+1) * time.Hour)
		if _, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("reminder")}}, at, nil); err != nil {
			t.Fatal(err)
		}
	}
	chats, err := c.NewSender("chats", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer chats.Close(ctx)
	for i := range 7 {
		m := &azservicebus.Message{Body: []byte("hi"), SessionID: to.Ptr(fmt.Sprintf("room-%d", i%3))}
		if err := chats.SendMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}

	// Each entity's senders and receivers follow their own waves.
	trafficCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	run := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	sendAt := func(entity string, w wave) { run(func() { sendWave(trafficCtx, c, entity, w) }) }
	receiveAt := func(topic, name string, w wave) { run(func() { receiveWave(trafficCtx, c, topic, name, w) }) }
	sendAt("orders", wave{mean: 40, amp: 25, period: 24 * time.Second})
	receiveAt("", "orders", wave{mean: 36, amp: 4, period: 9 * time.Second})
	sendAt("emails", wave{mean: 12, amp: 10, period: 13 * time.Second, phase: 2})
	receiveAt("", "emails", wave{mean: 12, amp: 10, period: 13 * time.Second, phase: 1.4})
	sendAt("events", wave{mean: 22, amp: 14, period: 31 * time.Second, phase: 4})
	receiveAt("events", "billing", wave{mean: 22, amp: 14, period: 31 * time.Second, phase: 3.5})
	receiveAt("events", "analytics", wave{mean: 15, amp: 3, period: 7 * time.Second})
	defer func() {
		stop()
		wg.Wait()
	}()
	browser := browserSteps(t, e2e, "http://"+p.http, t.TempDir())
	browser("overview", "payments:deadLetter=3", "payments:scheduled=4", "--docs="+file, "--points=60")
}

// wave is a rate per second that rises and falls around mean.
type wave struct {
	mean, amp float64
	period    time.Duration
	phase     float64 // radians
}

func (w wave) at(d time.Duration) float64 {
	return max(0, w.mean+w.amp*math.Sin(2*math.Pi*d.Seconds()/w.period.Seconds()+w.phase))
}

// pace calls do every 100 ms with how many messages the wave owes by
// then, until ctx ends or do fails.
func pace(ctx context.Context, w wave, do func(n int) error) {
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	owed := 0.0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		owed += w.at(time.Since(start)) / 10
		n := int(owed)
		owed -= float64(n)
		if n > 0 && do(n) != nil {
			return
		}
	}
}

func sendWave(ctx context.Context, c *azservicebus.Client, entity string, w wave) {
	s, err := c.NewSender(entity, nil)
	if err != nil {
		return
	}
	defer s.Close(context.Background())
	pace(ctx, w, func(n int) error {
		batch, err := s.NewMessageBatch(ctx, nil)
		if err != nil {
			return err
		}
		for range n {
			if err := batch.AddMessage(&azservicebus.Message{Body: []byte(`{"amount": 42}`)}, nil); err != nil {
				return err
			}
		}
		return s.SendMessageBatch(ctx, batch, nil)
	})
}

// receiveWave receives from a queue (topic "") or a subscription.
func receiveWave(ctx context.Context, c *azservicebus.Client, topic, name string, w wave) {
	opts := &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete}
	var r *azservicebus.Receiver
	var err error
	if topic == "" {
		r, err = c.NewReceiverForQueue(name, opts)
	} else {
		r, err = c.NewReceiverForSubscription(topic, name, opts)
	}
	if err != nil {
		return
	}
	defer r.Close(context.Background())
	pace(ctx, w, func(n int) error {
		rctx, cancel := context.WithTimeout(ctx, 90*time.Millisecond)
		defer cancel()
		r.ReceiveMessages(rctx, n, nil) // an empty queue is no failure
		return ctx.Err()
	})
}
