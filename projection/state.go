package projection

import (
	"cmp"
	"slices"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
)

// Entity is the state of one entity log: its config, its queues (the queue
// itself, its dead-letter and its transfer dead-letter subqueue; see
// event.QueueGroup) and the duplicate-detection window.
type Entity struct {
	name    string
	cfg     Config
	created bool
	queues  []*Queue // indexed by queue number; nil for a deleted subscription's
	topic   topicState
	dedup   *index.Dedup
	// forwarded is, per source entity id, the SequenceNumber there of the
	// last message that arrived from it by dead-letter forwarding.
	forwarded map[uint64]uint64
	// via is, per entity that forwards here (by lower-case name), the
	// MessageIds its duplicate detection accepted: it stores nothing of its
	// own, so its memory is kept where its messages went (event.Remembered).
	// Each window forgets as new ids arrive through it; one that stopped
	// forwarding here keeps its last window's ids.
	via      map[string]*index.Dedup
	last     uint64 // index of the last applied event
	lastTime int64  // its timestamp
}

// Queue is one queue of an entity: the sets of messages by state as roaring
// bitmaps of SequenceNumbers, and the indexes that go with them.
type Queue struct {
	No        uint32
	cfg       *Config // its behaviour: the entity's, or its subscription's
	bytes     uint64  // the records of its messages, for the entity's size quota
	msgs      *index.Messages
	available *roaring64.Bitmap
	locked    *roaring64.Bitmap
	deferred  *roaring64.Bitmap
	scheduled *roaring64.Bitmap
	all       *roaring64.Bitmap // every message of the queue, for peek and truncation
	locks     *index.Locks
	sessions  *index.Sessions // nil unless messages are grouped by session
	transfer  bool            // the transfer queue: nothing here is dead-lettered
	// overlays lists, per message, the records (abandon, defer, dead-letter)
	// that modify its application properties, oldest first.
	overlays map[uint64][]Ref

	lockTimers     index.Timers // Key: SequenceNumber, At: locked-until
	ttlTimers      index.Timers // Key: SequenceNumber, At: expiry
	scheduleTimers index.Timers // Key: SequenceNumber, At: activation time
	sessionTimers  index.Timers // Key: session number, At: session locked-until
}

// Ref points at a log record.
type Ref = event.Ref

// New returns the empty state of an entity log.
func New() *Entity {
	e := &Entity{cfg: DefaultConfig(), dedup: index.NewDedup(), forwarded: map[uint64]uint64{},
		via: map[string]*index.Dedup{}}
	e.queues = []*Queue{newQueue(event.MainQueue, false, &e.cfg), newQueue(event.DeadLetterQueue, false, &e.cfg),
		newQueue(event.TransferDeadLetterQueue, false, &e.cfg)}
	return e
}

func newQueue(no uint32, sessions bool, cfg *Config) *Queue {
	q := &Queue{
		No:        no,
		cfg:       cfg,
		msgs:      index.NewMessages(),
		available: roaring64.New(),
		locked:    roaring64.New(),
		deferred:  roaring64.New(),
		scheduled: roaring64.New(),
		all:       roaring64.New(),
		locks:     index.NewLocks(),
		overlays:  make(map[uint64][]Ref),
	}
	if sessions {
		q.sessions = index.NewSessions()
	}
	return q
}

// Name is the entity's name, from its EntityCreated event.
func (e *Entity) Name() string { return e.name }

// Config is the entity's current config.
func (e *Entity) Config() Config { return e.cfg }

// Created reports whether the log's EntityCreated event has been applied.
func (e *Entity) Created() bool { return e.created }

// LastIndex is the index of the last applied event.
func (e *Entity) LastIndex() uint64 { return e.last }

// LastTime is the timestamp of the last applied event.
func (e *Entity) LastTime() int64 { return e.lastTime }

// Queue returns queue no, or nil.
func (e *Entity) Queue(no uint32) *Queue {
	if int(no) < len(e.queues) && e.queues[no] != nil {
		return e.queues[no]
	}
	return nil
}

// deadLetterQueueOf is the dead-letter subqueue of queue no's group.
func deadLetterQueueOf(no uint32) uint32 { return event.SubqueueOf(no, event.KindDeadLetter) }

// isDeadLetterQueue reports whether queue no is a dead-letter subqueue, the
// plain one or the transfer one: nothing is sent there, nothing there is
// dead-lettered again or expires, and a message's arrival there is the
// record that moved it.
func isDeadLetterQueue(no uint32) bool { return event.KindOf(no) != event.KindMessages }

// IsDeadLetterQueue reports whether queue number no is a dead-letter queue
// (plain or transfer).
func IsDeadLetterQueue(no uint32) bool { return isDeadLetterQueue(no) }

// Counts is how many messages a queue holds in each state.
type Counts struct {
	Available, Locked, Deferred, Scheduled, Total uint64
}

func (q *Queue) Counts() Counts {
	return Counts{
		Available: q.available.GetCardinality(),
		Locked:    q.locked.GetCardinality(),
		Deferred:  q.deferred.GetCardinality(),
		Scheduled: q.scheduled.GetCardinality(),
		Total:     q.all.GetCardinality(),
	}
}

// Message returns the metadata of message seq.
func (q *Queue) Message(seq uint64) (index.Meta, bool) { return q.msgs.Get(seq) }

// Lock returns the lock on message seq.
func (q *Queue) Lock(seq uint64) (index.Lock, bool) { return q.locks.Get(seq) }

// arrival is the index of the record that put message seq where it is:
// in a dead-letter queue the last of its overlays (the dead-lettering, or
// a later change to its properties), elsewhere its SequenceNumber.
func (q *Queue) arrival(seq uint64) uint64 {
	if refs := q.overlays[seq]; len(refs) > 0 && isDeadLetterQueue(q.No) {
		return refs[len(refs)-1].Index
	}
	return seq
}

// SizeBytes is how much the entity's messages take: the records of the
// messages of every queue (a topic's message counts once per subscription
// that holds it). MaxSizeMB is checked against it.
func (e *Entity) SizeBytes() uint64 {
	var n uint64
	for _, q := range e.liveQueues() {
		n += q.bytes
	}
	return n
}

// Overlays returns the records that modify message seq, oldest first.
func (q *Queue) Overlays(seq uint64) []Ref { return q.overlays[seq] }

// Peek returns up to max messages with SequenceNumber >= from and <= limit,
// in order, whatever their state.
func (q *Queue) Peek(from uint64, max int, limit uint64) []uint64 {
	var out []uint64
	it := q.all.Iterator()
	it.AdvanceIfNeeded(from)
	for it.HasNext() && len(out) < max {
		seq := it.Next()
		if seq > limit {
			break
		}
		out = append(out, seq)
	}
	return out
}

// WalkAvailable calls visit with the queue's available messages in the
// order receivers take them (SequenceNumber order; a session receiver
// takes its session's in that order too) until visit returns false. visit
// says where to go on from: seq+1, or a later SequenceNumber to skip to.
func (q *Queue) WalkAvailable(visit func(seq uint64) (from uint64, more bool)) {
	it := q.available.Iterator()
	for it.HasNext() {
		seq := it.Next()
		from, more := visit(seq)
		if !more {
			return
		}
		if from > seq+1 {
			it.AdvanceIfNeeded(from)
		}
	}
}

// Sessions returns the session table, nil when the queue has no sessions.
func (q *Queue) Sessions() *index.Sessions { return q.sessions }

// Timer liveness: an entry is live while the thing it times still holds.
func (q *Queue) lockLive(t index.Timer) bool {
	lk, ok := q.locks.Get(t.Key)
	return ok && lk.Until == t.At
}

// A deferred message never expires, not even while it is locked after a
// receive by sequence number, so its expiry entry is stale for good; this
// keeps the set of live entries independent of when stale ones were dropped.
func (q *Queue) ttlLive(t index.Timer) bool {
	m, ok := q.msgs.Get(t.Key)
	return ok && (m.State == index.Available || m.State == index.Locked && m.Flags&index.FlagDeferred == 0)
}

func (q *Queue) scheduleLive(t index.Timer) bool {
	m, ok := q.msgs.Get(t.Key)
	return ok && m.State == index.Scheduled
}

func (q *Queue) sessionLive(t index.Timer) bool {
	s := q.sessions.ByNo(uint32(t.Key))
	return s != nil && s.Owner != "" && s.LockedUntil == t.At
}

// ttlActionable: a due expiry can be acted on only while the message is
// available; a locked message expires when its lock ends.
func (q *Queue) ttlActionable(t index.Timer) bool {
	m, ok := q.msgs.Get(t.Key)
	return ok && m.State == index.Available
}

// NextDeadline is the earliest time at which a timer (lock expiry,
// activation, message expiry, session lock expiry) needs a Tick or an
// Activate, or 0 if none is pending.
func (e *Entity) NextDeadline() int64 {
	var next int64
	consider := func(t index.Timer, ok bool) {
		if ok && (next == 0 || t.At < next) {
			next = t.At
		}
	}
	for _, q := range e.liveQueues() {
		consider(q.lockTimers.Earliest(q.lockLive))
		consider(q.ttlTimers.Earliest(q.ttlActionable))
		consider(q.scheduleTimers.Earliest(q.scheduleActionable))
		if q.sessions != nil {
			consider(q.sessionTimers.Earliest(q.sessionLive))
		}
	}
	return next
}

// DueScheduled returns the scheduled messages of queue no whose activation
// time is at or before now and which are not held, in SequenceNumber order. The shell reads each
// one's record and activates it with an Activate command.
func (e *Entity) DueScheduled(no uint32, now int64) []uint64 {
	q := e.Queue(no)
	if q == nil {
		return nil
	}
	var out []uint64
	q.scheduleTimers.Due(now, func(t index.Timer) {
		if q.scheduleActionable(t) {
			out = append(out, t.Key)
		}
	})
	slices.Sort(out)
	return slices.Compact(out)
}

// NeededBytesBelow is the size of what NeededBelow(cut) would list, or
// any sum over limit once it passes it: a compaction asks whether it is
// worth it before it lists and sorts the records. It allocates nothing and
// reads only what Frozen copies.
func (e *Entity) NeededBytesBelow(cut uint64, limit int64) int64 {
	var n int64
	for _, q := range e.liveQueues() {
		q.msgs.Range(func(seq uint64, m index.Meta) bool {
			if seq >= cut {
				return false
			}
			n += int64(m.Pos.Size)
			return n <= limit
		})
		if n > limit {
			return n
		}
		for _, ovs := range q.overlays {
			for _, ov := range ovs {
				if ov.Index < cut {
					if n += int64(ov.Pos.Size); n > limit {
						return n
					}
				}
			}
		}
	}
	return n
}

// NeededBelow lists the records below index cut that the state still
// reads, in index order, once each: every live message's own record and
// the records that modify it (its overlays). They are what a compaction
// must keep when it drops the log before cut. It reads only what Frozen
// copies.
func (e *Entity) NeededBelow(cut uint64) []Ref {
	var refs []Ref
	for _, q := range e.liveQueues() {
		q.msgs.Range(func(seq uint64, m index.Meta) bool {
			if seq >= cut {
				return false
			}
			refs = append(refs, Ref{Index: seq, Pos: m.Pos})
			return true
		})
		for _, ovs := range q.overlays {
			for _, ov := range ovs {
				if ov.Index < cut {
					refs = append(refs, ov)
				}
			}
		}
	}
	slices.SortFunc(refs, func(a, b Ref) int { return cmp.Compare(a.Index, b.Index) })
	return slices.CompactFunc(refs, func(a, b Ref) bool { return a.Index == b.Index })
}

// FirstNeeded is the lowest log index the state still reads records from:
// the oldest message of any queue (a message's modifying records come after
// it). Everything before it is dead and may be truncated once a snapshot
// covers it.
func (e *Entity) FirstNeeded() uint64 { return e.FirstNeededFrom(0) }

// FirstNeededFrom is FirstNeeded for a log whose records below from are
// kept elsewhere (a compaction archive): the lowest index at or above from
// that the state reads, which may be a later record modifying an older
// message.
func (e *Entity) FirstNeededFrom(from uint64) uint64 {
	first := e.last + 1
	for _, q := range e.liveQueues() {
		it := q.all.Iterator()
		it.AdvanceIfNeeded(from)
		if it.HasNext() {
			seq := it.Next()
			first = min(first, seq)
			// A rule action's copy reads its body from the Published
			// record before it (its first overlay); the oldest message's
			// is the oldest such record (copies follow their record in
			// its atomic group).
			if refs := q.overlays[seq]; len(refs) > 0 && refs[0].Index < seq {
				first = min(first, refs[0].Index)
			}
		}
		if from == 0 {
			continue
		}
		for seq, refs := range q.overlays {
			if seq >= from {
				continue // its message comes first
			}
			for _, r := range refs {
				if r.Index >= from {
					first = min(first, r.Index)
				}
			}
		}
	}
	return first
}
