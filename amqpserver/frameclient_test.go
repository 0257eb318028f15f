package amqpserver

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/internal/rawframe"
)

// frameClient speaks AMQP frame by frame, for what go-amqp does not do the way
// rhea (the JS SDK's AMQP library) does: a drain flow with credit left.
type frameClient struct {
	t  testing.TB
	nc net.Conn
	r  *bufio.Reader
}

func dialFrames(t testing.TB, addr string) *frameClient {
	t.Helper()
	nc, br := rawframe.Dial(t, addr, 20*time.Second)
	r := &frameClient{t: t, nc: nc, r: br}
	r.write(frames.AppendProtocolHeader(nil, frames.ProtocolSASL))
	r.readHeader()
	expectFrame[*frames.SASLMechanisms](r)
	r.write(frames.AppendFrame(nil, frames.TypeSASL, 0, &frames.SASLInit{Mechanism: "PLAIN",
		InitialResponse: []byte("\x00RootManageSharedAccessKey\x00SAS_KEY_VALUE")}, nil))
	if o := expectFrame[*frames.SASLOutcome](r); o.Code != frames.SASLOK {
		t.Fatalf("sasl outcome %d", o.Code)
	}
	r.write(frames.AppendProtocolHeader(nil, frames.ProtocolAMQP))
	r.readHeader()
	r.send(0, &frames.Open{ContainerID: "raw"}, nil)
	expectFrame[*frames.Open](r)
	r.send(0, &frames.Begin{NextOutgoingID: 0, IncomingWindow: 5000, OutgoingWindow: 5000}, nil)
	expectFrame[*frames.Begin](r)
	return r
}

func (r *frameClient) write(b []byte) {
	r.t.Helper()
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatalf("raw write: %v", err)
	}
}

func (r *frameClient) readHeader() {
	r.t.Helper()
	var b [8]byte
	if _, err := io.ReadFull(r.r, b[:]); err != nil {
		r.t.Fatalf("read protocol header: %v", err)
	}
}

func (r *frameClient) send(ch uint16, p frames.Performative, payload []byte) {
	r.write(frames.AppendFrame(nil, frames.TypeAMQP, ch, p, payload))
}

// next returns the next non-empty frame's performative and payload.
func (r *frameClient) next() (frames.Performative, []byte) {
	r.t.Helper()
	p, payload, ok := r.nextWithin(20 * time.Second)
	if !ok {
		r.t.Fatal("no frame within 20 s")
	}
	return p, payload
}

// nextWithin is next with a deadline; ok is false if nothing came.
func (r *frameClient) nextWithin(d time.Duration) (p frames.Performative, payload []byte, ok bool) {
	r.t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(d))
	defer r.nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		f, err := rawframe.Read(r.r)
		if ne, isNet := err.(net.Error); isNet && ne.Timeout() {
			return nil, nil, false
		}
		if err != nil {
			r.t.Fatalf("read frame: %v", err)
		}
		if f.P != nil { // not a heartbeat
			return f.P, f.Payload, true
		}
	}
}

func expectFrame[T frames.Performative](r *frameClient) T {
	r.t.Helper()
	p, _ := r.next()
	v, ok := p.(T)
	if !ok {
		var zero T
		r.t.Fatalf("got %T %+v, want %T", p, p, zero)
	}
	return v
}

// attachJS attaches a receiver as rhea does for the JS SDK: peek-lock
// (snd-settle-mode unsettled, rcv-settle-mode second) or receive-and-delete
// (settled, first).
func (r *frameClient) attachJS(handle uint32, name, address string, receiveAndDelete bool) *frames.Attach {
	r.t.Helper()
	snd, rcv := frames.SenderSettleUnsettled, frames.ReceiverSettleSecond
	if receiveAndDelete {
		snd, rcv = frames.SenderSettleSettled, frames.ReceiverSettleFirst
	}
	r.send(0, &frames.Attach{
		Name: name, Handle: handle, Role: frames.RoleReceiver,
		SndSettleMode: frames.Some(snd),
		RcvSettleMode: frames.Some(rcv),
		Source:        &frames.Source{Address: address},
		Target:        &frames.Target{Address: name},
	}, nil)
	return expectFrame[*frames.Attach](r)
}

// flow sends a link flow as rhea does: absolute credit from its delivery-count.
func (r *frameClient) flow(handle, deliveryCount, credit uint32, drain bool) {
	r.send(0, &frames.Flow{
		NextIncomingID: frames.Some[uint32](0), IncomingWindow: 5000, NextOutgoingID: 0, OutgoingWindow: 5000,
		Handle: frames.Some(handle), DeliveryCount: frames.Some(deliveryCount), LinkCredit: frames.Some(credit),
		Drain: drain,
	}, nil)
}
