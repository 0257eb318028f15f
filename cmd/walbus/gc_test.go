package main

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 400},
		{40 * mib, 400},   // the usual broker: 400% of it is well under the headroom
		{128 * mib, 400},  // 512 MiB of headroom is exactly 400%
		{256 * mib, 200},  // past that, the headroom stays 512 MiB
		{512 * mib, 100},  // and the target reaches Go's default
		{2048 * mib, 100}, // never below it
	} {
		if got := gcPercentFor(c.live, gcHeadroom); got != c.want {
			t.Errorf("gcPercentFor(%d MiB) = %d, want %d", c.live/mib, got, c.want)
		}
	}
}

// TestGCTunerFollowsTheLiveHeap: after collections that find a large live
// heap the target drops, and once that heap is gone it goes back up.
func TestGCTunerFollowsTheLiveHeap(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	g := startGCTuner(32 << 20) // 32 MiB of headroom: 400% up to 8 MiB live
	defer g.stop()
	waitPercent := func(want func(int64) bool, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !want(g.percent.Load()) {
			if time.Now().After(deadline) {
				t.Fatalf("target %d after collections, want %s", g.percent.Load(), what)
			}
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
	}
	live := make([]byte, 64<<20)
	for i := range live {
		live[i] = byte(i)
	}
	waitPercent(func(p int64) bool { return p == gcPercentMin }, "100 with 64 MiB live")
	if got := debug.SetGCPercent(gcPercentMin); got != gcPercentMin {
		t.Fatalf("the runtime's target is %d, the tuner's %d", got, g.percent.Load())
	}
	runtime.KeepAlive(live)
	live = nil
	waitPercent(func(p int64) bool { return p > gcPercentMin }, "above 100 once the heap is gone")
}
