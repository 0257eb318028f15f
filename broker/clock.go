package broker

import (
	"slices"
	"sync"
	"time"
)

// Clock is the broker's source of time. The projection never reads a clock:
// the runtime reads this one and passes the time in.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface{ Stop() bool }

// SystemClock is the real clock.
type SystemClock struct{}

func (SystemClock) Now() time.Time                            { return time.Now() }
func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// FakeClock is a manual clock for tests: time moves only by Advance or
// AdvanceTo, which run every timer that comes due. A timer set for the past
// runs at once, in the caller's goroutine.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	fired  int64
}

type fakeTimer struct {
	c       *FakeClock
	at      time.Time
	f       func()
	stopped bool
}

func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *FakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	t := &fakeTimer{c: c, at: c.now.Add(d), f: f}
	if d <= 0 {
		t.stopped = true
		c.fired++
		c.mu.Unlock()
		f()
		return t
	}
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	return t
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// Fired counts the timers that have run.
func (c *FakeClock) Fired() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fired
}

// Next returns when the earliest pending timer is due.
func (c *FakeClock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var next time.Time
	found := false
	for _, t := range c.timers {
		if !t.stopped && (!found || t.at.Before(next)) {
			next, found = t.at, true
		}
	}
	return next, found
}

// Advance moves the clock forward by d; see AdvanceTo.
func (c *FakeClock) Advance(d time.Duration) { c.AdvanceTo(c.Now().Add(d)) }

// AdvanceTo sets the clock to t (if later) and runs, in the caller's
// goroutine and in time order, every timer due by then that was pending
// when it was called.
func (c *FakeClock) AdvanceTo(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.now = t
	}
	var due []*fakeTimer
	kept := c.timers[:0]
	for _, tm := range c.timers {
		switch {
		case tm.stopped:
		case !tm.at.After(c.now):
			tm.stopped = true
			due = append(due, tm)
		default:
			kept = append(kept, tm)
		}
	}
	c.timers = kept
	c.fired += int64(len(due))
	c.mu.Unlock()
	slices.SortStableFunc(due, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
	for _, tm := range due {
		tm.f()
	}
}
