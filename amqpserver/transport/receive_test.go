package transport

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	amqp "github.com/Azure/go-amqp"
	"github.com/walbus/walbus/amqpserver/frames"
)

func manualReceiver(t *testing.T, s *amqp.Session, opts *amqp.ReceiverOptions) *amqp.Receiver {
	t.Helper()
	if opts == nil {
		opts = &amqp.ReceiverOptions{}
	}
	opts.Credit = -1
	r, err := s.NewReceiver(testCtx(t), "q", opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReceiveCreditKeptAcrossTime issues credit once and lets messages
// arrive later, one at a time: the credit must survive (Go SDK pattern,
// docs/compatibility.md §7).
func TestReceiveCreditKeptAcrossTime(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	s := newSession(t, ts.dial(t, nil))
	rcv := manualReceiver(t, s, nil)
	o := ts.h.nextOut(t)
	if err := rcv.IssueCredit(5); err != nil {
		t.Fatal(err)
	}
	// Wait until the credit has reached the server, then trickle.
	waitUntil(t, func() bool { return o.l.Credit().Limit == 5 })
	for i := 0; i < 5; i++ {
		o.push(encode(t, []byte(fmt.Sprint(i))))
		m, err := rcv.Receive(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(m.GetData()); got != fmt.Sprint(i) {
			t.Fatalf("got %q", got)
		}
		if err := rcv.AcceptMessage(testCtx(t), m); err != nil {
			t.Fatal(err)
		}
	}
	if c := o.l.Credit(); c.Available() != 0 || c.Sent != 5 {
		t.Fatalf("credit after use %+v", c)
	}
	// Out of credit: Send refuses instead of queueing without bound.
	if _, err := o.l.Send([]byte("x"), 0, encode(t, []byte("x")), false); err != ErrNoCredit {
		t.Fatalf("send without credit: %v", err)
	}
	// More credit later is absolute: 3 more on top of the 5 used.
	if err := rcv.IssueCredit(3); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return o.l.Credit().Limit == 8 })
}

// TestReceiveDrainGoAMQP: go-amqp drains with flow(drain, credit 0) and
// completes on our flow(drain=true).
func TestReceiveDrainGoAMQP(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	s := newSession(t, ts.dial(t, nil))
	rcv := manualReceiver(t, s, nil)
	o := ts.h.nextOut(t)
	if err := rcv.IssueCredit(10); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return o.l.Credit().Limit == 10 })
	o.push(encode(t, []byte("a")), encode(t, []byte("b")))
	if err := rcv.DrainCredit(testCtx(t), nil); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a", "b"} {
		m, err := rcv.Receive(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.GetData()) != want {
			t.Fatalf("got %q want %q", m.GetData(), want)
		}
	}
	if c := o.l.Credit(); c.Available() != 0 || c.Drain {
		t.Fatalf("credit after drain %+v", c)
	}
	// Credit works again after a drain.
	if err := rcv.IssueCredit(1); err != nil {
		t.Fatal(err)
	}
	o.push(encode(t, []byte("c")))
	if m, err := rcv.Receive(testCtx(t), nil); err != nil || string(m.GetData()) != "c" {
		t.Fatalf("after drain: %v %q", err, m.GetData())
	}
}

// TestReceiveDrainRhea: rhea drains with the remaining credit and waits
// for flow(drain=true, link-credit=0) with delivery-count advanced by the
// unused credit (docs/compatibility.md §7).
func TestReceiveDrainRhea(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	a := r.attachReceiver(0, 0, "r", frames.ReceiverSettleSecond)
	if a.InitialDeliveryCount.Or(1) != 0 || a.RcvSettleMode.Or(9) != frames.ReceiverSettleSecond {
		t.Fatalf("attach reply %+v", a)
	}
	o := ts.h.nextOut(t)
	o.push(encode(t, []byte("one")))
	flow := frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 2048, NextOutgoingID: 0, OutgoingWindow: 2048,
		Handle: frames.Some[uint32](0), DeliveryCount: frames.Some[uint32](0), LinkCredit: frames.Some[uint32](10)}
	r.send(0, &flow, nil)
	tr := expect[*frames.Transfer](r)
	if tr.DeliveryID.Value != 0 || tr.Settled {
		t.Fatalf("transfer %+v", tr)
	}
	// Drain the 9 left: delivery-count 1 as the receiver knows it.
	flow.Drain = true
	flow.DeliveryCount = frames.Some[uint32](1)
	flow.LinkCredit = frames.Some[uint32](9)
	flow.NextIncomingID = frames.Some[uint32](1)
	r.send(0, &flow, nil)
	fl := expect[*frames.Flow](r)
	if !fl.Drain || fl.LinkCredit.Or(99) != 0 || fl.DeliveryCount.Or(0) != 10 || !fl.Handle.Present || !fl.NextIncomingID.Present {
		t.Fatalf("drain answer %+v", fl)
	}
}

// TestReceiveLargeMessages sends messages of 1 MB and more to a client
// that accepts only small frames.
func TestReceiveLargeMessages(t *testing.T) {
	ts := startServer(t, Config{MaxMessageSize: 5 << 20}, nil)
	s := newSession(t, ts.dial(t, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous(), MaxFrameSize: 1024}))
	rcv := manualReceiver(t, s, nil)
	o := ts.h.nextOut(t)
	if err := rcv.IssueCredit(2); err != nil {
		t.Fatal(err)
	}
	var bodies [][]byte
	for _, size := range []int{1 << 20, 4<<20 + 3} {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(i * 13)
		}
		bodies = append(bodies, b)
		o.push(encode(t, b))
	}
	for _, want := range bodies {
		m, err := rcv.Receive(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.GetData(), want) {
			t.Fatalf("message of %d bytes corrupted", len(want))
		}
		if err := rcv.AcceptMessage(testCtx(t), m); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReceiveDispositions settles with every outcome in mode second: each
// reaches the handler unsettled and the handler's settled reply unblocks
// the client (docs/compatibility.md §5).
func TestReceiveDispositions(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	s := newSession(t, ts.dial(t, nil))
	second := amqp.ReceiverSettleModeSecond
	rcv := manualReceiver(t, s, &amqp.ReceiverOptions{SettlementMode: &second})
	o := ts.h.nextOut(t)
	o.answer = true
	if err := rcv.IssueCredit(4); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		o.push(encode(t, []byte(fmt.Sprint(i))))
	}
	settle := []func(*amqp.Message) error{
		func(m *amqp.Message) error { return rcv.AcceptMessage(testCtx(t), m) },
		func(m *amqp.Message) error {
			return rcv.RejectMessage(testCtx(t), m, &amqp.Error{Condition: "com.microsoft:dead-letter", Description: "dlq"})
		},
		func(m *amqp.Message) error { return rcv.ReleaseMessage(testCtx(t), m) },
		func(m *amqp.Message) error {
			return rcv.ModifyMessage(testCtx(t), m, &amqp.ModifyMessageOptions{UndeliverableHere: true})
		},
	}
	for i, f := range settle {
		m, err := rcv.Receive(testCtx(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		err = f(m)
		// The handler echoes the client's state; go-amqp reports a
		// rejected reply's error from RejectMessage.
		var ae *amqp.Error
		if i == 1 && errors.As(err, &ae) && ae.Condition == "com.microsoft:dead-letter" {
			err = nil
		}
		if err != nil {
			t.Fatalf("outcome %d: %v", i, err)
		}
	}
	var kinds []string
	for i := 0; i < 4; i++ {
		d := <-o.dispositions
		if d.settled {
			t.Fatalf("mode second disposition arrived settled: %+v", d)
		}
		kinds = append(kinds, fmt.Sprintf("%d:%T", d.id, d.state))
	}
	want := "[0:*frames.Accepted 1:*frames.Rejected 2:*frames.Released 3:*frames.Modified]"
	if fmt.Sprint(kinds) != want {
		t.Fatalf("dispositions %v", kinds)
	}
	if err := o.l.Settle(0, &frames.Accepted{}); err != ErrUnknownDelivery {
		t.Fatalf("settling twice: %v", err)
	}
}

// TestReceiveFirstModeAndPresettled: in mode first the client settles
// itself; with snd-settle-mode settled deliveries go out pre-settled.
func TestReceiveFirstModeAndPresettled(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	s := newSession(t, ts.dial(t, nil))
	rcv := manualReceiver(t, s, nil)
	o := ts.h.nextOut(t)
	if err := rcv.IssueCredit(1); err != nil {
		t.Fatal(err)
	}
	o.push(encode(t, []byte("first")))
	m, err := rcv.Receive(testCtx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.AcceptMessage(testCtx(t), m); err != nil {
		t.Fatal(err)
	}
	if d := <-o.dispositions; !d.settled {
		t.Fatalf("mode first disposition unsettled: %+v", d)
	}

	settled := amqp.SenderSettleModeSettled
	rad := manualReceiver(t, s, &amqp.ReceiverOptions{RequestedSenderSettleMode: &settled})
	o2 := ts.h.nextOut(t)
	if _, err := o2.l.Send(nil, 0, encode(t, nil), false); err != ErrSettleMode && err != ErrNoCredit {
		t.Fatalf("unsettled send on a settled link: %v", err)
	}
	o2.settled = true
	if err := rad.IssueCredit(1); err != nil {
		t.Fatal(err)
	}
	o2.push(encode(t, []byte("rad")))
	if m, err := rad.Receive(testCtx(t), nil); err != nil || string(m.GetData()) != "rad" {
		t.Fatalf("receive and delete: %v", err)
	}
}
