package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkAdminTenThousandQueues creates 10,000 queues through the
// administration API (16 clients at once, the Go SDK's admin client over
// plain HTTP), lists them, restarts walbus with them and lists them again,
// reporting each time and the resident memory after each phase:
//
//	go test ./cmd/walbus -run '^$' -bench AdminTenThousandQueues -benchtime 1x
func BenchmarkAdminTenThousandQueues(b *testing.B) {
	const n = 10_000
	dir := b.TempDir()
	start := func() (*exec.Cmd, string, time.Duration) {
		cmd := exec.Command(walbusBin, "serve", "--data", dir, "--amqp", "127.0.0.1:0", "--http", "127.0.0.1:0")
		log := &lockedLog{}
		cmd.Stderr = log
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		httpLine := regexp.MustCompile(`msg=listening http=(\S+)`)
		recovered := regexp.MustCompile(`msg=recovered entities=\d+ took=(\S+)`)
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			logged := log.Bytes()
			h, r := httpLine.FindSubmatch(logged), recovered.FindSubmatch(logged)
			if h != nil && r != nil {
				took, _ := time.ParseDuration(string(r[1]))
				return cmd, string(h[1]), took
			}
		}
		b.Fatalf("walbus did not start:\n%s", log.Bytes())
		return nil, "", 0
	}
	rss := func(cmd *exec.Cmd) float64 {
		s, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
		m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(s)
		if m == nil {
			return 0
		}
		kb, _ := strconv.ParseFloat(string(m[1]), 64)
		return kb / 1024
	}
	list := func(addr string) time.Duration {
		f := entityFlags{server: "http://" + addr, keyName: defaultKeyName, key: defaultKey}
		ac, err := f.client()
		if err != nil {
			b.Fatal(err)
		}
		began, got := time.Now(), 0
		for pager := ac.NewListQueuesPager(nil); pager.More(); {
			page, err := pager.NextPage(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			got += len(page.Queues)
		}
		if got != n {
			b.Fatalf("listed %d queues", got)
		}
		return time.Since(began)
	}
	for range b.N {
		cmd, addr, _ := start()
		f := entityFlags{server: "http://" + addr, keyName: defaultKeyName, key: defaultKey}
		ac, err := f.client()
		if err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		var wg sync.WaitGroup
		work := make(chan int)
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					if _, err := ac.CreateQueue(context.Background(), fmt.Sprintf("q%05d", i), nil); err != nil {
						b.Error(err)
					}
				}
			}()
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
		b.ReportMetric(time.Since(began).Seconds(), "s-create")
		b.ReportMetric(rss(cmd), "MiB-after-create")
		b.ReportMetric(list(addr).Seconds(), "s-list")
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		cmd, addr, took := start()
		b.ReportMetric(took.Seconds(), "s-restart")
		b.ReportMetric(rss(cmd), "MiB-after-restart")
		b.ReportMetric(list(addr).Seconds(), "s-list-after-restart")
		cmd.Process.Kill()
		cmd.Wait()
		os.RemoveAll(dir)
	}
}
