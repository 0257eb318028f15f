//go:build !unix

package main

import "time"

// processCPU is not available here: --procs auto leaves GOMAXPROCS alone.
func processCPU() time.Duration { return -1 }
