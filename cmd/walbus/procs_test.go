package main

import (
	"context"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// feed gives g one window's CPU use per value and returns GOMAXPROCS
// after each.
func feed(g *procsGovernor, used ...float64) []int {
	out := make([]int, len(used))
	for i, u := range used {
		out[i] = g.next(u)
	}
	return out
}

func TestProcsGovernor(t *testing.T) {
	t.Run("idle and moderate loads stay at one P", func(t *testing.T) {
		g := newProcsGovernor(4)
		for i, p := range feed(g, append(slices.Repeat([]float64{0}, 50), slices.Repeat([]float64{0.8}, 50)...)...) {
			if p != 1 {
				t.Fatalf("window %d: %d Ps", i, p)
			}
		}
	})
	t.Run("busy windows in a row bring the default back, scattered ones do not", func(t *testing.T) {
		g := newProcsGovernor(4)
		got := feed(g, 0.9, 0.95, 0.2, 1.0, 0.9, 0.1, 0.9, 1.0, 1.0, 1.2)
		want := []int{1, 1, 1, 1, 1, 1, 1, 1, 4, 4}
		if !slices.Equal(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	})
	t.Run("at the default: back to one P after the quiet wait, a busy window restarts it", func(t *testing.T) {
		g := newProcsGovernor(4)
		feed(g, slices.Repeat([]float64{0.1}, procsTryShort*procsQuietMin)...) // a long stint at one P,
		feed(g, 1, 1, 1)                                                       // then load
		if g.cur != 4 || g.wait != procsQuietMin {
			t.Fatalf("cur %d wait %d", g.cur, g.wait)
		}
		got := feed(g, slices.Repeat([]float64{0.9}, procsQuietMin-1)...)
		if got[len(got)-1] != 4 {
			t.Fatal("lowered too early")
		}
		if feed(g, 1.5)[0] != 4 { // not quiet: the count starts again
			t.Fatal("lowered on a busy window")
		}
		got = feed(g, slices.Repeat([]float64{0.9}, procsQuietMin)...)
		if got[len(got)-2] != 4 || got[len(got)-1] != 1 {
			t.Fatalf("quiet windows: %v", got)
		}
	})
	t.Run("a load between the two settings backs off instead of flapping", func(t *testing.T) {
		g := newProcsGovernor(2)
		// Busy at one P, quiet at two: each try at one P ends at once.
		changes, waits := 0, []int{}
		prev := g.cur
		for range 20000 {
			used := 0.6
			if g.cur == 1 {
				used = 0.9
			}
			if p := g.next(used); p != prev {
				changes++
				prev = p
				if p > 1 {
					waits = append(waits, g.wait)
				}
			}
		}
		if g.wait != procsQuietMax {
			t.Fatalf("wait %d after %d changes, want %d", g.wait, changes, procsQuietMax)
		}
		for i := 1; i < len(waits); i++ {
			if waits[i] < waits[i-1] {
				t.Fatalf("wait shrank: %v", waits)
			}
		}
		// 20,000 windows (33 minutes) hold at most ~35 tries at the
		// longest wait, not one every few seconds.
		if changes > 100 {
			t.Fatalf("%d changes", changes)
		}
	})
	t.Run("a long stint at one P resets the wait", func(t *testing.T) {
		g := newProcsGovernor(2)
		g.wait = procsQuietMax
		feed(g, slices.Repeat([]float64{0.1}, procsTryShort*procsQuietMax)...)
		feed(g, 1, 1, 1)
		if g.cur != 2 || g.wait != procsQuietMin {
			t.Fatalf("cur %d wait %d", g.cur, g.wait)
		}
	})
}

func TestProcsFlag(t *testing.T) {
	var n int
	f := procsFlag{&n}
	for _, c := range []struct {
		in   string
		want int
		bad  bool
	}{{"auto", procsAuto, false}, {"3", 3, false}, {"1", 1, false}, {"0", 0, true}, {"-1", 0, true}, {"two", 0, true}, {"", 0, true}} {
		n = -1
		err := f.Set(c.in)
		if (err != nil) != c.bad || (!c.bad && n != c.want) {
			t.Errorf("Set(%q): n %d err %v", c.in, n, err)
		}
	}
	for v, want := range map[int]string{0: "", procsAuto: "auto", 4: "4"} {
		n = v
		if f.String() != want {
			t.Errorf("String of %d: %q, want %q", v, f.String(), want)
		}
	}
}

// The governor applied to this test process: one P at first, the default
// under a busy load, one P again when it is quiet, the default after.
func TestGovernProcs(t *testing.T) {
	wide := runtime.GOMAXPROCS(0)
	if wide < 2 {
		t.Skip("one CPU: nothing to govern")
	}
	var load atomic.Uint64 // float64 bits: cores in use
	spent, last := time.Duration(0), time.Now()
	cpu := func() time.Duration { // called by the governor's goroutine only
		now := time.Now()
		spent += time.Duration(float64(now.Sub(last)) * math.Float64frombits(load.Load()))
		last = now
		return spent
	}
	setLoad := func(cores float64) { load.Store(math.Float64bits(cores)) }
	waitProcs := func(want int, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for runtime.GOMAXPROCS(0) != want {
			if time.Now().After(deadline) {
				t.Fatalf("GOMAXPROCS %d, want %d", runtime.GOMAXPROCS(0), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		governProcs(ctx, cpu, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	defer func() {
		cancel()
		<-done
	}()
	waitProcs(1, time.Second)
	setLoad(1.5)
	waitProcs(wide, 5*time.Second)
	setLoad(0.1)
	waitProcs(1, 10*time.Second)
	cancel()
	<-done
	if runtime.GOMAXPROCS(0) != wide {
		t.Fatalf("GOMAXPROCS %d after the governor ended, want %d", runtime.GOMAXPROCS(0), wide)
	}
}

// walbus serve: the runtime's GOMAXPROCS by default; --procs auto is one
// P while idle; --procs N and GOMAXPROCS fix it, the flag first.
func TestServeProcs(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 || os.Getenv("GOMAXPROCS") != "" {
		t.Skip("one CPU, or GOMAXPROCS set for the tests: the default would be 1 too")
	}
	metric := func(p *proc) string {
		t.Helper()
		text := getText(t, "http://"+p.http+"/metrics")
		const name = "\ngo_sched_gomaxprocs_threads "
		i := strings.Index(text, name)
		if i < 0 {
			t.Fatal("no go_sched_gomaxprocs_threads in /metrics")
		}
		v, _, _ := strings.Cut(text[i+len(name):], "\n")
		return v
	}
	// settled waits for a governor, if one runs, to have acted.
	settled := func(p *proc, want string) {
		t.Helper()
		time.Sleep(3 * procsWindow)
		deadline := time.Now().Add(5 * time.Second)
		for got := metric(p); got != want; got = metric(p) {
			if time.Now().After(deadline) {
				t.Fatalf("%v %v: GOMAXPROCS %s, want %s", p.env, p.args, got, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	start := func(env []string, args ...string) *proc {
		p := &proc{t: t, dir: t.TempDir(), env: env, args: args}
		p.start()
		t.Cleanup(p.kill)
		return p
	}
	if got := func() string { p := start(nil); time.Sleep(3 * procsWindow); return metric(p) }(); got == "1" {
		t.Errorf("GOMAXPROCS 1 without --procs on %d CPUs", runtime.GOMAXPROCS(0))
	}
	settled(start(nil, "--procs", "auto"), "1")
	settled(start(nil, "--procs", "3"), "3")
	settled(start([]string{"GOMAXPROCS=3"}), "3")
	settled(start([]string{"GOMAXPROCS=3"}, "--procs", "auto"), "1")
	settled(start([]string{"GOMAXPROCS=3", "WALBUS_PROCS=2"}), "2")
}
