package projection

import (
	"fmt"
	"strings"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
)

// Apply changes the state by one event, which must come right after the
// last applied one (its Index and Pos set by the log). It returns an error for
// an event that does not fit the state (a damaged or foreign log); the state
// is then unchanged apart from the event being counted as applied.
func (e *Entity) Apply(ev *event.Event) error {
	if ev.Index <= e.last {
		return fmt.Errorf("event %d (%s) applied after %d", ev.Index, ev.Type, e.last)
	}
	if ev.Type == event.Marker {
		// A Raft entry without events: it takes an index and carries no
		// time of the entity's (the storage under Raft writes it).
		e.last = ev.Index
		return nil
	}
	e.last, e.lastTime = ev.Index, ev.Time
	switch ev.Type {
	case event.EntityCreated, event.EntityUpdated:
		return e.applyConfig(ev)
	case event.Checkpoint, event.Committed:
		return nil
	case event.Remembered:
		e.rememberVia(ev)
		return nil
	case event.Arrived:
		e.forwarded[ev.Source] = ev.Seq
		return nil
	case event.Transfer:
		err := e.applyTransfer(ev)
		if q := e.TransferQueue(); q != nil {
			q.dropStaleTimers()
		}
		return err
	case event.Published, event.Copied, event.SubscriptionCreated, event.SubscriptionUpdated,
		event.SubscriptionDeleted, event.RuleAdded, event.RuleRemoved:
		return e.applyTopic(ev)
	}
	q := e.Queue(ev.Queue)
	if q == nil {
		return fmt.Errorf("event %d (%s): no queue %d", ev.Index, ev.Type, ev.Queue)
	}
	err := e.applyQueue(q, ev)
	q.dropStaleTimers()
	return err
}

func (e *Entity) applyConfig(ev *event.Event) error {
	cfg, err := DecodeConfig(ev.Props)
	if err != nil {
		return fmt.Errorf("event %d: %w", ev.Index, err)
	}
	if !e.created && cfg.RequiresSession {
		e.queues[event.MainQueue].sessions = index.NewSessions()
	}
	e.name, e.cfg, e.created = ev.Name, cfg, true
	return nil
}

func (e *Entity) applyQueue(q *Queue, ev *event.Event) error {
	switch ev.Type {
	case event.Enqueued:
		e.enqueue(q, ev.Index, ev.Pos, ev.SessionID, ev.Until)
		e.remember(ev.MessageID, ev.Time)
		return nil
	case event.Forwarded:
		e.forwarded[ev.Source] = ev.Seq
		if e.IsTopic() {
			// Routed by the Copied events after it, to which it is the
			// body and the first overlay; the topic keeps nothing.
			e.topic.lastPub = Ref{Index: ev.Index, Pos: ev.Pos}
			return nil
		}
		e.enqueue(q, ev.Index, ev.Pos, ev.SessionID, ev.Until)
		// The record is also the message's first overlay: how it was
		// dead-lettered where it came from.
		q.overlays[ev.Index] = []Ref{{Index: ev.Index, Pos: ev.Pos}}
		return nil
	case event.Restored, event.RestoredCopy:
		e.enqueue(q, ev.Index, ev.Pos, ev.SessionID, ev.Until)
		if ev.Deliveries > 0 {
			m, _ := q.msgs.Get(ev.Index)
			m.Deliveries = uint16(min(ev.Deliveries, 1<<16-1))
			q.msgs.Put(ev.Index, m)
		}
		if restoredOverlay(q, ev) {
			q.overlays[ev.Index] = []Ref{{Index: ev.Index, Pos: ev.Pos}}
		}
		return nil
	case event.ScheduledHeld:
		e.applyHeld(q, ev)
		return nil
	case event.Scheduled:
		q.add(ev.Index, index.Meta{Pos: ev.Pos, State: index.Scheduled}, ev.SessionID)
		q.scheduleTimers.Push(ev.Until, ev.Index)
		e.remember(ev.MessageID, ev.Time)
		return nil
	case event.SessionLocked, event.SessionLockRenewed, event.SessionUnlocked, event.SessionStateSet:
		return q.applySession(ev)
	}

	m, ok := q.msgs.Get(ev.Seq)
	if !ok {
		return fmt.Errorf("event %d (%s): no message %d in queue %d", ev.Index, ev.Type, ev.Seq, q.No)
	}
	switch ev.Type {
	case event.ScheduleCancelled, event.Deleted:
		q.remove(ev.Seq, m)
	case event.Activated:
		q.remove(ev.Seq, m)
		e.enqueue(q, ev.Index, ev.Pos, ev.SessionID, ev.Until)
	case event.Locked:
		q.setState(ev.Seq, &m, index.Locked)
		q.locks.Put(ev.Seq, index.Lock{Token: ev.Token, Until: ev.Until, Receiver: ev.Receiver})
		q.lockTimers.Push(ev.Until, ev.Seq)
		q.msgs.Put(ev.Seq, m)
	case event.LockRenewed:
		lk, ok := q.locks.Get(ev.Seq)
		if !ok {
			return fmt.Errorf("event %d: renewal of unlocked message %d", ev.Index, ev.Seq)
		}
		lk.Until = ev.Until
		q.locks.Put(ev.Seq, lk)
		q.lockTimers.Push(ev.Until, ev.Seq)
	case event.LockExpired, event.Abandoned:
		// A dead-letter queue counts no deliveries: Service Bus keeps the
		// count a message had when it was dead-lettered (the Go SDK's
		// messageSettler_test.go TestMessageSettlementUsingReceiver). The
		// count is derived here, never stored in these events, so a replay
		// of any log follows the same rule.
		if !isDeadLetterQueue(q.No) {
			m.AddDelivery()
		}
		q.unlock(ev.Seq, &m, ev)
	case event.Released:
		q.unlock(ev.Seq, &m, ev)
	case event.Deferred:
		m.Flags |= index.FlagDeferred
		q.unlock(ev.Seq, &m, ev)
	case event.Completed, event.Expired, event.ReceivedAndDeleted:
		q.remove(ev.Seq, m)
	case event.DeadLettered:
		e.deadLetter(q, ev, m)
	case event.TransferDeadLettered:
		return e.transferDeadLetter(q, ev, m)
	case event.Confirmed:
		return e.applyConfirmed(q, ev, m)
	default:
		return fmt.Errorf("event %d: type %s does not belong in an entity log", ev.Index, ev.Type)
	}
	return nil
}

// restoredOverlay reports whether a Restored record is also its message's
// overlay: when it changes something, and always in a dead-letter queue
// (where it stands for the dead-lettering, reason and all).
func restoredOverlay(q *Queue, ev *event.Event) bool {
	return isDeadLetterQueue(q.No) || ev.Type == event.RestoredCopy || ev.Name != "" || ev.Reason != "" || ev.Description != "" || len(ev.Props) > 0
}

// enqueue adds an available message, with its expiry timer.
func (e *Entity) enqueue(q *Queue, seq uint64, pos event.Position, session string, expires int64) {
	q.add(seq, index.Meta{Pos: pos, State: index.Available}, session)
	if expires > 0 {
		q.ttlTimers.Push(expires, seq)
	}
}

// remember adds an accepted MessageId to the duplicate-detection window and
// forgets the ones that fell out of it.
func (e *Entity) remember(id string, at int64) {
	if !e.cfg.RequiresDuplicateDetection {
		return
	}
	e.dedup.Expire(at - int64(e.cfg.DuplicateWindow))
	if id != "" {
		e.dedup.Add(id, at)
	}
}

// rememberVia adds a MessageId that an entity forwarding here accepted to
// that entity's window (until ev.Until), forgetting the ones that fell out.
func (e *Entity) rememberVia(ev *event.Event) {
	key := viaKey(ev.Name)
	d := e.via[key]
	if d == nil {
		d = index.NewDedup()
		e.via[key] = d
	}
	d.Expire(ev.Time - (ev.Until - ev.Time))
	d.Add(ev.MessageID, ev.Time)
}

// seenVia reports whether the entity via (a viaKey) accepted id at or after
// since.
func (e *Entity) seenVia(via, id string, since int64) bool {
	d := e.via[via]
	return d != nil && d.Seen(id, since)
}

// viaKey is the key of an entity name in Entity.via: names are
// case-insensitive.
func viaKey(name string) string { return strings.ToLower(name) }

// deadLetter moves a message to its queue's dead-letter subqueue, keeping its
// SequenceNumber and delivery count; the event itself carries the reason.
func (e *Entity) deadLetter(q *Queue, ev *event.Event, m index.Meta) {
	overlays := q.overlays[ev.Seq]
	q.remove(ev.Seq, m)
	dlq := e.queues[deadLetterQueueOf(q.No)]
	dlq.add(ev.Seq, index.Meta{Pos: m.Pos, Deliveries: m.Deliveries, State: index.Available}, "")
	dlq.overlays[ev.Seq] = append(overlays, Ref{Index: ev.Index, Pos: ev.Pos})
}

// add inserts a message in the given state.
func (q *Queue) add(seq uint64, m index.Meta, session string) {
	if q.sessions != nil && session != "" {
		s := q.sessions.Ensure(session)
		s.Messages++
		m.Session = s.No
	}
	q.all.Add(seq)
	q.set(m.State).Add(seq)
	q.msgs.Put(seq, m)
	q.bytes += uint64(m.Pos.Size)
	if m.State == index.Available && m.Session != 0 {
		s := q.sessions.ByNo(m.Session)
		s.Available.Add(seq)
		q.sessions.Refresh(s)
	}
}

// remove deletes a message whatever its state.
func (q *Queue) remove(seq uint64, m index.Meta) {
	q.set(m.State).Remove(seq)
	q.all.Remove(seq)
	q.msgs.Delete(seq)
	q.bytes -= uint64(m.Pos.Size)
	q.locks.Delete(seq)
	delete(q.overlays, seq)
	if m.Session != 0 {
		s := q.sessions.ByNo(m.Session)
		s.Available.Remove(seq)
		s.Locked.Remove(seq)
		s.Messages--
		q.sessions.Refresh(s)
		q.sessions.Collect(s)
	}
}

// setState moves a message between the state sets.
func (q *Queue) setState(seq uint64, m *index.Meta, to index.State) {
	q.set(m.State).Remove(seq)
	q.set(to).Add(seq)
	if m.Session != 0 {
		s := q.sessions.ByNo(m.Session)
		s.Available.Remove(seq)
		s.Locked.Remove(seq)
		switch to {
		case index.Available:
			s.Available.Add(seq)
		case index.Locked:
			s.Locked.Add(seq)
		}
		q.sessions.Refresh(s)
	}
	m.State = to
}

// unlock ends a message's lock: it becomes available again, or deferred again
// if it was deferred; an event with properties records them as an overlay.
func (q *Queue) unlock(seq uint64, m *index.Meta, ev *event.Event) {
	q.locks.Delete(seq)
	to := index.Available
	if m.Flags&index.FlagDeferred != 0 {
		to = index.Deferred
	}
	q.setState(seq, m, to)
	q.msgs.Put(seq, *m)
	if len(ev.Props) > 0 {
		q.overlays[seq] = append(q.overlays[seq], Ref{Index: ev.Index, Pos: ev.Pos})
	}
}

func (q *Queue) set(s index.State) *roaring64.Bitmap {
	switch s {
	case index.Available:
		return q.available
	case index.Locked:
		return q.locked
	case index.Deferred:
		return q.deferred
	case index.Scheduled:
		return q.scheduled
	}
	panic(fmt.Sprintf("projection: message state %d", s))
}

func (q *Queue) applySession(ev *event.Event) error {
	if q.sessions == nil {
		return fmt.Errorf("event %d (%s): queue %d has no sessions", ev.Index, ev.Type, q.No)
	}
	s := q.sessions.Ensure(ev.SessionID)
	switch ev.Type {
	case event.SessionLocked:
		s.Owner, s.LockedUntil = ev.Receiver, ev.Until
		q.sessionTimers.Push(ev.Until, uint64(s.No))
	case event.SessionLockRenewed:
		s.LockedUntil = ev.Until
		q.sessionTimers.Push(ev.Until, uint64(s.No))
		// The session's messages are locked as long as the session is.
		it := s.Locked.Iterator()
		for it.HasNext() {
			seq := it.Next()
			if lk, ok := q.locks.Get(seq); ok {
				lk.Until = ev.Until
				q.locks.Put(seq, lk)
				q.lockTimers.Push(ev.Until, seq)
			}
		}
	case event.SessionUnlocked:
		s.Owner, s.LockedUntil = "", 0
	case event.SessionStateSet:
		s.State, s.StateTime = nil, ev.Time
		if len(ev.State) > 0 {
			s.State = append([]byte(nil), ev.State...)
		}
	}
	q.sessions.Refresh(s)
	q.sessions.Collect(s)
	return nil
}

// dropStaleTimers pops stale entries off the top of every timer heap, so
// Decide's walks over due entries only meet live ones, and rebuilds a heap
// whose garbage has grown past its live entries.
func (q *Queue) dropStaleTimers() {
	q.lockTimers.DropStale(q.lockLive)
	q.ttlTimers.DropStale(q.ttlLive)
	q.scheduleTimers.DropStale(q.scheduleLive)
	n := q.msgs.Len()
	q.lockTimers.Compact(q.lockLive, q.locks.Len())
	q.ttlTimers.Compact(q.ttlLive, n)
	q.scheduleTimers.Compact(q.scheduleLive, n)
	if q.sessions != nil {
		q.sessionTimers.DropStale(q.sessionLive)
		q.sessionTimers.Compact(q.sessionLive, q.sessions.Len())
	}
}
