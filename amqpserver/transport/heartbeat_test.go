package transport

import (
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	"github.com/walbus/walbus/amqpserver/frames"
)

const shortIdle = 300 * time.Millisecond

// keptIdle is the idle time-out of the tests in which heartbeats must keep
// a connection open: long enough that a loaded machine (the race detector,
// every package at once) does not stall a heartbeat past it.
const keptIdle = time.Second

// TestSilentPeerClosed: a peer that sends nothing, not even heartbeats,
// is closed once our idle time-out passes (§2.4.5).
func TestSilentPeerClosed(t *testing.T) {
	ts := startServer(t, Config{IdleTimeout: shortIdle}, nil)
	r := dialRaw(t, ts.addr)
	o := r.open(frames.Open{})
	if o.IdleTimeout != uint32(shortIdle/2/time.Millisecond) {
		t.Fatalf("advertised idle-time-out %d", o.IdleTimeout)
	}
	e, _ := r.expectClose()
	if condition(e) != CondResourceLimit || e.Description != "idle timeout" {
		t.Fatalf("close %v", e)
	}
	r.expectEOF()
	if ce := ts.h.nextClosed(t); ce.err == nil {
		t.Fatal("closed without error")
	}
}

// TestHeartbeatingPeerStays: go-amqp heartbeats at half what we advertise,
// so it outlives several of our time-outs while idle.
func TestHeartbeatingPeerStays(t *testing.T) {
	ts := startServer(t, Config{IdleTimeout: keptIdle}, nil)
	c := ts.dial(t, nil)
	s := newSession(t, c)
	time.Sleep(3 * keptIdle)
	snd, err := s.NewSender(testCtx(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(testCtx(t), amqp.NewMessage([]byte("still here")), nil); err != nil {
		t.Fatal(err)
	}
}

// TestServerHeartbeats: a client with a short idle time-out is kept alive
// by our empty frames.
func TestServerHeartbeats(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	c := ts.dial(t, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous(), IdleTimeout: keptIdle})
	s := newSession(t, c)
	time.Sleep(3 * keptIdle)
	snd, err := s.NewSender(testCtx(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(testCtx(t), amqp.NewMessage([]byte("alive")), nil); err != nil {
		t.Fatal(err)
	}

	// Raw view: empty frames on channel 0 keep coming while nothing else
	// happens.
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{IdleTimeout: 100})
	for i := 0; i < 3; i++ {
		f, err := r.readFrame()
		if err != nil {
			t.Fatal(err)
		}
		if f.p != nil || f.h.Channel != 0 || f.h.Size != 8 {
			t.Fatalf("frame %+v, want a heartbeat", f)
		}
	}
}

func TestPeerIdleTimeoutTooSmall(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	r.saslAnonymous()
	r.header(frames.ProtocolAMQP)
	r.readHeader()
	r.send(0, &frames.Open{ContainerID: "x", IdleTimeout: 1}, nil)
	expect[*frames.Open](r)
	if e, _ := r.expectClose(); condition(e) != CondInvalidField {
		t.Fatalf("close %v", e)
	}
}
