package broker

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// drainThrough sends n messages of size bytes through q and completes each,
// deferring the first when deferFirst is set. It returns the deliveries'
// sequence numbers.
func drainThrough(t *testing.T, e *Entity, n, size int, deferFirst bool) []uint64 {
	t.Helper()
	deliveries := make(chan Delivery, n)
	r, err := e.Attach(ReceiverOptions{Name: "r", Deliver: func(d Delivery) { deliveries <- d }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Detach(nil)
	r.SetLimit(1 << 40)
	var seqs []uint64
	for i := range n {
		sendSync(t, e, projection.Message{Body: make([]byte, size), MessageID: fmt.Sprint(i)})
		d := nextDelivery(t, deliveries)
		o := projection.Complete
		if i == 0 && deferFirst {
			o = projection.Defer
		}
		settleSync(t, e, d, Settlement{Outcome: o})
		seqs = append(seqs, d.Seq)
	}
	e.Sync()
	return seqs
}

// An entity that drained a backlog and then goes idle gives its log back:
// no snapshot had been due (the backlog was under SnapshotEvery), so the
// whole log would otherwise stay on disk until the next burst. Then it
// stays quiet while idle, and the cut log recovers, sequence numbers
// carrying on.
func TestIdleCheckpointGivesTheLogBack(t *testing.T) {
	for _, idle := range []time.Duration{-1, 100 * time.Millisecond} {
		t.Run(fmt.Sprint("idle=", idle), func(t *testing.T) {
			dir := t.TempDir()
			var snapshots atomic.Int32
			opts := Options{Dir: dir, SegmentSize: 64 << 10, IdleCheckpoint: idle,
				OnSnapshot: func(SnapshotStats) { snapshots.Add(1) }}
			b := openBroker(t, opts)
			e, err := b.CreateQueue("q", projection.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			seqs := drainThrough(t, e, 1000, 1024, false)
			full := e.Bytes()
			if idle < 0 {
				time.Sleep(300 * time.Millisecond) // long enough for a check that should not come
				if got := e.Bytes(); full < 1<<20 || got != full || snapshots.Load() != 0 {
					t.Fatalf("without idle checkpoints: %d bytes (was %d), %d snapshots", got, full, snapshots.Load())
				}
				b.Close()
				return
			}
			// (A slow machine may pause long enough mid-run for a check to
			// cut part of the log already.)
			busy := func() bool { // a checkpoint's snapshot under way
				b, _ := call(e, func(e *Entity) (bool, error) { return e.snap.running, nil })
				return b
			}
			for deadline := time.Now().Add(10 * time.Second); e.Bytes() > 128<<10 || busy(); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("idle, drained queue keeps %d bytes of log (was %d)", e.Bytes(), full)
				}
			}
			n, last := snapshots.Load(), e.log.LastIndex()
			time.Sleep(10 * idle) // more idle periods: nothing more to do
			if snapshots.Load() != n || e.log.LastIndex() != last {
				t.Fatalf("still idle: %d -> %d snapshots, last index %d -> %d", n, snapshots.Load(), last, e.log.LastIndex())
			}
			b.Close()

			b = openBroker(t, opts)
			defer b.Close()
			e, _ = b.Entity("q")
			if c, _ := e.Counts(event.MainQueue); c.Total != 0 {
				t.Fatalf("after restart the queue holds %+v", c)
			}
			more := drainThrough(t, e, 1, 10, false)
			if more[0] <= seqs[len(seqs)-1] || more[0] <= last {
				t.Fatalf("sequence number after restart %d, last before %d (log at %d)", more[0], seqs[len(seqs)-1], last)
			}
		})
	}
}

// A message still in the queue pins the log: the idle check finds nothing
// it could cut and writes nothing.
func TestIdleCheckpointLeavesAPinnedLog(t *testing.T) {
	var snapshots atomic.Int32
	b := openBroker(t, Options{Dir: t.TempDir(), SegmentSize: 64 << 10, IdleCheckpoint: 10 * time.Millisecond,
		OnSnapshot: func(SnapshotStats) { snapshots.Add(1) }})
	defer b.Close()
	e, err := b.CreateQueue("q", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	drainThrough(t, e, 500, 1024, true) // the first is deferred
	last := e.log.LastIndex()
	full := e.Bytes()
	checked := func() bool { // the idle check has looked at the log as it is now
		at, _ := call(e, func(e *Entity) (uint64, error) { return e.idle.doneAt, nil })
		return at == last
	}
	for deadline := time.Now().Add(10 * time.Second); !checked(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the idle check never ran")
		}
	}
	if e.log.LastIndex() != last || e.Bytes() != full || snapshots.Load() != 0 {
		t.Fatalf("pinned log: last index %d -> %d, %d -> %d bytes, %d snapshots", last, e.log.LastIndex(),
			full, e.Bytes(), snapshots.Load())
	}
}

// A drained log that is all one segment is cut too: the log rolls its
// idle tail before the idle check looks (the roll comes at half the
// IdleCheckpoint), so the check finds a closed segment to drop. Before,
// with a check sooner than the log's own 2 s roll, it found nothing and
// never looked again.
func TestIdleCheckpointAfterTheRoll(t *testing.T) {
	b := openBroker(t, Options{Dir: t.TempDir(), IdleCheckpoint: 200 * time.Millisecond})
	defer b.Close()
	e, err := b.CreateQueue("q", projection.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	drainThrough(t, e, 400, 1024, false) // 400 KiB: one segment, over the log's IdleRollBytes
	full := e.Bytes()
	for deadline := time.Now().Add(10 * time.Second); e.log.FirstIndex() == 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("idle, drained one-segment log never cut: %d bytes", e.Bytes())
		}
	}
	t.Logf("%d -> %d bytes", full, e.Bytes())
}
