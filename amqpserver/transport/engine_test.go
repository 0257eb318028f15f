package transport

import (
	"net"
	"testing"

	"github.com/walbus/walbus/amqpserver/frames"
)

// engineConn is a connection past its handshake, driven by calling the
// reader's frame handler directly: it measures the engine without sockets.
type engineConn struct {
	c *Conn
}

func newEngineConn(t testing.TB, h Handler) *engineConn {
	t.Helper()
	a, b := net.Pipe()
	t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
	srv := NewServer(Config{}, h)
	c := newConn(srv, a)
	c.state = stateOpen
	c.peerOpen = &frames.Open{ContainerID: "peer", MaxFrameSize: frames.Some[uint32](65536)}
	c.outFrameSize = 65536
	e := &engineConn{c: c}
	e.frame(t, 0, &frames.Begin{IncomingWindow: 1 << 30, OutgoingWindow: 1 << 30}, nil)
	return e
}

// frame feeds one frame to the engine and runs the callbacks it caused;
// the output is dropped as if written.
func (e *engineConn) frame(t testing.TB, ch uint16, p frames.Performative, payload []byte) {
	raw := frames.AppendFrame(nil, frames.TypeAMQP, ch, p, payload)
	e.raw(t, raw)
}

func (e *engineConn) raw(t testing.TB, raw []byte) {
	h, body, err := frames.ParseFrame(raw)
	if err != nil {
		t.Fatal(err)
	}
	c := e.c
	c.mu.Lock()
	if ce := c.handleFrame(h, body); ce != nil {
		t.Fatalf("connection error %v", ce)
	}
	c.mu.Unlock()
	c.dispatch()
	c.mu.Lock()
	c.out = c.out[:0]
	c.run.reset()
	c.mu.Unlock()
}

// outboundOnce accepts outbound links and records them.
type outboundOnce struct {
	nopHandler
	link *Link
}

func (o *outboundOnce) Attach(l *Link) {
	if l.Inbound() {
		_ = l.AcceptInbound(nil, nopHandler{})
		return
	}
	_ = l.AcceptOutbound(nil, o)
	o.link = l
}
func (o *outboundOnce) Credit(*Link, Credit) {}
func (o *outboundOnce) Disposition(l *Link, id uint32, state frames.DeliveryState, settled bool) {
	if !settled {
		_ = l.Settle(id, state)
	}
}

// TestHotPathAllocations: receiving, settling, sending and taking a
// disposition allocate nothing per message once warmed up.
func TestHotPathAllocations(t *testing.T) {
	h := &outboundOnce{}
	e := newEngineConn(t, h)
	e.frame(t, 0, &frames.Attach{Name: "in", Handle: 0, Role: frames.RoleSender, Target: &frames.Target{Address: "q"}, InitialDeliveryCount: frames.Some[uint32](0)}, nil)
	e.frame(t, 0, &frames.Attach{Name: "out", Handle: 1, Role: frames.RoleReceiver, RcvSettleMode: frames.Some(frames.ReceiverSettleSecond), Source: &frames.Source{Address: "q"}}, nil)
	payload := make([]byte, 1024)
	var id uint32
	transfer := func() []byte {
		b := frames.AppendFrame(nil, frames.TypeAMQP, 0, &frames.Transfer{Handle: 0, DeliveryID: frames.Some(id), DeliveryTag: []byte{1, 2, 3, 4}, MessageFormat: frames.Some[uint32](0)}, payload)
		id++
		return b
	}
	frames1k := make([][]byte, 2000)
	for i := range frames1k {
		frames1k[i] = transfer()
	}
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		e.raw(t, frames1k[i])
		i++
	}); n != 0 {
		t.Errorf("inbound transfer: %v allocs per message", n)
	}

	l := h.link
	credit := frames.AppendFrame(nil, frames.TypeAMQP, 0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 1 << 30, OutgoingWindow: 1 << 30,
		Handle: frames.Some[uint32](1), DeliveryCount: frames.Some[uint32](0), LinkCredit: frames.Some[uint32](1 << 30)}, nil)
	e.raw(t, credit)
	var sent uint32
	disps := make([][]byte, 2000)
	for k := range disps {
		disps[k] = frames.AppendFrame(nil, frames.TypeAMQP, 0, &frames.Disposition{Role: frames.RoleReceiver, First: uint32(k), State: &frames.Accepted{}}, nil)
	}
	tag := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	if n := testing.AllocsPerRun(1000, func() {
		if _, err := l.Send(tag, 0, payload, false); err != nil {
			t.Fatal(err)
		}
		e.raw(t, disps[sent])
		sent++
	}); n != 0 {
		t.Errorf("outbound send and disposition: %v allocs per message", n)
	}
}

// BenchmarkEngineInbound is the engine's cost per incoming 1 KB delivery,
// settled inside Deliver, without any socket.
func BenchmarkEngineInbound(b *testing.B) {
	e := newEngineConn(b, nopHandler{})
	e.frame(b, 0, &frames.Attach{Name: "in", Handle: 0, Role: frames.RoleSender, Target: &frames.Target{Address: "q"}, InitialDeliveryCount: frames.Some[uint32](0)}, nil)
	// Every delivery is settled inside Deliver, so one encoded transfer
	// can be fed again and again.
	frame := frames.AppendFrame(nil, frames.TypeAMQP, 0, &frames.Transfer{Handle: 0, DeliveryID: frames.Some[uint32](7), DeliveryTag: []byte{1, 2, 3, 4}, MessageFormat: frames.Some[uint32](0)}, make([]byte, 1024))
	b.ReportAllocs()
	b.SetBytes(1024)
	for b.Loop() {
		e.raw(b, frame)
	}
}

// BenchmarkEngineOutbound is the engine's cost per outgoing 1 KB delivery
// and the peer's disposition for it, without any socket.
func BenchmarkEngineOutbound(b *testing.B) { benchOutbound(b, false) }

// BenchmarkEngineOutboundSecond is BenchmarkEngineOutbound on a link in
// receiver-settle-mode second, as peek-lock receivers of the SDKs attach:
// the peer's disposition is unsettled, and the handler answers it with
// the settled outcome.
func BenchmarkEngineOutboundSecond(b *testing.B) { benchOutbound(b, true) }

func benchOutbound(b *testing.B, second bool) {
	h := &outboundOnce{}
	e := newEngineConn(b, h)
	attach := &frames.Attach{Name: "out", Handle: 1, Role: frames.RoleReceiver, Source: &frames.Source{Address: "q"}}
	if second {
		attach.RcvSettleMode = frames.Some(frames.ReceiverSettleSecond)
	}
	e.frame(b, 0, attach, nil)
	e.frame(b, 0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 1 << 30, OutgoingWindow: 1 << 30,
		Handle: frames.Some[uint32](1), DeliveryCount: frames.Some[uint32](0), LinkCredit: frames.Some[uint32](1 << 31)}, nil)
	payload := make([]byte, 1024)
	tag := make([]byte, 16)
	disp := &frames.Disposition{Role: frames.RoleReceiver, Settled: !second, State: accepted}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	b.SetBytes(1024)
	for b.Loop() {
		id, err := h.link.Send(tag, 0, payload, false)
		if err != nil {
			b.Fatal(err)
		}
		disp.First = id
		var start int
		buf, start = frames.BeginFrame(buf[:0], frames.TypeAMQP, 0)
		buf = frames.EndFrame(disp.AppendTo(buf), start)
		e.raw(b, buf)
	}
}
