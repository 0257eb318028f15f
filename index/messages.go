// Package index holds walbus's in-memory lookups: per-message metadata with
// its log position, lock records, timer queues, the duplicate-detection
// window and the session table. They are plain data structures; the rules
// that change them live in package projection.
package index

import (
	"slices"

	"github.com/walbus/walbus/log/event"
)

// State is where a message stands in its queue.
type State uint8

const (
	Available State = iota + 1
	Locked
	Deferred
	Scheduled
)

func (s State) String() string {
	switch s {
	case Available:
		return "available"
	case Locked:
		return "locked"
	case Deferred:
		return "deferred"
	case Scheduled:
		return "scheduled"
	}
	return "invalid"
}

// Message flags.
const (
	// FlagDeferred marks a locked message that was deferred before it was
	// received by sequence number: when its lock ends it is deferred again.
	FlagDeferred uint8 = 1 << iota
	// FlagHeld marks a scheduled message of a transaction that has not
	// committed: it does not activate (event.ScheduledHeld).
	FlagHeld
)

// Meta is what the broker keeps in memory per message, 16 bytes. Everything
// else (body, ids, times) is in the message's log record, read by Pos.
type Meta struct {
	Pos        event.Position // where the record at the message's SequenceNumber is
	Session    uint32         // session number in the Sessions table, 0 for none
	Deliveries uint16         // failed delivery attempts so far (saturates)
	State      State
	Flags      uint8
}

// AddDelivery counts one more failed delivery attempt.
func (m *Meta) AddDelivery() {
	if m.Deliveries < ^uint16(0) {
		m.Deliveries++
	}
}

// Messages maps SequenceNumber to Meta for one queue. It is built for how a
// queue uses its numbers: they arrive in increasing order, lookups cluster
// around the head and the tail of the backlog, and snapshots walk them in
// order. A hash map of a million entries pays a cache miss per operation;
// here a message lives in the chunk of its number's high bits, with the
// chunk's messages sorted by low bits in two parallel slices (18 bytes a
// message): appends are O(1), lookups a binary search in a few KB, and walks
// sequential. Deletions leave tombstones (State 0) until half a chunk is
// dead.
type Messages struct {
	chunks  map[uint64]*chunk
	n       int
	hot     *chunk // the chunk of the last access
	hotHigh uint64
}

const chunkBits = 12

type chunk struct {
	lows  []uint16
	metas []Meta
	dead  int // tombstones
}

func NewMessages() *Messages { return &Messages{chunks: make(map[uint64]*chunk)} }

func (ms *Messages) chunk(high uint64) *chunk {
	if ms.hot != nil && ms.hotHigh == high {
		return ms.hot
	}
	c := ms.chunks[high]
	if c != nil {
		ms.hot, ms.hotHigh = c, high
	}
	return c
}

// search returns the position of low in c, or where it would go.
func (c *chunk) search(low uint16) int {
	lo, hi := 0, len(c.lows)
	if hi > 0 && c.lows[hi-1] < low {
		return hi // the common case: a new, highest number
	}
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if c.lows[mid] < low {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

func (ms *Messages) Get(seq uint64) (Meta, bool) {
	c := ms.chunk(seq >> chunkBits)
	if c == nil {
		return Meta{}, false
	}
	low := uint16(seq)
	i := c.search(low)
	if i < len(c.lows) && c.lows[i] == low && c.metas[i].State != 0 {
		return c.metas[i], true
	}
	return Meta{}, false
}

// Put inserts or replaces the Meta of seq. m.State must not be 0.
func (ms *Messages) Put(seq uint64, m Meta) {
	high, low := seq>>chunkBits, uint16(seq)
	c := ms.chunk(high)
	if c == nil {
		c = &chunk{}
		ms.chunks[high] = c
		ms.hot, ms.hotHigh = c, high
	}
	i := c.search(low)
	if i < len(c.lows) && c.lows[i] == low {
		if c.metas[i].State == 0 {
			c.dead--
			ms.n++
		}
		c.metas[i] = m
		return
	}
	c.lows = slices.Insert(c.lows, i, low)
	c.metas = slices.Insert(c.metas, i, m)
	ms.n++
}

func (ms *Messages) Delete(seq uint64) {
	high, low := seq>>chunkBits, uint16(seq)
	c := ms.chunk(high)
	if c == nil {
		return
	}
	i := c.search(low)
	if i >= len(c.lows) || c.lows[i] != low || c.metas[i].State == 0 {
		return
	}
	c.metas[i].State = 0
	c.dead++
	ms.n--
	switch {
	case c.dead == len(c.lows):
		delete(ms.chunks, high)
		if ms.hot == c {
			ms.hot = nil
		}
	case c.dead*2 > len(c.lows):
		c.compact()
	}
}

// compact drops a chunk's tombstones, shrinking its slices.
func (c *chunk) compact() {
	live := len(c.lows) - c.dead
	lows, metas := make([]uint16, 0, live), make([]Meta, 0, live)
	for i, m := range c.metas {
		if m.State != 0 {
			lows, metas = append(lows, c.lows[i]), append(metas, m)
		}
	}
	c.lows, c.metas, c.dead = lows, metas, 0
}

func (ms *Messages) Len() int { return ms.n }

// Range calls fn for every message in SequenceNumber order until fn returns
// false. fn must not change the table.
func (ms *Messages) Range(fn func(seq uint64, m Meta) bool) {
	highs := make([]uint64, 0, len(ms.chunks))
	for h := range ms.chunks {
		highs = append(highs, h)
	}
	slices.Sort(highs)
	for _, h := range highs {
		c := ms.chunks[h]
		for i, m := range c.metas {
			if m.State != 0 && !fn(h<<chunkBits|uint64(c.lows[i]), m) {
				return
			}
		}
	}
}
