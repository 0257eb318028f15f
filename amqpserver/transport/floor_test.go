package transport

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	"github.com/walbus/walbus/amqpserver/frames"
)

// The floor benchmarks put the server's CPU per message next to that of
// the least a Go server can do with the same socket traffic: a floor
// server (a child process too) reads records of a transfer frame's size,
// written one per syscall as go-amqp writes its frames, and answers each
// with one byte written at once, with no framing, no codec and no
// goroutine hand-off. What our server spends above the floor is ours to
// cut; the floor itself is the kernel's and the Go runtime's.

// floorServer is the benchServerEnv value that makes the child a floor
// server.
const floorServer = "floor"

// runFloorServer serves on loopback: on each connection it reads records
// of the size named by the first 4 bytes (big-endian) and writes one byte
// for each record completed by a read.
func runFloorServer() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go floorConn(nc)
		}
	}()
	answerCPU(ln.Addr())
}

func floorConn(nc net.Conn) {
	defer func() { _ = nc.Close() }()
	var hdr [4]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		return
	}
	size := int(hdr[0])<<24 | int(hdr[1])<<16 | int(hdr[2])<<8 | int(hdr[3])
	if size <= 0 {
		return
	}
	buf := make([]byte, 64<<10)
	acks := make([]byte, len(buf)/size+1)
	partial := 0
	for {
		n, err := nc.Read(buf)
		if err != nil {
			return
		}
		partial += n
		if k := partial / size; k > 0 {
			partial -= k * size
			if _, err := nc.Write(acks[:k]); err != nil {
				return
			}
		}
	}
}

// floorClient drives a floor server with records as large as a 1 KB
// message's transfer frame from go-amqp.
type floorClient struct {
	nc     net.Conn
	record []byte
	acked  atomic.Int64
	moved  chan struct{} // a read added to acked
	failed chan error
}

func dialFloor(b *testing.B, addr string) *floorClient {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = nc.Close() })
	size := transferFrameSize(b, 1024)
	if _, err := nc.Write([]byte{byte(size >> 24), byte(size >> 16), byte(size >> 8), byte(size)}); err != nil {
		b.Fatal(err)
	}
	f := &floorClient{nc: nc, record: make([]byte, size), moved: make(chan struct{}, 1), failed: make(chan error, 1)}
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := nc.Read(buf)
			f.acked.Add(int64(n))
			select {
			case f.moved <- struct{}{}:
			default:
			}
			if err != nil {
				f.failed <- err
				return
			}
		}
	}()
	return f
}

// transferFrameSize is the size of the frame go-amqp sends for a message
// with a body of n bytes and no properties.
func transferFrameSize(b *testing.B, n int) int {
	body, err := amqp.NewMessage(make([]byte, n)).MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	tag := make([]byte, 16)
	return len(frames.AppendFrame(nil, frames.TypeAMQP, 0, &frames.Transfer{Handle: 0,
		DeliveryID: frames.Some[uint32](1 << 20), DeliveryTag: tag, MessageFormat: frames.Some[uint32](0)}, body))
}

// waitAcked waits until n records have been answered.
func (f *floorClient) waitAcked(b *testing.B, n int64) {
	for f.acked.Load() < n {
		select {
		case <-f.moved:
		case err := <-f.failed:
			b.Fatal(err)
		}
	}
}

// stream sends n records, at most inflight unanswered, spread evenly over
// d when d > 0.
func (f *floorClient) stream(b *testing.B, n, inflight int, d time.Duration) {
	base := f.acked.Load()
	start := time.Now()
	for i := range n {
		if d > 0 && i%16 == 0 {
			if wait := time.Duration(int64(d)*int64(i)/int64(n)) - time.Since(start); wait > 0 {
				time.Sleep(wait)
			}
		}
		if int64(i)-(f.acked.Load()-base) >= int64(inflight) {
			f.waitAcked(b, base+int64(i-inflight+1))
		}
		if _, err := f.nc.Write(f.record); err != nil {
			b.Fatal(err)
		}
	}
	f.waitAcked(b, base+int64(n))
}

// floorPair is a benchmark's two server processes, ours and the floor,
// with a client for each.
type floorPair struct {
	srv, floor *benchServer
	snd        *amqp.Sender
	fc         *floorClient
}

func startFloorPair(b *testing.B) *floorPair {
	p := &floorPair{srv: startBenchServer(b), floor: startServerProcess(b, floorServer)}
	p.snd = benchSender(b, p.srv.addr)
	p.fc = dialFloor(b, p.floor.addr)
	return p
}

// measure runs ours against our server, then floor (told how long ours
// took) against the floor server, and reports the CPU per message each
// server spent meanwhile.
func (p *floorPair) measure(b *testing.B, ours func(), floor func(took time.Duration)) {
	b.ResetTimer()
	before := p.srv.cpu()
	start := time.Now()
	ours()
	took := time.Since(start)
	oursCPU := p.srv.cpu() - before
	before = p.floor.cpu()
	floor(took)
	floorCPU := p.floor.cpu() - before
	b.StopTimer()
	b.ReportMetric(float64(oursCPU.Nanoseconds())/float64(b.N), "server-ns/msg")
	b.ReportMetric(float64(floorCPU.Nanoseconds())/float64(b.N), "floor-ns/msg")
	b.ReportMetric(float64(b.N)/took.Seconds(), "msgs/s")
}

// BenchmarkFloorStream runs BenchmarkServerCPU's load (one go-amqp
// sender, 256 in flight) against our server, then the same number of
// records against the floor server, spread over the same time: at the
// same rate, the kernel's and the runtime's cost per message is the same
// for both, so floor-ns/msg is the least server-ns/msg could be.
func BenchmarkFloorStream(b *testing.B) {
	p := startFloorPair(b)
	sendPipelined(b, p.snd, 2000, 256, 1024) // warm up
	p.fc.stream(b, 2000, 256, 0)
	p.measure(b,
		func() { sendPipelined(b, p.snd, b.N, 256, 1024) },
		func(took time.Duration) { p.fc.stream(b, b.N, 256, took) })
}

// BenchmarkFloorPaced sends one message at a time, each after the last
// one's outcome and no sooner than 200 µs after the last one began (at
// most 5,000/s, as a client sending on its own at a moderate rate
// would), first through go-amqp to our server, then as records to the
// floor server. Each message then pays for its own wake-ups and syscalls
// on both sides: this is the cost per request and response of a server
// at a fixed rate, where nothing is shared with the next message.
func BenchmarkFloorPaced(b *testing.B) {
	p := startFloorPair(b)
	sendPipelined(b, p.snd, 200, 1, 1024) // warm up
	p.fc.stream(b, 200, 1, 0)
	msg := amqp.NewMessage(make([]byte, 1024))
	tick := time.NewTicker(200 * time.Microsecond)
	defer tick.Stop()
	p.measure(b, func() {
		for range b.N {
			<-tick.C
			if err := p.snd.Send(context.Background(), msg, nil); err != nil {
				b.Fatal(err)
			}
		}
	}, func(time.Duration) {
		base := p.fc.acked.Load()
		for i := range b.N {
			<-tick.C
			if _, err := p.fc.nc.Write(p.fc.record); err != nil {
				b.Fatal(err)
			}
			p.fc.waitAcked(b, base+int64(i)+1)
		}
	})
}
