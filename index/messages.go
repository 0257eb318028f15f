// Package index holds walbus's in-memory lookups: per-message metadata with
// its log position, lock records, timer queues, the duplicate-detection
// window and the session table. They are plain data structures; the rules
// that change them live in package projection.
package index

import "github.com/walbus/walbus/log"

// State is where a message stands in its queue.
type State uint8

const (
	Available State = iota + 1
	Locked
	Deferred
	Scheduled
)

func (s State) String() string {
	switch s {
	case Available:
		return "available"
	case Locked:
		return "locked"
	case Deferred:
		return "deferred"
	case Scheduled:
		return "scheduled"
	}
	return "invalid"
}

// Message flags.
const (
	// FlagDeferred marks a locked message that was deferred before it was
	// received by sequence number: when its lock ends it is deferred again.
	FlagDeferred uint8 = 1 << iota
)

// Meta is what the broker keeps in memory per message, 16 bytes. Everything
// else (body, ids, times) is in the message's log record, read by Pos.
type Meta struct {
	Pos        log.Position // where the record at the message's SequenceNumber is
	Session    uint32       // session number in the Sessions table, 0 for none
	Deliveries uint16       // failed delivery attempts so far (saturates)
	State      State
	Flags      uint8
}

// AddDelivery counts one more failed delivery attempt.
func (m *Meta) AddDelivery() {
	if m.Deliveries < ^uint16(0) {
		m.Deliveries++
	}
}

// Messages maps SequenceNumber to Meta for one queue.
type Messages struct {
	m map[uint64]Meta
}

func NewMessages() *Messages { return &Messages{m: make(map[uint64]Meta)} }

func (ms *Messages) Get(seq uint64) (Meta, bool) {
	m, ok := ms.m[seq]
	return m, ok
}

func (ms *Messages) Put(seq uint64, m Meta) { ms.m[seq] = m }
func (ms *Messages) Delete(seq uint64)      { delete(ms.m, seq) }
func (ms *Messages) Len() int               { return len(ms.m) }
