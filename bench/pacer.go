package bench

import (
	"sync"
	"time"
)

// pacer is one sender's send schedule at a fixed rate. A total rate R over
// S senders gives each sender R/S messages a second, and sender i starts
// i/R seconds after sender 0, so the senders' ticks interleave evenly
// instead of arriving at the broker in bursts of S.
//
// The schedule is pure: tick n is due at start + offset + n*interval,
// computed from n rather than by adding intervals, so it does not drift.
// A sender that falls behind gets due times in the past and sends at once;
// messages carry their due time, so the backlog shows up as latency
// instead of silently lowering the rate (coordinated omission).
type pacer struct {
	start    time.Time
	offset   float64 // ns
	interval float64 // ns between this sender's ticks

	mu   sync.Mutex
	next int64 // the first tick not yet taken
}

// newPacer schedules sender index of senders, sharing totalRate messages
// a second, from start.
func newPacer(start time.Time, totalRate float64, index, senders int) *pacer {
	return &pacer{
		start:    start,
		offset:   float64(index) * 1e9 / totalRate,
		interval: float64(senders) * 1e9 / totalRate,
	}
}

// due is when tick n is due.
func (p *pacer) due(n int64) time.Time {
	return p.start.Add(time.Duration(p.offset + float64(n)*p.interval))
}

// take claims the next n ticks and returns their due times in dst.
// Concurrent takers get disjoint ticks.
func (p *pacer) take(dst []time.Time, n int) []time.Time {
	p.mu.Lock()
	first := p.next
	p.next += int64(n)
	p.mu.Unlock()
	for i := range n {
		dst = append(dst, p.due(first+int64(i)))
	}
	return dst
}
