package broker

import (
	"reflect"

	"github.com/walbus/walbus/log"
)

// bodyCache keeps recent records that hold messages or their overlays in
// memory, so the common case (a message delivered soon after it was sent)
// never reads the log, and records appended but not yet written can be read
// at all. Records not yet durable always stay; durable ones are evicted,
// oldest first, once the cache is over its byte budget, and leave as soon
// as their message is gone.
type bodyCache struct {
	budget int64
	used   int64
	recs   map[uint64]log.Event
	order  []uint64 // indexes in append order; removed ones are skipped
	head   int
}

func newBodyCache(budget int64) *bodyCache {
	return &bodyCache{budget: budget, recs: make(map[uint64]log.Event)}
}

// entryOverhead is what an entry costs beside its bytes: the event itself,
// its map slot and its place in order.
var entryOverhead = int64(reflect.TypeFor[log.Event]().Size()) + 32

func cost(ev *log.Event) int64 { return int64(len(ev.Message)+len(ev.Props)) + entryOverhead }

func (c *bodyCache) get(index uint64) (log.Event, bool) {
	ev, ok := c.recs[index]
	return ev, ok
}

// add keeps ev. Its byte slices must not be modified afterwards.
func (c *bodyCache) add(ev log.Event) {
	c.recs[ev.Index] = ev
	c.order = append(c.order, ev.Index)
	c.used += cost(&ev)
}

func (c *bodyCache) remove(index uint64) {
	if ev, ok := c.recs[index]; ok {
		c.used -= cost(&ev)
		delete(c.recs, index)
	}
}

// evict drops the oldest durable records while over budget.
func (c *bodyCache) evict(durable uint64) {
	for c.used > c.budget && c.head < len(c.order) && c.order[c.head] <= durable {
		c.remove(c.order[c.head])
		c.head++
	}
	// Removed records leave recs but not order; rebuild order once they
	// dominate it, or it grows without bound under steady traffic.
	if live := len(c.order) - c.head; live > 2*len(c.recs)+1024 {
		kept := make([]uint64, 0, len(c.recs))
		for _, index := range c.order[c.head:] {
			if _, ok := c.recs[index]; ok {
				kept = append(kept, index)
			}
		}
		c.order, c.head = kept, 0
	}
}
