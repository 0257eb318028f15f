package transport

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/internal/rawframe"
)

// rawClient speaks AMQP frame by frame, for what go-amqp cannot be made
// to do: malformed input, silence, protocol violations, rhea's habits.
type rawClient struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
}

func dialRaw(t testing.TB, addr string) *rawClient {
	t.Helper()
	nc, br := rawframe.Dial(t, addr, safety)
	return &rawClient{t: t, nc: nc, r: br}
}

func (r *rawClient) write(b []byte) {
	r.t.Helper()
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatalf("raw write: %v", err)
	}
}

func (r *rawClient) header(id frames.ProtocolID) {
	r.write(frames.AppendProtocolHeader(nil, id))
}

func (r *rawClient) readHeader() frames.ProtocolHeader {
	r.t.Helper()
	var b [8]byte
	if _, err := io.ReadFull(r.r, b[:]); err != nil {
		r.t.Fatalf("read protocol header: %v", err)
	}
	h, err := frames.ParseProtocolHeader(b[:])
	if err != nil {
		r.t.Fatalf("protocol header %x: %v", b, err)
	}
	return h
}

func (r *rawClient) send(ch uint16, p frames.Performative, payload []byte) {
	r.write(frames.AppendFrame(nil, frames.TypeAMQP, ch, p, payload))
}

func (r *rawClient) sendSASL(p frames.Performative) {
	r.write(frames.AppendFrame(nil, frames.TypeSASL, 0, p, nil))
}

// rawFrame is one frame read back, empty for a heartbeat.
type rawFrame struct {
	h       frames.Header
	p       frames.Performative
	payload []byte
}

// readFrame returns the next frame, or an error at the end of the stream.
func (r *rawClient) readFrame() (rawFrame, error) {
	f, err := rawframe.Read(r.r)
	if errors.Is(err, rawframe.ErrMalformed) {
		r.t.Fatal(err)
	}
	if err != nil {
		return rawFrame{}, err
	}
	return rawFrame{f.H, f.P, f.Payload}, nil
}

// next returns the next non-empty frame.
func (r *rawClient) next() rawFrame {
	r.t.Helper()
	for {
		f, err := r.readFrame()
		if err != nil {
			r.t.Fatalf("read frame: %v", err)
		}
		if f.p != nil {
			return f
		}
	}
}

// expect reads the next non-empty frame and requires it to be a T.
func expect[T frames.Performative](r *rawClient) T {
	r.t.Helper()
	f := r.next()
	v, ok := f.p.(T)
	if !ok {
		var zero T
		r.t.Fatalf("got %T %+v, want %T", f.p, f.p, zero)
	}
	return v
}

// expectClose reads until the server's close and returns its error; the
// frames before it are returned too.
func (r *rawClient) expectClose() (*frames.Error, []rawFrame) {
	r.t.Helper()
	var seen []rawFrame
	for {
		f, err := r.readFrame()
		if err != nil {
			r.t.Fatalf("stream ended before close: %v (after %d frames)", err, len(seen))
		}
		if cl, ok := f.p.(*frames.Close); ok {
			return cl.Error, seen
		}
		if f.p != nil {
			seen = append(seen, f)
		}
	}
}

// expectEOF requires the server to close the socket.
func (r *rawClient) expectEOF() {
	r.t.Helper()
	var b [256]byte
	for {
		_, err := r.r.Read(b[:])
		if err == nil {
			continue
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			r.t.Fatal("server did not close the socket")
		}
		return
	}
}

// saslAnonymous runs the SASL layer with ANONYMOUS.
func (r *rawClient) saslAnonymous() {
	r.t.Helper()
	r.header(frames.ProtocolSASL)
	if h := r.readHeader(); h.ID != frames.ProtocolSASL {
		r.t.Fatalf("sasl header answered with %+v", h)
	}
	expect[*frames.SASLMechanisms](r)
	r.sendSASL(&frames.SASLInit{Mechanism: "ANONYMOUS", InitialResponse: []byte("raw")})
	if o := expect[*frames.SASLOutcome](r); o.Code != frames.SASLOK {
		r.t.Fatalf("sasl outcome %d", o.Code)
	}
}

// open runs SASL, the AMQP header and the open exchange.
func (r *rawClient) open(o frames.Open) *frames.Open {
	r.t.Helper()
	r.saslAnonymous()
	r.header(frames.ProtocolAMQP)
	if h := r.readHeader(); h.ID != frames.ProtocolAMQP {
		r.t.Fatalf("amqp header answered with %+v", h)
	}
	if o.ContainerID == "" {
		o.ContainerID = "raw"
	}
	r.send(0, &o, nil)
	return expect[*frames.Open](r)
}

// begin starts a session on channel ch.
func (r *rawClient) begin(ch uint16) *frames.Begin {
	r.t.Helper()
	return r.beginWindow(ch, 5000)
}

// beginWindow starts a session whose incoming-window is w.
func (r *rawClient) beginWindow(ch uint16, w uint32) *frames.Begin {
	r.t.Helper()
	r.send(ch, &frames.Begin{NextOutgoingID: 0, IncomingWindow: w, OutgoingWindow: 5000}, nil)
	return expect[*frames.Begin](r)
}

// attachSender attaches a link on which the raw client sends and returns
// the server's attach and initial flow.
func (r *rawClient) attachSender(ch uint16, handle uint32, name string) (*frames.Attach, *frames.Flow) {
	r.t.Helper()
	r.send(ch, &frames.Attach{
		Name: name, Handle: handle, Role: frames.RoleSender,
		Source:               &frames.Source{Address: "raw"},
		Target:               &frames.Target{Address: "q"},
		InitialDeliveryCount: frames.Some[uint32](0),
	}, nil)
	a := expect[*frames.Attach](r)
	return a, expect[*frames.Flow](r)
}

// attachReceiver attaches a link on which the raw client receives.
func (r *rawClient) attachReceiver(ch uint16, handle uint32, name string, rcv frames.ReceiverSettleMode) *frames.Attach {
	r.t.Helper()
	r.send(ch, &frames.Attach{
		Name: name, Handle: handle, Role: frames.RoleReceiver,
		RcvSettleMode: frames.Some(rcv),
		Source:        &frames.Source{Address: "q"},
		Target:        &frames.Target{Address: "raw"},
	}, nil)
	return expect[*frames.Attach](r)
}

// transfer sends one single-frame delivery.
func (r *rawClient) transfer(ch uint16, handle, id uint32, settled bool, payload []byte) {
	r.send(ch, &frames.Transfer{
		Handle: handle, DeliveryID: frames.Some(id), DeliveryTag: []byte{byte(id), byte(id >> 8)},
		MessageFormat: frames.Some[uint32](0), Settled: settled,
	}, payload)
}

func condition(e *frames.Error) encoding.Symbol {
	if e == nil {
		return ""
	}
	return e.Condition
}
