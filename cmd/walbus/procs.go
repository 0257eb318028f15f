package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"time"
)

// --procs sets the broker's GOMAXPROCS: a number, or auto. Without it the
// runtime chooses (every CPU, or the container's quota), as for any Go
// program.
//
// auto runs the broker's Go code on one P while it uses well under a core
// of CPU, and on the runtime's default when it needs more. A message
// crosses several goroutines in the broker (connection reader, entity, log
// writer, connection writer); with idle Ps about, the runtime wakes another
// thread for nearly every hand-off, and that thread spins looking for
// work, parks and is woken again, which on a broker mostly waiting for
// sockets and fsync costs more than the work. On two CPUs shared with the
// clients (make bench), one P took 10 to 35% off the broker's CPU per
// message, and single sends went up by a fifth or more, the clients having
// the CPU back. The price is latency at moderate fixed rates: a goroutine
// in fsync keeps the one P until the runtime's monitor takes it back (tens
// of microseconds or more), so the other goroutines wait; end-to-end
// latency at 5,000 msgs/s rose by a quarter or more. That is why auto is
// a choice and not the default.
const (
	procsWindow = 100 * time.Millisecond
	// procsBusy is the CPU (in cores) over a window at one P that counts
	// as busy: the P is nearly always running. procsBusyWindows busy
	// windows in a row bring the default back; one alone is a snapshot
	// or a collection, not load.
	procsBusy        = 0.85
	procsBusyWindows = 3
	// procsWideQuiet is the CPU under which a window at the default
	// counts as quiet. The same load costs more CPU at several Ps, so this
	// is above procsBusy: a load that would fit one P gets to try it.
	procsWideQuiet = 1.0
	// After procsQuietMin quiet windows in a row at the default the
	// broker tries one P again. A try that ends soon (busy again within
	// procsTryShort times the wait) doubles the wait, up to procsQuietMax,
	// so a load that sits between the two settings does not flap.
	procsQuietMin = 30  // 3 s
	procsQuietMax = 600 // 1 min
	procsTryShort = 10
)

// procsFlag is --procs: 0 when not given (the runtime's default),
// procsAuto, or a fixed GOMAXPROCS.
type procsFlag struct{ n *int }

const procsAuto = -1

func (p procsFlag) String() string {
	switch {
	case p.n == nil || *p.n == 0:
		return ""
	case *p.n == procsAuto:
		return "auto"
	}
	return strconv.Itoa(*p.n)
}

func (p procsFlag) Set(s string) error {
	if s == "auto" {
		*p.n = procsAuto
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return fmt.Errorf("want auto or a number of CPUs (1 or more)")
	}
	*p.n = n
	return nil
}

// procsGovernor decides GOMAXPROCS window by window. It is pure: the
// caller measures and applies.
type procsGovernor struct {
	wide  int // GOMAXPROCS under load: the runtime's default
	cur   int
	busy  int // busy windows in a row at one P
	quiet int // quiet windows in a row at wide
	wait  int // quiet windows needed before the next try at one P
	since int // windows since the last move to one P
}

func newProcsGovernor(wide int) *procsGovernor {
	return &procsGovernor{wide: wide, cur: 1, wait: procsQuietMin}
}

// next returns GOMAXPROCS for the coming window given the CPU used, in
// cores, over the last one.
func (g *procsGovernor) next(used float64) int {
	g.since++
	if g.cur == 1 {
		if used < procsBusy {
			g.busy = 0
			return 1
		}
		if g.busy++; g.busy < procsBusyWindows {
			return 1
		}
		if g.since < procsTryShort*g.wait {
			g.wait = min(2*g.wait, procsQuietMax)
		} else {
			g.wait = procsQuietMin
		}
		g.cur, g.busy, g.quiet = g.wide, 0, 0
		return g.cur
	}
	if used >= procsWideQuiet {
		g.quiet = 0
		return g.cur
	}
	if g.quiet++; g.quiet >= g.wait {
		g.cur, g.quiet, g.since = 1, 0, 0
	}
	return g.cur
}

// tuneProcs applies --procs, which overrides GOMAXPROCS in the
// environment. auto starts the governor, which runs until ctx ends; it
// does nothing on one CPU, or where CPU time cannot be read.
func tuneProcs(ctx context.Context, procs int, logger *slog.Logger) {
	switch {
	case procs > 0:
		runtime.GOMAXPROCS(procs)
	case procs == procsAuto && runtime.GOMAXPROCS(0) > 1 && processCPU() >= 0:
		go governProcs(ctx, processCPU, logger)
	}
}

// governProcs samples the process's CPU time every procsWindow and sets
// GOMAXPROCS as procsGovernor says. The broker starts idle: at one P.
func governProcs(ctx context.Context, cpu func() time.Duration, logger *slog.Logger) {
	g := newProcsGovernor(runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(1)
	defer runtime.SetDefaultGOMAXPROCS()
	tick := time.NewTicker(procsWindow)
	defer tick.Stop()
	lastCPU, lastAt := cpu(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			c := cpu()
			used := float64(c-lastCPU) / float64(now.Sub(lastAt))
			lastCPU, lastAt = c, now
			if g.cur > 1 {
				// The runtime's default follows a container's quota.
				g.cur = runtime.GOMAXPROCS(0)
				g.wide = g.cur
			}
			was := g.cur
			switch g.next(used) {
			case was:
			case 1:
				runtime.GOMAXPROCS(1)
				logger.Debug("one P", "cpu", used)
			default:
				runtime.SetDefaultGOMAXPROCS()
				if g.cur = runtime.GOMAXPROCS(0); g.cur < 2 {
					return // the quota is down to one CPU: nothing to govern
				}
				g.wide = g.cur
				logger.Debug("the default Ps", "gomaxprocs", g.cur, "cpu", used)
			}
		}
	}
}
