package amqpserver

import (
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/broker"
)

// A client that settles a locked message and then detaches the link (the
// JS SDK closing a receiver while a completeMessage is under way) gets the
// settlement's outcome before the answer to its detach. The outcome waits
// for the settlement's fsync; a detach answered meanwhile left the client
// with no outcome at all: rhea forgets a detached link's deliveries, and the
// JS SDK waited out its operation time-out and then reported that the
// settlement might not have happened (it had).
func TestSettlementAnsweredBeforeTheDetach(t *testing.T) {
	for _, outcome := range []struct {
		name  string
		state frames.DeliveryState
		left  int // messages in the queue afterwards
	}{
		{"complete", &frames.Accepted{}, 0},
		{"abandon", &frames.Modified{}, 1},
	} {
		t.Run(outcome.name, func(t *testing.T) {
			// Once armed, the queue's next fsync waits until released.
			b, addr, hold := startWithSyncHold(t)
			e, _ := b.Entity("q1")
			snd, err := plainConn(t, addr).NewSender(ctxT(t), "q1", nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := snd.Send(ctxT(t), &amqp.Message{Data: [][]byte{[]byte("m")}}, nil); err != nil {
				t.Fatal(err)
			}

			js := dialFrames(t, addr)
			js.attachJS(0, "peeklock", "q1", false)
			js.flow(0, 0, 1, false)
			var id uint32
			for {
				p, _ := js.next()
				if tr, ok := p.(*frames.Transfer); ok {
					id = tr.DeliveryID.Or(0)
					break
				}
			}
			if err := e.Sync(); err != nil { // the lock is durable: the next fsync is the settlement's
				t.Fatal(err)
			}
			hold.arm()
			js.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: id, State: outcome.state}, nil)
			hold.wait() // the settlement is decided, not yet durable
			js.send(0, &frames.Detach{Handle: 0, Closed: true}, nil)
			if p, _, ok := js.nextWithin(300 * time.Millisecond); ok {
				hold.free()
				t.Fatalf("while the settlement waits for its fsync the broker sent %T %+v", p, p)
			}
			hold.free()
			d := expectFrame[*frames.Disposition](js)
			if d.First != id || !d.Settled || d.Role != frames.RoleSender {
				t.Fatalf("disposition %+v, want the settled outcome of delivery %d", d, id)
			}
			expectFrame[*frames.Detach](js)

			peek, err := e.Peek(broker.MainQueue, 1, 10, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(peek) != outcome.left {
				t.Fatalf("the queue holds %d messages after the %s, want %d", len(peek), outcome.name, outcome.left)
			}
		})
	}
}

// A client that sends a message and detaches its sender before the send is
// acknowledged (a client closed on shutdown with sends in flight) gets the
// send's outcome before the answer to its detach: the message is stored
// either way, and a client that never learns so reports the send as failed
// and sends it again. Only the unsettled transfers are owed an outcome; one
// the client sent settled gets none.
func TestSendAnsweredBeforeTheDetach(t *testing.T) {
	b, addr, hold := startWithSyncHold(t)
	e, _ := b.Entity("q1")
	js := dialFrames(t, addr)
	js.send(0, &frames.Attach{
		Name: "sender", Handle: 0, Role: frames.RoleSender,
		SndSettleMode: frames.Some(frames.SenderSettleMixed),
		RcvSettleMode: frames.Some(frames.ReceiverSettleFirst),
		Source:        &frames.Source{Address: "sender"},
		Target:        &frames.Target{Address: "q1"},
	}, nil)
	expectFrame[*frames.Attach](js)
	expectFrame[*frames.Flow](js) // credit
	data := func(s string) []byte { return append([]byte{0x00, 0x53, 0x75, 0xa0, byte(len(s))}, s...) }
	transfer := func(id uint32, settled bool, body string) {
		js.send(0, &frames.Transfer{Handle: 0, DeliveryID: frames.Some(id), DeliveryTag: []byte{byte(id)},
			MessageFormat: frames.Some[uint32](0), Settled: settled}, data(body))
	}

	hold.arm()
	transfer(0, true, "settled")
	transfer(1, false, "unsettled")
	hold.wait() // the first of them is written, not yet durable
	js.send(0, &frames.Detach{Handle: 0, Closed: true}, nil)
	if p, _, ok := js.nextWithin(300 * time.Millisecond); ok {
		hold.free()
		t.Fatalf("while the send waits for its fsync the broker sent %T %+v", p, p)
	}
	hold.free()
	for {
		p, _ := js.next()
		if _, ok := p.(*frames.Flow); ok {
			continue
		}
		d, ok := p.(*frames.Disposition)
		if !ok {
			t.Fatalf("got %T %+v, want the send's outcome", p, p)
		}
		if _, accepted := d.State.(*frames.Accepted); d.First != 1 || d.Last.Or(1) != 1 || !d.Settled ||
			d.Role != frames.RoleReceiver || !accepted {
			t.Fatalf("disposition %+v, want delivery 1 settled as accepted", d)
		}
		break
	}
	if p, _ := js.next(); !isDetach(p) {
		t.Fatalf("got %T %+v after the outcome, want the detach's answer", p, p)
	}

	peek, err := e.Peek(broker.MainQueue, 1, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(peek) != 2 {
		t.Fatalf("the queue holds %d messages, want both", len(peek))
	}
}

func isDetach(p frames.Performative) bool {
	d, ok := p.(*frames.Detach)
	return ok && d.Closed && d.Error == nil
}

// The same through go-amqp: a Sender closed while a Send waits for its
// fsync. The Send used to fail with "link closed" although the message was
// stored.
func TestGoAMQPSendSucceedsWhenClosedUnderWay(t *testing.T) {
	b, addr, hold := startWithSyncHold(t)
	e, _ := b.Entity("q1")
	snd, err := plainConn(t, addr).NewSender(ctxT(t), "q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	hold.arm()
	sent := make(chan error, 1)
	go func() { sent <- snd.Send(ctxT(t), &amqp.Message{Data: [][]byte{[]byte("m")}}, nil) }()
	hold.wait()
	closed := make(chan error, 1)
	go func() { closed <- snd.Close(ctxT(t)) }()
	select {
	case err := <-sent:
		t.Fatalf("the send ended (%v) before its fsync", err)
	case <-time.After(200 * time.Millisecond):
	}
	hold.free()
	if err := <-sent; err != nil {
		t.Fatalf("send: %v (the message is stored)", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
	if peek, err := e.Peek(broker.MainQueue, 1, 10, ""); err != nil || len(peek) != 1 {
		t.Fatalf("peek: %d messages, %v", len(peek), err)
	}
}
