package projection

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
)

// The canonical encoding of an Entity: equal states encode to equal bytes,
// whatever history led to them. Everything is written in a fixed order
// (SequenceNumbers ascending, sessions by number) and only what cannot be
// derived is written: the bitmaps, heap layouts, lock timers, session heads
// and per-session sets are rebuilt from the messages on decode.
//
//	version, name, created, config (JSON), last index, last time
//	dedup: count, (id, time)... in acceptance order
//	forwarded (version 2): count, (source id, seq)... by source id
//	via (version 4): count, (entity name, count, (id, time)... in acceptance order)... by name
//	queues: count (version 3: 3 with the transfer dead-letter subqueue; before: 2), then per queue:
//	  number, has-sessions
//	  sessions (if any): next number, free numbers, count, (no, id, owner, locked-until, has-state, state, state-time)...
//	  messages: count, (seq delta, state, flags, deliveries, offset, size, session no)...
//	  locks: count, (seq, token, until, receiver)...
//	  overlays: count, (seq, refs count, (index, offset, size)...)...
//	  expiries: count, (seq, at)...      live TTL timers
//	  activations: count, (seq, at)...   live schedule timers
//
// Version 5 writes the queues that exist (a topic's subscriptions add
// groups; a deleted one leaves a gap), each with its number, and then a
// topic's subscriptions:
//
//	next group, last published (index, offset, size)
//	count, (queue, name, created, config (JSON), rules: count, (rule (JSON))...)... by queue
//
// Version 6 stores where each message's record is once per entity, not
// once per queue that holds it: a message's record is the one at its
// SequenceNumber, and a topic's subscriptions hold the same numbers. After
// via comes the table of every live message, and the queues name messages
// by their ordinal in it:
//
//	positions: count, (seq delta, offset, size)... ascending
//
// and in each queue, instead of the messages above:
//
//	plain messages (available, never delivered, no flags, no session):
//	  runs: count, (ordinal gap from the previous run's end, length - 1)...
//	other messages: count, (ordinal delta, state, flags, deliveries, session no)...
//
// A subscription holding a stretch of the topic's messages costs a few
// bytes, one that completed every other message about two bytes each.
//
// Version 7 lets a queue entity hold its transfer queue (number 3: what
// was sent through it for other entities, waiting to reach them) among its
// queues; its layout is any queue's. Version 8 lets a scheduled message
// be held for a transaction (index.FlagHeld among its flags).
const encodingVersion = 8

// Encode appends the canonical encoding of e to dst.
func (e *Entity) Encode(dst []byte) []byte {
	dst, _ = e.encode(encodingVersion, dst, nil)
	return dst
}

// EncodePieces hands the canonical encoding of e to add in pieces, which
// one after another are Encode's bytes: the entity's own state and the
// table of positions, each queue (a subscription's state is its three),
// and the topic's subscriptions and rules. A snapshot stores each piece
// apart (package snapshot), so only one is in memory at a time: a piece is
// valid only during the call. It stops at the first error add returns.
func (e *Entity) EncodePieces(add func(piece []byte) error) error {
	_, err := e.encode(encodingVersion, nil, add)
	return err
}

// encode appends version v (6, or 5 for the tests of reading it) to dst;
// with add, it hands each piece to add instead, reusing dst for the next.
func (e *Entity) encode(v uint64, dst []byte, add func([]byte) error) ([]byte, error) {
	cut := func() error {
		if add == nil {
			return nil
		}
		err := add(dst)
		dst = dst[:0]
		return err
	}
	dst = binary.AppendUvarint(dst, v)
	dst = event.AppendString(dst, e.name)
	dst = appendBool(dst, e.created)
	dst = event.AppendBytes(dst, e.cfg.Encode())
	dst = binary.AppendUvarint(dst, e.last)
	dst = binary.AppendVarint(dst, e.lastTime)

	dst = appendDedup(dst, e.dedup)

	sources := slices.Sorted(maps.Keys(e.forwarded))
	dst = binary.AppendUvarint(dst, uint64(len(sources)))
	for _, src := range sources {
		dst = binary.AppendUvarint(dst, src)
		dst = binary.AppendUvarint(dst, e.forwarded[src])
	}

	vias := slices.Sorted(maps.Keys(e.via))
	vias = slices.DeleteFunc(vias, func(v string) bool { return e.via[v].Len() == 0 })
	dst = binary.AppendUvarint(dst, uint64(len(vias)))
	for _, v := range vias {
		dst = event.AppendString(dst, v)
		dst = appendDedup(dst, e.via[v])
	}

	live := e.liveQueues()
	var table *positions
	if v >= 6 {
		table = &positions{}
		dst = table.append(dst, live)
	}
	dst = binary.AppendUvarint(dst, uint64(len(live)))
	if err := cut(); err != nil {
		return dst, err
	}
	for _, q := range live {
		dst = q.encode(dst, table)
		if err := cut(); err != nil {
			return dst, err
		}
	}

	t := &e.topic
	dst = binary.AppendUvarint(dst, uint64(t.next))
	dst = binary.AppendUvarint(dst, t.lastPub.Index)
	dst = binary.AppendUvarint(dst, uint64(t.lastPub.Pos.Offset))
	dst = binary.AppendUvarint(dst, uint64(t.lastPub.Pos.Size))
	dst = binary.AppendUvarint(dst, uint64(len(t.subs)))
	for _, s := range t.subs {
		dst = binary.AppendUvarint(dst, uint64(s.no))
		dst = event.AppendString(dst, s.name)
		dst = binary.AppendVarint(dst, s.created)
		dst = event.AppendBytes(dst, s.cfg.Encode())
		dst = binary.AppendUvarint(dst, uint64(len(s.rules)))
		for _, r := range s.rules {
			dst = event.AppendBytes(dst, r.spec.encode())
		}
	}
	return dst, cut()
}

func (q *Queue) encode(dst []byte, t *positions) []byte {
	dst = binary.AppendUvarint(dst, uint64(q.No))
	dst = appendBool(dst, q.sessions != nil)
	if q.sessions != nil {
		next, free := q.sessions.Numbering()
		dst = binary.AppendUvarint(dst, uint64(next))
		dst = binary.AppendUvarint(dst, uint64(len(free)))
		for _, no := range free {
			dst = binary.AppendUvarint(dst, uint64(no))
		}
		all := q.sessions.Sorted()
		slices.SortFunc(all, func(a, b *index.Session) int { return int(a.No) - int(b.No) })
		dst = binary.AppendUvarint(dst, uint64(len(all)))
		for _, s := range all {
			dst = binary.AppendUvarint(dst, uint64(s.No))
			dst = event.AppendString(dst, s.ID)
			dst = event.AppendString(dst, s.Owner)
			dst = binary.AppendVarint(dst, s.LockedUntil)
			dst = appendBool(dst, s.State != nil)
			dst = event.AppendBytes(dst, s.State)
			dst = binary.AppendVarint(dst, s.StateTime)
		}
	}

	if t != nil {
		dst = q.appendMessages(dst, t)
	} else {
		dst = q.appendMessagesV5(dst)
	}

	locked := q.locks.Seqs()
	slices.Sort(locked)
	dst = binary.AppendUvarint(dst, uint64(len(locked)))
	for _, seq := range locked {
		lk, _ := q.locks.Get(seq)
		dst = binary.AppendUvarint(dst, seq)
		dst = append(dst, lk.Token[:]...)
		dst = binary.AppendVarint(dst, lk.Until)
		dst = event.AppendString(dst, lk.Receiver)
	}

	withOverlays := make([]uint64, 0, len(q.overlays))
	for seq := range q.overlays {
		withOverlays = append(withOverlays, seq)
	}
	slices.Sort(withOverlays)
	dst = binary.AppendUvarint(dst, uint64(len(withOverlays)))
	for _, seq := range withOverlays {
		refs := q.overlays[seq]
		dst = binary.AppendUvarint(dst, seq)
		dst = binary.AppendUvarint(dst, uint64(len(refs)))
		for _, r := range refs {
			dst = binary.AppendUvarint(dst, r.Index)
			dst = binary.AppendUvarint(dst, uint64(r.Pos.Offset))
			dst = binary.AppendUvarint(dst, uint64(r.Pos.Size))
		}
	}

	dst = appendTimers(dst, q.ttlTimers.All(q.ttlLive))
	dst = appendTimers(dst, q.scheduleTimers.All(q.scheduleLive))
	return dst
}

// appendTimers writes live timer entries by key; an entry pushed twice with
// the same time is one entry.
func appendTimers(dst []byte, ts []index.Timer) []byte {
	slices.SortFunc(ts, func(a, b index.Timer) int {
		if c := cmp.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return cmp.Compare(a.At, b.At)
	})
	ts = slices.Compact(ts)
	dst = binary.AppendUvarint(dst, uint64(len(ts)))
	for _, t := range ts {
		dst = binary.AppendUvarint(dst, t.Key)
		dst = binary.AppendVarint(dst, t.At)
	}
	return dst
}

// appendDedup writes a duplicate-detection window: count, (id, time)... in
// acceptance order.
func appendDedup(dst []byte, d *index.Dedup) []byte {
	var ids []string
	var ats []int64
	d.Entries(func(id string, at int64) { ids, ats = append(ids, id), append(ats, at) })
	dst = binary.AppendUvarint(dst, uint64(len(ids)))
	for i := range ids {
		dst = event.AppendString(dst, ids[i])
		dst = binary.AppendVarint(dst, ats[i])
	}
	return dst
}

// readDedup reads what appendDedup wrote into d.
func readDedup(r *event.Reader, d *index.Dedup) {
	for n := r.Count(2); n > 0; n-- {
		id, at := r.String(), r.Varint()
		if r.Err() == nil {
			d.Add(id, at)
		}
	}
}

func appendBool(dst []byte, b bool) []byte {
	if b {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// Decode rebuilds an Entity from its canonical encoding, checking that it is
// consistent (states, sessions, locks and timers that refer to messages that
// exist). It never panics, whatever the input.
func Decode(b []byte) (*Entity, error) {
	r := event.NewReader(b)
	v := r.Uvarint()
	if r.Err() == nil && (v < 1 || v > encodingVersion) {
		return nil, fmt.Errorf("state encoding version %d, want 1 to %d", v, encodingVersion)
	}
	e := New()
	e.name = r.String()
	e.created = readBool(r)
	cfgBytes := r.Bytes()
	e.last = r.Uvarint()
	e.lastTime = r.Varint()
	if r.Err() != nil {
		return nil, fmt.Errorf("decode state header: %w", r.Err())
	}
	if e.created {
		cfg, err := DecodeConfig(cfgBytes)
		if err != nil {
			return nil, err
		}
		e.cfg = cfg
	}

	readDedup(r, e.dedup)
	if v >= 2 {
		var prev uint64
		for n := r.Count(2); n > 0 && r.Err() == nil; n-- {
			src, seq := r.Uvarint(), r.Uvarint()
			if r.Err() == nil && (src <= prev && prev != 0 || src == 0) {
				return nil, fmt.Errorf("forwarding sources not ascending at %d", src)
			}
			e.forwarded[src], prev = seq, src
		}
	}
	if v >= 4 {
		prev := ""
		for n := r.Count(2); n > 0 && r.Err() == nil; n-- {
			via := r.String()
			if r.Err() == nil && (via <= prev || via != viaKey(via)) {
				return nil, fmt.Errorf("via entities not ascending or not lower-case at %q", via)
			}
			d := index.NewDedup()
			readDedup(r, d)
			if r.Err() == nil && d.Len() == 0 {
				return nil, fmt.Errorf("via entity %q remembers nothing", via)
			}
			e.via[via], prev = d, via
		}
	}

	if v >= 5 {
		var t *positions
		if v >= 6 {
			t = &positions{}
			if err := t.decode(r); err != nil {
				return nil, err
			}
		}
		if err := e.decodeTopic(r, t, v); err != nil {
			return nil, err
		}
		if t != nil {
			if err := t.allUsed(); err != nil {
				return nil, err
			}
		}
	} else {
		nq, want := r.Count(7), len(e.queues)
		if v < 3 {
			want = 2 // before the transfer dead-letter subqueue, which is then empty
		}
		if r.Err() == nil && nq != want {
			return nil, fmt.Errorf("state has %d queues, want %d", nq, want)
		}
		for i := 0; i < nq && r.Err() == nil; i++ {
			if err := e.queues[i].decode(r, uint32(i), nil); err != nil {
				return nil, fmt.Errorf("queue %d: %w", i, err)
			}
		}
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("decode state: %w", err)
	}
	if wantSessions := e.created && e.cfg.RequiresSession; (e.queues[0].sessions != nil) != wantSessions {
		return nil, fmt.Errorf("main queue sessions %v, config says %v", e.queues[0].sessions != nil, wantSessions)
	}
	return e, nil
}

func (q *Queue) decode(r *event.Reader, no uint32, t *positions) error {
	if got := r.Uint32(); r.Err() == nil && got != no {
		return fmt.Errorf("numbered %d", got)
	}
	if readBool(r) {
		if err := q.decodeSessions(r); err != nil {
			return err
		}
	}
	var err error
	if t != nil {
		err = q.decodeMessages(r, t)
	} else {
		err = q.decodeMessagesV5(r)
	}
	if err != nil {
		return err
	}

	for n := r.Count(19); n > 0 && r.Err() == nil; n-- {
		seq := r.Uvarint()
		var lk index.Lock
		copy(lk.Token[:], r.Fixed(len(lk.Token)))
		lk.Until = r.Varint()
		lk.Receiver = r.String()
		if r.Err() != nil {
			break
		}
		if m, ok := q.msgs.Get(seq); !ok || m.State != index.Locked {
			return fmt.Errorf("lock on message %d that is not locked", seq)
		}
		if _, dup := q.locks.Get(seq); dup {
			return fmt.Errorf("two locks on message %d", seq)
		}
		q.locks.Put(seq, lk)
		q.lockTimers.Push(lk.Until, seq)
	}
	if r.Err() == nil && q.locks.Len() != int(q.locked.GetCardinality()) {
		return fmt.Errorf("%d locked messages but %d locks", q.locked.GetCardinality(), q.locks.Len())
	}

	for n := r.Count(2); n > 0 && r.Err() == nil; n-- {
		seq := r.Uvarint()
		refs := make([]Ref, r.Count(3))
		for i := range refs {
			refs[i] = Ref{Index: r.Uvarint(), Pos: event.Position{Offset: r.Uint32(), Size: r.Uint32()}}
		}
		if _, ok := q.msgs.Get(seq); r.Err() == nil && (!ok || len(refs) == 0) {
			return fmt.Errorf("overlays for missing message %d", seq)
		}
		q.overlays[seq] = refs
	}

	if err := decodeTimers(r, &q.ttlTimers, q.ttlLive, "expiry"); err != nil {
		return err
	}
	if err := decodeTimers(r, &q.scheduleTimers, q.scheduleLive, "activation"); err != nil {
		return err
	}
	if q.sessions != nil {
		for _, s := range q.sessions.Sorted() {
			q.sessions.Refresh(s)
			if s.Owner != "" {
				q.sessionTimers.Push(s.LockedUntil, uint64(s.No))
			}
		}
	}
	return r.Err()
}

// appendMessagesV5 writes q's messages as versions 1 to 5 did, each with
// its position.
func (q *Queue) appendMessagesV5(dst []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(q.msgs.Len()))
	prev := uint64(0)
	q.msgs.Range(func(seq uint64, m index.Meta) bool {
		dst = binary.AppendUvarint(dst, seq-prev)
		prev = seq
		dst = append(dst, byte(m.State), m.Flags)
		dst = binary.AppendUvarint(dst, uint64(m.Deliveries))
		dst = binary.AppendUvarint(dst, uint64(m.Pos.Offset))
		dst = binary.AppendUvarint(dst, uint64(m.Pos.Size))
		dst = binary.AppendUvarint(dst, uint64(m.Session))
		return true
	})
	return dst
}

// decodeMessagesV5 reads the messages of versions 1 to 5, each with its
// position.
func (q *Queue) decodeMessagesV5(r *event.Reader) error {
	var prev uint64
	for n := r.Count(6); n > 0 && r.Err() == nil; n-- {
		delta := r.Uvarint()
		if r.Err() == nil && (delta == 0 || prev+delta < prev) {
			return fmt.Errorf("SequenceNumbers not ascending after %d", prev)
		}
		seq := prev + delta
		prev = seq
		m := index.Meta{State: index.State(r.Byte()), Flags: r.Byte()}
		deliveries := r.Uvarint()
		m.Pos.Offset, m.Pos.Size, m.Session = r.Uint32(), r.Uint32(), r.Uint32()
		if r.Err() != nil {
			break
		}
		if err := q.addDecoded(seq, m, deliveries); err != nil {
			return err
		}
	}
	return r.Err()
}

// addDecoded adds message seq, read from a snapshot, after checking it.
func (q *Queue) addDecoded(seq uint64, m index.Meta, deliveries uint64) error {
	if m.State < index.Available || m.State > index.Scheduled || m.Flags&^(index.FlagDeferred|index.FlagHeld) != 0 ||
		m.Flags&index.FlagHeld != 0 && m.State != index.Scheduled || deliveries > 1<<16-1 {
		return fmt.Errorf("message %d: state %d flags %#x deliveries %d", seq, m.State, m.Flags, deliveries)
	}
	m.Deliveries = uint16(deliveries)
	if m.Session != 0 {
		if q.sessions == nil {
			return fmt.Errorf("message %d in session %d of a queue without sessions", seq, m.Session)
		}
		s := q.sessions.ByNo(m.Session)
		if s == nil {
			return fmt.Errorf("message %d in unknown session %d", seq, m.Session)
		}
		s.Messages++
		switch m.State {
		case index.Available:
			s.Available.Add(seq)
		case index.Locked:
			s.Locked.Add(seq)
		}
	}
	q.all.Add(seq)
	q.set(m.State).Add(seq)
	q.msgs.Put(seq, m)
	q.bytes += uint64(m.Pos.Size)
	return nil
}

func (q *Queue) decodeSessions(r *event.Reader) error {
	next := r.Uint32()
	free := make([]uint32, r.Count(1))
	for i := range free {
		free[i] = r.Uint32()
	}
	sessions := make([]*index.Session, r.Count(6))
	for i := range sessions {
		s := &index.Session{No: r.Uint32(), ID: r.String(), Owner: r.String(), LockedUntil: r.Varint(),
			Available: roaring64.New(), Locked: roaring64.New()}
		hasState := readBool(r)
		state := r.Bytes()
		s.StateTime = r.Varint()
		if hasState {
			s.State = append([]byte{}, state...)
		}
		sessions[i] = s
	}
	if r.Err() != nil {
		return r.Err()
	}
	t, err := index.Restore(sessions, next, free)
	if err != nil {
		return err
	}
	q.sessions = t
	return nil
}

func decodeTimers(r *event.Reader, ts *index.Timers, live func(index.Timer) bool, what string) error {
	for n := r.Count(2); n > 0 && r.Err() == nil; n-- {
		t := index.Timer{Key: r.Uvarint(), At: r.Varint()}
		if r.Err() != nil {
			break
		}
		if !live(t) {
			return fmt.Errorf("%s timer for message %d that cannot have one", what, t.Key)
		}
		ts.Push(t.At, t.Key)
	}
	return r.Err()
}

func readBool(r *event.Reader) bool {
	switch b := r.Byte(); b {
	case 0:
		return false
	case 1:
		return true
	default:
		r.Fail("boolean byte %d", b)
		return false
	}
}

// decodeTopic reads the queues and subscriptions of version 5 and later
// (with version 6's table of positions, t). The queues come
// first but belong to subscriptions listed after them: they are read into
// a table and placed once the subscriptions are known.
func (e *Entity) decodeTopic(r *event.Reader, table *positions, v uint64) error {
	nq := r.Count(7)
	queues := make(map[uint32]*Queue, nq)
	prev := -1
	for i := 0; i < nq && r.Err() == nil; i++ {
		// Peek at the number: decode checks it against the one given.
		save := *r
		no := r.Uint32()
		*r = save
		if r.Err() != nil {
			break
		}
		if int64(no) <= int64(prev) {
			return fmt.Errorf("queue %d after %d", no, prev)
		}
		prev = int(no)
		var q *Queue
		if no < event.QueueGroup {
			q = e.queues[no]
		} else {
			q = newQueue(no, false, nil)
		}
		if err := q.decode(r, no, table); err != nil {
			return fmt.Errorf("queue %d: %w", no, err)
		}
		queues[no] = q
	}
	for no := range uint32(event.QueueGroup) {
		if queues[no] == nil && r.Err() == nil {
			return fmt.Errorf("queue %d missing", no)
		}
	}
	t := &e.topic
	t.next = r.Uint32()
	t.lastPub = Ref{Index: r.Uvarint(), Pos: event.Position{Offset: r.Uint32(), Size: r.Uint32()}}
	ns := r.Count(5)
	if r.Err() == nil && ns > 0 && !e.IsTopic() {
		return fmt.Errorf("subscriptions in an entity that is not a topic")
	}
	for i := 0; i < ns && r.Err() == nil; i++ {
		s := &Subscription{no: r.Uint32(), name: r.String(), created: r.Varint()}
		cfgBytes := r.Bytes()
		rules := make([][]byte, r.Count(1))
		for j := range rules {
			rules[j] = r.Bytes()
		}
		if r.Err() != nil {
			break
		}
		if s.no%event.QueueGroup != 0 || s.no == 0 || s.no/event.QueueGroup >= max(t.next, 1) ||
			len(t.subs) > 0 && s.no <= t.subs[len(t.subs)-1].no {
			return fmt.Errorf("subscription %s numbered %d", s.name, s.no)
		}
		cfg, err := DecodeConfig(cfgBytes)
		if err != nil {
			return fmt.Errorf("subscription %s: %w", s.name, err)
		}
		s.cfg = cfg
		for _, b := range rules {
			rl, err := decodeRule(b)
			if err != nil {
				return fmt.Errorf("subscription %s: %w", s.name, err)
			}
			if n := len(s.rules); n > 0 && s.rules[n-1].spec.Name >= rl.spec.Name {
				return fmt.Errorf("subscription %s: rules not sorted at %s", s.name, rl.spec.Name)
			}
			s.rules = append(s.rules, rl)
		}
		next := t.next
		e.addSubscription(s)
		for _, no := range event.GroupOf(s.no) {
			q := queues[no]
			if q == nil {
				return fmt.Errorf("subscription %s: queue %d missing", s.name, no)
			}
			if (q.sessions != nil) != (no == s.no && cfg.RequiresSession) {
				return fmt.Errorf("subscription %s: queue %d sessions %v", s.name, no, q.sessions != nil)
			}
			q.cfg = &s.cfg
			e.queues[no] = q
			delete(queues, no)
		}
		t.next = next
	}
	if r.Err() != nil {
		return r.Err()
	}
	if q := queues[event.TransferQueue]; q != nil && v >= 7 && !e.IsTopic() {
		if q.sessions != nil {
			return fmt.Errorf("transfer queue with sessions")
		}
		q.transfer, q.cfg = true, &e.cfg
		e.queues = append(e.queues, q)
		delete(queues, event.TransferQueue)
	}
	for no := range queues {
		if no >= event.QueueGroup {
			return fmt.Errorf("queue %d belongs to no subscription", no)
		}
	}
	return nil
}
