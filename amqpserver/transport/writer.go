package transport

import (
	"runtime"
	"time"

	"github.com/walbus/walbus/amqpserver/frames"
)

// maxIdleSpare is the largest output buffer the writer keeps for reuse;
// a bigger one (after a huge message) is dropped to return the memory.
const maxIdleSpare = 4 << 20

// testHookWriterWoken, if set, runs each time a writer is woken (tests).
var testHookWriterWoken func()

// writeLoop is the connection's writer. Producers append whole frames to
// c.out under mu and wake it; it swaps the buffer out and writes everything
// queued with one call, so a burst of frames costs one syscall. A Burst's
// Close or the reader may write instead (writeInline), never at the same
// time (writeState).
func (c *Conn) writeLoop() {
	defer close(c.writerDone)
	var tick <-chan time.Time
	if c.heartbeat > 0 {
		// Checking at half the interval keeps every gap below the peer's
		// idle-time-out (§2.4.5).
		t := time.NewTicker(max(c.heartbeat/2, time.Millisecond))
		defer t.Stop()
		tick = t.C
	}
	spare := make([]byte, 0, initialReadBuffer)
	for {
		stopping := false
		select {
		case <-c.wake:
			if testHookWriterWoken != nil {
				testHookWriterWoken()
			}
		case now := <-tick:
			c.mu.Lock()
			if now.Sub(c.lastWrite) >= c.heartbeat && c.state == stateOpen && len(c.out) == 0 {
				c.out = frames.AppendEmptyFrame(c.out)
			}
			c.mu.Unlock()
		case <-c.stop:
			stopping = true
		}
		var ok bool
		if spare, ok = c.writeQueued(spare, stopping); !ok {
			return
		}
		if stopping {
			return
		}
	}
}

// writeQueued writes what out holds until it is empty, trading buffers
// with spare, and returns the spare; false once a write failed. From the
// end of one write to the look at out for the next, mu stays held. When
// stopping, it waits out an inline write and leaves the writer gone.
func (c *Conn) writeQueued(spare []byte, stopping bool) ([]byte, bool) {
	c.mu.Lock()
	for {
		if !c.writeState.beginWrite() {
			// A burst or the reader is writing; it wakes us if anything
			// is left.
			c.mu.Unlock()
			if !stopping {
				return spare, true
			}
			runtime.Gosched()
			c.mu.Lock()
			continue
		}
		buf := c.out
		c.out = spare[:0]
		c.run.reset()
		if c.writeState.drained() {
			c.outDrained.Broadcast()
		}
		if len(buf) == 0 {
			c.writeState.endWrite()
			if stopping {
				c.writeState.writerGone()
			}
			c.mu.Unlock()
			return buf, true
		}
		c.mu.Unlock()
		if c.cfg.WriteTimeout > 0 {
			_ = c.nc.SetWriteDeadline(time.Now().Add(c.cfg.WriteTimeout))
		}
		_, err := c.nc.Write(buf)
		c.mu.Lock()
		c.writeState.endWrite()
		c.lastWrite = time.Now()
		if err != nil {
			// Stop all output and wake the reader, which then ends the
			// connection.
			c.writeState.writerGone()
			c.out = nil
			c.outDrained.Broadcast()
			c.mu.Unlock()
			_ = c.nc.Close()
			return nil, false
		}
		spare = buf[:0]
		if cap(spare) > maxIdleSpare {
			spare = nil
		}
	}
}

// wakeWriter tells the writer that out has frames. While the reader is
// working through input it already has, the wake is held back until it
// is about to block (see releaseWriter): the frames that input causes
// then leave in one write instead of one each. Output made in a Burst's
// run waits for that run's Close instead. Called with mu held.
func (c *Conn) wakeWriter() {
	if !c.writeState.routeWake(c) {
		return
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// holdWriter marks the reader busy with buffered input.
func (c *Conn) holdWriter() {
	c.mu.Lock()
	c.writeState.startSpell()
	c.mu.Unlock()
}

// releaseWriter ends the reader's busy spell and sends the output it
// held back. Called with mu held, before the reader blocks on anything.
// The reader writes that output itself, without blocking, when no other
// write is under way and no burst is about to write it: waking the writer
// would cost a goroutine hand-off, usually to another thread, for each
// spell (BenchmarkFloorStream: 7-17% less server CPU per message). What
// the socket does not take goes to the writer, so a peer that does not
// read never blocks the reader.
func (c *Conn) releaseWriter() {
	c.deliverWake(c.writeState.endSpell(c.inlineReady()), nil)
}

// writable reports whether frames may still be queued: not after our
// close (§2.4.3) and not once the socket failed. Called with mu held.
func (c *Conn) writable() bool {
	return c.state == stateOpen && c.writeState.alive()
}

// appendFrame queues one performative. Hot paths use the typed helpers
// below instead, which keep the performative off the heap.
func (c *Conn) appendFrame(channel uint16, p frames.Performative) {
	if !c.writeState.alive() {
		return
	}
	c.out = frames.AppendFrame(c.out, frames.TypeAMQP, channel, p, nil)
	c.wakeWriter()
}

// appendClose queues close; the last frame ever written (§2.4.3).
func (c *Conn) appendClose(err *frames.Error) {
	c.appendFrame(0, &frames.Close{Error: err})
}

func (c *Conn) appendFlow(channel uint16, fl *frames.Flow) {
	if !c.writable() {
		return
	}
	var start int
	c.out, start = frames.BeginFrame(c.out, frames.TypeAMQP, channel)
	c.out = fl.AppendTo(c.out)
	c.out = frames.EndFrame(c.out, start)
	c.wakeWriter()
}

// dispositionRun remembers the disposition at the end of out so that the
// next one for the adjacent delivery-id with the same plain outcome can
// widen its range instead of adding a frame (§2.7.6: first..last).
type dispositionRun struct {
	start, end  int // bytes of the frame in out; end < 0 when there is none
	channel     uint16
	role        frames.Role
	settled     bool
	code        uint64
	first, last uint32
}

func (r *dispositionRun) reset() { r.end = -1 }

// plainStateCode reports states without fields, which can share a range.
func plainStateCode(s frames.DeliveryState) (uint64, bool) {
	switch s.(type) {
	case nil:
		return 0, true
	case *frames.Accepted:
		return frames.CodeAccepted, true
	case *frames.Released:
		return frames.CodeReleased, true
	}
	return 0, false
}

// appendDisposition queues disposition(role, id, settled, state), merging
// it into the previous frame when that covers the adjacent id.
func (c *Conn) appendDisposition(channel uint16, role frames.Role, id uint32, settled bool, state frames.DeliveryState) {
	if !c.writable() {
		return
	}
	code, plain := plainStateCode(state)
	r := &c.run
	if plain && r.end == len(c.out) && r.channel == channel && r.role == role &&
		r.settled == settled && r.code == code && (r.last+1 == id || r.first-1 == id) {
		c.out = c.out[:r.start]
		if r.last+1 == id {
			r.last = id
		} else {
			r.first = id
		}
	} else {
		*r = dispositionRun{start: len(c.out), end: -1, channel: channel, role: role, settled: settled, code: code, first: id, last: id}
	}
	d := frames.Disposition{Role: role, First: r.first, Settled: settled, State: state}
	if r.last != r.first {
		d.Last = frames.Some(r.last)
	}
	var start int
	c.out, start = frames.BeginFrame(c.out, frames.TypeAMQP, channel)
	c.out = d.AppendTo(c.out)
	c.out = frames.EndFrame(c.out, start)
	if plain {
		r.end = len(c.out)
	}
	c.wakeWriter()
}
