package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// topicSubs are the subscriptions of the topic crash test and which
// messages (by their number n) each one's rules select.
var topicSubs = []struct {
	name    string
	rules   string // Config.json "Rules", or "" for $Default
	selects func(n int) bool
	read    bool // a receiver drains it while the broker is killed
}{
	{"all", "", func(int) bool { return true }, true},
	{"even", `[{"Name": "even", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "n % 2 = 0"}}}]`,
		func(n int) bool { return n%2 == 0 }, true},
	{"fives", `[{"Name": "five", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Label": "five"},
		"Action": {"SqlExpression": "SET copied = TRUE"}}}]`, func(n int) bool { return n%5 == 0 }, true},
	// Never read: the oldest of what it holds pins the log's front, so the
	// server compacts the log while it is killed.
	{"never", `[{"Name": "twenty", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "n % 20 = 0"}}}]`,
		func(n int) bool { return n%20 == 0 }, false},
}

// TestTopicCrash: senders publish to a topic with duplicate detection and
// receivers complete messages from three of its four subscriptions while
// walbus is killed with SIGKILL and restarted. Then, for every
// subscription: each message whose send was acknowledged and that its
// rules select is there or was completed, none it does not select is,
// none whose completion was acknowledged comes back, and none is there
// twice (a send retried across a kill is a duplicate the topic drops). A
// completion that failed may have happened: that message may be gone.
func TestTopicCrash(t *testing.T) {
	rounds, perRound := crashRounds(3)
	seed := crashSeed(t)
	var subs string
	for i, s := range topicSubs {
		if i > 0 {
			subs += ", "
		}
		subs += fmt.Sprintf(`{"Name": %q, "Properties": {"LockDuration": "PT5S", "MaxDeliveryCount": 1000}`, s.name)
		if s.rules != "" {
			subs += `, "Rules": ` + s.rules
		}
		subs += "}"
	}
	cfg := filepath.Join(t.TempDir(), "Config.json")
	body := `{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [], "Topics": [{"Name": "news",
		"Properties": {"RequiresDuplicateDetection": true, "DuplicateDetectionHistoryTimeWindow": "PT10M"},
		"Subscriptions": [` + subs + `]}]}], "Logging": {"Type": "File"}}}`
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	p := startWalbus(t, data, "--config", cfg, "--segment-size", "16KiB", "--snapshot-every", "1000",
		"--compact-bytes", "32KiB")
	client := crashClient(t, p)
	defer client.Close(context.Background())

	var mu sync.Mutex
	acked := map[int]bool{}                // sends acknowledged
	completed := map[string]map[int]bool{} // per subscription: completions acknowledged
	// maybe is, per subscription, the messages whose completion failed: it
	// may have happened with only its answer lost to a kill.
	maybe := map[string]map[int]bool{}
	seen := map[string]map[int]int64{} // per subscription: the SequenceNumber each message had
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	for _, s := range topicSubs {
		completed[s.name], seen[s.name], maybe[s.name] = map[int]bool{}, map[int]int64{}, map[int]bool{}
	}

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var next int
	var sending sync.WaitGroup
	for range 3 {
		sending.Add(1)
		go func() {
			defer sending.Done()
			sender, err := client.NewSender("news", nil)
			if err != nil {
				fail("sender: %v", err)
				return
			}
			for ctx.Err() == nil {
				mu.Lock()
				n := next
				next++
				mu.Unlock()
				m := &azservicebus.Message{Body: []byte(fmt.Sprint(n)), MessageID: toPtr(fmt.Sprint("m-", n)),
					ApplicationProperties: map[string]any{"n": int64(n)}}
				if n%5 == 0 {
					m.Subject = toPtr("five")
				}
				// Retried until acknowledged: duplicate detection drops the
				// copies a kill made.
				for ctx.Err() == nil {
					sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					err := sender.SendMessage(sctx, m, nil)
					cancel()
					if err == nil {
						mu.Lock()
						acked[n] = true
						mu.Unlock()
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	receive := func(ctx context.Context, sub string) {
		r, err := client.NewReceiverForSubscription("news", sub, nil)
		if err != nil {
			fail("receiver %s: %v", sub, err)
			return
		}
		defer r.Close(context.Background())
		for ctx.Err() == nil {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			msgs, err := r.ReceiveMessages(rctx, 20, nil)
			cancel()
			if err != nil {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			for _, m := range msgs {
				var n int
				fmt.Sscan(string(m.Body), &n)
				mu.Lock()
				if completed[sub][n] {
					failures = append(failures, fmt.Sprintf("%s: message %d delivered after its completion was acknowledged", sub, n))
				}
				if seq, ok := seen[sub][n]; ok && seq != *m.SequenceNumber {
					failures = append(failures, fmt.Sprintf("%s: message %d twice, as %d and %d", sub, n, seq, *m.SequenceNumber))
				}
				seen[sub][n] = *m.SequenceNumber
				mu.Unlock()
				err := r.CompleteMessage(ctx, m, nil)
				mu.Lock()
				if err == nil {
					completed[sub][n] = true
				} else {
					maybe[sub][n] = true
				}
				mu.Unlock()
			}
		}
	}
	for _, s := range topicSubs {
		if s.read {
			wg.Add(1)
			go func() { defer wg.Done(); receive(ctx, s.name) }()
		}
	}
	rng := rand.New(rand.NewPCG(seed, 2))
	for range rounds {
		time.Sleep(perRound/2 + time.Duration(rng.Int64N(int64(perRound))))
		p.kill()
		p.start()
	}
	time.Sleep(perRound)
	stop()
	sending.Wait()
	wg.Wait()

	// What is left: taken (receive and delete) through a fresh client,
	// from every subscription.
	drain := crashClient(t, p)
	defer drain.Close(context.Background())
	for _, s := range topicSubs {
		r, err := drain.NewReceiverForSubscription("news", s.name,
			&azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		if err != nil {
			t.Fatal(err)
		}
		left := map[int]int64{}
		for {
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			msgs, err := r.ReceiveMessages(rctx, 100, nil)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatal(err)
			}
			if len(msgs) == 0 {
				break
			}
			for _, m := range msgs {
				var n int
				fmt.Sscan(string(m.Body), &n)
				if seq, dup := left[n]; dup {
					fail("%s: message %d left twice, as %d and %d", s.name, n, seq, *m.SequenceNumber)
				}
				left[n] = *m.SequenceNumber
				if completed[s.name][n] {
					fail("%s: message %d still there after its completion was acknowledged", s.name, n)
				}
				if !s.selects(n) {
					fail("%s: message %d is there, its rules do not select it", s.name, n)
				}
				if s.name == "fives" && m.ApplicationProperties["copied"] != true {
					fail("%s: message %d lacks its rule action's change", s.name, n)
				}
			}
		}
		r.Close(context.Background())
		for n := range acked {
			if s.selects(n) && !completed[s.name][n] && !maybe[s.name][n] {
				if _, ok := left[n]; !ok {
					fail("%s: acknowledged message %d is lost", s.name, n)
				}
			}
		}
	}
	arcs, _ := filepath.Glob(filepath.Join(data, "entities", "*", "archive", "*.wba"))
	t.Logf("%d sends acknowledged over %d kills; completed: all %d, even %d, fives %d; archives %v", len(acked), rounds,
		len(completed["all"]), len(completed["even"]), len(completed["fives"]), arcs)
	if len(acked) < 50 {
		t.Errorf("only %d sends acknowledged: the test shows little", len(acked))
	}
	for _, f := range failures {
		t.Error(f)
	}
}

func toPtr[T any](v T) *T { return &v }
