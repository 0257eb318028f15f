package broker

import (
	"sync/atomic"
	"time"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// stats counts what an entity's events did, for metrics. The actor updates
// it as it applies events; readers take a Stats copy from any goroutine.
type stats struct {
	sent, delivered, completed, abandoned, released, deferred, expired, lockExpired atomic.Uint64
	deadLetteredMaxDelivery, deadLetteredExpired, deadLetteredOther                 atomic.Uint64
	lockLost, deleted                                                               atomic.Uint64
}

// Stats are an entity's counters since it was opened.
type Stats struct {
	Sent        uint64 // messages stored (enqueued or scheduled, or forwarded here)
	Delivered   uint64 // messages handed out (locked or received and deleted)
	Completed   uint64
	Abandoned   uint64
	Released    uint64
	Deferred    uint64
	Expired     uint64 // dropped when their time to live ran out
	LockExpired uint64 // locks that ran out
	Deleted     uint64 // removed unread by batch deletes (purges)
	// DeadLettered counts dead-lettered messages by reason: the broker's own
	// (MaxDeliveryCountExceeded, TTLExpiredException) and "client" for
	// reasons clients gave, which are free text.
	DeadLettered map[string]uint64
	LockLost     uint64 // settlements and renewals refused because the lock was gone
}

func (s *stats) count(ev *event.Event) {
	switch ev.Type {
	case event.Enqueued, event.Scheduled, event.Forwarded:
		s.sent.Add(1)
	case event.Locked, event.ReceivedAndDeleted:
		s.delivered.Add(1)
	case event.Completed:
		s.completed.Add(1)
	case event.Abandoned:
		s.abandoned.Add(1)
	case event.Released:
		s.released.Add(1)
	case event.Deferred:
		s.deferred.Add(1)
	case event.Expired:
		s.expired.Add(1)
	case event.LockExpired:
		s.lockExpired.Add(1)
	case event.Deleted:
		s.deleted.Add(1)
	case event.DeadLettered:
		switch ev.Reason {
		case projection.ReasonMaxDeliveryCount:
			s.deadLetteredMaxDelivery.Add(1)
		case projection.ReasonTTLExpired:
			s.deadLetteredExpired.Add(1)
		default:
			s.deadLetteredOther.Add(1)
		}
	}
}

// Stats returns the entity's counters.
func (e *Entity) Stats() Stats {
	s := &e.stats
	return Stats{
		Sent: s.sent.Load(), Delivered: s.delivered.Load(), Completed: s.completed.Load(),
		Abandoned: s.abandoned.Load(), Released: s.released.Load(), Deferred: s.deferred.Load(),
		Expired: s.expired.Load(), LockExpired: s.lockExpired.Load(), LockLost: s.lockLost.Load(),
		Deleted: s.deleted.Load(),
		DeadLettered: map[string]uint64{
			projection.ReasonMaxDeliveryCount: s.deadLetteredMaxDelivery.Load(),
			projection.ReasonTTLExpired:       s.deadLetteredExpired.Load(),
			"client":                          s.deadLetteredOther.Load(),
		},
	}
}

// SnapshotStats describes one snapshot an entity wrote.
type SnapshotStats struct {
	Entity string
	Index  uint64
	Bytes  int // of encoded state, before compression
	Took   time.Duration
	Err    error
}
