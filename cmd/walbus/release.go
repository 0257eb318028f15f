package main

import (
	"context"
	"sync/atomic"
	"time"
)

// memoryReleaser gives the memory a burst left free back to the system
// once the broker has been quiet for a while. The runtime keeps freed heap
// for reuse and returns it only gradually, after a collection, and an idle
// process collects only every two minutes: after a burst, the buffers the
// log writers and tidwall had grown (hundreds of MB with many busy queues,
// all freed once the queues go idle) stayed resident for minutes.
type memoryReleaser struct {
	work     atomic.Uint64 // group commits so far
	seen     uint64        // work at the last check
	released uint64        // work at the last release
}

// touch records work: a group commit of any log.
func (r *memoryReleaser) touch() { r.work.Add(1) }

// due says whether to release now: there was work before the last check,
// none since, and nothing has been released since that work. Called once
// an interval, it answers yes once per quiet spell after activity.
func (r *memoryReleaser) due() bool {
	n := r.work.Load()
	quiet := n == r.seen && n != r.released
	r.seen = n
	if quiet {
		r.released = n
	}
	return quiet
}

// run checks every interval until ctx ends, releasing through free
// (debug.FreeOSMemory, which collects first).
func (r *memoryReleaser) run(ctx context.Context, every time.Duration, free func()) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if r.due() {
				free()
			}
		}
	}
}
