package broker

import (
	"fmt"
	"time"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/snapshot"
)

// load opens the entity's log (repairing a torn tail), loads its newest
// usable snapshot and replays the log after it. It sets the entity's log,
// state and durable index; rec reports what it did.
func (e *Entity) load(rec *EntityRecovery) error {
	b := e.b
	if b.opts.Cluster != nil {
		return e.loadMember()
	}
	wake := func() {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
	l, rep, err := log.Open(layout.LogDir(e.dir), b.logOptions(e.name, func(s log.CommitStats) {
		wake()
		if g := b.diskGuard(); g != nil {
			g.wrote(s.Bytes)
		}
		if b.opts.OnCommit != nil {
			b.opts.OnCommit(e.name, s)
		}
	}, func(error) { wake() }, e.bracket)) // settleDown finds the log's error
	if err != nil {
		return fmt.Errorf("entity %s: %w", e.name, err)
	}
	rec.Repair = rep.Repair
	if rep.Repair.Bytes > 0 {
		b.logger.Warn("log tail repaired", "entity", e.name, "repair", rep.Repair.String())
	}
	if cut := e.recoverTo; cut > 0 && l.LastIndex() > cut && cut >= l.FirstIndex() {
		// Records written after the last fsync that worked were refused to
		// their callers (or never told): the state is what was durable.
		// Replayed, a receive-and-delete that failed would remove a message
		// nobody received.
		if err := l.TruncateBack(cut); err != nil {
			l.Close()
			return fmt.Errorf("entity %s: %w", e.name, err)
		}
	}
	st, rebuilt, err := snapshot.Recover(layout.SnapshotDir(e.dir), l)
	if moved := rebuilt.SetAside; len(moved) > 0 {
		b.logger.Warn("snapshots beyond the repaired log set aside", "entity", e.name, "newest", moved[0].Path, "count", len(moved))
	}
	rec.Skipped, rec.Snapshot, rec.Replayed = rebuilt.Skipped, rebuilt.Snapshot, rebuilt.Replayed
	for _, s := range rebuilt.Skipped {
		b.logger.Warn("snapshot skipped", "entity", e.name, "path", s.Info.Path, "err", s.Err)
	}
	if err != nil {
		l.Close()
		return fmt.Errorf("entity %s: %w", e.name, err)
	}
	e.snap.lastIndex = rebuilt.Snapshot
	archives, err := log.OpenArchives(layout.ArchiveDir(e.dir))
	if err != nil {
		l.Close()
		return fmt.Errorf("entity %s: %w", e.name, err)
	}
	e.closeArchives()
	e.setArchives(archives)
	e.log, e.st = l, st
	var el entityLog = l
	e.logRef.Store(&el)
	e.window = log.Window{} // a repair may have cut what it holds
	cfg := st.Config()
	e.cfg.Store(&cfg)
	e.fwd = forwarders{gen: e.fwd.gen}
	e.durable = l.DurableIndex()
	e.snap.bytesAt = l.Bytes()
	return nil
}

// Retry delays for an entity whose log failed: it reopens the log and
// rebuilds its state, which drops whatever was applied but never durable.
const (
	firstRetry = 500 * time.Millisecond
	maxRetry   = 10 * time.Second
)

// scheduleRecovery arranges a reopen of a failed entity.
func (e *Entity) scheduleRecovery(delay time.Duration) {
	e.b.clock.AfterFunc(delay, func() {
		e.post(func(e *Entity) { e.recover(delay) })
	})
}

// recover reopens a failed entity: a full disk that has space again, a
// device that works again. On failure it tries again later, backing off.
func (e *Entity) recover(lastDelay time.Duration) {
	if e.failed == nil {
		return
	}
	e.log.Close() // its sticky error is the reason we are here
	if e.recoverTo == 0 && e.b.opts.Cluster == nil {
		// A member's log keeps what it has: Raft's followers must not
		// lose what they acknowledged, and nothing past the commit
		// reaches the state.
		e.recoverTo = e.log.DurableIndex()
	}
	var rec EntityRecovery
	err := e.load(&rec)
	if err == nil {
		e.recoverTo = 0
	}
	if err != nil {
		next := min(2*lastDelay, maxRetry)
		e.b.logger.Warn("entity still failing; retrying", "entity", e.name, "err", err, "retry_in", next)
		// Keep a closed log in place: operations keep failing with e.failed.
		e.scheduleRecovery(next)
		return
	}
	// Everything tied to the old state goes: receivers were told they are
	// lost and attach again; the cache may hold events that never became
	// durable.
	e.cache = newBodyCache(e.b.opts.CacheBytes)
	e.credit = creditQueue{}
	e.receivers = make(map[*Receiver]struct{})
	for _, w := range e.waiters {
		w.done(SessionLock{}, e.failed)
	}
	e.waiters = nil
	e.timerAt = 0
	e.failed = nil
	e.b.logger.Info("entity recovered after a failure", "entity", e.name, "snapshot", rec.Snapshot, "replayed", rec.Replayed,
		"tail_repair", rec.Repair.String())
}

func (e *Entity) closeArchives() {
	for _, a := range e.archives {
		a.Close()
	}
	e.setArchives(nil)
}
