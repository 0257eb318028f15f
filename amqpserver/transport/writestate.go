package transport

import "errors"

// writeState decides which goroutine writes a connection's output to its
// socket, and when the writer is woken. Three goroutines may write:
//
//   - the writer (writeLoop), woken through Conn.wake: it writes
//     everything queued, with blocking writes;
//   - a goroutine closing a Burst (flushBurst), which writes the output
//     of its run itself;
//   - the reader (releaseWriter), which writes the output its spell of
//     buffered input caused before it blocks.
//
// The last two write inline: with non-blocking writes, handing what the
// socket does not take to the writer.
//
// It is a state machine without IO: its methods decide, the Conn signals
// the writer, writes and broadcasts outDrained. Every method is called
// with Conn.mu held, and only this file assigns its fields (see
// TestWriteStateFieldsOwned). It holds these invariants, which check
// verifies:
//
//  1. At most one socket write is under way (writing): beginWrite and
//     takeBurstWake or endSpell's inline answer take the socket only from
//     nobody, and endWrite gives it back.
//  2. Nothing is written after the writer is gone (writerDead, after a
//     failed write or once it exits): inline writes are refused, as no
//     writer would take what the socket leaves, and Conn queues nothing
//     more.
//  3. A wake deferred to the reader's spell (wakeHeld) has a spell on to
//     deliver it (readerBusy), and its end delivers it exactly once,
//     however many wakes were deferred; inline writes wait for that end.
//  4. A wake deferred to a burst (burstWake) is registered with the burst
//     once, and the Close that takes it (takeBurstWake) delivers it
//     exactly once.
//  5. The reader sleeps on outDrained (outWaiting) only outside a spell,
//     with no wake held back and the writer alive: it never waits for
//     output that only it or a dead writer could send.
type writeState struct {
	writing    bool   // a socket write is under way (writer, burst or reader)
	writerDead bool   // the writer is gone: nothing more is written
	readerBusy bool   // the reader has buffered input to go through (a spell)
	wakeHeld   bool   // a writer wake deferred to the end of the reader's spell
	outBurst   *Burst // the open burst the output being queued belongs to
	burstWake  bool   // a writer wake deferred to a burst's Close
	outWaiting bool   // the reader waits on outDrained for out to drain
}

// wakeAction is what the caller does with a wake the state released.
type wakeAction uint8

const (
	wakeNone   wakeAction = iota // nothing is owed
	wakeRoute                    // call Conn.wakeWriter, which routes it again
	wakeInline                   // the caller holds the socket: write out, then endWrite
)

// checkWriteState makes every transition verify the invariants and panic
// on a breach. Tests set it; it costs a branch otherwise.
var checkWriteState bool

// routeWake decides where a writer wake goes: true when the writer must
// be signalled now. Output queued inside an open burst's run waits for
// that run's Close, registered with the burst once (4); output queued
// during the reader's spell waits for the spell's end (3). c is the
// connection, for the burst's list.
func (w *writeState) routeWake(c *Conn) bool {
	if w.outBurst != nil {
		if w.burstWake {
			return false
		}
		if w.outBurst.hold(c) {
			w.burstWake = true
			w.verify()
			return false
		}
	}
	if w.readerBusy {
		w.wakeHeld = true
		w.verify()
		return false
	}
	return true
}

// enterBurst makes the wakes of the output queued until leaveBurst go to
// b (nil for none); the two bracket one Link.Send or Link.Settle, inside
// one hold of Conn.mu, and do not nest.
func (w *writeState) enterBurst(b *Burst) {
	if w.outBurst != nil {
		panic("transport: enterBurst inside a burst's output")
	}
	w.outBurst = b
}

func (w *writeState) leaveBurst() { w.outBurst = nil }

// takeBurstWake is a burst's Close delivering the wake it held (4):
// wakeNone when there is none (another Close took it); wakeInline, with
// the socket taken, when the closing goroutine may write itself; else
// wakeRoute. ready reports a raw socket and queued output.
func (w *writeState) takeBurstWake(ready bool) wakeAction {
	if !w.burstWake {
		return wakeNone
	}
	w.burstWake = false
	return w.deliver(ready)
}

// deliver answers a released wake: an inline write when one may start
// (1, 2, 3), the socket then taken by the caller; the writer otherwise.
func (w *writeState) deliver(ready bool) wakeAction {
	if !ready || w.writing || w.writerDead || w.readerBusy {
		w.verify()
		return wakeRoute
	}
	w.writing = true
	w.verify()
	return wakeInline
}

// startSpell marks the reader busy with input it already has: wakes wait
// for the spell's end, so the frames that input causes leave in one
// write (3).
func (w *writeState) startSpell() {
	w.readerBusy = true
	w.verify()
}

// endSpell ends the reader's spell, before it blocks on anything, and
// releases the wake held during it, once (3): wakeInline, with the socket
// taken, when the reader may write itself and no burst is about to;
// wakeRoute when the writer must; wakeNone when no wake was held.
func (w *writeState) endSpell(ready bool) wakeAction {
	w.readerBusy = false
	if !w.wakeHeld {
		w.verify()
		return wakeNone
	}
	w.wakeHeld = false
	if w.burstWake {
		// A burst's Close is about to write: leave it to the writer.
		w.verify()
		return wakeRoute
	}
	return w.deliver(ready)
}

// beginWrite takes the socket for the writer: false while another write
// is under way (1) or once the writer is gone (2).
func (w *writeState) beginWrite() bool {
	if w.writing || w.writerDead {
		return false
	}
	w.writing = true
	w.verify()
	return true
}

// endWrite gives the socket back after beginWrite or a wakeInline answer.
func (w *writeState) endWrite() {
	if !w.writing {
		panic("transport: endWrite without a write under way")
	}
	w.writing = false
	w.verify()
}

// writerGone records that the writer exited, after a failed write or at
// teardown, holding no write: nothing is written any more (2), and a
// waiting reader stops waiting (5); the caller broadcasts outDrained.
func (w *writeState) writerGone() {
	if w.writing {
		panic("transport: writer gone during a write")
	}
	w.writerDead = true
	w.outWaiting = false
	w.verify()
}

// alive reports whether the writer still runs: frames may be queued.
func (w *writeState) alive() bool { return !w.writerDead }

// awaitDrain records that the reader waits on outDrained; the caller
// ended its spell and checked the writer is alive (5).
func (w *writeState) awaitDrain() {
	w.outWaiting = true
	w.verify()
}

// drained reports, once, that a reader waits for out, which just shrank
// below outHighWater: the caller broadcasts outDrained.
func (w *writeState) drained() bool {
	if !w.outWaiting {
		return false
	}
	w.outWaiting = false
	return true
}

// check reports the first invariant the state breaks. outBurst lasts one
// Send or Settle, so it is not checked.
func (w *writeState) check() error {
	switch {
	case w.wakeHeld && !w.readerBusy:
		return errors.New("a wake is held with no reader spell to deliver it")
	case w.outWaiting && (w.readerBusy || w.wakeHeld):
		return errors.New("the reader waits for output while holding a wake back")
	case w.outWaiting && w.writerDead:
		return errors.New("the reader waits for output from a dead writer")
	case w.writing && w.writerDead:
		return errors.New("a write is under way after the writer is gone")
	}
	return nil
}

func (w *writeState) verify() {
	if checkWriteState {
		if err := w.check(); err != nil {
			panic("transport: write state: " + err.Error())
		}
	}
}
