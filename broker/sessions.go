package broker

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// SessionLock is a session held by a receiver.
type SessionLock struct {
	SessionID   string
	LockedUntil int64 // unix ns
}

// ErrTimeout: no session became free within the accept-next wait.
// com.microsoft:timeout
var ErrTimeout = errors.New("no session was available within the wait time")

// sessionWaiter is an accept-next-session waiting for a session to free up.
type sessionWaiter struct {
	r        *Receiver
	deadline int64
	done     func(SessionLock, error)
}

// AcceptSession makes r a receiver of one session: sessionID, or with an
// empty sessionID the free session whose oldest message has waited longest,
// waiting up to wait for one to become free. done runs once, on a broker
// goroutine, possibly the entity's actor: it must not block, nor call the
// receiver or the entity (SetLimit, Detach post to the actor, which would
// wait on its own queue when that is full); hand such work to a goroutine.
// A named session is accepted even if it has no messages.
func (r *Receiver) AcceptSession(sessionID string, wait time.Duration, done func(SessionLock, error)) {
	err := r.e.post(func(e *Entity) {
		if r.closed {
			done(SessionLock{}, ErrClosed)
			return
		}
		if r.opts.Session != "" {
			done(SessionLock{}, fmt.Errorf("%w: the receiver already holds session %q", projection.ErrInvalid, r.opts.Session))
			return
		}
		if err := e.acceptSession(r, sessionID, done); errors.Is(err, projection.ErrNoSession) && wait > 0 {
			e.waiters = append(e.waiters, &sessionWaiter{r: r, deadline: e.now() + int64(wait), done: done})
		} else if errors.Is(err, projection.ErrNoSession) {
			done(SessionLock{}, ErrTimeout)
		} else if err != nil {
			done(SessionLock{}, err)
		}
	})
	if err != nil {
		done(SessionLock{}, err)
	}
}

// acceptSession tries to lock a session for r; on success it calls done.
func (e *Entity) acceptSession(r *Receiver, sessionID string, done func(SessionLock, error)) error {
	evs, err := e.decide(projection.AcceptSession{Queue: r.opts.Queue, SessionID: sessionID, Receiver: r.id})
	if err != nil {
		return err
	}
	if err := e.commit(evs, nil); err != nil {
		return err
	}
	lock := evs[len(evs)-1] // the SessionLocked event
	r.opts.Session = lock.SessionID
	r.session.Store(&lock.SessionID)
	done(SessionLock{SessionID: lock.SessionID, LockedUntil: lock.Until}, nil)
	return nil
}

// retryWaiters gives freed sessions to waiting accept-next receivers, in the
// order they asked.
func (e *Entity) retryWaiters() {
	if len(e.waiters) == 0 {
		return
	}
	kept := e.waiters[:0]
	for i, w := range e.waiters {
		if w.r.closed {
			w.done(SessionLock{}, ErrClosed)
			continue
		}
		err := e.acceptSession(w.r, "", w.done)
		if errors.Is(err, projection.ErrNoSession) {
			// Nothing free: everyone behind waits too.
			kept = append(kept, e.waiters[i:]...)
			break
		}
		if err != nil {
			w.done(SessionLock{}, err)
		}
	}
	clear(e.waiters[len(kept):])
	e.waiters = kept
}

// expireWaiters answers the accept-next receivers whose wait ran out.
func (e *Entity) expireWaiters() {
	now := e.b.clock.Now().UnixNano()
	e.waiters = slices.DeleteFunc(e.waiters, func(w *sessionWaiter) bool {
		if w.deadline <= now {
			w.done(SessionLock{}, ErrTimeout)
			return true
		}
		return false
	})
}

// cancelWait drops r's pending accept, if any, telling it the entity closed
// the request.
func (e *Entity) cancelWait(r *Receiver) {
	e.waiters = slices.DeleteFunc(e.waiters, func(w *sessionWaiter) bool {
		if w.r == r {
			w.done(SessionLock{}, ErrClosed)
			return true
		}
		return false
	})
}

// RenewSession extends the receiver's session lock; done gets the new
// locked-until (unix ns) once durable.
func (r *Receiver) RenewSession(done func(int64, error)) {
	err := r.e.post(func(e *Entity) {
		evs, err := e.decide(projection.RenewSession{Queue: r.opts.Queue, SessionID: r.opts.Session, Receiver: r.id})
		if err != nil {
			done(0, err)
			return
		}
		until := evs[0].Until
		if err := e.commit(evs, func(err error) { done(until, err) }); err != nil {
			done(0, err)
		}
	})
	if err != nil {
		done(0, err)
	}
}

// SetSessionState replaces the state of the receiver's session (nil or
// empty clears it); done runs once durable.
func (r *Receiver) SetSessionState(state []byte, done func(error)) {
	r.e.do(done, func(e *Entity) ([]event.Event, error) {
		return e.decide(projection.SetSessionState{Queue: r.opts.Queue, SessionID: r.opts.Session, Receiver: r.id,
			State: state})
	})
}

// SessionState returns the state of the receiver's session.
func (r *Receiver) SessionState() ([]byte, error) {
	return call(r.e, func(e *Entity) ([]byte, error) {
		q := e.st.Queue(r.opts.Queue)
		if q.Sessions() == nil {
			return nil, projection.ErrNotAllowed
		}
		s := q.Sessions().Get(r.opts.Session)
		if s == nil || s.Owner != r.id || s.LockedUntil <= e.now() {
			return nil, projection.ErrSessionLockLost
		}
		return slices.Clone(s.State), nil
	})
}

// Session is the session a session receiver holds, "" before it accepts
// one. Safe to call from any goroutine.
func (r *Receiver) Session() string {
	if s := r.session.Load(); s != nil {
		return *s
	}
	return ""
}

// SessionListAll is the updated-after time (unix ms) with which ListSessions
// lists every session that has messages or state: the Go SDK asks with
// 10000-01-01T00:00:00Z, which does not fit in unix nanoseconds.
const SessionListAll = 253402300800000

// ListSessions returns session ids in order: with updatedAfterMs at or past
// SessionListAll every session with messages or state, otherwise those whose
// state was set after updatedAfterMs (unix ms); skip and top page the list.
func (e *Entity) ListSessions(queue uint32, updatedAfterMs int64, skip, top int) ([]string, error) {
	return call(e, func(e *Entity) ([]string, error) {
		q := e.st.Queue(queue)
		if q == nil || q.Sessions() == nil {
			return nil, projection.ErrNotAllowed
		}
		var ids []string
		for _, s := range q.Sessions().Sorted() {
			if updatedAfterMs >= SessionListAll && (s.Messages > 0 || s.State != nil) ||
				updatedAfterMs < SessionListAll && s.State != nil && s.StateTime/int64(time.Millisecond) > updatedAfterMs {
				ids = append(ids, s.ID)
			}
		}
		if skip >= len(ids) {
			return nil, nil
		}
		ids = ids[skip:]
		if top >= 0 && top < len(ids) {
			ids = ids[:top]
		}
		return ids, nil
	})
}

// SessionInfo is what the console shows of one session.
type SessionInfo struct {
	ID          string // as clients name it
	Messages    int    // in any state
	LockedUntil int64  // unix ns while a receiver holds it, else 0
	State       []byte // nil for none
}

// SessionList returns, in order, the sessions of queue that have messages,
// state or a receiver, skip and top paging the list.
func (e *Entity) SessionList(queue uint32, skip, top int) ([]SessionInfo, error) {
	return call(e, func(e *Entity) ([]SessionInfo, error) {
		q := e.st.Queue(queue)
		if q == nil || q.Sessions() == nil {
			return nil, projection.ErrNotAllowed
		}
		var out []SessionInfo
		now := e.now()
		for _, s := range q.Sessions().Sorted() {
			held := s.Owner != "" && s.LockedUntil > now
			if s.Messages == 0 && s.State == nil && !held {
				continue
			}
			if skip > 0 {
				skip--
				continue
			}
			if len(out) == top {
				break
			}
			info := SessionInfo{ID: ClientSessionID(s.ID), Messages: s.Messages, State: slices.Clone(s.State)}
			if held {
				info.LockedUntil = s.LockedUntil
			}
			out = append(out, info)
		}
		return out, nil
	})
}
