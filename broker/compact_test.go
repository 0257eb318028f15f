package broker

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// compactOptions make compaction happen at the test's size: under the
// race detector, small segments and frequent snapshots; at full size
// (make full-size), the defaults. The idle checkpoint comes quickly.
func compactOptions(dir string) Options {
	if raceScale == 1 {
		return Options{Dir: dir, IdleCheckpoint: 100 * time.Millisecond}
	}
	return Options{Dir: dir, SegmentSize: 64 << 10, SnapshotEvery: 1000, CompactBytes: 256 << 10,
		IdleCheckpoint: 20 * time.Millisecond}
}

// TestCompactionFollowsWhatIsHeld: a topic's subscription that nobody reads
// holds one message in a hundred (its filter), while another subscription
// drains a million messages (4,000 under the race detector) and
// dead-letters one in fifty. The log's front is
// pinned by the oldest of those from the start, yet once the broker is
// idle its disk use follows what is still held, not what was sent; every
// held message is intact, under its SequenceNumber, with its dead-letter
// reason, before and after a restart.
func TestCompactionFollowsWhatIsHeld(t *testing.T) {
	dir := t.TempDir()
	opts := compactOptions(dir)
	b := openBroker(t, opts)
	news, err := b.CreateTopic("news", DefaultTopicConfig())
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(news.CreateSubscription("fast", DefaultSubscriptionConfig(), nil))
	must(news.CreateSubscription("slow", DefaultSubscriptionConfig(), []RuleSpec{{Name: "red",
		Filter: FilterSpec{Kind: FilterSQL, SQL: "color = 'red'"}}}))
	fast, _ := news.SubscriptionQueue("fast")
	slow, _ := news.SubscriptionQueue("slow")

	const n, size, batch = 1_000_000 / raceScale, 1024, 4000 / raceScale
	ch := make(chan Delivery, batch) // Deliver must not block
	r, err := news.Attach(ReceiverOptions{Name: "fast", Queue: fast, Deliver: func(d Delivery) { ch <- d }})
	must(err)
	var wantSlow, wantDead []uint64
	for i := 0; i < n; i += batch {
		var msgs []projection.Message
		for j := i; j < i+batch; j++ {
			color := "blue"
			if j%100 == 7 {
				color = "red"
			}
			m := colored(fmt.Sprint(j), color)
			m.Body = body(j)
			msgs = append(msgs, m)
		}
		sendSync(t, news, msgs...)
		r.SetLimit(uint64(i + batch))
		settled := make(chan error, batch)
		for range batch {
			d := nextDelivery(t, ch)
			j, _ := strconv.Atoi(d.MessageID)
			if j%100 == 7 {
				wantSlow = append(wantSlow, d.Seq)
			}
			s := Settlement{Token: d.Token, Outcome: Complete}
			if j%50 == 3 {
				wantDead = append(wantDead, d.Seq)
				s = Settlement{Token: d.Token, Outcome: DeadLetter, Reason: "poison", Description: d.MessageID}
			}
			news.Settle(fast, s, func(err error) { settled <- err })
		}
		for range batch {
			must(<-settled)
		}
	}
	r.Detach(nil)
	sent := int64(n * size)
	held := int64(len(wantSlow)+len(wantDead)) * size
	// What is held, a few segments of log, and the archive's own copy
	// while the next one is written.
	limit := 4*held + 8*int64(max(opts.SegmentSize, 1<<20))
	// Once idle, the entity settles on one archive (a compaction under way
	// has written the next one and not yet removed the last).
	archives := func() []string {
		arcs, _ := filepath.Glob(filepath.Join(layout.ArchiveDir(news.dir), "*.wba"))
		return arcs
	}
	deadline := time.Now().Add(30 * time.Second)
	for news.Bytes() > limit || len(archives()) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("sent %d bytes, %d still held; the entity keeps %d bytes on disk (want at most %d), archives %v",
				sent, held, news.Bytes(), limit, archives())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("sent %d bytes in %d messages, %d still held: %d bytes on disk", sent, n, held, news.Bytes())

	check := func(b *Broker) {
		t.Helper()
		news, err := b.Entity("news")
		must(err)
		seqs := func(q uint32, want []uint64, dead bool) {
			t.Helper()
			var got []uint64
			for from := uint64(1); ; {
				ds, err := news.Peek(q, from, 1000, "")
				must(err)
				if len(ds) == 0 {
					break
				}
				for _, d := range ds {
					got = append(got, d.Seq)
					from = d.Seq + 1
					i, _ := strconv.Atoi(d.MessageID)
					if !slices.Equal(d.Message, body(i)) {
						t.Fatalf("message %d (%s) has another body", d.Seq, d.MessageID)
					}
					if dead && (len(d.Overlays) == 0 || d.Overlays[0].Reason != "poison" || d.Overlays[0].Description != d.MessageID) {
						t.Fatalf("dead-lettered message %d: overlays %+v", d.Seq, d.Overlays)
					}
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("queue %d holds %d messages, want %d", q, len(got), len(want))
			}
		}
		seqs(slow, wantSlow, false)
		seqs(event.SubqueueOf(fast, event.KindDeadLetter), wantDead, true)
	}
	check(b)
	must(b.Close())
	b = openBroker(t, compactOptions(dir))
	check(b)
	must(b.Close())

	// Once what was held is drained, the next compaction drops the archive
	// (a small one, worth rewriting at a smaller CompactBytes).
	opts.CompactBytes = 16 << 10
	b = openBroker(t, opts)
	defer b.Close()
	news, _ = b.Entity("news")
	drain := map[uint32]int{slow: len(wantSlow), event.SubqueueOf(fast, event.KindDeadLetter): len(wantDead)}
	for q, n := range drain {
		ch := make(chan Delivery, n)
		r, err := news.Attach(ReceiverOptions{Name: "drain", Queue: q, Deliver: func(d Delivery) { ch <- d }})
		must(err)
		r.SetLimit(uint64(n))
		settled := make(chan error, n)
		// Every held message is taken; a loaded machine may pause between
		// deliveries, so this waits for the count, not for a quiet second.
		for taken := range n {
			select {
			case d := <-ch:
				news.Settle(q, Settlement{Token: d.Token, Outcome: Complete}, func(err error) { settled <- err })
			case <-time.After(30 * time.Second):
				t.Fatalf("queue %d: %d of %d held messages delivered", q, taken, n)
			}
		}
		for range n {
			must(<-settled)
		}
		r.Detach(nil)
	}
	deadline = time.Now().Add(60 * time.Second)
	for {
		arcs, _ := filepath.Glob(filepath.Join(layout.ArchiveDir(news.dir), "*.wba"))
		if len(arcs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the archive of drained messages stays: %v", arcs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// body is message i's body: 1 KiB that does not compress.
func body(i int) []byte {
	b := make([]byte, 1024)
	var seed [32]byte
	seed[0], seed[1] = byte(i), byte(i>>8)
	rand.NewChaCha8(seed).Read(b)
	return b
}
