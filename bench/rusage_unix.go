//go:build unix

package bench

import (
	"runtime"
	"syscall"
	"time"
)

// selfUsage is this process's CPU time so far and its peak RSS.
func selfUsage() (procUsage, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return procUsage{}, err
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	// ru_maxrss is in KiB on Linux and the BSDs, in bytes on macOS.
	rss := int64(ru.Maxrss)
	if runtime.GOOS != "darwin" {
		rss <<= 10
	}
	return procUsage{CPU: cpu, RSS: rss}, nil
}
