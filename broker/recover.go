package broker

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/snapshot"
)

// load opens the entity's log (repairing a torn tail), loads its newest
// usable snapshot and replays the log after it. It sets the entity's log,
// state and durable index; rec reports what it did.
func (e *Entity) load(rec *EntityRecovery) error {
	b := e.b
	l, rep, err := log.Open(filepath.Join(e.dir, "log"), b.logOptions(e.name, func(s log.CommitStats) {
		select {
		case e.wake <- struct{}{}:
		default:
		}
		if b.opts.OnCommit != nil {
			b.opts.OnCommit(e.name, s)
		}
	}))
	if err != nil {
		return fmt.Errorf("entity %s: %w", e.name, err)
	}
	rec.Repair = rep.Repair
	if rep.Repair.Bytes > 0 {
		b.logger.Warn("log tail repaired", "entity", e.name, "repair", rep.Repair.String())
	}
	st, info, skipped, err := snapshot.Load(filepath.Join(e.dir, "snapshots"), func(index uint64) error {
		if index+1 < l.FirstIndex() || index > l.LastIndex() {
			return fmt.Errorf("snapshot at %d does not fit the log (%d-%d)", index, l.FirstIndex(), l.LastIndex())
		}
		return nil
	})
	rec.Skipped = skipped
	for _, s := range skipped {
		b.logger.Warn("snapshot skipped", "entity", e.name, "path", s.Info.Path, "err", s.Err)
	}
	if err != nil {
		l.Close()
		return fmt.Errorf("entity %s: %w", e.name, err)
	}
	from := uint64(1)
	if st != nil {
		rec.Snapshot, from = info.Index, info.Index+1
		e.snap.lastIndex = info.Index
	} else {
		st = projection.New()
		if l.FirstIndex() > 1 {
			l.Close()
			return fmt.Errorf("entity %s: the log starts at %d and no snapshot covers the events before it", e.name, l.FirstIndex())
		}
	}
	err = l.Scan(from, func(ev *log.Event) error {
		rec.Replayed++
		return st.Apply(ev)
	})
	if err != nil {
		l.Close()
		return fmt.Errorf("entity %s: replay: %w", e.name, err)
	}
	e.log, e.st = l, st
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
	var rec EntityRecovery
	if err := e.load(&rec); err != nil {
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
