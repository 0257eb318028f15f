package broker

import (
	"cmp"
	"slices"
	"sync/atomic"
	"time"

	"github.com/walbus/walbus/projection"
)

// The memory budget: the body caches of all entities together hold at most
// Options.MemoryBudget bytes (docs/operations.md#memory). Each cache is
// owned by its entity's actor, so no goroutine trims another's: each actor
// adds its cache's size to a broker-wide total after every batch, and one
// trimmer goroutine, woken when the total passes the budget, plans who
// keeps what and posts each entity a target to trim itself to.
//
// The plan brings the total down to 7/8 of the budget, so that trims come
// in rounds rather than after every batch. Half of that is shared evenly:
// every entity keeps up to an even share (one holding less leaves the rest
// to the others). The other half goes to the entities beyond their even
// share that were used most recently, so the least recently used lose
// their bodies first, a busy entity cannot push a quiet one below its even
// share, and an entity alone may use the whole budget. Inside an entity,
// its next deliveries are the last records to go (Entity.trimTo).
type memoryBudget struct {
	limit int64        // Options.MemoryBudget; 0: no budget
	used  atomic.Int64 // what the caches hold, as each last reported
	// even is the even share of the last plan (the limit before the
	// first): an entity that finds the total over the limit trims itself at
	// once, down to it at most, while the trimmer works out the rest.
	even  atomic.Int64
	clock atomic.Uint64 // use stamps: the entity used last holds the largest
	kick  chan struct{} // the total went over the limit; one buffered
}

// cacheAccount is an entity's part in the budget, read by the trimmer.
// Only the entity's actor writes it.
type cacheAccount struct {
	bytes atomic.Int64  // the cache's size as last added to the total
	use   atomic.Uint64 // the budget's clock when the cache was last used
}

// planGoal is what a plan leaves the caches: 7/8 of the budget.
func planGoal(limit int64) int64 { return limit - limit/8 }

// trimRetry is how long the trimmer waits after a plan that left the total
// over the budget (records not yet durable cannot go) before the next.
const trimRetry = 10 * time.Millisecond

// CacheStats is what the entities' body caches hold together, and the
// budget they share (0: none).
type CacheStats struct {
	Bytes, Budget int64
}

// CacheStats reports the caches' size; it is read from a counter each
// entity updates after every batch.
func (b *Broker) CacheStats() CacheStats {
	return CacheStats{Bytes: b.mem.used.Load(), Budget: b.mem.limit}
}

// initBudget sets up the budget, before any entity opens.
func (b *Broker) initBudget() {
	b.mem.limit = max(b.opts.MemoryBudget, 0)
	if b.mem.limit > 0 {
		b.mem.even.Store(b.mem.limit)
		b.mem.kick = make(chan struct{}, 1)
	}
}

// runTrimmer trims the caches each time the total passes the budget, until
// the broker closes.
func (b *Broker) runTrimmer() {
	if b.mem.kick == nil {
		return
	}
	for {
		select {
		case <-b.quit:
			return
		case <-b.mem.kick:
		}
		if b.trimCaches() == 0 && b.mem.used.Load() > b.mem.limit {
			// Nobody could trim: what is over is not durable yet.
			select {
			case <-b.quit:
				return
			case <-time.After(trimRetry):
			}
		}
	}
}

// trimCaches plans what each entity keeps, when the total is over the
// plans' goal, and waits until the entities asked to trim have done so. It
// returns how many it asked. (The entity that went over the budget may
// have trimmed itself back under it already: the plan gives it room.)
func (b *Broker) trimCaches() int {
	m := &b.mem
	if m.used.Load() <= planGoal(m.limit) {
		return 0
	}
	var ents []*Entity
	var shares []cacheShare
	b.mu.RLock()
	for _, e := range b.entities {
		if n := e.mem.bytes.Load(); n > 0 {
			ents = append(ents, e)
			shares = append(shares, cacheShare{bytes: n, use: e.mem.use.Load()})
		}
	}
	b.mu.RUnlock()
	m.even.Store(planTrims(shares, planGoal(m.limit)))
	var waits []func()
	for i, e := range ents {
		target := shares[i].target
		if target >= shares[i].bytes {
			continue
		}
		done := make(chan struct{})
		if e.post(func(e *Entity) {
			defer close(done)
			e.trimTo(target)
			e.publishCache()
		}) == nil {
			waits = append(waits, func() {
				select {
				case <-done:
				case <-e.done: // closed before it got to the request
				}
			})
		}
	}
	for _, wait := range waits {
		wait()
	}
	return len(waits)
}

// cacheShare is one entity's part in a trim plan.
type cacheShare struct {
	bytes  int64  // what its cache holds
	use    uint64 // its last use; larger is more recent
	target int64  // what the plan leaves it
}

// planTrims sets the targets of shares so that together they hold at most
// goal bytes, and returns the even share: half of goal is shared evenly
// (an entity holding less than an even share keeps all it holds, and the
// rest of its share goes to the others), the other half goes to what
// entities hold beyond their even share, the most recently used first.
func planTrims(shares []cacheShare, goal int64) (even int64) {
	var total int64
	for i := range shares {
		shares[i].target = shares[i].bytes
		total += shares[i].bytes
	}
	if total <= goal {
		return goal
	}
	order := make([]int, len(shares))
	for i := range order {
		order[i] = i
	}
	// The even share: the level half the goal reaches poured over the
	// entities, smallest first. total > goal, so it stops inside.
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(shares[a].bytes, shares[b].bytes) })
	left := goal / 2
	for k, i := range order {
		n := int64(len(order) - k)
		if shares[i].bytes*n >= left {
			even = left / n
			break
		}
		left -= shares[i].bytes
	}
	spare := goal
	for i := range shares {
		shares[i].target = min(shares[i].bytes, even)
		spare -= shares[i].target
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(shares[b].use, shares[a].use) })
	for _, i := range order {
		if spare == 0 {
			break
		}
		extra := min(shares[i].bytes-shares[i].target, spare)
		shares[i].target += extra
		spare -= extra
	}
	return even
}

// trimCache runs on the actor after every batch: it keeps the cache within
// its own limit, adds its size to the budget's total, and when the total is
// over the budget trims itself down to the even share at most and wakes the
// trimmer.
func (e *Entity) trimCache() {
	c := e.cache
	if c.limit > 0 && c.used > c.limit {
		// In rounds, not after every batch: a trim walks the records kept.
		e.trimTo(c.limit / 2)
	}
	c.tidy()
	e.publishCache()
	m := &e.b.mem
	if m.limit == 0 {
		return
	}
	if over := m.used.Load() - m.limit; over > 0 {
		if even := m.even.Load(); c.used > even {
			e.trimTo(max(c.used-over, even))
			e.publishCache()
		}
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
}

// publishCache adds the change in the cache's size to the budget's total
// and stamps its use.
func (e *Entity) publishCache() {
	c, m := e.cache, &e.b.mem
	if c.touched {
		c.touched = false
		// A new stamp only when another entity was used since: an entity
		// busy on its own costs no write to the shared clock.
		if now := m.clock.Load(); e.mem.use.Load() != now || now == 0 {
			e.mem.use.Store(m.clock.Add(1))
		}
	}
	if d := c.used - e.mem.bytes.Load(); d != 0 {
		m.used.Add(d)
		e.mem.bytes.Store(c.used)
	}
}

// releaseCache takes the cache out of the budget's total as the actor
// stops.
func (e *Entity) releaseCache() {
	e.b.mem.used.Add(-e.mem.bytes.Swap(0))
}

// trimTo trims the cache to target bytes, keeping for last the records
// its queues hand out next. (A cache over its target holds more than its
// queues' consumers take before newer records are needed: the newest are
// the furthest from delivery.)
func (e *Entity) trimTo(target int64) {
	if e.cache.used > target {
		e.cache.keep = e.nextDeliveries(e.cache.keep[:0], target)
		e.cache.trim(target, e.durable, e.cache.keep)
	}
}

// nextDeliveries appends to keep, in index order, the cached records of
// the messages the entity's queues (and a topic's subscriptions) hand out
// next, up to bytes in all, shared evenly by the queues that have messages
// available.
func (e *Entity) nextDeliveries(keep []uint64, bytes int64) []uint64 {
	var queues []*projection.Queue
	for _, no := range e.st.QueueNumbers() {
		if q := e.st.Queue(no); q != nil && q.Counts().Available > 0 {
			queues = append(queues, q)
		}
	}
	if len(queues) == 0 || bytes <= 0 {
		return keep
	}
	c := e.cache
	share := bytes / int64(len(queues))
	for _, q := range queues {
		var got int64
		k, i := -1, 0 // the cache's place after the last record kept
		q.WalkAvailable(func(seq uint64) (uint64, bool) {
			// Next deliveries are mostly a run of records: the first record
			// after the last one kept is often the one wanted, or past it.
			if k < 0 || k < len(c.blocks) && c.blocks[k].recs[i].Index < seq {
				k, i = c.seek(seq)
			}
			if k == len(c.blocks) {
				return 0, false // nothing cached from here on
			}
			ev := &c.blocks[k].recs[i]
			if ev.Index != seq {
				return ev.Index, true // not cached: skip to what is
			}
			keep = append(keep, seq)
			got += cost(ev)
			k, i = c.held(k, i+1)
			return seq + 1, got < share
		})
	}
	if len(queues) > 1 {
		slices.Sort(keep)
		keep = slices.Compact(keep) // a topic's message is in many subscriptions
	}
	return keep
}
