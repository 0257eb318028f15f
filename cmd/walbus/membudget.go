package main

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// The memory budget's default is a quarter of the memory walbus may use,
// at most maxDefaultBudget: the cache of recent messages is worth having
// for consumers that keep up, which need little of it, and for the head of
// a backlog; the rest of a backlog is read back from the log (and the
// kernel's page cache) instead. docs/operations.md#memory.
const (
	maxDefaultBudget = 512 << 20
	// memoryOverhead is what the process's RSS may hold beside twice the
	// budget (the budget's worth being the collector's room): what walbus
	// holds besides the cache (message tables, log buffers of busy queues,
	// connections), and binaryAllowance of it for what the runtime's
	// memory limit does not count, the binary's code and data.
	memoryOverhead  = 256 << 20
	binaryAllowance = 64 << 20
)

// defaultMemoryBudget is a quarter of the machine's memory, or of its
// cgroup's limit when that is lower, at most maxDefaultBudget; the cap
// alone where neither can be read.
func defaultMemoryBudget() int {
	total := physicalMemory()
	if limit := cgroupMemoryLimit(); limit > 0 && (total == 0 || limit < total) {
		total = limit
	}
	if total == 0 {
		return maxDefaultBudget
	}
	return int(min(total/4, maxDefaultBudget))
}

// memoryLimitFor is the runtime's memory limit for a budget, so that RSS
// stays under twice the budget plus memoryOverhead; 0 for no budget.
func memoryLimitFor(budget int) int64 {
	if budget <= 0 {
		return 0
	}
	return 2*int64(budget) + memoryOverhead - binaryAllowance
}

// limitMemory sets the runtime's memory limit from the budget, unless
// GOMEMLIMIT is set or there is no budget. It returns the limit in force
// (math.MaxInt64: none).
func limitMemory(budget int) int64 {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set || budget <= 0 {
		return debug.SetMemoryLimit(-1)
	}
	limit := memoryLimitFor(budget)
	debug.SetMemoryLimit(limit)
	return limit
}

// physicalMemory is MemTotal from /proc/meminfo, 0 if unknown.
func physicalMemory() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && fields[0] == "MemTotal:" && fields[2] == "kB" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// cgroupMemoryLimit is the memory limit of the process's cgroup (v2's
// memory.max, or v1's memory.limit_in_bytes), 0 if none or unknown.
func cgroupMemoryLimit() int64 {
	for _, path := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
		// "max" in v2; v1 says no limit with a number near 2^63.
		if err == nil && n > 0 && n < 1<<60 {
			return n
		}
	}
	return 0
}

// memoryLimitText is a memory limit for the log: "none" for no limit.
func memoryLimitText(limit int64) string {
	if limit == math.MaxInt64 {
		return "none"
	}
	n := int(limit)
	return byteSize{&n}.String()
}
