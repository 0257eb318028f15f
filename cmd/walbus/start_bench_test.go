package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// BenchmarkStartTenThousandQueues times walbus serve with 10,000 queues
// from a Config.json: the first start, which creates them, to the AMQP
// listener (which opens once the file is applied); a graceful stop; and a
// restart, with the files it holds open under the data directory and the
// lines it logged by then:
//
//	go test ./cmd/walbus -run '^$' -bench StartTenThousandQueues -benchtime 1x
func BenchmarkStartTenThousandQueues(b *testing.B) {
	const n = 10_000
	defs := make([]queueDef, n)
	for i := range defs {
		defs[i] = queueDef{name: fmt.Sprintf("q%05d", i)}
	}
	cfg := writeConfigQueues(b, defs...)
	ready := regexp.MustCompile(`msg=listening amqp=`)
	for range b.N {
		data := filepath.Join(b.TempDir(), "data")
		serve := func() (*exec.Cmd, time.Duration, *lockedLog) {
			cmd := exec.Command(walbusBin, "serve", "--data", data, "--config", cfg, "--amqp", "127.0.0.1:0", "--http", "")
			log := &lockedLog{}
			cmd.Stderr = log
			began := time.Now()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			for deadline := began.Add(5 * time.Minute); !ready.Match(log.Bytes()); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					b.Fatalf("walbus did not start:\n%s", log.Bytes())
				}
			}
			return cmd, time.Since(began), log
		}
		cmd, took, _ := serve()
		b.ReportMetric(took.Seconds(), "s-first-start")
		began := time.Now()
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		b.ReportMetric(time.Since(began).Seconds(), "s-stop")
		cmd, took, log := serve()
		b.ReportMetric(took.Seconds(), "s-restart")
		b.ReportMetric(float64(openUnder(b, cmd.Process.Pid, data)), "files-open")
		b.ReportMetric(float64(bytes.Count(log.Bytes(), []byte("\n"))), "log-lines")
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}
}
