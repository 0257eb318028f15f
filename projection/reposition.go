package projection

import (
	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
)

// Reposition sets where each record the state reads sits in the log, as
// at says: a cluster member's storage knows, while the events its entity
// applied came without positions (docs/cluster.md). Records at does not
// know (those in an archive) keep theirs. It is for a copy from Frozen,
// before Encode: the offline tools read a snapshot's positions.
func (e *Entity) Reposition(at func(index uint64) (event.Position, bool)) {
	for _, q := range e.queues {
		if q == nil {
			continue
		}
		type moved struct {
			seq  uint64
			meta index.Meta
		}
		var ms []moved
		q.msgs.Range(func(seq uint64, m index.Meta) bool {
			if p, ok := at(seq); ok && p != m.Pos {
				m.Pos = p
				ms = append(ms, moved{seq, m})
			}
			return true
		})
		for _, m := range ms {
			q.msgs.Put(m.seq, m.meta)
		}
		for _, refs := range q.overlays {
			for i := range refs {
				if p, ok := at(refs[i].Index); ok {
					refs[i].Pos = p
				}
			}
		}
	}
	if lp := &e.topic.lastPub; lp.Index != 0 {
		if p, ok := at(lp.Index); ok {
			lp.Pos = p
		}
	}
}
