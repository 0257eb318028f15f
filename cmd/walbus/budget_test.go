package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// TestMemoryBudgetAcrossQueues fills many queues through the Go SDK, nothing
// received: the records the queues keep in memory stay within
// --memory-budget (what senders have in flight, not yet durable, aside),
// the process's peak RSS within twice the budget plus memoryOverhead, and
// every message reads back.
// Without the budget each queue would keep all it got, up to its 8 MiB
// --cache-size. Scaled down (100 queues of 2 MiB, a 32 MiB budget) it runs
// in seconds; WALBUS_FULL_SIZE=1 (`make full-size`) runs issue 33's figure,
// 300 queues of 10 MiB, under the default budget.
func TestMemoryBudgetAcrossQueues(t *testing.T) {
	queues, perQueue, budget := 100, 2<<20, 32<<20
	var args []string
	if os.Getenv("WALBUS_FULL_SIZE") != "" {
		queues, perQueue, budget = 300, 10<<20, defaultMemoryBudget()
	} else {
		args = append(args, "--memory-budget", fmt.Sprint(budget))
	}
	const (
		size    = 64 << 10
		batch   = 15 // 960 KiB: under the link's 1 MiB
		senders = 4
	)
	var defs []queueDef
	for i := range queues {
		defs = append(defs, queueDef{fmt.Sprint("fill-", i), ""})
	}
	p := startWalbus(t, t.TempDir(), append([]string{"--config", writeConfigQueues(t, defs...)}, args...)...)

	// Watch the caches' total while the queues fill.
	var mu sync.Mutex
	var peak float64
	stop := make(chan struct{})
	var watching sync.WaitGroup
	watching.Go(func() {
		for {
			if v, ok := scrapeValue("http://"+p.http+"/metrics", "walbus_cache_bytes"); ok {
				mu.Lock()
				peak = max(peak, v)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})

	ctx := context.Background()
	client := p.sdkClient()
	defer client.Close(ctx)
	body := func(q, i int) []byte { return bytes.Repeat([]byte{byte(q), byte(i)}, size/2) }
	perQ := perQueue / size
	start := time.Now()
	var sending sync.WaitGroup
	errs := make(chan error, senders)
	for s := range senders {
		sending.Go(func() {
			for q := s; q < queues; q += senders {
				sender, err := client.NewSender(fmt.Sprint("fill-", q), nil)
				if err != nil {
					errs <- err
					return
				}
				for i := 0; i < perQ; i += batch {
					b, err := sender.NewMessageBatch(ctx, nil)
					if err != nil {
						errs <- err
						return
					}
					for j := i; j < min(i+batch, perQ); j++ {
						if err := b.AddMessage(&azservicebus.Message{Body: body(q, j)}, nil); err != nil {
							errs <- fmt.Errorf("queue %d message %d: %w", q, j, err)
							return
						}
					}
					if err := sender.SendMessageBatch(ctx, b, nil); err != nil {
						errs <- err
						return
					}
				}
				sender.Close(ctx)
			}
		})
	}
	sending.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("sent %d MiB to %d queues in %v", queues*perQueue>>20, queues, time.Since(start).Round(time.Millisecond))
	close(stop)
	watching.Wait()

	// In flight at once: a batch per sender, kept until durable, and the
	// one each may have just made durable before its queue trimmed.
	slack := float64(2 * senders * batch * size)
	// The last batches' queues trim once they are durable, after the
	// acknowledgements.
	var text string
	var now float64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		text = getText(t, "http://"+p.http+"/metrics")
		if now = metricValue(t, text, "walbus_cache_bytes"); now <= float64(budget) || time.Now().After(deadline) {
			break
		}
	}
	if got := metricValue(t, text, "walbus_memory_budget_bytes"); got != float64(budget) {
		t.Errorf("walbus_memory_budget_bytes %v, want %d", got, budget)
	}
	t.Logf("cached: %.1f MiB at most while filling, %.1f MiB now; budget %d MiB (without it: %d MiB)",
		peak/(1<<20), now/(1<<20), budget>>20, queues*min(perQueue, 8<<20)>>20)
	if now > float64(budget) || peak > float64(budget)+slack {
		t.Errorf("the caches hold %.0f bytes, %.0f at most, over the budget of %d (%.0f in flight)", now, peak, budget, slack)
	}
	if hwm, ok := peakRSS(p); ok {
		bound := 2*int64(budget) + memoryOverhead
		t.Logf("peak RSS %d MiB, bound %d MiB", hwm>>20, bound>>20)
		if hwm > bound {
			t.Errorf("peak RSS %d MiB, over twice the budget plus %d MiB (%d MiB)", hwm>>20, memoryOverhead>>20, bound>>20)
		}
	}

	// Every message reads back, in order, from the cache or the log: the
	// first queue (trimmed the most), one from the middle, the last.
	for _, q := range []int{0, queues / 2, queues - 1} {
		r, err := client.NewReceiverForQueue(fmt.Sprint("fill-", q), &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < perQ; {
			msgs, err := r.ReceiveMessages(ctx, perQ-i, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if !bytes.Equal(m.Body, body(q, i)) {
					t.Fatalf("queue %d message %d: %d bytes, not the ones sent", q, i, len(m.Body))
				}
				i++
			}
		}
		r.Close(ctx)
	}
}

// scrapeValue reads one sample from a /metrics page; false if it cannot.
func scrapeValue(url, sample string) (float64, bool) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindSubmatch(text)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	return v, err == nil
}

// peakRSS is the process's peak resident set (VmHWM), where /proc has it.
func peakRSS(p *proc) (int64, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}
