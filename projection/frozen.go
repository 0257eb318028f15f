package projection

import (
	"maps"
	"slices"

	"github.com/walbus/walbus/index"
)

// Frozen returns a copy of e that Encode reads as it reads e, and that
// later changes to e do not reach: the broker takes it on the entity's
// actor, where it costs about a copy of the message tables, and encodes it
// on another goroutine, so a large state (a topic with many subscriptions
// and a backlog) does not hold the actor for its encoding. Only Encode
// may use the copy: its message sets and session indexes are left out.
func (e *Entity) Frozen() *Entity {
	f := &Entity{name: e.name, cfg: e.cfg, created: e.created, last: e.last, lastTime: e.lastTime,
		dedup: e.dedup.Clone(), forwarded: maps.Clone(e.forwarded), via: make(map[string]*index.Dedup, len(e.via))}
	for k, d := range e.via {
		f.via[k] = d.Clone()
	}
	f.topic = topicState{next: e.topic.next, lastPub: e.topic.lastPub}
	subs := map[*Subscription]*Subscription{}
	for _, s := range e.topic.subs {
		c := *s
		c.rules = slices.Clone(s.rules) // compiled rules never change
		subs[s] = &c
		f.topic.subs = append(f.topic.subs, &c)
	}
	f.queues = make([]*Queue, len(e.queues))
	for i, q := range e.queues {
		if q == nil {
			continue
		}
		c := &Queue{No: q.No, transfer: q.transfer, cfg: &f.cfg, msgs: q.msgs.Clone(), locks: q.locks.Clone(),
			overlays:  make(map[uint64][]Ref, len(q.overlays)),
			ttlTimers: q.ttlTimers.Clone(), scheduleTimers: q.scheduleTimers.Clone()}
		if s := e.SubscriptionOf(q.No); s != nil {
			c.cfg = &subs[s].cfg
		}
		for seq, refs := range q.overlays {
			c.overlays[seq] = slices.Clone(refs)
		}
		if q.sessions != nil {
			c.sessions = q.sessions.CloneForEncoding()
		}
		f.queues[i] = c
	}
	return f
}
