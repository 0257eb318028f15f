package index

// Timer is one entry of a timer queue: at a time (unix ns), something about
// Key (a SequenceNumber or a session number) is due.
type Timer struct {
	At  int64
	Key uint64
}

func (a Timer) before(b Timer) bool {
	return a.At < b.At || a.At == b.At && a.Key < b.Key
}

// Timers is a min-heap of timers ordered by (At, Key), with lazy deletion:
// an entry whose subject changed (a renewed lock, a completed message) stays
// in the heap and its owner treats it as stale. Owners drop stale entries as
// they reach the top (DropStale) and rebuild the heap when garbage dominates.
type Timers struct {
	h []Timer
}

func (t *Timers) Len() int { return len(t.h) }

func (t *Timers) Push(at int64, key uint64) {
	t.h = append(t.h, Timer{at, key})
	t.up(len(t.h) - 1)
}

// Top returns the earliest entry.
func (t *Timers) Top() (Timer, bool) {
	if len(t.h) == 0 {
		return Timer{}, false
	}
	return t.h[0], true
}

// DropStale pops entries from the top while live says they are stale.
func (t *Timers) DropStale(live func(Timer) bool) {
	for len(t.h) > 0 && !live(t.h[0]) {
		t.pop()
	}
}

// Due calls fn for every entry with At <= now, in no particular order,
// without changing the heap (it walks only the due part of the tree).
func (t *Timers) Due(now int64, fn func(Timer)) {
	var walk func(i int)
	walk = func(i int) {
		if i >= len(t.h) || t.h[i].At > now {
			return
		}
		fn(t.h[i])
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
}

// Earliest returns the earliest entry for which live is true, walking only
// as deep as needed: every entry above it in the heap is due no later.
func (t *Timers) Earliest(live func(Timer) bool) (Timer, bool) {
	best, found := Timer{}, false
	var walk func(i int)
	walk = func(i int) {
		if i >= len(t.h) || found && !t.h[i].before(best) {
			return
		}
		if live(t.h[i]) {
			best, found = t.h[i], true
			return // children are no earlier
		}
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
	return best, found
}

// Compact rebuilds the heap from its live entries when stale ones outnumber
// them, keeping memory proportional to what is pending.
func (t *Timers) Compact(live func(Timer) bool, liveCount int) {
	if len(t.h) <= 2*liveCount+1024 {
		return
	}
	kept := t.h[:0]
	for _, e := range t.h {
		if live(e) {
			kept = append(kept, e)
		}
	}
	clear(t.h[len(kept):])
	t.h = kept
	for i := len(t.h)/2 - 1; i >= 0; i-- {
		t.down(i)
	}
}

// All returns the live entries, for snapshots.
func (t *Timers) All(live func(Timer) bool) []Timer {
	var out []Timer
	for _, e := range t.h {
		if live(e) {
			out = append(out, e)
		}
	}
	return out
}

func (t *Timers) pop() Timer {
	top := t.h[0]
	last := len(t.h) - 1
	t.h[0] = t.h[last]
	t.h = t.h[:last]
	if last > 0 {
		t.down(0)
	}
	return top
}

func (t *Timers) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.h[i].before(t.h[p]) {
			return
		}
		t.h[i], t.h[p] = t.h[p], t.h[i]
		i = p
	}
}

func (t *Timers) down(i int) {
	n := len(t.h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && t.h[r].before(t.h[l]) {
			m = r
		}
		if !t.h[m].before(t.h[i]) {
			return
		}
		t.h[i], t.h[m] = t.h[m], t.h[i]
		i = m
	}
}
