package transport

import (
	"sync"
	"syscall"
	"time"
)

// A Burst gathers the output that goroutines outside the connections (a
// queue's actor, its log's writer) produce for many links in one run of
// work, and writes it when the run ends. Inside an open burst, Link.Send and
// Link.Settle on links bound to it (Link.SetBurst) queue their frames
// without waking the connection's writer; Close then writes each touched
// connection's output itself, without blocking, handing only what the
// socket would not take to the writer. The frames of one run leave in one
// syscall per connection, and on the goroutine that already runs: no
// writer wake-up, no hand-off to another thread.
//
// Runs may be open on several goroutines at once. Each Close writes
// everything queued so far, so output never waits for a run other than
// the one it was made in (or one open at the same time) to end. A Burst
// with no run open changes nothing.
type Burst struct {
	mu    sync.Mutex
	depth int
	held  []*Conn
	spare []*Conn
}

// testHookBurstWrote, if set, runs after a burst's write, before the
// connection is locked again (tests).
var testHookBurstWrote func()

// NewBurst returns a closed burst.
func NewBurst() *Burst { return &Burst{} }

// Open begins a run of work.
func (b *Burst) Open() {
	b.mu.Lock()
	b.depth++
	b.mu.Unlock()
}

// Close ends a run and writes what the open runs have queued.
func (b *Burst) Close() {
	b.mu.Lock()
	b.depth--
	if len(b.held) == 0 {
		b.mu.Unlock()
		return
	}
	held := b.held
	b.held, b.spare = b.spare[:0], nil
	b.mu.Unlock()
	for i, c := range held {
		c.flushBurst()
		held[i] = nil
	}
	b.mu.Lock()
	if b.spare == nil {
		b.spare = held[:0]
	}
	b.mu.Unlock()
}

// hold registers c's deferred wake; false when no run is open, so the
// caller wakes the writer as usual. Called with c.mu held.
func (b *Burst) hold(c *Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.depth == 0 {
		return false
	}
	b.held = append(b.held, c)
	return true
}

// SetBurst binds the link to b (nil unbinds): output of its Send and
// Settle calls made while b is open waits for b's Close.
func (l *Link) SetBurst(b *Burst) {
	c := l.conn
	c.mu.Lock()
	l.burst = b
	c.mu.Unlock()
}

// flushBurst writes what a closed burst left queued: at once, with one
// non-blocking write, when no other write is under way; the writer takes
// the rest.
func (c *Conn) flushBurst() {
	c.mu.Lock()
	c.deliverWake(c.writeState.takeBurstWake(c.inlineReady()), testHookBurstWrote)
	c.mu.Unlock()
}

// inlineReady reports whether there is something to write inline and a
// raw socket to write it to without blocking. Called with mu held.
func (c *Conn) inlineReady() bool {
	return c.raw != nil && len(c.out) > 0
}

// deliverWake carries out a wake the write state released (releaseWriter,
// flushBurst). Called with mu held, which wakeInline releases meanwhile.
func (c *Conn) deliverWake(a wakeAction, wrote func()) {
	switch a {
	case wakeInline:
		c.writeInline(wrote)
	case wakeRoute:
		c.wakeWriter()
	}
}

// writeInline writes out on the calling goroutine with non-blocking
// writes; what the socket does not take goes to the writer. Called with mu
// held, the socket taken (wakeInline) and out not empty; mu is released
// meanwhile and held again on return. wrote, if not nil, runs after the
// write, before mu is taken again (tests).
func (c *Conn) writeInline(wrote func()) {
	buf := c.out
	c.out = c.inlineSpare[:0]
	c.inlineSpare = nil
	c.run.reset()
	c.mu.Unlock()

	n := c.tryWrite(buf)
	if wrote != nil {
		wrote()
	}

	c.mu.Lock()
	c.writeState.endWrite()
	if n > 0 {
		c.lastWrite = time.Now()
	}
	switch {
	case n < len(buf) && len(c.out) == 0:
		c.out = buf[n:]
	case n < len(buf):
		// The rest goes first, ahead of anything queued meanwhile.
		rest := make([]byte, 0, len(buf)-n+len(c.out))
		rest = append(append(rest, buf[n:]...), c.out...)
		c.out = rest
		c.run.reset()
	case cap(buf) <= maxIdleSpare:
		c.inlineSpare = buf[:0]
	}
	if len(c.out) <= outHighWater && c.writeState.drained() {
		c.outDrained.Broadcast()
	}
	if len(c.out) > 0 {
		c.wakeWriter()
	}
}

// tryWrite writes buf with non-blocking writes until the socket takes no
// more and returns how much it took; errors are left for the writer to
// find. It goes round the poller (Control, not RawConn.Write), so a write
// deadline the writer set for a write long finished does not refuse it;
// no two writers (the writer, a burst, the reader) write at once
// (writeState).
func (c *Conn) tryWrite(buf []byte) int {
	var n int
	_ = c.raw.Control(func(fd uintptr) {
		for n < len(buf) {
			m, err := syscall.Write(int(fd), buf[n:])
			if m <= 0 || err != nil {
				return
			}
			n += m
		}
	})
	return n
}
