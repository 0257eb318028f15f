package broker

import (
	"reflect"
	"slices"

	"github.com/walbus/walbus/log/event"
)

// bodyCache keeps recent records that hold messages or their overlays in
// memory, so the common case (a message delivered soon after it was sent)
// never reads the log, and records appended but not yet written can be read
// at all. Records not yet durable always stay; durable ones are evicted,
// oldest first, once the cache is over its byte budget, and leave as soon
// as their message is gone.
//
// Records arrive in log order, so they are kept in that order in blocks of
// fixed capacity and found by binary search: adding one copies it once and
// allocates a block per cacheBlockLen records, where a map would hash,
// allocate and later rehash per record. A removed record leaves a gone slot
// (Type 0, which no record has) that keeps its Index for the search; the
// slots are compacted away once they outnumber the records held.
type bodyCache struct {
	budget int64
	used   int64
	blocks []*cacheBlock // ascending indexes; new records go to the last
	slots  int           // slots from each block's head on, gone or not
	live   int           // records held
	spare  *cacheBlock   // an emptied block, reused for the next
}

// cacheBlock holds records in ascending index order; recs[:head] are gone.
type cacheBlock struct {
	recs []event.Event
	head int
}

const cacheBlockLen = 256

func newBodyCache(budget int64) *bodyCache { return &bodyCache{budget: budget} }

// entryOverhead is what a record costs beside its bytes: its slot.
var entryOverhead = int64(reflect.TypeFor[event.Event]().Size())

func cost(ev *event.Event) int64 { return int64(len(ev.Message)+len(ev.Props)) + entryOverhead }

func (c *bodyCache) get(index uint64) (event.Event, bool) {
	if ev := c.find(index); ev != nil {
		return *ev, true
	}
	return event.Event{}, false
}

// find returns the slot holding the record at index, or nil.
func (c *bodyCache) find(index uint64) *event.Event {
	b, i, ok := c.search(index)
	if !ok || b.recs[i].Type == 0 {
		return nil
	}
	return &b.recs[i]
}

// search finds where index is or would go: the first block whose last
// slot is not below it, and the position in that block.
func (c *bodyCache) search(index uint64) (*cacheBlock, int, bool) {
	lo, hi := 0, len(c.blocks)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if b := c.blocks[m]; b.recs[len(b.recs)-1].Index < index {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(c.blocks) {
		return nil, 0, false
	}
	b := c.blocks[lo]
	lo, hi = b.head, len(b.recs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if b.recs[m].Index < index {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return b, lo, lo < len(b.recs) && b.recs[lo].Index == index
}

// add keeps ev. Its byte slices must not be modified afterwards.
func (c *bodyCache) add(ev event.Event) {
	if ev.Type == 0 {
		return // not a record
	}
	c.used += cost(&ev)
	c.live++
	if n := len(c.blocks); n > 0 {
		last := c.blocks[n-1]
		if len(last.recs) > 0 && last.recs[len(last.recs)-1].Index >= ev.Index {
			c.insert(ev)
			return
		}
		if len(last.recs) < cap(last.recs) {
			last.recs = append(last.recs, ev)
			c.slots++
			return
		}
	}
	b := c.spare
	if b == nil {
		b = &cacheBlock{recs: make([]event.Event, 0, cacheBlockLen)}
	}
	c.spare = nil
	b.recs = append(b.recs, ev)
	c.blocks = append(c.blocks, b)
	c.slots++
}

// insert places a record that arrived out of index order, which the log
// never does; kept correct rather than fast.
func (c *bodyCache) insert(ev event.Event) {
	b, i, found := c.search(ev.Index)
	if b == nil {
		b = c.blocks[len(c.blocks)-1]
		i = len(b.recs)
	}
	if found {
		if old := &b.recs[i]; old.Type != 0 {
			c.used -= cost(old)
			c.live--
		}
		b.recs[i] = ev
		return
	}
	b.recs = slices.Insert(b.recs, i, ev)
	c.slots++
}

func (c *bodyCache) remove(index uint64) {
	if ev := c.find(index); ev != nil {
		c.used -= cost(ev)
		c.live--
		*ev = event.Event{Index: index}
	}
}

// evict drops the oldest durable records while over budget, and the gone
// slots ahead of the oldest record held.
func (c *bodyCache) evict(durable uint64) {
	for len(c.blocks) > 0 {
		b := c.blocks[0]
		if b.head == len(b.recs) {
			if len(c.blocks) == 1 && len(b.recs) < cap(b.recs) {
				break // still taking records
			}
			c.blocks[0] = nil
			c.blocks = c.blocks[1:]
			b.recs, b.head = b.recs[:0], 0
			c.spare = b
			continue
		}
		ev := &b.recs[b.head]
		if ev.Type != 0 {
			if c.used <= c.budget || ev.Index > durable {
				break
			}
			c.used -= cost(ev)
			c.live--
		}
		*ev = event.Event{}
		b.head++
		c.slots--
	}
	// Gone slots behind a record that stays (a deferred message, one not yet
	// durable) remain; compact once they dominate, or they grow without bound.
	if c.slots > 2*c.live+2*cacheBlockLen {
		c.compact()
	}
}

// compact copies the records held into fresh, full blocks.
func (c *bodyCache) compact() {
	old := c.blocks
	c.blocks, c.slots = nil, 0
	var last *cacheBlock
	for _, b := range old {
		for _, ev := range b.recs[b.head:] {
			if ev.Type == 0 {
				continue
			}
			if last == nil || len(last.recs) == cap(last.recs) {
				last = &cacheBlock{recs: make([]event.Event, 0, cacheBlockLen)}
				c.blocks = append(c.blocks, last)
			}
			last.recs = append(last.recs, ev)
			c.slots++
		}
	}
}
