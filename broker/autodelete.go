package broker

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// AutoDeleteOnIdle: an entity whose setting is not zero is deleted once it
// has been idle that long, as Service Bus does. Idle means, for a queue, no
// send, receive, settlement, peek or change and no receiver attached; for
// a topic, no send or change; for a subscription, no receive, settlement or
// peek and no receiver attached. An entity that forwards (ForwardTo) is
// never idle. The deletion is the same as a client's: an event in the
// namespace log (or the topic's, for a subscription), so it holds across
// restarts. After a restart an entity's idle time counts from the start.

// activity is when an entity, and each of a topic's subscriptions, was last
// used (unix ns). accessed is the last message operation or receiver since
// the broker started (0: none), the administration API's AccessedAt; last
// also counts changes of the entity and starts at its opening.
type activity struct {
	// since is when this node began to see the entity's use: when it
	// opened it, or, in a cluster, when it began to lead it (a follower
	// sees none). Idleness counts from no earlier.
	since    atomic.Int64
	last     atomic.Int64
	accessed atomic.Int64
	subs     sync.Map // subscription queue number -> *atomic.Int64
}

// touch records a use of queue q of e now: of the entity, and of q's
// subscription if it has one.
func (e *Entity) touch(q uint32) {
	now := e.b.clock.Now().UnixNano()
	e.active.last.Store(now)
	e.active.accessed.Store(now)
	if q >= event.QueueGroup {
		g := q - q%event.QueueGroup
		v, ok := e.active.subs.Load(g)
		if !ok {
			v, _ = e.active.subs.LoadOrStore(g, &atomic.Int64{}) // allocates once per subscription
		}
		v.(*atomic.Int64).Store(now)
	}
}

// autoDelete deletes every entity and subscription idle for longer than its
// AutoDeleteOnIdle. It runs every Options.AutoDeleteScan.
func (b *Broker) autoDelete() {
	now := b.clock.Now().UnixNano()
	scale := max(b.opts.AutoDeleteScale, 1)
	idleFor := func(cfg projection.Config, last int64) bool {
		return cfg.AutoDeleteOnIdle > 0 && cfg.ForwardTo == "" &&
			time.Duration(now-last) >= cfg.AutoDeleteOnIdle/time.Duration(scale)
	}
	for _, e := range b.Entities() {
		cfg := e.cfg.Load()
		if cfg == nil {
			continue
		}
		if b.opts.Cluster != nil && !e.Leading() {
			// Its use is seen where it is led. (The deletion itself is
			// the metadata group's leader's: where one node leads both.)
			continue
		}
		if idleFor(*cfg, max(e.active.last.Load(), e.active.since.Load())) && !e.hasReceivers(nil) {
			if err := b.DeleteEntity(e.name); err == nil {
				b.logger.Info("entity deleted: idle for its AutoDeleteOnIdle", "entity", e.name, "auto_delete_on_idle", cfg.AutoDeleteOnIdle)
			}
			continue
		}
		if !e.IsTopic() {
			continue
		}
		subs, err := e.Subscriptions()
		if err != nil {
			continue
		}
		for _, s := range subs {
			last := max(s.Created, e.active.since.Load())
			if v, ok := e.active.subs.Load(s.Queue); ok {
				last = max(last, v.(*atomic.Int64).Load())
			}
			group := s.Queue
			if idleFor(s.Config, last) && !e.hasReceivers(&group) {
				if err := e.DeleteSubscription(s.Name); err == nil {
					b.logger.Info("subscription deleted: idle for its AutoDeleteOnIdle", "entity", e.name,
						"subscription", s.Name, "auto_delete_on_idle", s.Config.AutoDeleteOnIdle)
				}
			}
		}
	}
}

// hasReceivers says whether a receiver is attached to the entity or, with
// group, to that subscription's queues.
func (e *Entity) hasReceivers(group *uint32) bool {
	has, err := call(e, func(e *Entity) (bool, error) {
		for r := range e.receivers {
			if group == nil || r.opts.Queue-r.opts.Queue%event.QueueGroup == *group {
				return true, nil
			}
		}
		return false, nil
	})
	return err != nil || has
}

// runAutoDelete scans for idle entities until the broker closes.
func (b *Broker) runAutoDelete() {
	t := time.NewTicker(b.opts.AutoDeleteScan)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			b.autoDelete()
		case <-b.idleScan:
			b.autoDelete()
		case <-b.quit:
			return
		}
	}
}

// Accessed is when e last had a message operation or a receiver attached
// since the broker started; the zero time if it has had none.
func (e *Entity) Accessed() time.Time { return unixOrZero(e.active.accessed.Load()) }

// SubscriptionAccessed is Accessed for the subscription whose queue is q.
func (e *Entity) SubscriptionAccessed(q uint32) time.Time {
	if v, ok := e.active.subs.Load(q); ok {
		return unixOrZero(v.(*atomic.Int64).Load())
	}
	return time.Time{}
}

func unixOrZero(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
