//go:build unix

package main

import (
	"syscall"
	"time"
)

// processCPU is the process's user and system CPU time so far, or -1.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
