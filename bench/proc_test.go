package bench

import (
	"math"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"
)

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The command name holds spaces and parentheses; fields count from the
// last ')'.
func TestParseStat(t *testing.T) {
	cpu, err := parseStat(readTestdata(t, "stat"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (1234 + 567) * 10 * time.Millisecond; cpu != want {
		t.Fatalf("cpu %v, want %v", cpu, want)
	}
	for _, bad := range []string{"", "12 (x", "12 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 -5 3 0"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("parseStat(%q): no error", bad)
		}
	}
}

func TestParseStatusRSS(t *testing.T) {
	rss, err := parseStatusRSS(readTestdata(t, "status"))
	if err != nil || rss != 125664<<10 {
		t.Fatalf("rss %d, %v; want %d", rss, err, 125664<<10)
	}
	if rss, err := parseStatusRSS([]byte("Name:\tkthreadd\nState:\tS\n")); rss != 0 || err != nil {
		t.Fatalf("kernel thread: %d, %v", rss, err)
	}
	if _, err := parseStatusRSS([]byte("VmRSS:\t12 MB\n")); err == nil {
		t.Fatal("unknown unit accepted")
	}
}

// write_bytes and cancelled_write_bytes are read; the other counters,
// which include socket traffic (wchar) or reads, are not.
func TestParseProcIO(t *testing.T) {
	got, err := parseProcIO(readTestdata(t, "io"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (procIO{WriteBytes: 731906048, CancelledWriteBytes: 8192}); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{
		"",
		"rchar: 1\nwchar: 2\n", // no write lines: no IO accounting
		"write_bytes: 4096\n",  // half of it
		"write_bytes: x\ncancelled_write_bytes: 0\n",   // not a number
		"write_bytes: -1\ncancelled_write_bytes: 0\n",  // negative
		"write_bytes: 1\ncancelled_write_bytes: 1.5\n", // not an integer
	} {
		if _, err := parseProcIO([]byte(bad)); err == nil {
			t.Errorf("parseProcIO(%q): no error", bad)
		}
	}
}

// This process's own /proc/PID/io can be read, and counts a file it
// writes and syncs (unless the temporary directory is tmpfs, which
// charges nothing: then it only has to be readable).
func TestReadProcIOSelf(t *testing.T) {
	linuxOnly(t)
	before, err := readProcIO(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "w"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	after, err := readProcIO(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after.WriteBytes < before.WriteBytes {
		t.Fatalf("write_bytes went back from %d to %d", before.WriteBytes, after.WriteBytes)
	}
	t.Logf("write_bytes grew by %d for a 1 MiB file", after.WriteBytes-before.WriteBytes)
}

// The "cpu" line is the machine's sum; idle and iowait are the only
// times that are not busy; guest time is inside user and not added again.
func TestParseProcStat(t *testing.T) {
	m, err := parseProcStat(readTestdata(t, "proc_stat"))
	if err != nil {
		t.Fatal(err)
	}
	tick := 10 * time.Millisecond
	want := machineTimes{busy: (2000 + 100 + 1000 + 300 + 200) * tick, steal: 200 * tick,
		total: (2000 + 100 + 1000 + 6000 + 400 + 300 + 200) * tick, cpus: 2}
	if m != want {
		t.Fatalf("got %+v, want %+v", m, want)
	}
	for _, bad := range []string{"", "intr 1 2 3\n", "cpu  1 2 3 4\n", "cpu  1 2 3 x 5 6 7 8\n", "cpu  1 2 3 -4 5 6 7 8\n"} {
		if _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q): no error", bad)
		}
	}
}

// Two samples a second apart on two CPUs: the busy and stolen shares of
// the CPU time that passed, in CPUs.
func TestMachineLoad(t *testing.T) {
	s := time.Second
	from := machineTimes{busy: 10 * s, steal: 1 * s, total: 100 * s, cpus: 2}
	to := machineTimes{busy: 11500 * time.Millisecond, steal: 1100 * time.Millisecond, total: 102 * s, cpus: 2}
	m := machineLoad(from, to)
	if m == nil || m.CPUs != 2 || math.Abs(m.BusyCPUs-1.5) > 1e-9 || math.Abs(m.StolenCPUs-0.1) > 1e-9 {
		t.Fatalf("got %+v, want 1.5 busy and 0.1 stolen of 2", m)
	}
	if m := machineLoad(to, to); m != nil {
		t.Fatalf("no time passed, got %+v", m)
	}
}

// Only listening sockets on the port count, IPv4 and IPv6 alike.
func TestParseListenInodes(t *testing.T) {
	if got := parseListenInodes(readTestdata(t, "net_tcp"), 5672); !slices.Equal(got, []uint64{55501}) {
		t.Errorf("tcp: %v", got)
	}
	if got := parseListenInodes(readTestdata(t, "net_tcp6"), 5672); !slices.Equal(got, []uint64{66601}) {
		t.Errorf("tcp6: %v", got)
	}
	if got := parseListenInodes(readTestdata(t, "net_tcp"), 5673); len(got) != 0 {
		t.Errorf("port 5673: %v", got)
	}
}

func linuxOnly(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs /proc")
	}
}

// The test process's own CPU time grows as it works, and it has an RSS.
func TestReadProcUsageSelf(t *testing.T) {
	linuxOnly(t)
	before, err := readProcUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if before.RSS <= 0 {
		t.Fatalf("rss %d", before.RSS)
	}
	// Spin until the kernel has charged at least one more tick, or give up:
	// a stuck counter, not a slow machine, is what this would catch.
	deadline := time.Now().Add(10 * time.Second)
	sink := 0
	for time.Now().Before(deadline) {
		for i := range 1_000_000 {
			sink += i
		}
		after, err := readProcUsage(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after.CPU < before.CPU {
			t.Fatalf("cpu went back from %v to %v", before.CPU, after.CPU)
		}
		if after.CPU > before.CPU {
			return
		}
	}
	t.Fatalf("cpu stayed at %v while spinning (%d)", before.CPU, sink)
}

// A listener this process opened is found to be this process's.
func TestFindListenerPID(t *testing.T) {
	linuxOnly(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pid, err := findListenerPID(l.Addr().(*net.TCPAddr).Port)
	if err != nil || pid != os.Getpid() {
		t.Fatalf("pid %d, %v; want %d", pid, err, os.Getpid())
	}
}

func TestSelfUsage(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no getrusage")
	}
	u, err := selfUsage()
	if err != nil || u.CPU <= 0 || u.RSS <= 0 {
		t.Fatalf("%+v, %v", u, err)
	}
}
