package amqpserver

import (
	"fmt"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walbus/walbus/broker"
)

// Clients carry on when walbus restarts under them, and nothing that was
// acknowledged before the restart is lost.
func TestSDKRecoversAcrossRestart(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	tb.reconnects = true
	c := tb.client(t)
	s, _ := c.NewSender("q1", nil)
	r, _ := c.NewReceiverForQueue("q1", nil)
	send := func(from, to int) {
		for i := from; i < to; i++ {
			var err error
			for attempt := 0; attempt < 10; attempt++ {
				if err = s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte(fmt.Sprint(i))}, nil); err == nil {
					break
				}
				time.Sleep(200 * time.Millisecond) // a user retries too
			}
			if err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
	}
	received := map[string]bool{}
	receive := func(n int) {
		for len(received) < n {
			msgs, err := r.ReceiveMessages(ctxT(t), n-len(received), nil)
			if err != nil {
				t.Logf("receive (retrying): %v", err)
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for _, m := range msgs {
				if err := r.CompleteMessage(ctxT(t), m, nil); err != nil {
					t.Logf("complete %s (it comes back): %v", m.Body, err)
					continue
				}
				received[string(m.Body)] = true
			}
		}
	}
	send(0, 20)
	receive(5)
	tb.restart(t)
	send(20, 30)
	receive(30)
	for i := range 30 {
		if !received[fmt.Sprint(i)] {
			t.Fatalf("message %d lost", i)
		}
	}
}
