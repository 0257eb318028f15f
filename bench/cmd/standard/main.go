//go:build unix

// Command standard is `make bench`: it starts walbus serve --sync always on
// a fresh data directory and a free loopback port, runs a short standard
// set of walbus bench runs against it, runs its fixed-rate loads again
// against walbus bench floor as the control, plain and durable (under two
// minutes in all), and prints one table. It exits 1 if a run failed or the
// server did not stop cleanly.
//
//	go run ./bench/cmd/standard [--walbus bin/walbus] [--warmup 1s] [--duration 5s]
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/walbus/walbus/bench"
)

// A workload is one walbus bench run; the target flags are added to args.
type workload struct {
	name  string
	queue string
	args  []string
}

// standard is the set. The batch run fills the queue the drain empties:
// it sends faster than the drain receives, so the drain does not run dry.
var standard = []workload{
	{"sdk send, in-flight 64", "send", []string{"--client", "sdk", "--senders", "1", "--receivers", "0", "--in-flight", "64"}},
	{"sdk send, batches of 100", "drain", []string{"--client", "sdk", "--senders", "1", "--receivers", "0", "--batch", "100", "--in-flight", "4"}},
	{"amqp send, in-flight 64", "amqp", []string{"--client", "amqp", "--senders", "1", "--receivers", "0", "--in-flight", "64"}},
	{"sdk 4+4 at 2000/s", "mixed", []string{"--client", "sdk", "--senders", "4", "--receivers", "4", "--in-flight", "16", "--rate", "2000"}},
	{"sdk 4+4 at 5000/s", "mixed", []string{"--client", "sdk", "--senders", "4", "--receivers", "4", "--in-flight", "16", "--rate", "5000"}},
	// The same load from go-amqp clients: the broker's work is the same, the
	// client's is lighter (no credit round trip per receive call).
	{"amqp 4+4 at 5000/s", "mixed", []string{"--client", "amqp", "--senders", "4", "--receivers", "4", "--in-flight", "16", "--rate", "5000"}},
	{"sdk drain, 4 receivers", "drain", []string{"--client", "sdk", "--senders", "0", "--receivers", "4", "--batch", "100", "--in-flight", "64"}},
}

// The emulator's key, which walbus serve accepts by default.
const credentials = "RootManageSharedAccessKey:SAS_KEY_VALUE"

func main() {
	walbus := flag.String("walbus", "bin/walbus", "the walbus binary")
	warmup := flag.Duration("warmup", time.Second, "warm-up of each run")
	duration := flag.Duration("duration", 5*time.Second, "measured window of each run")
	flag.Parse()
	os.Exit(run(*walbus, *warmup, *duration))
}

func run(walbus string, warmup, duration time.Duration) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := standardSet(ctx, walbus, warmup, duration); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}

func standardSet(ctx context.Context, walbus string, warmup, duration time.Duration) (err error) {
	dir, err := os.MkdirTemp("", "walbus-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := startServer(walbus, dir)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, srv.stop()) }()

	rows, failed, err := runAll(ctx, walbus, srv.amqpAddr, srv.cmd.Process.Pid, standard, warmup, duration)
	if err != nil {
		return err
	}
	// The floors: plain, then the two durable ones, each syncing to a
	// file on the disk walbus serve writes to.
	floorLog := filepath.Join(dir, "floor.log")
	for _, f := range []struct {
		label string
		args  []string
	}{
		{"floor", nil},
		{"durable floor", []string{"--durable", floorLog}},
		{"overwriting floor", []string{"--durable", floorLog, "--overwrite"}},
	} {
		floorRows, floorFailed, err := floorSet(ctx, walbus, f.label, f.args, warmup, duration)
		if ctx.Err() != nil {
			return errors.New("interrupted")
		}
		if err != nil {
			floorFailed = append(floorFailed, err.Error())
		}
		failed = append(failed, floorFailed...)
		rows = append(rows, floorRows...)
	}
	printTable(os.Stdout, rows, warmup, duration)
	for _, note := range dryRuns(rows, warmup, duration) {
		fmt.Fprintln(os.Stdout, note)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d run(s) failed:\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	return nil
}

// runAll runs each workload against the broker listening on addr (process
// pid) and returns a row each, and what failed. Only an interrupt stops it
// early.
func runAll(ctx context.Context, walbus, addr string, pid int, set []workload, warmup, duration time.Duration) (rows []row, failed []string, err error) {
	common := []string{"--url", fmt.Sprintf("amqp://%s@%s", credentials, addr), "--broker-pid", fmt.Sprint(pid), "--json",
		"--warmup", warmup.String(), "--duration", duration.String()}
	for i, w := range set {
		fmt.Fprintf(os.Stderr, "[%d/%d] %s\n", i+1, len(set), w.name)
		res, err := benchRun(ctx, walbus, append(append([]string{"bench", "--queue", w.queue}, w.args...), common...))
		if ctx.Err() != nil {
			return nil, nil, errors.New("interrupted")
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", w.name, err))
		}
		rows = append(rows, row{w, res})
	}
	return rows, failed, nil
}

// benchRun runs walbus bench with args and decodes its --json result. A
// failed run still returns what it measured, if anything.
func benchRun(ctx context.Context, walbus string, args []string) (*bench.Result, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, walbus, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	res := new(bench.Result)
	if err := json.Unmarshal(stdout.Bytes(), res); err != nil {
		return nil, fmt.Errorf("%v: %s", runErr, lastLines(stderr.String(), 3))
	}
	if problem := res.Problem(); problem != "" {
		return res, errors.New(problem)
	}
	if runErr != nil {
		return res, fmt.Errorf("%v: %s", runErr, lastLines(stderr.String(), 3))
	}
	return res, nil
}

// A row is a workload and what it measured (nil if it failed).
type row struct {
	workload
	res *bench.Result
}

// floorSet runs the fixed-rate workloads of the standard set again against
// walbus bench floor (with args), the broker that does nothing, as the
// control for the machine and the client: their latency and CPU there are
// what any broker starts from on this machine at this hour. Through a
// durable floor they are what any broker starts from that acknowledges and
// delivers only what is on disk. Rows are named after label.
func floorSet(ctx context.Context, walbus, label string, args []string, warmup, duration time.Duration) (rows []row, failed []string, err error) {
	cmd := exec.Command(walbus, append([]string{"bench", "floor", "--amqp", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	line, err := bufio.NewReader(stderr).ReadString('\n')
	_, addr, ok := strings.Cut(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok {
		return nil, nil, fmt.Errorf("walbus bench floor (%s) did not start: %q %v", label, line, err)
	}
	var fixed []workload
	for _, w := range standard {
		if slices.Contains(w.args, "--rate") {
			w.name += ", " + label
			fixed = append(fixed, w)
		}
	}
	return runAll(ctx, walbus, addr, cmd.Process.Pid, fixed, warmup, duration)
}

func printTable(w io.Writer, rows []row, warmup, duration time.Duration) {
	fmt.Fprintf(w, "\nwalbus %s, serve --sync always; %s %s/%s, %d CPUs, Linux %s; 1 KiB messages, %v warm-up + %v per run\n\n",
		gitCommit(), runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), kernel(), warmup, duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "run\tsend msgs/s\treceive msgs/s\tlatency\tp50 ms\tp99 ms\tbroker CPU µs/msg\tbroker peak RSS\tmachine busy\t\n")
	for _, r := range rows {
		res := r.res
		if res == nil {
			fmt.Fprintf(tw, "%s\tFAILED\t\t\t\t\t\t\t\t\n", r.name)
			continue
		}
		kind, lat := "e2e", res.Latency
		if res.Receivers == 0 {
			kind, lat = "send", res.SendLatency // no receivers: the send call to its acknowledgement
		}
		p50, p99 := "-", "-"
		if lat.Count > 0 {
			p50, p99 = millis(lat.P50), millis(lat.P99)
		} else {
			kind = "-" // a drain receives only messages sent before it
		}
		cpu, rss := "-", "-"
		if u := res.Broker; u != nil {
			perMsg := u.CPUPerSentMicros // with receivers, this covers the message's receive and complete too
			if res.Sent == 0 {
				perMsg = u.CPUPerReceivedMicros
			}
			cpu, rss = fmt.Sprintf("%.1f", perMsg), fmt.Sprintf("%.0f MiB", float64(u.PeakRSSBytes)/(1<<20))
		}
		busy := "-"
		if m := res.Machine; m != nil {
			busy = fmt.Sprintf("%.0f%%", m.BusyPercent())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.name, rate(res.SendRate, res.Senders),
			rate(res.ReceiveRate, res.Receivers), kind, p50, p99, cpu, rss, busy)
	}
	tw.Flush()
	fmt.Fprint(w, "\nlatency: send = one send call to its acknowledgement (a whole batch for batches);\n"+
		"e2e = due to be sent to received. Broker CPU per message sent (received for the drain).\n"+
		"Machine busy: all processes (broker, load generator, kernel) over all CPUs in the window.\n"+
		"Floor: the same load against walbus bench floor, a broker that keeps nothing (its CPU in the CPU column);\n"+
		"durable floor: the same, but each message and settlement appended and fsynced before it is answered or\n"+
		"delivered (--durable); overwriting floor: written over a zero-filled file with fdatasync (--overwrite).\n")
}

// dryRuns flags the receive-only runs that may have emptied their queue
// before the window ended, which would make their rate a lower bound. The
// counts are estimates: results count only the measured window.
func dryRuns(rows []row, warmup, duration time.Duration) []string {
	whole := (warmup + duration).Seconds() / duration.Seconds()
	queued := map[string]float64{}
	var notes []string
	for _, r := range rows {
		res := r.res
		if res == nil {
			continue
		}
		taken := float64(res.Received) * whole
		if res.Senders == 0 && taken >= 0.9*queued[r.queue] {
			notes = append(notes, fmt.Sprintf("%s: the queue may have run dry (about %.0f of %.0f messages taken); its rate is a lower bound",
				r.name, taken, queued[r.queue]))
		}
		queued[r.queue] += float64(res.Sent)*whole - taken
	}
	return notes
}

func rate(perSecond float64, clients int) string {
	if clients == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", perSecond)
}

func millis(us float64) string { return fmt.Sprintf("%.2f", us/1000) }

// server is a walbus serve child in its own process group, so a Ctrl-C
// reaches it only through stop.
type server struct {
	cmd      *exec.Cmd
	amqpAddr string
	log      *os.File
	exited   chan error
}

// startServer starts walbus serve on dir and waits until it listens.
func startServer(walbus, dir string) (*server, error) {
	const config = `{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [` +
		`{"Name": "send", "Properties": {}}, {"Name": "amqp", "Properties": {}}, ` +
		`{"Name": "mixed", "Properties": {}}, {"Name": "drain", "Properties": {}}], "Topics": []}], "Logging": {"Type": "File"}}}`
	configFile := filepath.Join(dir, "Config.json")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(walbus, "serve", "--data", filepath.Join(dir, "data"), "--sync", "always",
		"--amqp", "127.0.0.1:0", "--http", "", "--config", configFile, "--log-format", "json")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, log: log, exited: make(chan error, 1)}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			log.Write(append(sc.Bytes(), '\n'))
			var rec struct{ Msg, AMQP string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "listening" && rec.AMQP != "" {
				listening <- rec.AMQP
			}
		}
		io.Copy(log, stderr)   // past a line too long to scan
		s.exited <- cmd.Wait() // after the pipe is drained, as Wait requires
	}()
	select {
	case s.amqpAddr = <-listening:
		return s, nil
	case err := <-s.exited:
		return nil, fmt.Errorf("walbus serve exited before listening (%v):\n%s", err, s.logTail())
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
		return nil, fmt.Errorf("walbus serve not listening after 30s:\n%s", s.logTail())
	}
}

// stop asks the server to shut down and checks that it exits 0.
func (s *server) stop() error {
	defer s.log.Close()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.exited:
		if err != nil {
			return fmt.Errorf("walbus serve: %v:\n%s", err, s.logTail())
		}
		return nil
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("walbus serve did not stop within 30s:\n%s", s.logTail())
	}
}

func (s *server) logTail() string {
	data, _ := os.ReadFile(s.log.Name())
	return lastLines(string(data), 10)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func gitCommit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "(no git)"
	}
	return strings.TrimSpace(string(out))
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}
