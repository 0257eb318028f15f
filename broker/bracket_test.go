package broker

import (
	"sync/atomic"
	"testing"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// depthBracket counts the runs open on it.
type depthBracket struct {
	t     *testing.T
	depth atomic.Int32
	runs  atomic.Int32
}

func (b *depthBracket) Open() {
	b.depth.Add(1)
	b.runs.Add(1)
}

func (b *depthBracket) Close() {
	if b.depth.Add(-1) < 0 {
		b.t.Error("bracket closed more often than opened")
	}
}

// The callbacks that hand output to connections (a send's and a
// settlement's done, Deliver) run inside a run of the entity's bracket,
// whichever goroutine runs them, and every run is closed again.
func TestCallbacksRunInsideTheBracket(t *testing.T) {
	for _, sync := range []log.SyncPolicy{log.SyncAlways, log.SyncInterval, log.SyncNone} {
		t.Run(sync.String(), func(t *testing.T) {
			made := make(chan *depthBracket, 4)
			b := openBroker(t, Options{Dir: t.TempDir(), Sync: sync, NewBracket: func() log.Bracket {
				br := &depthBracket{t: t}
				made <- br
				return br
			}})
			e, err := b.CreateQueue("q", projection.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			br := <-made
			if e.Bracket() != log.Bracket(br) {
				t.Fatal("Bracket is not the one NewBracket made")
			}
			inside := func(what string) {
				if br.depth.Load() <= 0 {
					t.Errorf("%s ran outside the bracket", what)
				}
			}
			const n = 20
			sent := make(chan error, n)
			for i := range n {
				e.Send(event.MainQueue, []projection.Message{{MessageID: string(rune('a' + i)), Body: []byte("x")}},
					func(err error) { inside("send done"); sent <- err })
			}
			for range n {
				if err := <-sent; err != nil {
					t.Fatal(err)
				}
			}
			got := make(chan Delivery, n)
			r, err := e.Attach(ReceiverOptions{Name: "r", Deliver: func(d Delivery) { inside("Deliver"); got <- d }})
			if err != nil {
				t.Fatal(err)
			}
			r.SetLimit(n)
			settled := make(chan error, n)
			for range n {
				d := nextDelivery(t, got)
				e.Settle(d.Queue, Settlement{Token: d.Token, Outcome: projection.Complete},
					func(err error) { inside("settle done"); settled <- err })
			}
			for range n {
				if err := <-settled; err != nil {
					t.Fatal(err)
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			if d := br.depth.Load(); d != 0 {
				t.Fatalf("%d runs still open after Close", d)
			}
			if br.runs.Load() == 0 {
				t.Fatal("no run was bracketed")
			}
		})
	}
}
