package broker

import (
	"fmt"
	"testing"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

func TestPlanTrims(t *testing.T) {
	plan := func(goal int64, shares ...cacheShare) ([]int64, int64) {
		even := planTrims(shares, goal)
		var targets []int64
		var total int64
		for _, s := range shares {
			if s.target > s.bytes || s.target < 0 {
				t.Fatalf("target %d for %d bytes", s.target, s.bytes)
			}
			targets = append(targets, s.target)
			total += s.target
		}
		if total > goal {
			t.Fatalf("targets %v hold %d, over the goal %d", targets, total, goal)
		}
		return targets, even
	}
	// Under the goal: nothing to do.
	if got, _ := plan(100, cacheShare{bytes: 40, use: 1}, cacheShare{bytes: 50, use: 2}); got[0] != 40 || got[1] != 50 {
		t.Errorf("under the goal: %v", got)
	}
	// Alone: the whole goal.
	if got, _ := plan(100, cacheShare{bytes: 500, use: 1}); got[0] != 100 {
		t.Errorf("alone: %v", got)
	}
	// Least recently used first: the oldest loses what it has beyond its
	// even share, the newer ones keep all.
	got, even := plan(100, cacheShare{bytes: 45, use: 1}, cacheShare{bytes: 40, use: 2}, cacheShare{bytes: 25, use: 3})
	if even != 16 || got[0] != 35 || got[1] != 40 || got[2] != 25 {
		t.Errorf("LRU: %v, even share %d", got, even)
	}
	// Then down to its even share, and the next oldest goes on.
	got, _ = plan(100, cacheShare{bytes: 45, use: 1}, cacheShare{bytes: 40, use: 2}, cacheShare{bytes: 60, use: 3})
	if got[0] != 16 || got[1] != 24 || got[2] != 60 {
		t.Errorf("LRU, second round: %v", got)
	}
	// Fair: an entity holding less than its even share keeps it however
	// long ago it was used; a busy one cannot take it.
	got, even = plan(100, cacheShare{bytes: 10, use: 1}, cacheShare{bytes: 500, use: 2})
	if even != 40 || got[0] != 10 || got[1] != 90 {
		t.Errorf("small and old beside big and busy: %v, even share %d", got, even)
	}
	// Many alike: each keeps at least the even share.
	var many []cacheShare
	for i := range 10 {
		many = append(many, cacheShare{bytes: 30, use: uint64(i + 1)})
	}
	got, even = plan(100, many...)
	if even != 5 {
		t.Errorf("ten alike: even share %d", even)
	}
	for i, g := range got {
		if g < even {
			t.Errorf("ten alike: %v, entity %d under the even share", got, i)
		}
	}
	if got[9] != 30 || got[0] != 5 {
		t.Errorf("ten alike: %v, want the most recent whole and the oldest at the even share", got)
	}
}

// budgetBroker opens a broker with a memory budget and no cap per entity.
func budgetBroker(t *testing.T, budget int64) *Broker {
	t.Helper()
	b := openBroker(t, Options{Dir: t.TempDir(), MemoryBudget: budget, CacheBytes: -1})
	t.Cleanup(func() { b.Close() })
	return b
}

// fill sends n messages of size bytes to e, one at a time.
func fill(t *testing.T, e *Entity, n, size int) {
	t.Helper()
	for i := range n {
		sendSync(t, e, projection.Message{MessageID: fmt.Sprint(i), Body: make([]byte, size)})
	}
}

// settleBudget lets every entity trim after its last batch and the
// trimmer plan until the caches are within the budget.
func settleBudget(t *testing.T, b *Broker) {
	t.Helper()
	for _, e := range b.Entities() {
		call(e, func(*Entity) (any, error) { return nil, nil }) // a batch: settleDown follows
	}
	for range 100 {
		if b.trimCaches() == 0 {
			if s := b.CacheStats(); s.Bytes <= s.Budget {
				return
			}
		}
	}
	t.Fatalf("caches hold %d, over the budget of %d", b.CacheStats().Bytes, b.CacheStats().Budget)
}

// cached reports which of seqs e's cache holds, and its size.
func cached(t *testing.T, e *Entity, seqs ...uint64) ([]bool, int64) {
	t.Helper()
	type result struct {
		held []bool
		used int64
	}
	r, err := call(e, func(e *Entity) (result, error) {
		var r result
		for _, seq := range seqs {
			r.held = append(r.held, e.cache.find(seq) != nil)
		}
		r.used = e.cache.used
		return r, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return r.held, r.used
}

// firstSeq is the SequenceNumber of e's first available message.
func firstSeq(t *testing.T, e *Entity) uint64 {
	t.Helper()
	ds, err := e.Peek(event.MainQueue, 0, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		if d.State == Available {
			return d.Seq
		}
	}
	t.Fatalf("no message available among the first %d", len(ds))
	return 0
}

// Queues filled one after another: together they stay within the budget;
// the least recently filled gave up the most, the last keeps all it got,
// and every queue keeps its next delivery.
func TestMemoryBudgetLeastRecentlyUsedFirst(t *testing.T) {
	const budget, size, perQueue = 1 << 20, 8 << 10, 48 // 8 queues of about 400 KiB
	b := budgetBroker(t, budget)
	var queues []*Entity
	for i := range 8 {
		e, err := b.CreateQueue(fmt.Sprint("q", i), projection.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		for range perQueue {
			// A plan after each message: nothing goes over the budget, so
			// what each keeps is the plans' doing alone.
			fill(t, e, 1, size)
			settleBudget(t, b)
		}
		queues = append(queues, e)
	}
	if got := b.CacheStats().Bytes; got > budget {
		t.Fatalf("caches hold %d, over the budget %d", got, budget)
	}
	var sizes []int64
	var total int64
	for _, e := range queues {
		held, used := cached(t, e, firstSeq(t, e))
		if !held[0] {
			t.Errorf("%s: its next delivery is not cached", e.Name())
		}
		sizes = append(sizes, used)
		total += used
	}
	t.Logf("cached per queue: %v", sizes)
	if total != b.CacheStats().Bytes {
		t.Errorf("the queues hold %d, the total says %d", total, b.CacheStats().Bytes)
	}
	whole := perQueue * (size + entryOverhead)
	if last := sizes[len(sizes)-1]; last != whole {
		t.Errorf("the queue used last holds %d of its %d", last, whole)
	}
	for i := 1; i < len(sizes); i++ {
		if sizes[i-1] > sizes[i] {
			t.Errorf("%s holds more than %s, used after it", queues[i-1].Name(), queues[i].Name())
		}
	}
	if even := planGoal(budget) / 2 / int64(len(queues)); sizes[0] > even || sizes[0] < even-(size+entryOverhead) {
		t.Errorf("the queue used first holds %d, not its even share %d", sizes[0], even)
	}
}

// A queue that holds little keeps it while another floods the budget, even
// though it was used less recently: it is within its even share.
func TestMemoryBudgetFair(t *testing.T) {
	const budget, size = 1 << 20, 8 << 10
	b := budgetBroker(t, budget)
	small, _ := b.CreateQueue("small", projection.DefaultConfig())
	big, _ := b.CreateQueue("big", projection.DefaultConfig())
	fill(t, small, 8, size)
	_, before := cached(t, small)
	fill(t, big, 400, size) // three times the budget
	settleBudget(t, b)
	if _, after := cached(t, small); after != before {
		t.Errorf("the small queue held %d, now %d", before, after)
	}
	_, flood := cached(t, big)
	if total := b.CacheStats().Bytes; total > budget || flood < planGoal(budget)/2 {
		t.Errorf("the flooding queue holds %d, all %d, of a budget of %d", flood, total, budget)
	}
}

// A queue alone may use the whole budget (down to 7/8 of it after a plan),
// and keeps its next deliveries: the oldest records, not the newest.
func TestMemoryBudgetOneQueueTakesAll(t *testing.T) {
	const budget, size, n = 1 << 20, 8 << 10, 300 // more than twice the budget
	b := budgetBroker(t, budget)
	e, _ := b.CreateQueue("alone", projection.DefaultConfig())
	fill(t, e, n, size)
	settleBudget(t, b)
	first := firstSeq(t, e)
	held, used := cached(t, e, first, first+1, first+n/2)
	if used > budget || used < planGoal(budget)-(size+entryOverhead) {
		t.Errorf("alone, the queue holds %d of a budget of %d", used, budget)
	}
	if !held[0] || !held[1] {
		t.Errorf("its next deliveries are not cached: %v", held)
	}
	if held[2] {
		t.Errorf("a message from the middle of the backlog is cached, its head kept in its place")
	}
}

// Deferred messages at the head of a queue go before the messages it
// hands out next.
func TestMemoryBudgetNextDeliveriesLast(t *testing.T) {
	const size = 8 << 10
	b := budgetBroker(t, 1<<30)
	e, _ := b.CreateQueue("q", projection.DefaultConfig())
	fill(t, e, 64, size)
	deliveries := make(chan Delivery, 16)
	r, err := e.Attach(ReceiverOptions{Name: "r", Deliver: func(d Delivery) { deliveries <- d }})
	if err != nil {
		t.Fatal(err)
	}
	r.SetLimit(16)
	var deferred []uint64
	for range 16 {
		d := nextDelivery(t, deliveries)
		settleSync(t, e, d, Settlement{Outcome: projection.Defer})
		deferred = append(deferred, d.Seq)
	}
	r.Detach(nil)
	next := firstSeq(t, e)
	for _, seq := range deferred {
		if seq >= next {
			t.Fatalf("deferred %d, after the first available %d", seq, next)
		}
	}
	// Room for a quarter of the records: the next deliveries take it all;
	// the deferred ones go, and the newest.
	target := 16 * int64(size+entryOverhead)
	if _, err := call(e, func(e *Entity) (any, error) { e.trimTo(target); return nil, nil }); err != nil {
		t.Fatal(err)
	}
	held, used := cached(t, e, append([]uint64{next, next + 1, next + 15, next + 16}, deferred...)...)
	if used > target {
		t.Errorf("trimmed to %d, holds %d", target, used)
	}
	if !held[0] || !held[1] || !held[2] {
		t.Errorf("the next sixteen deliveries are not all cached: %v", held[:3])
	}
	if held[3] {
		t.Errorf("the seventeenth is cached too, over the target")
	}
	for i, h := range held[4:] {
		if h {
			t.Errorf("deferred message %d still cached", deferred[i])
		}
	}
	// With less room still, the next deliveries go too, the farthest first.
	if _, err := call(e, func(e *Entity) (any, error) { e.trimTo(target / 8); return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if held, _ := cached(t, e, next, next+7); !held[0] || held[1] {
		t.Errorf("trimmed to two records, the first next delivery cached: %v, the eighth: %v", held[0], held[1])
	}
}

// A deleted queue's cache leaves the total.
func TestMemoryBudgetDeletedEntity(t *testing.T) {
	b := budgetBroker(t, 1<<30)
	e, _ := b.CreateQueue("gone", projection.DefaultConfig())
	keep, _ := b.CreateQueue("kept", projection.DefaultConfig())
	fill(t, e, 10, 1000)
	fill(t, keep, 10, 1000)
	settleBudget(t, b)
	_, kept := cached(t, keep)
	if err := b.DeleteEntity("gone"); err != nil {
		t.Fatal(err)
	}
	if got := b.CacheStats().Bytes; got != kept {
		t.Errorf("after the delete the total is %d, the remaining queue holds %d", got, kept)
	}
}
