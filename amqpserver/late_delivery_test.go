package amqpserver

import (
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
)

// A delivery the broker hands a receiver link after the link closed (it
// locked the message before the link's detach reached the queue) goes back
// at once: a peek-lock one is released without counting a delivery, so the
// next receiver has it long before its lock (a minute) would have run out,
// and a receive-and-delete one is restored, so it is not lost.
func TestDeliveryAfterTheLinkClosedGoesBack(t *testing.T) {
	for _, mode := range []broker.Mode{broker.PeekLock, broker.ReceiveAndDelete} {
		b, _ := startRaw(t, Config{})
		e, err := b.Entity("q1")
		if err != nil {
			t.Fatal(err)
		}
		sent := make(chan error, 1)
		e.Send(broker.MainQueue, []broker.Message{{MessageID: "m", Body: []byte("late")}}, func(err error) { sent <- err })
		if err := <-sent; err != nil {
			t.Fatal(err)
		}

		// The link is closed, as Detached leaves it, and the broker has
		// not heard of it yet: its receiver still has a credit.
		rl := &receiverLink{e: e, mode: mode, closed: true, unsettled: map[uint32]broker.LockToken{}}
		r, err := e.Attach(broker.ReceiverOptions{Queue: broker.MainQueue, Name: "closed", Mode: mode, Deliver: rl.deliver})
		if err != nil {
			t.Fatal(err)
		}
		rl.r = r
		r.SetLimit(1)

		got := make(chan broker.Delivery, 1)
		next, err := e.Attach(broker.ReceiverOptions{Queue: broker.MainQueue, Name: "next", Deliver: func(d broker.Delivery) { got <- d }})
		if err != nil {
			t.Fatal(err)
		}
		next.SetLimit(1)
		select {
		case d := <-got:
			if string(d.Message) == "" || d.MessageID != "m" || d.Deliveries != 0 {
				t.Fatalf("mode %d: the next receiver got %q with %d earlier deliveries, want m with none", mode, d.MessageID, d.Deliveries)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("mode %d: the message handed to a closed link never came back", mode)
		}
	}
}
