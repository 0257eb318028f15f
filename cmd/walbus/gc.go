package main

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// The garbage collector's target for serve and bench when GOGC is not set.
// serve: tidwall/wal keeps each log's open segment in one buffer that it
// grows by reallocation, which allocates about five bytes for every byte
// logged; with Go's default of 100 the collector then runs far more often
// than the broker's live data calls for, and costs a third of its CPU.
// bench: the SDK allocates several times each message's size to build it,
// and a load generator sharing the broker's cores should leave them to the
// broker. The headroom over the live heap is capped, though: 400% of a
// live heap swollen by large messages (100 MB each at most) would let the
// process grow to gigabytes, so the target falls towards Go's default as
// the live heap passes gcHeadroom/4. GOGC and GOMEMLIMIT still rule when
// set.
const (
	gcPercentMax = 400
	gcPercentMin = 100 // Go's default
	gcHeadroom   = 512 << 20
)

// gcPercentFor is the target that gives a live heap of live bytes at most
// headroom bytes to grow into before the next collection, within
// [gcPercentMin, gcPercentMax].
func gcPercentFor(live, headroom uint64) int {
	if live == 0 {
		return gcPercentMax
	}
	return int(min(max(headroom*100/live, gcPercentMin), gcPercentMax))
}

// tuneGC sets the collector's target unless GOGC is set, and from then on
// adjusts it after every collection to the live heap that one found.
func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		startGCTuner(gcHeadroom)
	}
}

// gcTuner re-sets the collector's target after each collection. It learns
// of a collection from a cleanup on an object it dropped: the runtime runs
// that once a collection has found it unreachable.
type gcTuner struct {
	headroom uint64
	percent  atomic.Int64 // the target last set
	stopped  atomic.Bool
	sample   []metrics.Sample // used by the cleanup goroutine only
}

// gcSentinel is big enough to stay out of the tiny allocator, whose blocks
// hold several objects and may outlive each of them.
type gcSentinel [32]byte

func startGCTuner(headroom uint64) *gcTuner {
	g := &gcTuner{headroom: headroom, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	g.percent.Store(gcPercentMax)
	debug.SetGCPercent(gcPercentMax)
	g.arm()
	return g
}

func (g *gcTuner) arm() {
	runtime.AddCleanup(new(gcSentinel), func(g *gcTuner) { g.collected() }, g)
}

// collected runs on the runtime's cleanup goroutine after a collection.
func (g *gcTuner) collected() {
	if g.stopped.Load() {
		return
	}
	metrics.Read(g.sample)
	if v := g.sample[0].Value; v.Kind() == metrics.KindUint64 {
		if p := gcPercentFor(v.Uint64(), g.headroom); int64(p) != g.percent.Load() {
			g.percent.Store(int64(p))
			debug.SetGCPercent(p)
		}
	}
	g.arm()
}

// stop ends the adjustments; the target stays where it is.
func (g *gcTuner) stop() { g.stopped.Store(true) }
