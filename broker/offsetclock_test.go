package broker

import (
	"errors"
	"testing"
	"time"

	"github.com/walbus/walbus/projection"
)

// An offset clock's advance runs at once the timers it passes, brings the
// others nearer, and leaves stopped ones stopped; Now moves with it.
func TestOffsetClock(t *testing.T) {
	c := NewOffsetClock()
	fired := make(chan string, 3)
	c.AfterFunc(time.Hour, func() { fired <- "hour" })
	c.AfterFunc(3*time.Hour, func() { fired <- "three hours" })
	stopped := c.AfterFunc(time.Hour, func() { fired <- "stopped" })
	if !stopped.Stop() {
		t.Fatal("a pending timer did not stop")
	}
	before := c.Now()
	c.Advance(2*time.Hour + time.Minute)
	if d := c.Now().Sub(before); d < 2*time.Hour || d > 2*time.Hour+2*time.Minute {
		t.Fatalf("Now moved %v", d)
	}
	select {
	case got := <-fired:
		if got != "hour" {
			t.Fatalf("%s ran", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the timer the advance passed did not run")
	}
	select {
	case got := <-fired:
		t.Fatalf("%s ran before its time", got)
	case <-time.After(50 * time.Millisecond):
	}
	c.Advance(time.Hour)
	select {
	case got := <-fired:
		if got != "three hours" {
			t.Fatalf("%s ran", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second timer did not run")
	}
	if c.Offset() != 3*time.Hour+time.Minute {
		t.Fatalf("offset %v", c.Offset())
	}
}

// A broker on the real clock refuses an advance; one on a test clock
// refuses nonsense, and keeps its advances across a restart.
func TestAdvanceClock(t *testing.T) {
	real := openBroker(t, Options{Dir: t.TempDir()})
	defer real.Close()
	if err := real.AdvanceClock(time.Hour); !errors.Is(err, ErrNoTestClock) {
		t.Fatalf("advancing the real clock: %v", err)
	}
	dir := t.TempDir()
	b := openBroker(t, Options{Dir: dir, Clock: NewOffsetClock()})
	for _, d := range []time.Duration{0, -time.Hour, 101 * 365 * 24 * time.Hour} {
		if err := b.AdvanceClock(d); !errors.Is(err, projection.ErrInvalid) {
			t.Errorf("advance by %v: %v", d, err)
		}
	}
	for range 2 {
		if err := b.AdvanceClock(90 * time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	b.Close()
	b = openBroker(t, Options{Dir: dir, Clock: NewOffsetClock()})
	defer b.Close()
	if off := b.ClockOffset(); off != 3*time.Hour {
		t.Fatalf("offset after a restart: %v", off)
	}
}
