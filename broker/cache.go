package broker

import (
	"reflect"
	"slices"

	"github.com/walbus/walbus/log/event"
)

// bodyCache keeps recent records that hold messages or their overlays in
// memory, so the common case (a message delivered soon after it was sent)
// never reads the log, and records appended but not yet written can be read
// at all. Records not yet durable always stay; durable ones are trimmed
// when the cache is over its own limit or the broker's memory budget
// (budget.go) asks for it, and leave as soon as their message is gone.
//
// Records arrive in log order, so they are kept in that order in blocks of
// fixed capacity and found by binary search: adding one copies it once and
// allocates a block per cacheBlockLen records, where a map would hash,
// allocate and later rehash per record. A removed record leaves a gone slot
// (Type 0, which no record has) that keeps its Index for the search; the
// slots are compacted away once they outnumber the records held.
type bodyCache struct {
	limit   int64 // its own cap (Options.CacheBytes); 0: none
	used    int64
	blocks  []*cacheBlock // ascending indexes; new records go to the last
	slots   int           // slots from each block's head on, gone or not
	live    int           // records held
	spare   *cacheBlock   // an emptied block, reused for the next
	touched bool          // a record was added or looked up since the budget last looked
	keep    []uint64      // scratch for trim's records to keep
}

// cacheBlock holds records in ascending index order; recs[:head] are gone.
type cacheBlock struct {
	recs []event.Event
	head int
}

const cacheBlockLen = 256

// newBodyCache returns a cache capped at limit bytes; 0 or less: no cap
// of its own.
func newBodyCache(limit int64) *bodyCache { return &bodyCache{limit: max(limit, 0)} }

// entryOverhead is what a record costs beside its bytes: its slot.
var entryOverhead = int64(reflect.TypeFor[event.Event]().Size())

func cost(ev *event.Event) int64 { return int64(len(ev.Message)+len(ev.Props)) + entryOverhead }

func (c *bodyCache) get(index uint64) (event.Event, bool) {
	c.touched = true
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
	k, i := c.locate(index)
	if k == len(c.blocks) {
		return nil, 0, false
	}
	b := c.blocks[k]
	return b, i, i < len(b.recs) && b.recs[i].Index == index
}

// locate returns the first block whose last slot is not below index (k is
// len(c.blocks) if there is none) and the first slot from its head that is
// not below index.
func (c *bodyCache) locate(index uint64) (k, i int) {
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
		return lo, 0
	}
	b := c.blocks[lo]
	i, hi = b.head, len(b.recs)
	for i < hi {
		m := int(uint(i+hi) >> 1)
		if b.recs[m].Index < index {
			i = m + 1
		} else {
			hi = m
		}
	}
	return lo, i
}

// add keeps ev. Its byte slices must not be modified afterwards.
func (c *bodyCache) add(ev event.Event) {
	if ev.Type == 0 {
		return // not a record
	}
	c.used += cost(&ev)
	c.live++
	c.touched = true
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

// seek returns the place (block k, slot i) of the first record held at
// index or after it; k is len(c.blocks) if there is none.
func (c *bodyCache) seek(index uint64) (k, i int) {
	if k, i = c.locate(index); k == len(c.blocks) {
		return k, 0
	}
	return c.held(k, i)
}

// held returns the place of the first record held at block k, slot i or
// after it.
func (c *bodyCache) held(k, i int) (int, int) {
	for k < len(c.blocks) {
		b := c.blocks[k]
		for ; i < len(b.recs); i++ {
			if b.recs[i].Type != 0 {
				return k, i
			}
		}
		k++
		if k < len(c.blocks) {
			i = c.blocks[k].head
		}
	}
	return k, 0
}

// trim drops durable records until the cache holds at most target bytes,
// newest first: for a queue those are the furthest from delivery. The
// records in keep (ascending indexes: the entity's next deliveries) go
// last, the furthest first too. Records not yet durable stay.
func (c *bodyCache) trim(target int64, durable uint64, keep []uint64) {
	k, i := c.dropNewest(target, durable, keep)
	if c.used > target { // only records to keep are left
		k2, i2 := c.dropNewest(target, durable, nil)
		if k2 < k || k2 == k && i2 < i {
			k, i = k2, i2
		}
	}
	if k < len(c.blocks) {
		c.closeUp(k, i) // clears the slots of the records dropped
	}
	c.tidy()
}

// dropNewest drops durable records not in keep, newest first, until the
// cache holds at most target bytes. It returns the place of the last one
// dropped (block len(c.blocks) if none): closeUp from there must follow.
func (c *bodyCache) dropNewest(target int64, durable uint64, keep []uint64) (int, int) {
	k := len(keep) - 1
	lowBlock, lowSlot := len(c.blocks), 0
	for bi := len(c.blocks) - 1; bi >= 0 && c.used > target; bi-- {
		b := c.blocks[bi]
		for i := len(b.recs) - 1; i >= b.head && c.used > target; i-- {
			ev := &b.recs[i]
			if ev.Type == 0 || ev.Index > durable {
				continue
			}
			for k >= 0 && keep[k] > ev.Index {
				k--
			}
			if k >= 0 && keep[k] == ev.Index {
				continue
			}
			c.used -= cost(ev)
			c.live--
			ev.Type = 0 // gone; closeUp clears it
			lowBlock, lowSlot = bi, i
		}
	}
	return lowBlock, lowSlot
}

// closeUp moves the records held from block k, slot i on down over the gone
// slots among them, and drops the slots left free at the end: the records
// trimmed from the end of the cache, before those not yet durable, leave
// no gap for compact to copy the whole cache over.
func (c *bodyCache) closeUp(k, i int) {
	wk, wi := k, i // where the next record held goes
	for rk := k; rk < len(c.blocks); rk++ {
		b := c.blocks[rk]
		ri := b.head
		if rk == k {
			ri = i
		}
		for ; ri < len(b.recs); ri++ {
			if b.recs[ri].Type == 0 {
				continue
			}
			if wi == len(c.blocks[wk].recs) {
				wk, wi = wk+1, 0 // only the first block has a head
			}
			if wk != rk || wi != ri {
				c.blocks[wk].recs[wi] = b.recs[ri]
			}
			wi++
		}
	}
	// Everything from (wk, wi) on is free.
	for rk := len(c.blocks) - 1; rk >= wk; rk-- {
		b := c.blocks[rk]
		from := b.head
		if rk == wk {
			from = max(wi, b.head)
		}
		c.slots -= len(b.recs) - from
		clear(b.recs[from:])
		b.recs = b.recs[:from]
		if len(b.recs) > b.head {
			break
		}
		clear(b.recs)
		c.blocks[rk] = nil
		c.blocks = c.blocks[:rk]
		b.recs, b.head = b.recs[:0], 0
		c.spare = b
	}
}

// tidy drops the gone slots ahead of the oldest record held, and compacts
// the rest once they dominate.
func (c *bodyCache) tidy() {
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
			break
		}
		*ev = event.Event{}
		b.head++
		c.slots--
	}
	// Gone slots behind a record that stays (a deferred message, one not yet
	// durable, a next delivery) remain; compact once they dominate, or they
	// grow without bound.
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
