package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbus/walbus/amqpserver/frames"
)

// A burst of output far larger than the socket takes, produced on the
// reader's goroutine (credit arrives, the handler sends at once), to a
// client that reads only later: every transfer arrives whole and in order.
func TestBurstLargerThanTheSocketArrivesInOrder(t *testing.T) {
	const n, size = 300, 32 << 10
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	if tc, ok := r.nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(32 << 10) // a small window: the server's writes back up
	}
	r.open(frames.Open{})
	r.begin(0)
	r.attachReceiver(0, 0, "r", frames.ReceiverSettleFirst)
	o := ts.h.nextOut(t)
	o.settled = true
	payloads := make([][]byte, n)
	for i := range payloads {
		p := make([]byte, size)
		for j := range p {
			p[j] = byte(i + j)
		}
		binary.BigEndian.PutUint32(p, uint32(i))
		payloads[i] = p
	}
	o.push(payloads...) // no credit yet: they wait

	r.send(0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 5000, OutgoingWindow: 100,
		Handle: frames.Some[uint32](0), DeliveryCount: frames.Some[uint32](0), LinkCredit: frames.Some[uint32](n)}, nil)
	time.Sleep(200 * time.Millisecond) // not reading: let the socket fill up
	for i := range n {
		f := r.next()
		if _, ok := f.p.(*frames.Transfer); !ok {
			t.Fatalf("frame %d is %T, want a transfer", i, f.p)
		}
		if got := binary.BigEndian.Uint32(f.payload); got != uint32(i) || len(f.payload) != size {
			t.Fatalf("transfer %d carries message %d (%d bytes)", i, got, len(f.payload))
		}
		for j := 4; j < size; j++ {
			if f.payload[j] != byte(i+j) {
				t.Fatalf("transfer %d corrupted at byte %d", i, j)
			}
		}
	}
}

// writerIdle waits until c's writer has nothing queued, under way or
// about to start: what is queued next leaves only when something wakes it.
// (The writer writes whatever out holds when it runs, held output too.)
func writerIdle(t *testing.T, c *Conn) {
	t.Helper()
	waitUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.writing && len(c.out) == 0 && len(c.wake) == 0
	})
}

// quiet requires that nothing arrives for a while.
func (r *rawClient) quiet(what string) {
	r.t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(150 * time.Millisecond))
	f, err := r.readFrame()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		r.t.Fatalf("%s: got %T %+v (err %v), want nothing yet", what, f.p, f.p, err)
	}
	_ = r.nc.SetReadDeadline(time.Now().Add(safety))
}

// Output of links bound to an open Burst stays queued until the run that
// made it closes, then leaves: transfers of an outbound link and the
// outcome of an inbound delivery alike. A second run still open does not
// hold back what the first leaves.
func TestBurstHoldsOutputUntilItsRunCloses(t *testing.T) {
	h := newTestHandler()
	got := make(chan Delivery, 1)
	h.inbound = func(*Link) InboundHandler { return &funcInbound{h: h, deliver: func(d Delivery) { got <- d }} }
	ts := startServer(t, Config{}, h)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.attachReceiver(0, 0, "out", frames.ReceiverSettleFirst)
	o := h.nextOut(t)
	o.settled = true
	b := NewBurst()
	o.l.SetBurst(b)
	r.send(0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 5000, OutgoingWindow: 100,
		Handle: frames.Some[uint32](0), DeliveryCount: frames.Some[uint32](0), LinkCredit: frames.Some[uint32](10)}, nil)
	waitUntil(t, func() bool { return o.l.Credit().Limit == 10 })

	writerIdle(t, o.l.conn)
	b.Open() // one run: the actor's, say
	b.Open() // another: the log writer's
	o.push([]byte("one"), []byte("two"))
	r.quiet("transfers sent in an open run")
	b.Close()
	for _, want := range []string{"one", "two"} {
		f := r.next()
		if tr, ok := f.p.(*frames.Transfer); !ok || string(f.payload) != want {
			t.Fatalf("got %T %q, want the transfer of %q", tr, f.payload, want)
		}
	}

	r.attachSender(0, 1, "in")
	r.transfer(0, 1, 0, false, []byte("msg"))
	var d Delivery
	select {
	case d = <-got:
	case <-time.After(safety):
		t.Fatal("no delivery")
	}
	d.Link.SetBurst(b)
	writerIdle(t, d.Link.conn)
	if err := d.Settle(&frames.Accepted{}); err != nil { // the second run is still open
		t.Fatal(err)
	}
	r.quiet("an outcome settled in an open run")
	b.Close()
	disp := expect[*frames.Disposition](r)
	if _, ok := disp.State.(*frames.Accepted); !ok || disp.First != 0 || !disp.Settled {
		t.Fatalf("disposition %+v, want delivery 0 accepted and settled", disp)
	}

	o.push([]byte("three")) // no run open: out at once
	if f := r.next(); string(f.payload) != "three" {
		t.Fatalf("got %T %q, want the transfer of three", f.p, f.payload)
	}
}

// A run's output far larger than the socket takes: the burst writes what
// the socket accepts and the writer the rest, ahead of output queued
// meanwhile outside any run; everything arrives whole and in order.
func TestBurstLargerThanTheSocketKeepsItsOrder(t *testing.T) {
	const n, size = 200, 32 << 10
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	if tc, ok := r.nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(32 << 10)
	}
	r.open(frames.Open{})
	r.begin(0)
	r.attachReceiver(0, 0, "r", frames.ReceiverSettleFirst)
	o := ts.h.nextOut(t)
	o.settled = true
	b := NewBurst()
	o.l.SetBurst(b)
	r.send(0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 5000, OutgoingWindow: 100,
		Handle: frames.Some[uint32](0), DeliveryCount: frames.Some[uint32](0), LinkCredit: frames.Some[uint32](2 * n)}, nil)
	waitUntil(t, func() bool { return o.l.Credit().Limit == 2*n })
	payload := func(i int) []byte {
		p := make([]byte, size)
		for j := range p {
			p[j] = byte(i + j)
		}
		binary.BigEndian.PutUint32(p, uint32(i))
		return p
	}
	// The second half is queued while the burst's write is under way.
	testHookBurstWrote = func() {
		testHookBurstWrote = nil
		for i := n; i < 2*n; i++ {
			o.push(payload(i))
		}
	}
	t.Cleanup(func() { testHookBurstWrote = nil })
	b.Open()
	for i := range n {
		o.push(payload(i))
	}
	b.Close()
	if testHookBurstWrote != nil {
		t.Fatal("the burst did not write")
	}
	time.Sleep(200 * time.Millisecond) // not reading: let the socket fill up
	for i := range 2 * n {
		f := r.next()
		if _, ok := f.p.(*frames.Transfer); !ok {
			t.Fatalf("frame %d is %T, want a transfer", i, f.p)
		}
		if got := binary.BigEndian.Uint32(f.payload); got != uint32(i) || len(f.payload) != size {
			t.Fatalf("transfer %d carries message %d (%d bytes)", i, got, len(f.payload))
		}
		if !bytes.Equal(f.payload, payload(i)) {
			t.Fatalf("transfer %d corrupted", i)
		}
	}
}

// Output the reader makes while it handles input (an attach's answer, a
// transfer sent as soon as credit arrives) leaves by the reader's own
// write, without waking the connection's writer.
func TestReaderWritesItsOwnOutput(t *testing.T) {
	var wakes atomic.Int32
	testHookWriterWoken = func() { wakes.Add(1) }
	t.Cleanup(func() { testHookWriterWoken = nil })
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	before := wakes.Load()
	for i := range 5 {
		r.attachReceiver(0, uint32(i), fmt.Sprintf("r%d", i), frames.ReceiverSettleFirst)
	}
	o := ts.h.nextOut(t)
	o.settled = true
	o.push([]byte("queued before credit"))
	r.send(0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 5000, OutgoingWindow: 100,
		Handle: frames.Some[uint32](0), DeliveryCount: frames.Some[uint32](0), LinkCredit: frames.Some[uint32](1)}, nil)
	if f := r.next(); string(f.payload) != "queued before credit" {
		t.Fatalf("got %T %q, want the transfer", f.p, f.payload)
	}
	if n := wakes.Load() - before; n != 0 {
		t.Fatalf("the writer was woken %d times for output the reader made", n)
	}
}
