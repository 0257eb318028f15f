package index

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The chunked table against a plain map, under random puts, replacements,
// deletions and lookups, including numbers inserted out of order (dead-
// lettered messages keep their number) and whole chunks emptied.
func TestMessagesAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ms := NewMessages()
	model := map[uint64]Meta{}
	next := uint64(1)
	for step := range 200_000 {
		switch r := rng.IntN(10); {
		case r < 4: // append a new, higher number, sometimes after a gap
			next += 1 + uint64(rng.IntN(3))*uint64(rng.IntN(5000))
			m := Meta{State: Available, Deliveries: uint16(step)}
			ms.Put(next, m)
			model[next] = m
		case r < 5: // insert below the head
			seq := 1 + uint64(rng.Int64N(int64(next)))
			m := Meta{State: Deferred, Session: uint32(step)}
			ms.Put(seq, m)
			model[seq] = m
		case r < 8: // delete, mostly near the front (completions)
			var seq uint64
			for k := range model {
				seq = k
				break
			}
			if rng.IntN(3) == 0 {
				seq = 1 + uint64(rng.Int64N(int64(next)))
			}
			ms.Delete(seq)
			delete(model, seq)
		default:
			seq := 1 + uint64(rng.Int64N(int64(next+10)))
			got, ok := ms.Get(seq)
			want, wantOK := model[seq]
			if ok != wantOK || got != want {
				t.Fatalf("step %d: Get(%d) = %v %v, want %v %v", step, seq, got, ok, want, wantOK)
			}
		}
		if ms.Len() != len(model) {
			t.Fatalf("step %d: Len %d, want %d", step, ms.Len(), len(model))
		}
	}
	var walked []uint64
	ms.Range(func(seq uint64, m Meta) bool {
		if model[seq] != m {
			t.Fatalf("Range gave %d %v, want %v", seq, m, model[seq])
		}
		walked = append(walked, seq)
		return true
	})
	want := make([]uint64, 0, len(model))
	for k := range model {
		want = append(want, k)
	}
	slices.Sort(want)
	if !slices.Equal(walked, want) {
		t.Fatalf("Range walked %d numbers, want %d in order", len(walked), len(want))
	}
}
