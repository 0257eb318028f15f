package broker

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
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

// OffsetClock is the real clock moved ahead by an offset that Advance
// grows: walbus serve --test-clock. Its timers run when the moved clock
// reaches them, so an advance runs at once every timer it passes (lock
// expiries, activations, expiries, idle deletions) and brings the others
// nearer.
type OffsetClock struct {
	mu     sync.Mutex
	offset time.Duration
	timers map[*offsetTimer]struct{}
}

type offsetTimer struct {
	c    *OffsetClock
	at   time.Time // on the moved clock
	f    func()
	real *time.Timer
	done bool
}

// NewOffsetClock returns a clock at the real time, offset by nothing.
func NewOffsetClock() *OffsetClock { return &OffsetClock{timers: map[*offsetTimer]struct{}{}} }

func (c *OffsetClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Offset is how far ahead of the real clock this one is.
func (c *OffsetClock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

func (c *OffsetClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &offsetTimer{c: c, at: time.Now().Add(c.offset + d), f: f}
	c.timers[t] = struct{}{}
	t.real = time.AfterFunc(d, t.fire)
	return t
}

// Advance moves the clock d ahead (d > 0): the timers it passes run now.
func (c *OffsetClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setOffset(c.offset + d)
}

// setOffset moves the clock to offset and reschedules the timers. c.mu is
// held.
func (c *OffsetClock) setOffset(offset time.Duration) {
	c.offset = offset
	now := time.Now().Add(offset)
	for t := range c.timers {
		t.real.Reset(max(t.at.Sub(now), 0)) // fire runs f once, whatever Reset did
	}
}

func (t *offsetTimer) fire() {
	t.c.mu.Lock()
	if t.done {
		t.c.mu.Unlock()
		return
	}
	if wait := t.at.Sub(time.Now().Add(t.c.offset)); wait > 0 {
		t.real.Reset(wait) // early: the real timer ran before a setOffset that moved it back
		t.c.mu.Unlock()
		return
	}
	t.done = true
	delete(t.c.timers, t)
	t.c.mu.Unlock()
	t.f()
}

func (t *offsetTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.done
	t.done = true
	delete(t.c.timers, t)
	t.real.Stop()
	return was
}

// ErrNoTestClock refuses an advance of a broker that runs on the real
// clock.
var ErrNoTestClock = errors.New("the clock is the real one: walbus serve --test-clock to move it")

// AdvanceClock moves the broker's test clock d ahead (0 < d ≤ 100 years),
// durably: a ClockAdvanced event in the namespace log, which the next
// start reads. Every timer it passes runs.
func (b *Broker) AdvanceClock(d time.Duration) error {
	c, ok := b.clock.(*OffsetClock)
	if !ok {
		return ErrNoTestClock
	}
	if d <= 0 || d > 100*365*24*time.Hour {
		return fmt.Errorf("%w: advance the clock by more than nothing and at most 100 years, not %v", projection.ErrInvalid, d)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.appendNamespace([]event.Event{{Type: event.ClockAdvanced, TTL: int64(d)}}); err != nil {
		return err
	}
	c.Advance(d)
	// What became idle for its AutoDeleteOnIdle goes now, not at the next
	// scan.
	select {
	case b.idleScan <- struct{}{}:
	default:
	}
	return nil
}

// Now is the broker's clock: the real time, or the test clock's.
func (b *Broker) Now() time.Time { return b.clock.Now() }

// ClockOffset is how far the test clock runs ahead of the real one.
func (b *Broker) ClockOffset() time.Duration {
	if c, ok := b.clock.(*OffsetClock); ok {
		return c.Offset()
	}
	return 0
}

// TestClock reports whether the broker runs on a test clock.
func (b *Broker) TestClock() bool {
	_, ok := b.clock.(*OffsetClock)
	return ok
}
