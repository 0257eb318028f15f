package index

// Dedup is the duplicate-detection window: the MessageIds accepted in the
// last Window nanoseconds. Entries arrive in time order (the broker clock is
// monotonic per log), so expiry is a FIFO.
type Dedup struct {
	seen  map[string]int64 // MessageId -> time it was last accepted
	order []dedupEntry     // FIFO of acceptances; an id may appear more than once
	head  int
}

type dedupEntry struct {
	id string
	at int64
}

func NewDedup() *Dedup { return &Dedup{seen: make(map[string]int64)} }

// Seen reports whether id was accepted at or after since.
func (d *Dedup) Seen(id string, since int64) bool {
	at, ok := d.seen[id]
	return ok && at >= since
}

// Add records that id was accepted at time at.
func (d *Dedup) Add(id string, at int64) {
	d.seen[id] = at
	d.order = append(d.order, dedupEntry{id, at})
}

// Expire forgets acceptances older than before.
func (d *Dedup) Expire(before int64) {
	for d.head < len(d.order) && d.order[d.head].at < before {
		e := d.order[d.head]
		if d.seen[e.id] == e.at {
			delete(d.seen, e.id)
		}
		d.order[d.head] = dedupEntry{}
		d.head++
	}
	// Reclaim the consumed prefix once it is most of the slice.
	if d.head > 1024 && d.head*2 > len(d.order) {
		d.order = append(d.order[:0:0], d.order[d.head:]...)
		d.head = 0
	}
}

func (d *Dedup) Len() int { return len(d.seen) }

// Entries calls fn for the live acceptances in time order, for snapshots.
func (d *Dedup) Entries(fn func(id string, at int64)) {
	for _, e := range d.order[d.head:] {
		if d.seen[e.id] == e.at {
			fn(e.id, e.at)
		}
	}
}
