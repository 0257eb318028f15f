package amqpserver

import (
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/log"
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

			peek, err := e.Peek(log.MainQueue, 1, 10, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(peek) != outcome.left {
				t.Fatalf("the queue holds %d messages after the %s, want %d", len(peek), outcome.name, outcome.left)
			}
		})
	}
}
