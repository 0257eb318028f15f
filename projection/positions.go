package projection

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
)

// positions is the table of encoding version 6: every live message of an
// entity once, ascending, with where its record is. Queues name their
// messages by ordinal in it.
type positions struct {
	// only is, when encoding, the one queue that has messages: the table
	// is its messages in order, and an ordinal is a count.
	only *Queue
	seqs []uint64
	pos  []event.Position
	used []bool // decoding: which entries a queue named
}

// append builds the table from queues and appends it to dst.
func (t *positions) append(dst []byte, queues []*Queue) []byte {
	var only *Queue
	nonEmpty := 0
	for _, q := range queues {
		if q.msgs.Len() > 0 {
			only = q
			nonEmpty++
		}
	}
	prev := uint64(0)
	add := func(seq uint64, pos event.Position) {
		dst = binary.AppendUvarint(dst, seq-prev)
		dst = binary.AppendUvarint(dst, uint64(pos.Offset))
		dst = binary.AppendUvarint(dst, uint64(pos.Size))
		prev = seq
	}
	if nonEmpty <= 1 {
		// A queue alone: its messages, in order, are the table.
		t.only = only
		n := 0
		if only != nil {
			n = only.msgs.Len()
		}
		dst = binary.AppendUvarint(dst, uint64(n))
		if only != nil {
			only.msgs.Range(func(seq uint64, m index.Meta) bool {
				add(seq, m.Pos)
				return true
			})
		}
		return dst
	}
	type entry struct {
		seq uint64
		pos event.Position
	}
	seen := roaring64.New()
	var all []entry
	for _, q := range queues {
		q.msgs.Range(func(seq uint64, m index.Meta) bool {
			if seen.CheckedAdd(seq) {
				all = append(all, entry{seq, m.Pos})
			}
			return true
		})
	}
	bySeq := func(a, b entry) int { return cmp.Compare(a.seq, b.seq) }
	if !slices.IsSortedFunc(all, bySeq) {
		slices.SortFunc(all, bySeq)
	}
	t.seqs = make([]uint64, len(all))
	dst = binary.AppendUvarint(dst, uint64(len(all)))
	for i, en := range all {
		t.seqs[i] = en.seq
		add(en.seq, en.pos)
	}
	return dst
}

// ordinal is seq's place in the table, looked for at or after from: a
// queue's messages ascend, so each lookup starts where the last ended, and
// gallops (the next is usually close).
func (t *positions) ordinal(seq uint64, from int) int {
	step, hi := 1, from
	for hi < len(t.seqs) && t.seqs[hi] < seq {
		from = hi + 1
		hi += step
		step *= 2
	}
	hi = min(hi+1, len(t.seqs))
	i, _ := slices.BinarySearch(t.seqs[from:hi], seq)
	return from + i
}

func (t *positions) decode(r *event.Reader) error {
	n := r.Count(3)
	t.seqs, t.pos, t.used = make([]uint64, n), make([]event.Position, n), make([]bool, n)
	prev := uint64(0)
	for i := 0; i < n && r.Err() == nil; i++ {
		delta := r.Uvarint()
		if r.Err() == nil && (delta == 0 || prev+delta < prev) {
			return fmt.Errorf("positions: SequenceNumbers not ascending after %d", prev)
		}
		prev += delta
		t.seqs[i], t.pos[i] = prev, event.Position{Offset: r.Uint32(), Size: r.Uint32()}
	}
	return r.Err()
}

// allUsed checks that every message of the table is in some queue, as the
// encoder writes only those.
func (t *positions) allUsed() error {
	if i := slices.Index(t.used, false); i >= 0 {
		return fmt.Errorf("positions: message %d is in no queue", t.seqs[i])
	}
	return nil
}

// plain is a message that needs nothing but its number: available, never
// delivered, without flags or session.
func plain(m index.Meta) bool {
	return m.State == index.Available && m.Flags == 0 && m.Deliveries == 0 && m.Session == 0
}

// appendMessages writes q's messages as ordinals of t: the plain ones as
// runs, the others one by one.
func (q *Queue) appendMessages(dst []byte, t *positions) []byte {
	var runs []uint64 // start, length, start, length...
	var others []byte
	nOthers, prevOther, at := 0, 0, -1
	q.msgs.Range(func(seq uint64, m index.Meta) bool {
		if t.only == q {
			at++
		} else {
			at = t.ordinal(seq, max(at, 0))
		}
		if plain(m) {
			if n := len(runs); n > 0 && runs[n-2]+runs[n-1] == uint64(at) {
				runs[n-1]++
			} else {
				runs = append(runs, uint64(at), 1)
			}
			return true
		}
		others = binary.AppendUvarint(others, uint64(at-prevOther))
		others = append(others, byte(m.State), m.Flags)
		others = binary.AppendUvarint(others, uint64(m.Deliveries))
		others = binary.AppendUvarint(others, uint64(m.Session))
		nOthers, prevOther = nOthers+1, at
		return true
	})
	dst = binary.AppendUvarint(dst, uint64(len(runs)/2))
	end := uint64(0)
	for i := 0; i < len(runs); i += 2 {
		dst = binary.AppendUvarint(dst, runs[i]-end)
		dst = binary.AppendUvarint(dst, runs[i+1]-1)
		end = runs[i] + runs[i+1]
	}
	dst = binary.AppendUvarint(dst, uint64(nOthers))
	return append(dst, others...)
}

// decodeMessages reads what appendMessages wrote, adding the messages in
// ascending order.
func (q *Queue) decodeMessages(r *event.Reader, t *positions) error {
	type run struct{ start, end int } // ordinals [start, end)
	runs := make([]run, r.Count(2))
	end := uint64(0)
	for i := range runs {
		gap, length := r.Uvarint(), r.Uvarint()
		start := end + gap
		if r.Err() != nil || (i > 0 && gap == 0) || start < end || start+length+1 <= start || start+length+1 > uint64(len(t.seqs)) {
			return fmt.Errorf("plain messages: run %d out of the table of %d", i, len(t.seqs))
		}
		end = start + length + 1
		runs[i] = run{int(start), int(end)}
	}
	type other struct {
		ord        int
		m          index.Meta
		deliveries uint64
	}
	others := make([]other, r.Count(5))
	prev := 0
	for i := range others {
		delta := r.Uvarint()
		o := other{m: index.Meta{State: index.State(r.Byte()), Flags: r.Byte()}}
		o.deliveries = r.Uvarint()
		o.m.Session = r.Uint32()
		if r.Err() != nil {
			return r.Err()
		}
		if (i > 0 && delta == 0) || delta >= uint64(len(t.seqs)-prev) {
			return fmt.Errorf("messages: ordinal out of the table of %d", len(t.seqs))
		}
		o.ord = prev + int(delta)
		prev = o.ord
		others[i] = o
	}
	add := func(ord int, m index.Meta, deliveries uint64) error {
		t.used[ord] = true
		m.Pos = t.pos[ord]
		return q.addDecoded(t.seqs[ord], m, deliveries)
	}
	// Merge the two ascending lists; a message in both is damage.
	ri, oi := 0, 0
	for ri < len(runs) || oi < len(others) {
		if oi < len(others) && (ri == len(runs) || others[oi].ord < runs[ri].start) {
			if err := add(others[oi].ord, others[oi].m, others[oi].deliveries); err != nil {
				return err
			}
			oi++
			continue
		}
		rn := runs[ri]
		if oi < len(others) && others[oi].ord < rn.end {
			return fmt.Errorf("message %d both plain and not", t.seqs[others[oi].ord])
		}
		for ord := rn.start; ord < rn.end; ord++ {
			if err := add(ord, index.Meta{State: index.Available}, 0); err != nil {
				return err
			}
		}
		ri++
	}
	return nil
}
