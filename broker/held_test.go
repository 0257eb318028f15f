package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// scheduleHeldSync schedules msgs held on e's main queue and returns them.
func scheduleHeldSync(t *testing.T, e *Entity, msgs ...projection.Message) []HeldMessage {
	t.Helper()
	type result struct {
		held []HeldMessage
		err  error
	}
	ch := make(chan result, 1)
	e.ScheduleHeld(event.MainQueue, msgs, func(h []HeldMessage, err error) { ch <- result{h, err} })
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return r.held
}

// A schedule held for a transaction neither shows in a peek nor
// activates, even when due, nor blocks its MessageId, until the commit
// confirms it; then it activates at its time.
func TestHeldScheduleWaitsForTheCommit(t *testing.T) {
	cfg := projection.DefaultConfig()
	cfg.RequiresDuplicateDetection = true
	b := openBroker(t, Options{Dir: t.TempDir()})
	defer b.Close()
	e, err := b.CreateQueue("q", cfg)
	if err != nil {
		t.Fatal(err)
	}
	held := scheduleHeldSync(t, e, projection.Message{MessageID: "due", Body: []byte("x"), ScheduledAt: time.Now().Add(-time.Second).UnixNano()},
		projection.Message{MessageID: "later", Body: []byte("y"), ScheduledAt: time.Now().Add(time.Hour).UnixNano()})
	if len(held) != 2 || held[0].MessageID != "due" {
		t.Fatalf("held %+v", held)
	}
	time.Sleep(50 * time.Millisecond)
	if c, _ := e.Counts(event.MainQueue); c.Scheduled != 2 || c.Available != 0 {
		t.Fatalf("while held: %+v", c)
	}
	if ids := peekIDs(t, e, event.MainQueue); len(ids) != 0 {
		t.Fatalf("a peek shows %v while they are held", ids)
	}
	// Not yet remembered: a send with the same MessageId is stored.
	sendSync(t, e, projection.Message{MessageID: "later", Body: []byte("sent")})
	if err := commitSync(e, Transaction{ID: []byte("tx"), Schedules: []TxSchedule{{Queue: event.MainQueue, Messages: held}}}); err != nil {
		t.Fatal(err)
	}
	waitCounts(t, e, event.MainQueue, func(c projection.Counts) bool { return c.Available == 2 && c.Scheduled == 1 })
	// Confirmed, "due" is remembered: a send with its MessageId is dropped.
	sendSync(t, e, projection.Message{MessageID: "due", Body: []byte("again")})
	if c, _ := e.Counts(event.MainQueue); c.Total != 3 {
		t.Fatalf("after the commit: %+v", c)
	}
}

// What transactions held and never committed is cancelled when walbus
// starts again, from the log or from a snapshot; what they committed stays.
func TestHeldSchedulesCancelledAtStart(t *testing.T) {
	for _, graceful := range []bool{false, true} {
		t.Run(fmt.Sprint("graceful=", graceful), func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir, IdleCheckpoint: -1, FinalSnapshotMin: 1}
			b := openBroker(t, opts)
			e, err := b.CreateQueue("q", projection.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			later := time.Now().Add(time.Hour).UnixNano()
			committed := scheduleHeldSync(t, e, projection.Message{MessageID: "committed", Body: []byte("c"), ScheduledAt: later})
			scheduleHeldSync(t, e, projection.Message{MessageID: "open", Body: []byte("o"), ScheduledAt: later})
			if err := commitSync(e, Transaction{Schedules: []TxSchedule{{Messages: committed}}}); err != nil {
				t.Fatal(err)
			}
			if err := b.shutdown(graceful); err != nil {
				t.Fatal(err)
			}
			b, rec, err := Open(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if graceful && (rec.Entities[0].Snapshot == 0 || rec.Entities[0].Replayed != 0) {
				t.Fatalf("recovered %+v, want a snapshot alone", rec.Entities[0])
			}
			e, _ = b.Entity("q")
			waitCounts(t, e, event.MainQueue, func(c projection.Counts) bool { return c.Total == 1 && c.Scheduled == 1 })
			if ids := peekIDs(t, e, event.MainQueue); fmt.Sprint(ids) != "[committed]" {
				t.Fatalf("after the start: %v", ids)
			}
		})
	}
}
