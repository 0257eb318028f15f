package bench

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"
)

// ticksBefore takes ticks from p until one is due at or after end and
// returns those due before it.
func ticksBefore(p *pacer, end time.Time) []time.Time {
	var due []time.Time
	for {
		next := p.take(nil, 1)[0]
		if !next.Before(end) {
			return due
		}
		due = append(due, next)
	}
}

// Over a window, the senders' schedules together hold rate*window ticks,
// and merged they are evenly spaced: tick k of all is due at k/rate.
func TestPacerRateAndSpacing(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	for _, rate := range []float64{1, 7.5, 5000, 12345.6} {
		for _, senders := range []int{1, 3, 64} {
			t.Run(fmt.Sprintf("%g/s over %d", rate, senders), func(t *testing.T) {
				window := 10 * time.Second
				var all []time.Time
				for i := range senders {
					all = append(all, ticksBefore(newPacer(start, rate, i, senders), start.Add(window))...)
				}
				want := rate * window.Seconds()
				if got := float64(len(all)); math.Abs(got-want) > 1 {
					t.Fatalf("%v ticks in %v, want %v", got, window, want)
				}
				slices.SortFunc(all, func(a, b time.Time) int { return a.Compare(b) })
				for k, due := range all {
					ideal := float64(k) * 1e9 / rate
					if off := float64(due.Sub(start)) - ideal; math.Abs(off) > 2 {
						t.Fatalf("tick %d due at %v, %vns from even spacing", k, due.Sub(start), off)
					}
				}
			})
		}
	}
}

// Concurrent takers (a sender's --in-flight goroutines) share one
// schedule: together they get every tick once, in batches.
func TestPacerConcurrentTake(t *testing.T) {
	start := time.Unix(0, 0)
	p := newPacer(start, 1000, 0, 1)
	const takers, each, batch = 8, 50, 3
	got := make([][]time.Time, takers)
	var wg sync.WaitGroup
	for i := range takers {
		wg.Go(func() {
			for range each {
				got[i] = p.take(got[i], batch)
			}
		})
	}
	wg.Wait()
	seen := map[time.Duration]bool{}
	for _, due := range got {
		for _, d := range due {
			seen[d.Sub(start)] = true
		}
	}
	for k := range takers * each * batch {
		if !seen[time.Duration(k)*time.Millisecond] {
			t.Fatalf("tick %d never taken (%d distinct of %d)", k, len(seen), takers*each*batch)
		}
	}
	if len(seen) != takers*each*batch {
		t.Fatalf("%d distinct ticks, want %d", len(seen), takers*each*batch)
	}
}

// A schedule computed from the tick number does not drift over a long run.
func TestPacerNoDrift(t *testing.T) {
	start := time.Unix(0, 0)
	p := newPacer(start, 3, 1, 7) // 3/s over 7 senders: interval 7/3 s, offset 1/3 s
	n := int64(10_000_000)
	want := float64(time.Second)/3 + float64(n)*7*float64(time.Second)/3
	if got := float64(p.due(n).Sub(start)); math.Abs(got-want) > 1e3 {
		t.Fatalf("tick %d due at %v, want %v", n, time.Duration(got), time.Duration(want))
	}
}
