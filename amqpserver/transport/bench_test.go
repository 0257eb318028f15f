package transport

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	"github.com/walbus/walbus/amqpserver/frames"
)

// benchServerEnv makes the test binary act as a bare server process for
// BenchmarkServerCPU, so that the server's CPU can be measured apart from
// the go-amqp client's.
const benchServerEnv = "WALBUS_TRANSPORT_BENCH_SERVER"

func TestMain(m *testing.M) {
	switch os.Getenv(benchServerEnv) {
	case "":
	case floorServer:
		runFloorServer()
		os.Exit(0)
	default:
		runBenchServer()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// nopHandler accepts every link and every delivery and keeps nothing: the
// cost measured is the engine's.
type nopHandler struct{}

func (nopHandler) Authenticate(ConnInfo, Credentials) (any, error) { return nil, nil }
func (nopHandler) ConnectionOpened(*Conn) *frames.Error            { return nil }
func (nopHandler) ConnectionClosed(*Conn, error)                   {}
func (nopHandler) Attach(l *Link)                                  { _ = l.AcceptInbound(nil, nopHandler{}) }
func (nopHandler) Detached(*Link, *frames.Error)                   {}
func (nopHandler) Deliver(d Delivery)                              { _ = d.Settle(accepted) }

var (
	accepted    = &frames.Accepted{}
	quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))
)

// runBenchServer serves on loopback and reports its CPU (answerCPU).
func runBenchServer() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	go func() { _ = NewServer(Config{Logger: quietLogger}, nopHandler{}).Serve(ln) }()
	// WALBUS_TRANSPORT_BENCH_SERVER_PROFILE=file profiles the server alone.
	if path := os.Getenv(benchServerEnv + "_PROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	answerCPU(ln.Addr())
}

// answerCPU prints the server's address, then answers each "cpu" line on
// stdin with the process's user+system CPU in nanoseconds.
func answerCPU(addr net.Addr) {
	fmt.Println(addr)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		fmt.Println(processCPU().Nanoseconds())
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sendPipelined sends n messages of size bytes with inflight outstanding.
func sendPipelined(b *testing.B, snd *amqp.Sender, n, inflight, size int) {
	msg := amqp.NewMessage(make([]byte, size))
	receipts := make(chan amqp.SendReceipt, inflight)
	waited := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			r := <-receipts
			if _, err := r.Wait(context.Background()); err != nil {
				waited <- err
				return
			}
		}
		waited <- nil
	}()
	for i := 0; i < n; i++ {
		r, err := snd.SendWithReceipt(context.Background(), msg, nil)
		if err != nil {
			b.Fatal(err)
		}
		receipts <- r
	}
	if err := <-waited; err != nil {
		b.Fatal(err)
	}
}

func benchSender(b *testing.B, addr string) *amqp.Sender {
	c, err := amqp.Dial(context.Background(), "amqp://"+addr, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	s, err := c.NewSession(context.Background(), nil)
	if err != nil {
		b.Fatal(err)
	}
	snd, err := s.NewSender(context.Background(), "q", nil)
	if err != nil {
		b.Fatal(err)
	}
	return snd
}

// BenchmarkServerCPU measures the server's own CPU per 1 KB message from
// one go-amqp sender with 256 sends in flight. The server runs in a child
// process (this test binary, see TestMain) and reports getrusage before
// and after, so the client's CPU is not counted.
func BenchmarkServerCPU(b *testing.B) {
	srv := startBenchServer(b)
	snd := benchSender(b, srv.addr)
	sendPipelined(b, snd, 2000, 256, 1024) // warm up
	b.SetBytes(1024)
	before := srv.cpu()
	b.ResetTimer()
	sendPipelined(b, snd, b.N, 256, 1024)
	b.StopTimer()
	srv.report(b, before)
}

// BenchmarkServerCPURawClient is BenchmarkServerCPU with a client that
// writes its transfers in batches, as a client with its own write
// coalescing would: fewer, larger socket reads on the server show the
// engine's own cost.
func BenchmarkServerCPURawClient(b *testing.B) {
	srv := startBenchServer(b)
	r := dialRaw(b, srv.addr)
	_ = r.nc.SetDeadline(time.Time{})
	r.open(frames.Open{})
	r.begin(0)
	r.attachSender(0, 0, "bench")
	payload := make([]byte, 1024)
	var id uint32
	var batch []byte
	run := func(n int) {
		sent, settled := 0, 0
		for settled < n {
			for sent < n && sent-settled < 256 {
				batch = batch[:0]
				for k := 0; k < 64 && sent < n && sent-settled < 256; k++ {
					batch = frames.AppendFrame(batch, frames.TypeAMQP, 0, &frames.Transfer{Handle: 0, DeliveryID: frames.Some(id),
						DeliveryTag: []byte{byte(id), byte(id >> 8), byte(id >> 16), byte(id >> 24)}, MessageFormat: frames.Some[uint32](0)}, payload)
					id++
					sent++
				}
				r.write(batch)
			}
			f, err := r.readFrame()
			if err != nil {
				b.Fatal(err)
			}
			if d, ok := f.p.(*frames.Disposition); ok {
				settled += int(d.LastID()-d.First) + 1
			}
		}
	}
	run(2000)
	b.SetBytes(1024)
	before := srv.cpu()
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	srv.report(b, before)
}

// benchServer is the child process serving a benchmark.
type benchServer struct {
	addr string
	cpu  func() time.Duration
}

// startBenchServer runs this test binary as our server (see TestMain).
func startBenchServer(b *testing.B) *benchServer { return startServerProcess(b, "1") }

// startServerProcess runs this test binary as the server kind names.
func startServerProcess(b *testing.B, kind string) *benchServer {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchServerEnv+"="+kind)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	out := bufio.NewScanner(stdout)
	if !out.Scan() {
		b.Fatal("bench server printed nothing")
	}
	return &benchServer{
		addr: strings.TrimSpace(out.Text()),
		cpu: func() time.Duration {
			fmt.Fprintln(stdin, "cpu")
			if !out.Scan() {
				b.Fatal("bench server gone")
			}
			ns, err := strconv.ParseInt(strings.TrimSpace(out.Text()), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return time.Duration(ns)
		},
	}
}

// report adds the server's CPU per message and the message rate.
func (s *benchServer) report(b *testing.B, before time.Duration) {
	spent := s.cpu() - before
	b.ReportMetric(float64(spent.Nanoseconds())/float64(b.N), "server-ns/msg")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkSendInProcess runs client and server in one process: msgs/s,
// and the CPU of both together per message.
func BenchmarkSendInProcess(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := NewServer(Config{Logger: quietLogger}, nopHandler{})
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown(context.Background()) }()
	snd := benchSender(b, ln.Addr().String())
	sendPipelined(b, snd, 2000, 256, 1024)
	b.SetBytes(1024)
	before := processCPU()
	b.ResetTimer()
	sendPipelined(b, snd, b.N, 256, 1024)
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-before).Nanoseconds())/float64(b.N), "cpu-ns/msg")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
