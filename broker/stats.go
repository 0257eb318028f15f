package broker

import (
	"sync"
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

	// subs counts per subscription of a topic, by its first queue number.
	subsMu sync.Mutex
	subs   map[uint32]*subCounters
}

// subCounters are one subscription's counters (its dead-letter queues'
// events count in its own).
type subCounters struct {
	enqueued, delivered, completed, abandoned, deadLettered, expired atomic.Uint64
}

// SubscriptionStats are a subscription's counters since its topic was
// opened.
type SubscriptionStats struct {
	Enqueued     uint64 // messages its rules gave it (copies included)
	Delivered    uint64
	Completed    uint64
	Abandoned    uint64
	DeadLettered uint64
	Expired      uint64
}

// sub returns the counters of the subscription that owns queue no.
func (s *stats) sub(no uint32) *subCounters {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	return s.subLocked(no)
}

// subLocked is sub with subsMu held.
func (s *stats) subLocked(no uint32) *subCounters {
	no -= no % event.QueueGroup
	c := s.subs[no]
	if c == nil {
		if s.subs == nil {
			s.subs = map[uint32]*subCounters{}
		}
		c = &subCounters{}
		s.subs[no] = c
	}
	return c
}

// countSubscription counts ev in its subscription's counters.
func (s *stats) countSubscription(ev *event.Event) {
	switch ev.Type {
	case event.Published:
		routes, _ := event.DecodeRoutes(ev.Props)
		s.subsMu.Lock()
		for _, no := range routes {
			s.subLocked(no).enqueued.Add(1)
		}
		s.subsMu.Unlock()
	case event.Copied:
		s.sub(ev.Queue).enqueued.Add(1)
		if ev.Reason != "" {
			s.sub(ev.Queue).deadLettered.Add(1)
		}
	case event.Locked, event.ReceivedAndDeleted:
		s.sub(ev.Queue).delivered.Add(1)
	case event.Completed:
		s.sub(ev.Queue).completed.Add(1)
	case event.Abandoned:
		s.sub(ev.Queue).abandoned.Add(1)
	case event.DeadLettered:
		s.sub(ev.Queue).deadLettered.Add(1)
	case event.Expired:
		s.sub(ev.Queue).expired.Add(1)
	case event.SubscriptionDeleted:
		s.subsMu.Lock()
		delete(s.subs, ev.Queue)
		s.subsMu.Unlock()
	}
}

// SubscriptionStats returns the counters of the subscription whose queue
// is queue.
func (e *Entity) SubscriptionStats(queue uint32) SubscriptionStats {
	c := e.stats.sub(queue)
	return SubscriptionStats{Enqueued: c.enqueued.Load(), Delivered: c.delivered.Load(), Completed: c.completed.Load(),
		Abandoned: c.abandoned.Load(), DeadLettered: c.deadLettered.Load(), Expired: c.expired.Load()}
}

// Stats are an entity's counters since it was opened.
type Stats struct {
	Sent        uint64 // messages stored (enqueued or scheduled, or forwarded here; published to a topic)
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
	if ev.Queue >= event.QueueGroup || ev.Type == event.Published || ev.Type == event.Copied {
		s.countSubscription(ev)
	}
	switch ev.Type {
	case event.Enqueued, event.Forwarded:
		s.sent.Add(1)
	case event.Scheduled, event.Published:
		if ev.Seq == 0 { // not the activation of a scheduled message, already counted
			s.sent.Add(1)
		}
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
