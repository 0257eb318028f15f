package index

import (
	"encoding/binary"

	"github.com/walbus/walbus/log/event"
)

// Lock is a message lock held by a receiver.
type Lock struct {
	Token    event.LockToken
	Until    int64 // unix ns
	Receiver string
}

// Locks maps SequenceNumber to the lock on that message.
type Locks struct {
	m map[uint64]Lock
}

func NewLocks() *Locks { return &Locks{m: make(map[uint64]Lock)} }

func (l *Locks) Get(seq uint64) (Lock, bool) {
	lk, ok := l.m[seq]
	return lk, ok
}

func (l *Locks) Put(seq uint64, lk Lock) { l.m[seq] = lk }
func (l *Locks) Delete(seq uint64)       { delete(l.m, seq) }
func (l *Locks) Len() int                { return len(l.m) }

// Seqs returns the locked SequenceNumbers in no particular order.
func (l *Locks) Seqs() []uint64 {
	out := make([]uint64, 0, len(l.m))
	for seq := range l.m {
		out = append(out, seq)
	}
	return out
}

// MakeToken builds the lock token for a lock on seq: the SequenceNumber in
// the first 8 bytes (so a token leads straight to its message without a
// second map) and 8 unguessable bytes the broker supplies.
func MakeToken(seq, nonce uint64) event.LockToken {
	var t event.LockToken
	binary.BigEndian.PutUint64(t[:8], seq)
	binary.BigEndian.PutUint64(t[8:], nonce)
	return t
}

// TokenSeq returns the SequenceNumber a token was made for.
func TokenSeq(t event.LockToken) uint64 { return binary.BigEndian.Uint64(t[:8]) }
