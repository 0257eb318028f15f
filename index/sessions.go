package index

import (
	"fmt"
	"slices"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// Session is one message session of a session-enabled queue.
type Session struct {
	No          uint32 // the number messages refer to (Meta.Session)
	ID          string
	Available   *roaring64.Bitmap // the session's available messages, FIFO by SequenceNumber
	Locked      *roaring64.Bitmap // its messages locked through the session receiver
	Messages    int               // its messages in any state
	Owner       string            // receiver holding the session lock; "" when free
	LockedUntil int64             // unix ns
	State       []byte            // opaque session state set by clients
	StateTime   int64             // when State was last set, unix ns
	head        uint64            // SequenceNumber registered in Sessions.heads, 0 if none
}

// Sessions is the session table of one queue. It keeps, for sessions that
// are free and have available messages, their oldest available message in a
// bitmap, so "accept the next session" is a Minimum() away and picks the
// session whose head has waited longest.
type Sessions struct {
	byNo  map[uint32]*Session
	byID  map[string]uint32
	free  []uint32 // released session numbers, reused last-in first-out
	next  uint32
	heads *roaring64.Bitmap
	owner map[uint64]uint32 // head SequenceNumber -> session number
}

func NewSessions() *Sessions {
	return &Sessions{
		byNo:  make(map[uint32]*Session),
		byID:  make(map[string]uint32),
		heads: roaring64.New(),
		owner: make(map[uint64]uint32),
	}
}

// Get returns the session with the given id, or nil.
func (t *Sessions) Get(id string) *Session {
	if no, ok := t.byID[id]; ok {
		return t.byNo[no]
	}
	return nil
}

// ByNo returns the session with the given number, or nil.
func (t *Sessions) ByNo(no uint32) *Session { return t.byNo[no] }

// Ensure returns the session with id, creating it if needed.
func (t *Sessions) Ensure(id string) *Session {
	if s := t.Get(id); s != nil {
		return s
	}
	var no uint32
	if n := len(t.free); n > 0 {
		no, t.free = t.free[n-1], t.free[:n-1]
	} else {
		t.next++
		no = t.next
	}
	s := &Session{No: no, ID: id, Available: roaring64.New(), Locked: roaring64.New()}
	t.byNo[no] = s
	t.byID[id] = no
	return s
}

// Collect forgets s if nothing refers to it any more: no messages, no state,
// no lock.
func (t *Sessions) Collect(s *Session) {
	if s.Messages > 0 || s.State != nil || s.Owner != "" {
		return
	}
	t.setHead(s, 0)
	delete(t.byNo, s.No)
	delete(t.byID, s.ID)
	t.free = append(t.free, s.No)
}

// Refresh re-registers s among the free sessions with available messages
// after its lock or its available set changed.
func (t *Sessions) Refresh(s *Session) {
	var head uint64
	if s.Owner == "" && !s.Available.IsEmpty() {
		head = s.Available.Minimum()
	}
	t.setHead(s, head)
}

func (t *Sessions) setHead(s *Session, head uint64) {
	if s.head == head {
		return
	}
	if s.head != 0 {
		t.heads.Remove(s.head)
		delete(t.owner, s.head)
	}
	s.head = head
	if head != 0 {
		t.heads.Add(head)
		t.owner[head] = s.No
	}
}

// NextFree returns the free session whose oldest available message has the
// lowest SequenceNumber, or nil.
func (t *Sessions) NextFree() *Session {
	if t.heads.IsEmpty() {
		return nil
	}
	return t.byNo[t.owner[t.heads.Minimum()]]
}

// Len is the number of sessions known.
func (t *Sessions) Len() int { return len(t.byNo) }

// Sorted returns all sessions ordered by id, for snapshots and listings.
func (t *Sessions) Sorted() []*Session {
	out := make([]*Session, 0, len(t.byNo))
	for _, s := range t.byNo {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *Session) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out
}

// Numbering returns how session numbers are handed out: the highest number
// issued and the free list. Snapshots keep both so a restored table numbers
// new sessions exactly as the original would have.
func (t *Sessions) Numbering() (next uint32, free []uint32) { return t.next, t.free }

// Restore rebuilds a table from a snapshot: the sessions (with their
// messages already counted in Available, Locked and Messages) and the
// numbering. It rejects numbers or ids used twice, numbers beyond next, and
// a numbering with gaps: every number up to next is a session's or free,
// so a damaged next (near 2^32, where Ensure would wrap and reuse numbers
// in use) cannot pass.
func Restore(sessions []*Session, next uint32, free []uint32) (*Sessions, error) {
	if uint64(len(sessions))+uint64(len(free)) != uint64(next) {
		return nil, fmt.Errorf("session numbering: %d sessions and %d free numbers, but %d issued", len(sessions), len(free), next)
	}
	t := NewSessions()
	t.next = next
	used := make(map[uint32]bool, len(sessions)+len(free))
	for _, no := range free {
		if no == 0 || no > next || used[no] {
			return nil, fmt.Errorf("free session number %d invalid", no)
		}
		used[no] = true
	}
	t.free = free
	for _, s := range sessions {
		if s.No == 0 || s.No > next || used[s.No] {
			return nil, fmt.Errorf("session number %d invalid or reused", s.No)
		}
		if _, dup := t.byID[s.ID]; dup {
			return nil, fmt.Errorf("session %q twice", s.ID)
		}
		used[s.No] = true
		t.byNo[s.No] = s
		t.byID[s.ID] = s.No
		t.Refresh(s)
	}
	return t, nil
}
