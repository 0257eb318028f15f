package amqpserver

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/broker"
)

// A receive-and-delete link that closes while the broker is making the
// removal of messages for its credit durable must not lose them: the client
// gets a message, or the queue still has it, never neither. (The removals
// became durable after the link had closed, and their deliveries, dropped
// by the closed link, were lost.)
func TestReceiveAndDeleteOnAClosingLinkLosesNothing(t *testing.T) {
	// Once armed, the queue's next fsync waits until released: the removal
	// for the link's credit is decided but not durable while it closes.
	b, addr, hold := startWithSyncHold(t)
	e, _ := b.Entity("q1")
	sess := plainConn(t, addr)
	snd, err := sess.NewSender(ctxT(t), "q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var sent []string
	for i := range n {
		body := fmt.Sprintf("m%d", i)
		sent = append(sent, body)
		if err := snd.Send(ctxT(t), &amqp.Message{Data: [][]byte{[]byte(body)}}, nil); err != nil {
			t.Fatal(err)
		}
	}

	js := dialFrames(t, addr)
	js.attachJS(0, "rad", "q1", true)
	hold.arm()
	js.flow(0, 0, 5, false)
	hold.wait() // five messages are removed, not yet durably
	js.send(0, &frames.Detach{Handle: 0, Closed: true}, nil)
	var received []string
	for {
		p, payload := js.next()
		if _, ok := p.(*frames.Transfer); ok {
			var m amqp.Message
			if err := m.UnmarshalBinary(payload); err != nil {
				t.Fatal(err)
			}
			received = append(received, string(m.GetData()))
		}
		if _, ok := p.(*frames.Detach); ok {
			break
		}
	}
	hold.free()

	// What the closed link could not send goes back (on its own time):
	// wait until every message is accounted for, or say which are not.
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := e.Sync(); err != nil {
			t.Fatal(err)
		}
		peek, err := e.Peek(broker.MainQueue, 1, 2*n, "")
		if err != nil {
			t.Fatal(err)
		}
		left = left[:0]
		for _, d := range peek {
			var m amqp.Message
			if err := m.UnmarshalBinary(d.Message); err != nil {
				t.Fatal(err)
			}
			left = append(left, string(m.GetData()))
		}
		if len(received)+len(left) >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	all := slices.Sorted(slices.Values(append(slices.Clone(received), left...)))
	if !slices.Equal(all, sent) {
		t.Fatalf("the client received %v and the queue has %v: not the %d sent, each once", received, left, n)
	}
}
