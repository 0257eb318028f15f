package index

import (
	"maps"
	"slices"
)

// Copies for a snapshot: the broker copies an entity's state on its actor
// (at the speed of copying memory) and encodes the copy on another
// goroutine, so the actor is not held for the encoding of a large state.
// Each copy shares nothing the original goes on changing.

// Clone returns a copy of ms.
func (ms *Messages) Clone() *Messages {
	out := &Messages{chunks: make(map[uint64]*chunk, len(ms.chunks)), n: ms.n}
	for high, c := range ms.chunks {
		out.chunks[high] = &chunk{lows: slices.Clone(c.lows), metas: slices.Clone(c.metas), dead: c.dead}
	}
	return out
}

// Clone returns a copy of l.
func (l *Locks) Clone() *Locks { return &Locks{m: maps.Clone(l.m)} }

// Clone returns a copy of d.
func (d *Dedup) Clone() *Dedup {
	return &Dedup{seen: maps.Clone(d.seen), order: slices.Clone(d.order[d.head:])}
}

// Clone returns a copy of t.
func (t *Timers) Clone() Timers { return Timers{h: slices.Clone(t.h)} }

// CloneForEncoding returns a copy of t with what an encoding reads: the
// numbering and each session's number, id, owner, lock and state. The
// copy's per-session message sets are empty and its heads index is not
// kept: it serves Numbering, Sorted and ByNo only.
func (t *Sessions) CloneForEncoding() *Sessions {
	out := &Sessions{byNo: make(map[uint32]*Session, len(t.byNo)), byID: maps.Clone(t.byID),
		free: slices.Clone(t.free), next: t.next}
	for no, s := range t.byNo {
		c := &Session{No: s.No, ID: s.ID, Messages: s.Messages, Owner: s.Owner, LockedUntil: s.LockedUntil,
			State: s.State, StateTime: s.StateTime}
		out.byNo[no] = c
	}
	return out
}
