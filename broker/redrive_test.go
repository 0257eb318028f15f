package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

func redriveSync(t *testing.T, e *Entity, queue uint32, seqs []uint64) int {
	t.Helper()
	type result struct {
		n   int
		err error
	}
	ch := make(chan result, 1)
	e.Redrive(queue, seqs, func(n int, err error) { ch <- result{n, err} })
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.n
}

// Re-driven dead-lettered messages come back to their queue under new
// numbers, in the order asked, without their dead-letter reason and with
// a delivery count of zero, and live the queue's default time to live
// from then; the rest wait in the dead-letter queue. After a restart the
// queues hold the same.
func TestRedrive(t *testing.T) {
	dir := t.TempDir()
	cfg := projection.DefaultConfig()
	cfg.DefaultTTL = time.Hour
	b := openBroker(t, Options{Dir: dir})
	e, err := b.CreateQueue("q", cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		sendSync(t, e, projection.Message{Body: []byte("x"), MessageID: fmt.Sprint("m", i)})
		if i == 1 {
			// One failed delivery first: re-driven, it counts none.
			got := make(chan Delivery, 1)
			r, err := e.Attach(ReceiverOptions{Name: "r", Deliver: func(d Delivery) { got <- d }})
			if err != nil {
				t.Fatal(err)
			}
			r.SetLimit(1)
			settleSync(t, e, nextDelivery(t, got), Settlement{Outcome: projection.Abandon})
			r.Detach(nil)
		}
		deadLetterHead(t, e)
	}
	dead, err := e.Peek(event.DeadLetterQueue, 0, 10, "")
	if err != nil || len(dead) != 3 {
		t.Fatalf("dead-letter queue: %d (%v)", len(dead), err)
	}
	if dead[1].Deliveries != 1 {
		t.Fatalf("m1 dead-lettered after %d failed deliveries, want 1", dead[1].Deliveries)
	}
	if n := redriveSync(t, e, event.MainQueue, []uint64{dead[1].Seq, 12345}); n != 1 {
		t.Fatalf("re-drove %d, want the one asked for that is there", n)
	}
	check := func(when string, e *Entity, main, dlq string) {
		t.Helper()
		if got := fmt.Sprint(peekIDs(t, e, event.MainQueue)); got != main {
			t.Fatalf("%s: the queue holds %s, want %s", when, got, main)
		}
		if got := fmt.Sprint(peekIDs(t, e, event.DeadLetterQueue)); got != dlq {
			t.Fatalf("%s: the dead-letter queue holds %s, want %s", when, got, dlq)
		}
		ds, _ := e.Peek(event.MainQueue, 0, 10, "")
		for _, d := range ds {
			if d.Deliveries != 0 || len(d.Overlays) != 0 || d.ExpiresAt == 0 || d.Seq <= dead[2].Seq {
				t.Fatalf("%s: re-driven %s: deliveries %d, overlays %+v, expires %d, seq %d", when, d.MessageID,
					d.Deliveries, d.Overlays, d.ExpiresAt, d.Seq)
			}
		}
	}
	check("one re-driven", e, "[m1]", "[m0 m2]")
	if n := redriveSync(t, e, event.MainQueue, nil); n != 2 {
		t.Fatalf("re-drove %d, want the other two", n)
	}
	check("all re-driven", e, "[m1 m0 m2]", "[]")
	b.Close()
	b = openBroker(t, Options{Dir: dir})
	defer b.Close()
	e, _ = b.Entity("q")
	check("after a restart", e, "[m1 m0 m2]", "[]")
}
