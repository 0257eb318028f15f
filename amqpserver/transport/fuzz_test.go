package transport

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/walbus/walbus/amqpserver/frames"
)

// fuzzHandler accepts everything and keeps every link busy: inbound
// deliveries are accepted, outbound links send whenever they have credit
// and answer drains and dispositions.
type fuzzHandler struct{}

func (fuzzHandler) Authenticate(ConnInfo, Credentials) (any, error) { return nil, nil }
func (fuzzHandler) ConnectionOpened(*Conn) *frames.Error            { return nil }
func (fuzzHandler) ConnectionClosed(*Conn, error)                   {}
func (fuzzHandler) Attach(l *Link) {
	if l.Inbound() {
		_ = l.AcceptInbound(&Reply{Credit: 3}, fuzzLink{})
		return
	}
	_ = l.AcceptOutbound(nil, fuzzLink{})
	fuzzLink{}.Credit(l, l.Credit())
}

type fuzzLink struct{}

func (fuzzLink) Deliver(d Delivery)            { _ = d.Settle(&frames.Accepted{}) }
func (fuzzLink) Detached(*Link, *frames.Error) {}
func (fuzzLink) Credit(l *Link, c Credit) {
	for i := 0; i < 3; i++ {
		if _, err := l.Send([]byte{byte(i)}, 0, make([]byte, 700), i%2 == 0); err != nil {
			break
		}
	}
	if c.Drain {
		_ = l.Drained()
	}
}
func (fuzzLink) Disposition(l *Link, id uint32, state frames.DeliveryState, settled bool) {
	if !settled {
		_ = l.Settle(id, state)
	}
}

var (
	fuzzServerOnce sync.Once
	fuzzServer     *Server
)

// preamble returns what precedes the fuzz input: nothing, a plain AMQP
// header, a SASL exchange, or a whole handshake up to open.
func preamble(mode byte) []byte {
	var b []byte
	switch mode % 4 {
	case 1:
		b = frames.AppendProtocolHeader(b, frames.ProtocolAMQP)
	case 2:
		b = frames.AppendProtocolHeader(b, frames.ProtocolSASL)
		b = frames.AppendFrame(b, frames.TypeSASL, 0, &frames.SASLInit{Mechanism: "ANONYMOUS"}, nil)
		b = frames.AppendProtocolHeader(b, frames.ProtocolAMQP)
	case 3:
		b = frames.AppendProtocolHeader(b, frames.ProtocolSASL)
		b = frames.AppendFrame(b, frames.TypeSASL, 0, &frames.SASLInit{Mechanism: "ANONYMOUS"}, nil)
		b = frames.AppendProtocolHeader(b, frames.ProtocolAMQP)
		b = frames.AppendFrame(b, frames.TypeAMQP, 0, &frames.Open{ContainerID: "fuzz", MaxFrameSize: frames.Some[uint32](600)}, nil)
	}
	return b
}

// serveFuzz runs one connection over net.Pipe with input written by the
// client, which then leaves, and fails if the server is still busy 10 s
// later.
func serveFuzz(t *testing.T, input []byte) {
	fuzzServerOnce.Do(func() {
		fuzzServer = NewServer(Config{
			AllowNoSASL:        true,
			MaxFrameSize:       4096,
			MaxMessageSize:     16 << 10,
			MaxSessions:        4,
			MaxLinksPerSession: 4,
			HandshakeTimeout:   5 * time.Second,
			CloseTimeout:       time.Second,
			Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
		}, fuzzHandler{})
	})
	client, server := net.Pipe()
	served := make(chan struct{})
	go func() {
		_ = fuzzServer.ServeConn(server)
		close(served)
	}()
	go func() { _, _ = io.Copy(io.Discard, client) }()
	// The write runs aside: a server that stopped reading without closing
	// would block it, and that is one of the hangs to catch.
	go func() {
		_, _ = client.Write(input)
		_ = client.Close()
	}()
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatalf("connection still being served after 10 s (%d bytes of input)", len(input))
	}
}

// FuzzConn feeds arbitrary bytes to a live connection over net.Pipe and
// requires the server to neither panic nor hang.
func FuzzConn(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(byte(3), seed)
	}
	f.Add(byte(0), []byte("AMQP\x00\x01\x00\x00"))
	f.Add(byte(1), frames.AppendFrame(nil, frames.TypeAMQP, 0, &frames.Open{ContainerID: "x"}, nil))
	f.Add(byte(2), []byte{0, 0, 0, 8, 2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, mode byte, data []byte) {
		serveFuzz(t, append(preamble(mode), data...))
	})
}

// FuzzConnFrames reads its input as a program of well-formed frames with
// fuzzed fields, which reaches deeper link and credit states than raw
// bytes do.
func FuzzConnFrames(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 0, 5, 0, 0, 7, 1, 3, 0, 1, 0, 200, 7, 0, 0, 1, 0, 1, 9, 0, 0, 0})
	f.Add([]byte{0, 1, 0, 0, 2, 1, 2, 1, 3, 1, 2, 0, 9, 1, 7, 1, 2, 0, 4, 2, 3, 1, 2, 0, 0, 3, 8, 1, 2, 1, 1})
	f.Fuzz(func(t *testing.T, program []byte) {
		serveFuzz(t, append(preamble(3), framesFromProgram(program)...))
	})
}

// framesFromProgram turns bytes into frames: an opcode, a channel, a
// handle and a number, then opcode-specific bits.
func framesFromProgram(p []byte) []byte {
	next := func() byte {
		if len(p) == 0 {
			return 0
		}
		b := p[0]
		p = p[1:]
		return b
	}
	var out []byte
	emit := func(ch uint16, perf frames.Performative, payload []byte) {
		out = frames.AppendFrame(out, frames.TypeAMQP, ch, perf, payload)
	}
	for len(p) > 0 {
		op, ch, h, n := next()%12, uint16(next()%3), uint32(next()%5), uint32(next())
		bits := next()
		flag := func(i uint) bool { return bits&(1<<i) != 0 }
		switch op {
		case 0:
			emit(ch, &frames.Begin{NextOutgoingID: n, IncomingWindow: uint32(bits), OutgoingWindow: 100}, nil)
		case 1:
			emit(ch, &frames.Attach{Name: fmt.Sprint("s", h), Handle: h, Role: frames.RoleSender,
				SndSettleMode: frames.Some(frames.SenderSettleMode(bits % 3)), RcvSettleMode: frames.Some(frames.ReceiverSettleMode(bits >> 2 % 2)),
				Target: &frames.Target{Address: "q"}, InitialDeliveryCount: frames.Some(n)}, nil)
		case 2:
			emit(ch, &frames.Attach{Name: fmt.Sprint("r", h), Handle: h, Role: frames.RoleReceiver,
				SndSettleMode: frames.Some(frames.SenderSettleMode(bits % 3)), RcvSettleMode: frames.Some(frames.ReceiverSettleMode(bits >> 2 % 2)),
				Source: &frames.Source{Address: "q"}, MaxMessageSize: frames.Some(uint64(n) * 16)}, nil)
		case 3:
			emit(ch, &frames.Flow{NextIncomingID: frames.Some(n), IncomingWindow: uint32(bits), OutgoingWindow: 10, Handle: frames.Some(h),
				DeliveryCount: frames.Some(n), LinkCredit: frames.Some(uint32(next())), Drain: flag(0), Echo: flag(1)}, nil)
		case 4:
			emit(ch, &frames.Flow{NextIncomingID: frames.Some(n), IncomingWindow: uint32(bits), OutgoingWindow: 10, Echo: flag(0)}, nil)
		case 5:
			emit(ch, &frames.Transfer{Handle: h, DeliveryID: frames.Some(n), DeliveryTag: []byte{byte(n)}, MessageFormat: frames.Some[uint32](0),
				More: flag(0), Settled: flag(1)}, make([]byte, int(next())*8))
		case 6:
			emit(ch, &frames.Transfer{Handle: h, More: flag(0), Aborted: flag(1), Settled: flag(2)}, make([]byte, int(next())*8))
		case 7:
			var state frames.DeliveryState
			switch bits % 4 {
			case 1:
				state = &frames.Accepted{}
			case 2:
				state = &frames.Rejected{Error: &frames.Error{Condition: "x"}}
			case 3:
				state = &frames.Modified{DeliveryFailed: true}
			}
			emit(ch, &frames.Disposition{Role: frames.Role(flag(2)), First: n, Last: frames.Some(n + uint32(next())), Settled: flag(3), State: state}, nil)
		case 8:
			var err *frames.Error
			if flag(1) {
				err = &frames.Error{Condition: "bye"}
			}
			emit(ch, &frames.Detach{Handle: h, Closed: flag(0), Error: err}, nil)
		case 9:
			emit(ch, &frames.End{}, nil)
		case 10:
			emit(ch, &frames.Close{}, nil)
		case 11:
			out = frames.AppendEmptyFrame(out)
		}
	}
	return out
}

// fuzzSeeds are valid frame sequences after open, so mutations start from
// deep inside the protocol.
func fuzzSeeds() [][]byte {
	amqpFrame := func(b []byte, ch uint16, p frames.Performative, payload []byte) []byte {
		return frames.AppendFrame(b, frames.TypeAMQP, ch, p, payload)
	}
	begin := amqpFrame(nil, 0, &frames.Begin{IncomingWindow: 100, OutgoingWindow: 100}, nil)

	send := append([]byte(nil), begin...)
	send = amqpFrame(send, 0, &frames.Attach{Name: "s", Handle: 0, Role: frames.RoleSender, Target: &frames.Target{Address: "q"}, InitialDeliveryCount: frames.Some[uint32](0)}, nil)
	send = amqpFrame(send, 0, &frames.Transfer{Handle: 0, DeliveryID: frames.Some[uint32](0), DeliveryTag: []byte{1}, MessageFormat: frames.Some[uint32](0)}, []byte("hello"))
	send = amqpFrame(send, 0, &frames.Transfer{Handle: 0, DeliveryID: frames.Some[uint32](1), DeliveryTag: []byte{2}, MessageFormat: frames.Some[uint32](0), More: true}, make([]byte, 300))
	send = amqpFrame(send, 0, &frames.Transfer{Handle: 0, Settled: true}, make([]byte, 300))
	send = amqpFrame(send, 0, &frames.Transfer{Handle: 0, DeliveryID: frames.Some[uint32](2), DeliveryTag: []byte{3}, More: true}, []byte("x"))
	send = amqpFrame(send, 0, &frames.Transfer{Handle: 0, Aborted: true}, nil)
	send = amqpFrame(send, 0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 10, OutgoingWindow: 10, Handle: frames.Some[uint32](0), DeliveryCount: frames.Some[uint32](9), Echo: true}, nil)
	send = amqpFrame(send, 0, &frames.Disposition{Role: frames.RoleSender, First: 0, Last: frames.Some[uint32](5), Settled: true}, nil)
	send = amqpFrame(send, 0, &frames.Detach{Handle: 0, Closed: true}, nil)
	send = amqpFrame(send, 0, &frames.End{}, nil)
	send = amqpFrame(send, 0, &frames.Close{}, nil)

	recv := append([]byte(nil), begin...)
	recv = amqpFrame(recv, 0, &frames.Attach{Name: "r", Handle: 0, Role: frames.RoleReceiver, RcvSettleMode: frames.Some(frames.ReceiverSettleSecond), Source: &frames.Source{Address: "q", Filter: nil}}, nil)
	recv = amqpFrame(recv, 0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 2, OutgoingWindow: 10, Handle: frames.Some[uint32](0), DeliveryCount: frames.Some[uint32](0), LinkCredit: frames.Some[uint32](5)}, nil)
	recv = amqpFrame(recv, 0, &frames.Disposition{Role: frames.RoleReceiver, First: 0, Last: frames.Some[uint32](1), State: &frames.Rejected{Error: &frames.Error{Condition: "x"}}}, nil)
	recv = amqpFrame(recv, 0, &frames.Flow{NextIncomingID: frames.Some[uint32](4), IncomingWindow: 100, OutgoingWindow: 10, Handle: frames.Some[uint32](0), DeliveryCount: frames.Some[uint32](2), LinkCredit: frames.Some[uint32](7), Drain: true}, nil)
	recv = amqpFrame(recv, 0, &frames.Disposition{Role: frames.RoleReceiver, First: 2, Last: frames.Some[uint32](4000000000), Settled: true, State: &frames.Accepted{}}, nil)
	recv = amqpFrame(recv, 0, &frames.Flow{IncomingWindow: 100, OutgoingWindow: 10, Echo: true}, nil)
	recv = amqpFrame(recv, 1, &frames.Begin{IncomingWindow: 1, OutgoingWindow: 1}, nil)
	recv = amqpFrame(recv, 1, &frames.Attach{Name: "c", Handle: 3, Role: frames.RoleSender, Coordinator: &frames.Coordinator{}}, nil)
	recv = amqpFrame(recv, 1, &frames.Transfer{Handle: 3, DeliveryID: frames.Some[uint32](0), DeliveryTag: []byte{1}}, []byte("declare"))
	recv = amqpFrame(recv, 1, &frames.End{Error: &frames.Error{Condition: "bye"}}, nil)
	recv = append(recv, 0, 0, 0, 8, 2, 0, 0, 0)
	return [][]byte{begin, send, recv}
}
