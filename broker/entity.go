package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/snapshot"
)

// Entity is the runtime of one queue: an actor goroutine that owns the
// entity's projection and log. Every operation is a request the actor runs
// in turn: Decide, append through group commit, Apply at once (so the next
// request sees the change), and release effects (acknowledgements,
// deliveries of new messages) only once the log says the events are
// durable. Locks are the exception: deliveries of already durable messages
// go out as soon as their Locked event is appended, since losing a lock in a
// crash only means the message is delivered again.
type Entity struct {
	b    *Broker
	name string
	id   uint64
	dir  string
	log  entityLog
	// logRef is log for readers off the actor (Bytes); the actor swaps
	// log when it recovers.
	logRef atomic.Pointer[entityLog]
	// arcBytes is the size of archives, and arcList the archives, for
	// the same readers.
	arcBytes atomic.Int64
	arcList  atomic.Pointer[[]*log.Archive]
	// created and updated are when the namespace recorded the entity and
	// its last change (unix ns), for the administration API.
	created, updated atomic.Int64
	// opened is when it was opened (unix ns), and active when it and its
	// subscriptions were last used: for AutoDeleteOnIdle.
	opened int64
	active activity
	// recoverTo is, while a failed entity recovers, the last index its log
	// had made durable: recovery cuts what came after.
	recoverTo uint64

	reqs chan func(*Entity)
	wake chan struct{} // the log made progress
	quit chan struct{}
	done chan struct{}

	// Owned by the actor goroutine.
	st        *projection.Entity
	durable   uint64 // index the log reports durable; messages above are not handed out
	cache     *bodyCache
	mem       cacheAccount
	window    log.Window // the log read last, for messages delivered in order
	credit    creditQueue
	receivers map[*Receiver]struct{}
	waiters   []*sessionWaiter
	timer     Timer
	timerAt   int64
	rng       *rand.Rand
	failed    error // sticky: the log failed
	nextID    uint64
	syncs     []chan error // Sync calls waiting for the end of the batch

	snap     snapshotState
	idle     idleState
	stats    stats
	fwd      forwarders
	compact  compactState
	archives []*log.Archive // records compaction moved out of the log, newest first

	// cfg is the entity's config as of its last applied change, for
	// readers outside the actor (send routing).
	cfg atomic.Pointer[projection.Config]

	closeOnce sync.Once

	bracket log.Bracket // never nil

	// In a cluster (Options.Cluster): what the entity's group member
	// told the actor, and whether it leads. See cluster.go.
	raft raftState
}

// entityLog is what the actor needs of its log: a *log.Log on a single
// node, a group member's (memberLog) in a cluster.
type entityLog interface {
	Append(evs []event.Event, done func(error)) (uint64, error)
	AppendLazy(evs []event.Event) (uint64, error)
	DurableIndex() uint64
	Err() error
	FirstIndex() uint64
	LastIndex() uint64
	Scan(from uint64, fn func(*event.Event) error) error
	Bytes() int64
	ReadAhead(index uint64, pos event.Position, w *log.Window) (event.Event, error)
	Reclaimable(upTo uint64) int64
	TruncateFront(upTo uint64) (uint64, error)
	Close() error
}

// noBracket is the bracket of a broker without Options.NewBracket.
type noBracket struct{}

func (noBracket) Open()  {}
func (noBracket) Close() {}

// Bracket is the entity's bracket from Options.NewBracket (a no-op
// without one).
func (e *Entity) Bracket() log.Bracket { return e.bracket }

// snapshotState tracks when the next snapshot is due and the one being
// written.
type snapshotState struct {
	lastIndex uint64 // index of the last snapshot written
	sinceLast int    // events applied since
	bytesAt   int64  // log size at the last snapshot
	running   bool
	after     []func() // to run on the actor when the running one ends
}

// idleState drives the idle checkpoint (Options.IdleCheckpoint).
type idleState struct {
	timer   *time.Timer // set by armIdle; nil once its check has run
	armedAt uint64      // the entity's last index when the timer was armed
	doneAt  uint64      // its last index after the last check: nothing to do until it moves
}

// ErrClosed is returned by operations on a closed or deleted entity.
var ErrClosed = errors.New("the entity is closed")

func (e *Entity) Name() string { return e.name }

// post queues a request for the actor. It returns ErrClosed if the entity
// is gone.
func (e *Entity) post(f func(*Entity)) error {
	select {
	case <-e.quit:
		return ErrClosed
	default:
	}
	select {
	case e.reqs <- f:
		return nil
	case <-e.quit:
		return ErrClosed
	}
}

// call runs f on the actor and waits for it.
func call[T any](e *Entity, f func(*Entity) (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	if err := e.post(func(e *Entity) {
		v, err := f(e)
		ch <- result{v, err}
	}); err != nil {
		var zero T
		return zero, err
	}
	select {
	case r := <-ch:
		return r.v, r.err
	case <-e.done:
		var zero T
		return zero, ErrClosed
	}
}

func (e *Entity) start() {
	go e.run()
}

func (e *Entity) run() {
	defer close(e.done)
	e.armIdle() // a log recovered as it was left may hold what is no longer needed
	for {
		select {
		case f := <-e.reqs:
			e.bracket.Open()
			// A caller may act on an acknowledgement before the log's wake
			// reaches us: start every batch with the current watermark.
			e.durable = e.log.DurableIndex()
			f(e)
			// Take whatever else is queued before the follow-up work, so a
			// burst of sends shares one dispatch and one timer update.
		drain:
			for range 256 {
				select {
				case f := <-e.reqs:
					// Each request sees the watermark of its arrival: one
					// acknowledged meanwhile (a send, then a peek by the
					// same client) is not hidden by an older one.
					e.durable = e.log.DurableIndex()
					f(e)
				default:
					break drain
				}
			}
		case <-e.wake:
			e.bracket.Open()
			e.durable = e.log.DurableIndex()
			if e.b.opts.Cluster != nil {
				e.raftTold()
			}
		case <-e.quit:
			e.stop()
			return
		}
		e.settleDown()
		e.bracket.Close()
	}
}

// settleDown runs after every batch of requests: hand out what the new state
// allows, re-arm the timer, and take a snapshot when one is due.
func (e *Entity) settleDown() {
	if err := e.log.Err(); err != nil && e.failed == nil {
		// A write failed on the log's goroutine after its events were
		// applied here (OnFail woke us): the state may be ahead of the
		// log even if nothing else is written.
		e.fail(err)
	}
	if e.failed == nil && e.following() {
		e.durable = e.log.DurableIndex()
		e.maybeSnapshot()
	} else if e.failed == nil {
		e.durable = e.log.DurableIndex()
		e.trimCache()
		e.retryWaiters()
		e.dispatch()
		e.forward()
		e.armTimer()
		e.maybeSnapshot()
		e.armIdle()
	}
	for _, ch := range e.syncs {
		if e.failed != nil {
			ch <- e.failed
		} else if _, err := e.log.Append(nil, func(err error) { ch <- err }); err != nil {
			ch <- err
		}
	}
	e.syncs = e.syncs[:0]
}

// now is the broker clock, kept monotonic per entity so event times never go
// backwards in the log.
func (e *Entity) now() int64 {
	return max(e.b.clock.Now().UnixNano(), e.st.LastTime())
}

// check returns the reason the entity cannot take writes, if any.
func (e *Entity) check() error {
	if e.failed != nil {
		return e.failed
	}
	if e.following() {
		return e.notLeader()
	}
	return nil
}

// notLeader is the refusal of a follower, naming the leader it knows.
func (e *Entity) notLeader() error {
	nl := &NotLeaderError{Entity: e.name}
	if l, ok := e.log.(memberLog); ok {
		nl.Leader = l.Leader()
	}
	return nl
}

// decide runs Decide on the current state at the current time.
func (e *Entity) decide(cmd projection.Command) ([]event.Event, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	return e.st.Decide(cmd, e.now())
}

// commit appends evs as one atomic group, applies them, and calls done (if
// not nil) once they are durable and applied, so that whoever done wakes
// sees the state they made (an entity's config, its counters). done runs
// on the log's writer goroutine or on the actor and must not block.
func (e *Entity) commit(evs []event.Event, done func(error)) error {
	if len(evs) == 0 && done == nil {
		return nil
	}
	if done == nil || len(evs) == 0 {
		_, err := e.log.Append(evs, done)
		return e.applyAppended(evs, err)
	}
	w := &afterApply{done: done}
	w.left.Store(2)
	_, err := e.log.Append(evs, w.finish)
	if err := e.applyAppended(evs, err); err != nil {
		return err // the caller reports err; w never completes
	}
	w.finish(nil)
	return nil
}

// afterApply calls done once both the log's durability callback and the
// actor's apply have run, with the log's result.
type afterApply struct {
	done func(error)
	left atomic.Int32
	err  error // the log's result; written before its finish
}

func (w *afterApply) finish(err error) {
	if err != nil {
		w.err = err
	}
	if w.left.Add(-1) == 0 {
		w.done(w.err)
	}
}

// commitLazy is commit for events nobody waits on and whose loss in a
// crash costs only a redelivery (locks on durable messages): they ride
// on the next fsync instead of causing one (log.AppendLazy).
func (e *Entity) commitLazy(evs []event.Event) error {
	if len(evs) == 0 {
		return nil
	}
	_, err := e.log.AppendLazy(evs)
	return e.applyAppended(evs, err)
}

// applyAppended applies events the log took (err is the append's result).
func (e *Entity) applyAppended(evs []event.Event, err error) error {
	if err != nil {
		e.fail(err)
		return e.failed
	}
	for i := range evs {
		ev := &evs[i]
		if err := e.st.Apply(ev); err != nil {
			// Decide produced an event Apply rejects: a bug. The log holds
			// it, so replay would hit it too; stop here and say so.
			e.fail(fmt.Errorf("apply %s %d: %w", ev.Type, ev.Index, err))
			return e.failed
		}
		e.trackCache(ev)
		if ev.Queue != event.TransferQueue || e.st.IsTopic() || ev.Type == event.TransferDeadLettered {
			// The transfer queue's traffic is not the queue's: its
			// messages are counted where they arrive.
			e.stats.count(ev)
		}
		if ev.Type == event.EntityCreated || ev.Type == event.EntityUpdated {
			cfg := e.st.Config()
			e.cfg.Store(&cfg)
		}
	}
	e.snap.sinceLast += len(evs)
	return nil
}

// trackCache keeps message records in the body cache and drops those of
// messages that are gone.
func (e *Entity) trackCache(ev *event.Event) {
	switch ev.Type {
	case event.Enqueued, event.Scheduled, event.Activated, event.Forwarded, event.Restored, event.RestoredCopy,
		event.Published, event.Copied, event.Transfer, event.ScheduledHeld:
		e.cache.add(*ev)
		if ev.Type == event.Activated || ev.Type == event.Published && ev.Seq != 0 {
			e.cache.remove(ev.Seq)
		}
	case event.Abandoned, event.Deferred, event.DeadLettered, event.TransferDeadLettered:
		if len(ev.Props) > 0 || ev.Type == event.DeadLettered || ev.Type == event.TransferDeadLettered {
			e.cache.add(*ev) // an overlay: read back with its message
		}
	case event.Completed, event.Expired, event.ReceivedAndDeleted, event.ScheduleCancelled, event.Deleted:
		e.cache.remove(ev.Seq)
	}
}

// fail makes the entity refuse further work: its in-memory state may be
// ahead of its log. Recovery is reopening the entity, which replays the log.
func (e *Entity) fail(err error) {
	if e.failed == nil {
		e.failed = fmt.Errorf("entity %s: %w", e.name, err)
		if errors.Is(err, ErrNotLeader) {
			// Its member lost its term: not a failure of the disk.
			e.b.logger.Info("entity steps down; reopening it", "entity", e.name, "why", err)
		} else {
			e.b.logger.Error("entity failed; reopening it", "entity", e.name, "err", err)
			e.b.writeFailed(err)
		}
		for r := range e.receivers {
			r.fail(e.failed)
		}
		// Accept-next waiters are told too: no timer runs while the
		// entity is failed, and recovery may take long or keep failing.
		for _, w := range e.waiters {
			w.done(SessionLock{}, e.failed)
		}
		clear(e.waiters)
		e.waiters = e.waiters[:0]
		e.scheduleRecovery(firstRetry)
	}
}

// record returns the log record at index (a message or an overlay), from
// the cache or the log.
func (e *Entity) record(index uint64, pos event.Position) (event.Event, error) {
	if ev, ok := e.cache.get(index); ok {
		return ev, nil
	}
	if first := e.log.FirstIndex(); index <= first && len(e.archives) > 0 {
		// Compaction moved it out of the log (see log.ReadArchived).
		if ev, ok, err := log.ReadArchived(e.archives, index); ok || index < first {
			if !ok {
				err = fmt.Errorf("record %d is before the log (which starts at %d) and in no archive", index, first)
			}
			return ev, err
		}
	}
	return e.log.ReadAhead(index, pos, &e.window)
}

// archivedThrough is the highest index the archives hold; the newest
// archive holds every record below its cut that was still needed then, and
// nothing dead below the cut comes back to life, so the log need not keep
// anything up to it.
func (e *Entity) archivedThrough() uint64 {
	if len(e.archives) == 0 {
		return 0
	}
	return e.archives[0].Last()
}

func (e *Entity) armTimer() {
	at := e.st.NextDeadline()
	for _, w := range e.waiters {
		if at == 0 || w.deadline < at {
			at = w.deadline
		}
	}
	if at == e.timerAt {
		return
	}
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	e.timerAt = at
	if at == 0 {
		return
	}
	d := time.Duration(at - e.b.clock.Now().UnixNano())
	e.timer = e.b.clock.AfterFunc(max(d, 0), func() {
		e.post(func(e *Entity) {
			e.timerAt = 0
			e.tick()
		})
	})
}

// tick acts on the timers that are due: lock and message expiry, session
// lock expiry, activation of scheduled messages, accept-next timeouts.
func (e *Entity) tick() {
	evs, err := e.decide(projection.Tick{})
	if err != nil || e.commit(evs, nil) != nil {
		return
	}
	now := e.now()
	for _, q := range []uint32{event.MainQueue} {
		for _, seq := range e.st.DueScheduled(q, now) {
			meta, _ := e.st.Queue(q).Message(seq)
			rec, err := e.record(seq, meta.Pos)
			if err != nil {
				e.fail(fmt.Errorf("read scheduled message %d: %w", seq, err))
				return
			}
			act := projection.Activate{Queue: q, Seq: seq, Record: rec}
			if e.st.IsTopic() {
				act.Filter, act.Nonce = e.filterMessage(rec.Message), e.rng.Uint64()
			}
			evs, err := e.decide(act)
			if err != nil || e.commit(evs, nil) != nil {
				return
			}
		}
	}
	e.expireWaiters()
}

// maybeSnapshot starts a background snapshot when enough has happened since
// the last one. The actor pays only for a frozen copy of the state;
// encoding, compression, fsync and front truncation happen on another
// goroutine.
func (e *Entity) maybeSnapshot() {
	o := e.b.opts
	if e.snap.running || e.snap.sinceLast < o.SnapshotEvery && e.log.Bytes()-e.snap.bytesAt < o.SnapshotBytes {
		return
	}
	if l, ok := e.log.(memberLog); ok {
		e.startMemberSnapshot(l)
		return
	}
	e.startSnapshot(nil)
}

// startSnapshot encodes the state now and writes it once the log is durable
// up to it (a snapshot must never claim events a crash could take back).
// then, if not nil, is called with the outcome on the actor.
func (e *Entity) startSnapshot(then func(error)) {
	// Copying costs the actor far less than encoding: a topic with 100
	// subscriptions and a backlog of 200,000 held it for 3.9 s to encode.
	frozen := e.st.Frozen()
	index := e.st.LastIndex()
	firstNeeded := e.st.FirstNeededFrom(e.archivedThrough() + 1)
	e.snap.running = true
	e.snap.sinceLast = 0
	e.snap.bytesAt = e.log.Bytes()
	dir := layout.SnapshotDir(e.dir)
	l := e.log // recovery may replace e.log while this runs
	archives := slices.Clone(e.archives)
	barrier := make(chan error, 1)
	if _, err := l.Append(nil, func(err error) { barrier <- err }); err != nil {
		barrier <- err
	}
	// The file is written off the actor, which goes on serving; the result
	// comes back through post.
	go func() {
		// Each piece (the entity, then each queue) is compressed and
		// written as it is encoded, so only one is in memory at a time.
		start := time.Now()
		var raw int64
		w, err := snapshot.Create(dir, index)
		if err == nil {
			err = frozen.EncodePieces(w.Add)
			raw = w.Bytes()
			if berr := <-barrier; err == nil {
				err = berr
			}
			if err == nil {
				_, err = w.Commit()
			} else {
				w.Abort()
			}
		} else {
			<-barrier
		}
		if err == nil {
			err = snapshot.Prune(dir, keepSnapshots)
		}
		if err == nil {
			err = truncate(l, dir, firstNeeded)
		}
		var comp *compaction
		again := false
		if ll, local := l.(*log.Log); err == nil && local { // a member's log is not compacted yet
			var cerr error
			comp, again, cerr = planCompaction(ll, e.dir, frozen, index, archives, e.b.opts.CompactBytes)
			if cerr != nil {
				e.b.logger.Warn("compaction failed", "entity", e.name, "err", cerr)
			}
		}
		elapsed := time.Since(start)
		if hook := e.b.opts.OnSnapshot; hook != nil {
			hook(SnapshotStats{Entity: e.name, Index: index, Bytes: int(raw), Took: elapsed, Err: err})
		}
		e.post(func(e *Entity) {
			e.snap.running = false
			if comp != nil {
				e.installCompaction(comp)
			}
			e.compact.checkedAt, e.compact.again = e.diskBytes(), again
			if err == nil {
				e.snap.lastIndex = index
				e.b.logger.Debug("snapshot written", "entity", e.name, "index", index, "bytes", raw, "took", elapsed)
			} else {
				e.b.logger.Warn("snapshot failed", "entity", e.name, "index", index, "err", err)
			}
			if then != nil {
				then(err)
			}
			e.snapshotEnded()
		})
	}()
}

// snapshotEnded runs, on the actor, what waited for the snapshot under
// way to end (a final snapshot).
func (e *Entity) snapshotEnded() {
	after := e.snap.after
	e.snap.after = nil
	for _, f := range after {
		f()
	}
}

// armIdle starts the idle timer when the entity has had events since its
// last idle check. The timer is armed at most once per IdleCheckpoint,
// however busy the entity is: the check itself tells whether anything
// happened meanwhile. Not while a snapshot is being written: a checkpoint
// sequence keeps one under way from its first round to its last.
func (e *Entity) armIdle() {
	last := e.st.LastIndex()
	if e.b.opts.IdleCheckpoint < 0 || e.b.opts.Cluster != nil || e.idle.timer != nil || e.snap.running || last == e.idle.doneAt {
		return
	}
	e.idle.armedAt = last
	e.idle.timer = time.AfterFunc(e.b.opts.IdleCheckpoint, func() {
		e.post(func(e *Entity) {
			e.idle.timer = nil
			e.idleCheck()
		})
	})
}

// idleCheck runs when the idle timer fires. If the entity had no event
// since it was armed and its log holds segments its state no longer needs
// (kept only because its older snapshot predates them), it checkpoints,
// each time with a snapshot, until a snapshot's truncation has cut the log
// to what the state needs (twice at most: two snapshots past the old log). An idle entity that has drained a
// large backlog so gives its disk back instead of keeping up to two
// snapshot intervals of log until its next burst. Otherwise settleDown
// arms the timer again, or (nothing moved) leaves it until something does.
func (e *Entity) idleCheck() {
	last := e.st.LastIndex()
	if last != e.idle.armedAt || e.snap.running {
		return // not idle throughout, or busy: look again later
	}
	e.idle.doneAt = last
	if e.failed != nil || e.reclaimable() == 0 && !e.compactDue() {
		return
	}
	e.checkpoint(2)
}

// reclaimable is how much of the log the state no longer needs.
func (e *Entity) reclaimable() int64 {
	return e.log.Reclaimable(e.st.FirstNeededFrom(e.archivedThrough() + 1))
}

// checkpoint writes a Checkpoint event and snapshots the state after it,
// up to rounds times in a row, until the log holds nothing the state does
// not need (one round is enough when the newest snapshot already covers
// the last event). Once done, the idle timer waits for an event after the
// last checkpoint.
func (e *Entity) checkpoint(rounds int) {
	if _, ok := e.log.(memberLog); ok {
		// A member's log is cut by its own snapshots: one soon.
		e.snap.sinceLast = max(e.snap.sinceLast, e.b.opts.SnapshotEvery)
		return
	}
	if rounds > 0 && (e.reclaimable() > 0 || e.compactDue()) {
		evs, err := e.decide(projection.Checkpoint{})
		if err == nil && e.commit(evs, nil) == nil {
			e.idle.doneAt = evs[0].Index
			e.startSnapshot(func(err error) {
				if err != nil {
					rounds = 1 // stop here; the snapshot goroutine said why
				}
				e.checkpoint(rounds - 1)
			})
			return
		}
	}
}

// keepSnapshots is how many snapshots an entity keeps. The log is kept back
// to the oldest of them, so one damaged snapshot never makes the entity
// unrecoverable.
const keepSnapshots = 2

// truncate drops log segments that neither the state (firstNeeded) nor the
// replay from the oldest kept snapshot needs.
func truncate(l entityLog, dir string, firstNeeded uint64) error {
	infos, err := snapshot.List(dir)
	if err != nil || len(infos) < keepSnapshots {
		return err
	}
	upTo := min(firstNeeded, infos[len(infos)-1].Index+1)
	_, err = l.TruncateFront(upTo)
	return err
}

// close stops the actor. With graceful, it first writes a snapshot so the
// next start replays little. It waits for the actor to finish.
func (e *Entity) close(graceful bool) error {
	var snapErr error
	if graceful {
		done := make(chan error, 1)
		if err := e.post(func(e *Entity) { e.finalSnapshot(done) }); err == nil {
			select {
			case snapErr = <-done:
			case <-e.done:
			}
		}
	}
	e.closeOnce.Do(func() { close(e.quit) })
	<-e.done
	e.closeArchives()
	err := e.log.Close()
	if errors.Is(err, log.ErrClosed) {
		err = nil
	}
	return errors.Join(snapErr, err)
}

// finalSnapshot writes a snapshot of the current state, after any snapshot
// still being written, unless the last one covers all but a few events
// (Options.FinalSnapshotMin).
func (e *Entity) finalSnapshot(done chan<- error) {
	switch {
	case e.failed != nil || e.b.opts.Cluster != nil:
		done <- nil
	case e.snap.running:
		e.snap.after = append(e.snap.after, func() { e.finalSnapshot(done) })
	case e.st.LastIndex()-e.snap.lastIndex < uint64(e.b.opts.FinalSnapshotMin):
		done <- nil
	default:
		e.startSnapshot(func(err error) { done <- err })
	}
}

func (e *Entity) stop() {
	e.releaseCache()
	if e.timer != nil {
		e.timer.Stop()
	}
	if e.idle.timer != nil {
		e.idle.timer.Stop()
	}
	for r := range e.receivers {
		r.fail(ErrClosed)
	}
	for _, w := range e.waiters {
		w.done(SessionLock{}, ErrClosed)
	}
	e.waiters = nil
}

func (e *Entity) logger() *slog.Logger { return e.b.logger.With("entity", e.name) }
