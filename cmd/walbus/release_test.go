package main

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"
)

func TestMemoryReleaserDue(t *testing.T) {
	var r memoryReleaser
	steps := []struct {
		work int
		due  bool
	}{
		{0, false}, // nothing ever happened
		{3, false}, // busy
		{0, true},  // quiet after work: release
		{0, false}, // still quiet: released already
		{1, false},
		{2, false},
		{0, true},
		{1, false},
		{0, true},
	}
	for i, s := range steps {
		for range s.work {
			r.touch()
		}
		if got := r.due(); got != s.due {
			t.Fatalf("step %d (work %d): due = %v, want %v", i, s.work, got, s.due)
		}
	}
}

// rss is a process's resident set in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	m := regexp.MustCompile(`(?m)^VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no VmRSS in /proc/%d/status", pid)
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return kb << 10
}

// TestQuietServerReturnsMemory: after a burst through many queues, a
// server that goes quiet gives the memory it freed back to the system
// within a few idle periods, not after the runtime's two-minute collection
// (measured without: 228 MiB resident after the burst, still 228 MiB 30 s
// later; with: 253 MiB, then 25 MiB). It runs with 8 MiB segments, the
// default when it was written, whose write buffers make most of the burst's
// footprint.
func TestQuietServerReturnsMemory(t *testing.T) {
	const queues, perQ, perMsg = 12, 16, 256 << 10
	p := burstThroughQueues(t, "burst", queues, perQ, perMsg, "--idle-checkpoint", "500ms", "--segment-size", "8MiB")
	peak := rss(t, p.cmd.Process.Pid)
	if peak < 96<<20 {
		t.Fatalf("resident set after the burst %d MiB: too small to show anything", peak>>20)
	}
	// A quarter of the peak, or 32 MiB: a smaller burst (a busy machine
	// collects more during it) leaves a floor of binary and runtime that
	// is a larger share of it.
	want := max(peak/4, 32<<20)
	deadline := time.Now().Add(20 * time.Second)
	for rss(t, p.cmd.Process.Pid) > want {
		if time.Now().After(deadline) {
			t.Fatalf("a quiet server still holds %d MiB resident, %d MiB after the burst", rss(t, p.cmd.Process.Pid)>>20, peak>>20)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("resident %d MiB after the burst, %d MiB once quiet", peak>>20, rss(t, p.cmd.Process.Pid)>>20)
}
