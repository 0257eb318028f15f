package amqpserver

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/broker"
)

// gatedConn is a client socket whose reads can be stopped: a client that
// stops reading, so the server's writes to it back up.
type gatedConn struct {
	net.Conn
	mu   sync.Mutex
	open *sync.Cond
	shut bool
}

func newGatedConn(c net.Conn) *gatedConn {
	g := &gatedConn{Conn: c}
	g.open = sync.NewCond(&g.mu)
	return g
}

func (g *gatedConn) Read(b []byte) (int, error) {
	g.mu.Lock()
	for g.shut {
		g.open.Wait()
	}
	g.mu.Unlock()
	return g.Conn.Read(b)
}

func (g *gatedConn) setShut(shut bool) {
	g.mu.Lock()
	g.shut = shut
	g.mu.Unlock()
	g.open.Broadcast()
}

// A client that stops reading gets back-pressure on its own connection
// only: with megabytes of deliveries stuck behind it, the same queue still
// takes sends and answers management requests, other queues send and
// receive, and when the slow client reads again it gets every message.
func TestSlowReaderStallsOnlyItself(t *testing.T) {
	b, addr := startRaw(t, Config{})
	if _, err := b.CreateQueue("q2", broker.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	gate := newGatedConn(nc)
	slow, err := amqp.NewConn(ctxT(t), gate, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain("RootManageSharedAccessKey", "SAS_KEY_VALUE")})
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	slowSess, err := slow.NewSession(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	const n, size = 200, 64 << 10 // 12.5 MiB: far more than the socket buffers hold
	slowRcv, err := slowSess.NewReceiver(ctxT(t), "q1", &amqp.ReceiverOptions{Credit: n, SettlementMode: amqp.ReceiverSettleModeFirst.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	gate.setShut(true)

	fast := plainConn(t, addr)
	snd, err := fast.NewSender(ctxT(t), "q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte{'x'}, size)
	for i := range n {
		if err := snd.Send(ctxT(t), &amqp.Message{Data: [][]byte{body}, ApplicationProperties: map[string]any{"i": int64(i)}}, nil); err != nil {
			t.Fatalf("send %d to the queue the slow client reads: %v", i, err)
		}
	}
	// The entity is not blocked behind the stuck connection: its counts
	// come from its actor, and they show every message handed out.
	e, _ := b.Entity("q1")
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := make(chan broker.Counts, 1)
		go func() {
			counts, _ := e.Counts(0)
			got <- counts
		}()
		var counts broker.Counts
		select {
		case counts = <-got:
		case <-time.After(20 * time.Second):
			t.Fatal("the queue's actor is blocked behind the slow connection")
		}
		if counts.Locked == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries to the slow client stopped at %+v", counts)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Another queue works normally on another connection.
	snd2, err := fast.NewSender(ctxT(t), "q2", nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv2, err := fast.NewReceiver(ctxT(t), "q2", &amqp.ReceiverOptions{Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := snd2.Send(ctxT(t), &amqp.Message{Data: [][]byte{[]byte("fast")}}, nil); err != nil {
			t.Fatalf("send %d to q2 while a client is stuck: %v", i, err)
		}
		m, err := rcv2.Receive(ctxT(t), nil)
		if err != nil {
			t.Fatalf("receive %d from q2 while a client is stuck: %v", i, err)
		}
		if err := rcv2.AcceptMessage(ctxT(t), m); err != nil {
			t.Fatal(err)
		}
	}

	gate.setShut(false)
	for i := range n {
		m, err := slowRcv.Receive(ctxT(t), nil)
		if err != nil {
			t.Fatalf("slow client, message %d: %v", i, err)
		}
		if got := m.ApplicationProperties["i"]; got != int64(i) || len(m.GetData()) != size {
			t.Fatalf("slow client got message %v (%d bytes), want %d", got, len(m.GetData()), i)
		}
		if err := slowRcv.AcceptMessage(ctxT(t), m); err != nil {
			t.Fatal(err)
		}
	}
}
