package broker

import (
	"testing"
	"time"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// Two queues whose dead-letter queues forward to each other pass a message
// that keeps being dead-lettered back and forth, but not for ever: every
// auto-forward is a hop (ForwardTo links at send time too), and the
// dead-letter forward that would make a fifth moves the message to its
// source's transfer dead-letter queue as MaxTransferHopCountExceeded, as
// Service Bus does. The count is in the log: a restart in between keeps
// it. Before, the message went round for as long as it was dead-lettered.
func TestDeadLetterForwardingLoopStopsAfterFourHops(t *testing.T) {
	for _, c := range []struct {
		name     string
		viaEntry bool // sent to "entry", which forwards to "a": one hop at send time
		stopsAt  string
	}{
		{"sent to a", false, "a"},
		{"sent through a ForwardTo link", true, "b"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := Options{Dir: t.TempDir()}
			b := openBroker(t, opts)
			if _, err := b.CreateQueue("b", projection.DefaultConfig()); err != nil {
				t.Fatal(err)
			}
			if _, err := b.CreateQueue("a", deadLettersTo("b")); err != nil {
				t.Fatal(err)
			}
			if err := b.UpdateQueue("b", deadLettersTo("a")); err != nil {
				t.Fatal(err)
			}
			first := "a"
			if c.viaEntry {
				entry := projection.DefaultConfig()
				entry.ForwardTo = "a"
				e, err := b.CreateQueue("entry", entry)
				if err != nil {
					t.Fatal(err)
				}
				sendSync(t, e, projection.Message{Body: []byte("m"), MessageID: "m"})
			} else {
				a, _ := b.Entity("a")
				sendSync(t, a, projection.Message{Body: []byte("m"), MessageID: "m"})
			}
			other := map[string]string{"a": "b", "b": "a"}
			at, hops := first, uint32(0)
			if c.viaEntry {
				hops = 1
			}
			for {
				e, _ := b.Entity(at)
				d := peekOne(t, e, event.MainQueue)
				if d.Hops != hops {
					t.Fatalf("the message in %s has taken %d hops, want %d", at, d.Hops, hops)
				}
				if hops == 2 {
					// The count outlives a crash.
					if err := b.shutdown(false); err != nil {
						t.Fatal(err)
					}
					b = openBroker(t, opts)
					e, _ = b.Entity(at)
					if d := peekOne(t, e, event.MainQueue); d.Hops != 2 {
						t.Fatalf("after a restart the message in %s has taken %d hops, want 2", at, d.Hops)
					}
				}
				deadLetterHead(t, e)
				if hops == projection.MaxHops {
					break
				}
				next, _ := b.Entity(other[at])
				waitCounts(t, next, event.MainQueue, func(c projection.Counts) bool { return c.Total == 1 })
				at, hops = other[at], hops+1
			}
			if at != c.stopsAt {
				t.Fatalf("the fifth hop would leave %s, want %s", at, c.stopsAt)
			}
			e, _ := b.Entity(at)
			waitCounts(t, e, event.TransferDeadLetterQueue, func(c projection.Counts) bool { return c.Total == 1 })
			d := peekOne(t, e, event.TransferDeadLetterQueue)
			last := d.Overlays[len(d.Overlays)-1]
			if d.MessageID != "m" || last.Type != event.TransferDeadLettered || last.Reason != projection.ReasonMaxTransferHops {
				t.Fatalf("transfer dead-lettered %q with %+v", d.MessageID, last)
			}
			for _, name := range []string{"a", "b"} {
				e, _ := b.Entity(name)
				for _, q := range []uint32{event.MainQueue, event.DeadLetterQueue} {
					if c, _ := e.Counts(q); c.Total != 0 {
						t.Fatalf("%s queue %d still holds %d", name, q, c.Total)
					}
				}
			}
			b.Close()
		})
	}
}

// peekOne is the one message queue q of e holds, once it is durable (peek
// shows nothing before).
func peekOne(t *testing.T, e *Entity, q uint32) Delivery {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ds, err := e.Peek(q, 1, 10, "")
		if err == nil && len(ds) == 1 {
			return ds[0]
		}
		if err != nil || len(ds) > 1 || time.Now().After(deadline) {
			t.Fatalf("%s queue %d holds %d messages (%v), want 1", e.Name(), q, len(ds), err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
