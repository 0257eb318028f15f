package transport

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	"github.com/walbus/walbus/amqpserver/frames"
)

func TestTooManyConnections(t *testing.T) {
	ts := startServer(t, Config{MaxConnections: 1}, nil)
	ts.dial(t, nil)
	c, err := amqp.Dial(testCtx(t), "amqp://"+ts.addr, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
	if err == nil {
		<-c.Done()
		err = c.Err()
	}
	var ce *amqp.ConnError
	if !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != amqp.ErrCondResourceLimitExceeded {
		t.Fatalf("second connection saw %v", err)
	}
}

func TestTooManySessions(t *testing.T) {
	ts := startServer(t, Config{MaxSessions: 2}, nil)
	// go-amqp honours our channel-max on its own.
	c := ts.dial(t, nil)
	newSession(t, c)
	newSession(t, c)
	if _, err := c.NewSession(testCtx(t), nil); err == nil {
		t.Fatal("third session allowed")
	}
	// A peer that ignores it: begin on a channel above channel-max is a
	// framing error (§2.7.1).
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.send(2, &frames.Begin{IncomingWindow: 10, OutgoingWindow: 10}, nil)
	if e, _ := r.expectClose(); condition(e) != CondFramingError {
		t.Fatalf("close %v", e)
	}
}

func TestTooManyLinks(t *testing.T) {
	ts := startServer(t, Config{MaxLinksPerSession: 2}, nil)
	s := newSession(t, ts.dial(t, nil))
	for i := 0; i < 2; i++ {
		if _, err := s.NewSender(testCtx(t), "q", nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.NewSender(testCtx(t), "q", nil); err == nil {
		t.Fatal("third link allowed")
	}
	// Raw: a handle above handle-max is a framing error (§2.7.2).
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.send(0, &frames.Attach{Name: "x", Handle: 2, Role: frames.RoleSender, Target: &frames.Target{}, InitialDeliveryCount: frames.Some[uint32](0)}, nil)
	if e, _ := r.expectClose(); condition(e) != CondFramingError {
		t.Fatalf("close %v", e)
	}
}

func TestHandleInUse(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.attachSender(0, 0, "a")
	r.send(0, &frames.Attach{Name: "b", Handle: 0, Role: frames.RoleSender, Target: &frames.Target{}, InitialDeliveryCount: frames.Some[uint32](0)}, nil)
	if e := expect[*frames.End](r); condition(e.Error) != CondHandleInUse {
		t.Fatalf("end %v", e.Error)
	}
	if d := ts.h.nextDetached(t); condition(d.err) != CondHandleInUse {
		t.Fatalf("detached with %v", d.err)
	}
	// Discarding until our end is answered, then the channel is free.
	r.transfer(0, 0, 0, true, []byte("ignored"))
	r.send(0, &frames.End{}, nil)
	r.begin(0)
}

func TestUnattachedHandle(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.transfer(0, 5, 0, true, []byte("x"))
	if e := expect[*frames.End](r); condition(e.Error) != CondUnattachedHandle {
		t.Fatalf("end %v", e.Error)
	}
}

func TestOversizeFrame(t *testing.T) {
	ts := startServer(t, Config{MaxFrameSize: 1024}, nil)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.attachSender(0, 0, "s")
	big := make([]byte, 2000)
	r.transfer(0, 0, 0, false, big)
	if e, _ := r.expectClose(); condition(e) != CondFramingError {
		t.Fatalf("close %v", e)
	}
	r.expectEOF()
}

func TestMalformedFrames(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	cases := map[string][]byte{
		"size below 8":        {0, 0, 0, 4, 2, 0, 0, 0},
		"data offset below 2": {0, 0, 0, 8, 1, 0, 0, 0},
		"unknown frame type":  {0, 0, 0, 8, 2, 7, 0, 0},
	}
	for name, frame := range cases {
		t.Run(name, func(t *testing.T) {
			r := dialRaw(t, ts.addr)
			r.open(frames.Open{})
			r.write(frame)
			if e, _ := r.expectClose(); condition(e) != CondFramingError {
				t.Fatalf("close %v", e)
			}
		})
	}
	decodeCases := map[string][]byte{
		"not a described list": {0x40},
		"unknown performative": {0x00, 0x53, 0x99, 0x45},
		"truncated begin":      {0x00, 0x53, 0x11, 0xc0, 0x05, 0x02},
		"begin missing fields": {0x00, 0x53, 0x11, 0x45},
	}
	for name, body := range decodeCases {
		t.Run(name, func(t *testing.T) {
			r := dialRaw(t, ts.addr)
			r.open(frames.Open{})
			frame := binary.BigEndian.AppendUint32(nil, uint32(8+len(body)))
			frame = append(frame, 2, 0, 0, 0)
			r.write(append(frame, body...))
			if e, _ := r.expectClose(); condition(e) != CondDecodeError {
				t.Fatalf("close %v", e)
			}
		})
	}
}

// TestOversizeMessage: a delivery whose frames add up past
// max-message-size is rejected with message-size-exceeded once its last
// frame is in, and the link carries on.
func TestOversizeMessage(t *testing.T) {
	ts, col := collectingServer(t, Config{MaxFrameSize: 4096, MaxMessageSize: 10000}, 4)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	a, _ := r.attachSender(0, 0, "s")
	if a.MaxMessageSize.Or(0) != 10000 {
		t.Fatalf("max-message-size %+v", a.MaxMessageSize)
	}
	chunk := make([]byte, 3000)
	r.send(0, &frames.Transfer{Handle: 0, DeliveryID: frames.Some[uint32](0), DeliveryTag: []byte{1}, MessageFormat: frames.Some[uint32](0), More: true}, chunk)
	r.send(0, &frames.Transfer{Handle: 0, More: true}, chunk)
	r.send(0, &frames.Transfer{Handle: 0, More: true}, chunk)
	r.send(0, &frames.Transfer{Handle: 0}, chunk)
	d := expect[*frames.Disposition](r)
	rej, ok := d.State.(*frames.Rejected)
	if d.Role != frames.RoleReceiver || d.First != 0 || !d.Settled || !ok || condition(rej.Error) != CondMessageSizeExceeded {
		t.Fatalf("disposition %+v", d)
	}
	// The link is still up: a message within the limit goes through.
	r.send(0, &frames.Transfer{Handle: 0, DeliveryID: frames.Some[uint32](1), DeliveryTag: []byte{2}, MessageFormat: frames.Some[uint32](0)}, chunk)
	select {
	case got := <-col.deliveries:
		if got.ID != 1 || len(got.Payload) != len(chunk) {
			t.Fatalf("delivery after the oversize one: id %d, %d bytes (the oversize one delivered?)", got.ID, len(got.Payload))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the message after the oversize one was not delivered")
	}
}

// TestTransferWithoutCredit: a sender exceeding its credit loses the link.
func TestTransferWithoutCredit(t *testing.T) {
	h := newTestHandler()
	h.reply = func(*Link) *Reply { return &Reply{Credit: 2} }
	h.inbound = func(*Link) InboundHandler { return newCollector(h, 10) }
	ts := startServer(t, Config{}, h)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	_, fl := r.attachSender(0, 0, "s")
	if fl.LinkCredit.Value != 2 {
		t.Fatalf("credit %d", fl.LinkCredit.Value)
	}
	for id := uint32(0); id < 3; id++ {
		r.transfer(0, 0, id, false, []byte("x"))
	}
	if d := expect[*frames.Detach](r); condition(d.Error) != CondTransferLimit {
		t.Fatalf("detach %+v", d)
	}
}

// TestSessionWindowRefreshed: go-amqp stops sending at a remote incoming
// window of 0, so more frames than its own window of 5000 must flow
// without a stall (TestSessionWindowRefreshedRaw checks the flows).
func TestSessionWindowRefreshed(t *testing.T) {
	h := newTestHandler()
	ts := startServer(t, Config{MaxFrameSize: 512}, h)
	mode := amqp.SenderSettleModeSettled
	snd, err := newSession(t, ts.dial(t, nil)).NewSender(testCtx(t), "q", &amqp.SenderOptions{SettlementMode: &mode})
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 64<<10) // ~150 frames of 512 bytes each
	for i := 0; i < 40; i++ {
		if err := snd.Send(testCtx(t), amqp.NewMessage(body), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPeerHandleMax: our handles stay under the peer's handle-max; a peer
// attaching more links than that leaves no way to answer.
func TestPeerHandleMax(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.send(0, &frames.Begin{IncomingWindow: 100, OutgoingWindow: 100, HandleMax: frames.Some[uint32](0)}, nil)
	expect[*frames.Begin](r)
	if a, _ := r.attachSender(0, 0, "a"); a.Handle != 0 {
		t.Fatalf("handle %d", a.Handle)
	}
	r.send(0, &frames.Attach{Name: "b", Handle: 1, Role: frames.RoleSender, Target: &frames.Target{}, InitialDeliveryCount: frames.Some[uint32](0)}, nil)
	if e, _ := r.expectClose(); condition(e) != CondResourceLimit {
		t.Fatalf("close %v", e)
	}
}

// TestModeSecondOutcomesGoOutSettled: a sender that asks for
// rcv-settle-mode second, as uAMQP's (the Python SDK's) does, gets the
// mode echoed but every outcome settled, as Service Bus sends it: uAMQP
// finishes a send only on a settled disposition and never settles after
// an unsettled one. An accepted delivery and an oversize one's rejection
// both end on our side, so their ids may come again at once (an id still
// unsettled would fail the link), and a late settlement from the peer is
// ignored.
func TestModeSecondOutcomesGoOutSettled(t *testing.T) {
	ts, col := collectingServer(t, Config{MaxFrameSize: 4096, MaxMessageSize: 1000}, 4)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.send(0, &frames.Attach{Name: "s", Handle: 0, Role: frames.RoleSender,
		SndSettleMode: frames.Some(frames.SenderSettleUnsettled), RcvSettleMode: frames.Some(frames.ReceiverSettleSecond),
		Source: &frames.Source{Address: "raw"}, Target: &frames.Target{Address: "q"}, InitialDeliveryCount: frames.Some[uint32](0)}, nil)
	if a := expect[*frames.Attach](r); a.RcvSettleMode.Or(0) != frames.ReceiverSettleSecond {
		t.Fatalf("attach reply %+v", a)
	}
	expect[*frames.Flow](r)
	next := func(want string) {
		t.Helper()
		select {
		case got := <-col.deliveries:
			if got.ID != 0 || string(got.Payload) != want {
				t.Fatalf("delivery %+v", got)
			}
			if err := got.Settle(&frames.Accepted{}); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("delivery %q did not arrive", want)
		}
		if d := expect[*frames.Disposition](r); !d.Settled || d.First != 0 {
			t.Fatalf("disposition %+v", d)
		} else if _, ok := d.State.(*frames.Accepted); !ok {
			t.Fatalf("disposition %+v", d)
		}
	}
	r.transfer(0, 0, 0, false, []byte("one"))
	next("one")
	r.transfer(0, 0, 0, false, make([]byte, 2000))
	d := expect[*frames.Disposition](r)
	if _, ok := d.State.(*frames.Rejected); !ok || !d.Settled {
		t.Fatalf("disposition %+v", d)
	}
	r.send(0, &frames.Disposition{Role: frames.RoleSender, First: 0, Settled: true, State: d.State}, nil)
	r.transfer(0, 0, 0, false, []byte("two"))
	next("two")
}

// TestSmallReadsAcknowledgedAtOnce: a read of a small frame asks for an
// immediate ACK (TCP_QUICKACK), so a peer with Nagle's algorithm on does
// not wait out the delayed ACK before its next frame; a read of message
// traffic does not (our dispositions carry its ACKs).
func TestSmallReadsAcknowledgedAtOnce(t *testing.T) {
	var acks atomic.Int32
	h := newTestHandler()
	col := newCollector(h, 4)
	h.inbound = func(*Link) InboundHandler { return col }
	ts := startServer(t, Config{MaxFrameSize: 65536}, h, func(s *Server) {
		s.quickAck = func(fd uintptr) {
			acks.Add(1)
			quickAck(fd)
		}
	})
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.send(0, &frames.Attach{Name: "s", Handle: 0, Role: frames.RoleSender,
		Source: &frames.Source{Address: "raw"}, Target: &frames.Target{Address: "q"}, InitialDeliveryCount: frames.Some[uint32](0)}, nil)
	expect[*frames.Attach](r)
	expect[*frames.Flow](r)
	deliver := func(id uint32, payload []byte) int32 {
		t.Helper()
		before := acks.Load()
		r.transfer(0, 0, id, false, payload)
		select {
		case d := <-col.deliveries:
			if err := d.Settle(&frames.Accepted{}); err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("delivery did not arrive")
		}
		expect[*frames.Disposition](r)
		return acks.Load() - before
	}
	if n := deliver(0, []byte("small")); n == 0 {
		t.Error("a small transfer's read asked for no quick ACK")
	}
	if n := deliver(1, make([]byte, 8000)); n != 0 {
		t.Errorf("an 8000-byte transfer's read asked for %d quick ACKs", n)
	}
}
