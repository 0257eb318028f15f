package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat. The kernel
// exports them in USER_HZ, fixed at 100 on every architecture Go supports
// on Linux (proc(5)), whatever the kernel's own tick rate is.
const userHZ = 100

// procUsage is what /proc says about a process at one moment.
type procUsage struct {
	CPU time.Duration // user + system time since the process started
	RSS int64         // resident set size, bytes
}

// parseStat reads utime and stime from the text of /proc/PID/stat. The
// command name (field 2) is in parentheses and may itself hold spaces and
// parentheses, so fields are counted from the last ')'.
func parseStat(data []byte) (time.Duration, error) {
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return 0, errors.New("stat: no command name")
	}
	// After the name: state (field 3), ..., utime (14), stime (15).
	fields := strings.Fields(string(data[end+1:]))
	const utimeAt, stimeAt = 14 - 3, 15 - 3
	if len(fields) <= stimeAt {
		return 0, fmt.Errorf("stat: %d fields after the command name, want more than %d", len(fields), stimeAt)
	}
	var ticks int64
	for _, f := range []string{fields[utimeAt], fields[stimeAt]} {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("stat: cpu time %q", f)
		}
		ticks += n
	}
	return time.Duration(ticks) * (time.Second / userHZ), nil
}

// parseStatusRSS reads VmRSS from the text of /proc/PID/status, in bytes.
// Kernel threads and zombies have no VmRSS line; that is 0, not an error.
func parseStatusRSS(data []byte) (int64, error) {
	for line := range bytes.Lines(data) {
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("status: VmRSS line %q", bytes.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("status: VmRSS %q: %w", f[0], err)
		}
		return kb << 10, nil
	}
	return 0, nil
}

// readProcUsage samples process pid from /proc.
func readProcUsage(pid int) (procUsage, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return procUsage{}, err
	}
	cpu, err := parseStat(stat)
	if err != nil {
		return procUsage{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return procUsage{}, err
	}
	rss, err := parseStatusRSS(status)
	if err != nil {
		return procUsage{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return procUsage{CPU: cpu, RSS: rss}, nil
}

// procIO is a process's storage writes so far, from /proc/PID/io: the
// sum over its threads, since it started.
type procIO struct {
	// WriteBytes is what the process caused to be sent to storage. A
	// buffered write is charged when it dirties a page cache page, a page
	// at a time, so an fsync after each small append costs a page per
	// append, which is what a durable broker pays; a write to tmpfs is
	// never charged. The file system's journal, written by a kernel
	// thread, is not in it.
	WriteBytes int64
	// CancelledWriteBytes is the part of WriteBytes that never reached
	// storage after all: dirty pages of files truncated or deleted first.
	CancelledWriteBytes int64
}

// parseProcIO reads write_bytes and cancelled_write_bytes from the text
// of /proc/PID/io, lines of "name: value" (proc(5)).
func parseProcIO(data []byte) (procIO, error) {
	var sample procIO
	var haveWrite, haveCancelled bool
	for line := range bytes.Lines(data) {
		name, value, ok := strings.Cut(string(line), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch strings.TrimSpace(name) {
		case "write_bytes":
			dst, haveWrite = &sample.WriteBytes, true
		case "cancelled_write_bytes":
			dst, haveCancelled = &sample.CancelledWriteBytes, true
		default:
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil || n < 0 {
			return procIO{}, fmt.Errorf("io: %s %q", strings.TrimSpace(name), strings.TrimSpace(value))
		}
		*dst = n
	}
	if !haveWrite || !haveCancelled {
		return procIO{}, errors.New("io: no write_bytes or cancelled_write_bytes line")
	}
	return sample, nil
}

// readProcIO samples /proc/PID/io. Only the process's owner (or root) may
// read it, and only kernels with task IO accounting have it.
func readProcIO(pid int) (procIO, error) {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "io"))
	if err != nil {
		return procIO{}, err
	}
	sample, err := parseProcIO(data)
	if err != nil {
		return procIO{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return sample, nil
}

// machineTimes is the whole machine's CPU time at one moment, summed over
// its CPUs: busy is everything but idle and iowait, steal is the part of
// busy the hypervisor gave to other guests.
type machineTimes struct {
	busy, steal, total time.Duration
	cpus               int
}

// parseProcStat reads the text of /proc/stat: the "cpu" line's times in
// USER_HZ (user nice system idle iowait irq softirq steal; guest time is
// already inside user) and the number of "cpuN" lines.
func parseProcStat(data []byte) (machineTimes, error) {
	var m machineTimes
	found := false
	for line := range bytes.Lines(data) {
		f := strings.Fields(string(line))
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			m.cpus++
			continue
		}
		if len(f) < 9 {
			return m, fmt.Errorf("/proc/stat: cpu line has %d fields, want at least 9", len(f))
		}
		var t [8]time.Duration
		for i := range t {
			n, err := strconv.ParseInt(f[i+1], 10, 64)
			if err != nil || n < 0 {
				return m, fmt.Errorf("/proc/stat: cpu time %q", f[i+1])
			}
			t[i] = time.Duration(n) * (time.Second / userHZ)
		}
		const idle, iowait, steal = 3, 4, 7
		for _, d := range t {
			m.total += d
		}
		m.busy = m.total - t[idle] - t[iowait]
		m.steal = t[steal]
		found = true
	}
	if !found {
		return m, errors.New("/proc/stat: no cpu line")
	}
	return m, nil
}

// readMachineTimes samples /proc/stat.
func readMachineTimes() (machineTimes, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTimes{}, err
	}
	return parseProcStat(data)
}

// machineLoad is the machine's load between two samples, or nil if the
// samples are unusable.
func machineLoad(from, to machineTimes) *Machine {
	total := to.total - from.total
	if total <= 0 || to.cpus == 0 {
		return nil
	}
	// CPU time passes cpus times faster than the wall clock.
	share := func(d time.Duration) float64 { return float64(d) / float64(total) * float64(to.cpus) }
	return &Machine{CPUs: to.cpus, BusyCPUs: share(to.busy - from.busy), StolenCPUs: share(to.steal - from.steal)}
}

// tcpListen is the socket state LISTEN in /proc/net/tcp (include/net/tcp_states.h).
const tcpListen = "0A"

// parseListenInodes returns the inodes of the listening sockets on port in
// the text of /proc/net/tcp or /proc/net/tcp6, whose lines read
// "sl local_address rem_address st ... uid timeout inode ...", addresses
// as hex "ADDR:PORT".
func parseListenInodes(data []byte, port int) []uint64 {
	var inodes []uint64
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[3] != tcpListen {
			continue // the header line, or not a listener
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil || int(p) != port {
			continue
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil || inode == 0 {
			continue
		}
		inodes = append(inodes, inode)
	}
	return inodes
}

// findListenerPID finds the process listening on TCP port on this host, by
// matching the socket inodes of /proc/net/tcp{,6} against the links in
// every readable /proc/PID/fd. Processes of other users are unreadable
// without privilege, so this is best effort: 0 means not found.
func findListenerPID(port int) (int, error) {
	want := map[string]bool{}
	for _, name := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(name)
		if err != nil {
			continue // no IPv6, or no /proc
		}
		for _, inode := range parseListenInodes(data, port) {
			want[fmt.Sprintf("socket:[%d]", inode)] = true
		}
	}
	if len(want) == 0 {
		return 0, fmt.Errorf("no listener on port %d in /proc/net/tcp", port)
	}
	// Look at this process first: a broker in the same process is common
	// in tests and cheap to confirm.
	if pidHolds(os.Getpid(), want) {
		return os.Getpid(), nil
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if pidHolds(pid, want) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("the listener on port %d belongs to no process this user can inspect", port)
}

// pidHolds reports whether pid has one of the sockets in want open.
func pidHolds(pid int, want map[string]bool) bool {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, fd.Name()))
		if err == nil && want[target] {
			return true
		}
	}
	return false
}

// isLocalHost reports whether host names this machine: a loopback address
// or one of its interfaces' addresses.
func isLocalHost(host string) bool {
	ips, err := net.LookupIP(host)
	if err != nil {
		return false
	}
	addrs, _ := net.InterfaceAddrs()
	for _, ip := range ips {
		if ip.IsLoopback() || ip.IsUnspecified() {
			return true
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}
