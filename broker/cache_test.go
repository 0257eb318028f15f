package broker

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/walbus/walbus/log/event"
)

func cacheRecord(index uint64, size int) event.Event {
	return event.Event{Type: event.Enqueued, Index: index, Message: make([]byte, size)}
}

func TestBodyCacheKeepsRemovesAndTrims(t *testing.T) {
	c := newBodyCache(100 * (entryOverhead + 10))
	for i := uint64(1); i <= 1000; i++ {
		c.add(cacheRecord(i, 10))
	}
	for _, i := range []uint64{1, 255, 256, 257, 1000} {
		if ev, ok := c.get(i); !ok || ev.Index != i {
			t.Fatalf("get(%d) = %d, %v", i, ev.Index, ok)
		}
	}
	if _, ok := c.get(1001); ok {
		t.Fatal("found a record never added")
	}
	c.remove(500)
	if _, ok := c.get(500); ok {
		t.Fatal("found a removed record")
	}
	// Only records up to 600 are durable: trimming stops there although
	// the cache stays over its limit.
	c.trim(c.limit, 600, nil)
	if _, ok := c.get(600); ok {
		t.Fatal("durable record 600 kept while over budget")
	}
	if _, ok := c.get(601); !ok {
		t.Fatal("record 601, not durable, evicted")
	}
	// All durable: down to the limit, oldest kept, but for the ones to
	// keep.
	keep := []uint64{990, 1000}
	c.trim(c.limit, 1000, keep)
	if c.live != 100 || c.used != 100*cost(&event.Event{Message: make([]byte, 10)}) {
		t.Fatalf("after trimming: %d records, %d bytes", c.live, c.used)
	}
	for index, want := range map[uint64]bool{601: true, 698: true, 699: false, 989: false, 990: true, 1000: true} {
		if _, ok := c.get(index); ok != want {
			t.Errorf("record %d held: %v", index, ok)
		}
	}
	// The records to keep go last, the furthest first; the next record
	// takes the place of the last one gone.
	c.trim(cost(&event.Event{Message: make([]byte, 10)}), 1000, keep)
	if _, ok := c.get(990); c.live != 1 || !ok {
		t.Fatalf("trimmed to nothing but record 990: %d records", c.live)
	}
	c.add(cacheRecord(1001, 10))
	if _, ok := c.get(1001); !ok || c.slots != 2 {
		t.Fatalf("a record after trimming: held %v, %d slots", ok, c.slots)
	}
}

func TestBodyCacheCompactsGoneSlots(t *testing.T) {
	c := newBodyCache(1 << 40)
	// A message that stays (a deferred one) among many that come and go
	// must not keep the slots of the others.
	c.add(cacheRecord(1, 1))
	for i := uint64(2); i < 100_000; i++ {
		c.add(cacheRecord(i, 1))
		c.remove(i)
		c.tidy()
	}
	if c.slots > 2*c.live+2*cacheBlockLen {
		t.Fatalf("%d slots held for %d records", c.slots, c.live)
	}
	if _, ok := c.get(1); !ok {
		t.Fatal("the record that stayed is gone")
	}
}

// TestBodyCacheMatchesModel runs random operations against the cache and
// a plain map with the same rules: records found, bytes counted and the
// trimming order (newest first, the records kept for next deliveries last
// and newest of them first too, none not yet durable) must agree.
func TestBodyCacheMatchesModel(t *testing.T) {
	for _, records := range []int{40, 3000} { // within a block, across several
		t.Run(fmt.Sprint(records), func(t *testing.T) { testBodyCacheMatchesModel(t, records) })
	}
}

func testBodyCacheMatchesModel(t *testing.T, records int) {
	rng := rand.New(rand.NewPCG(1, 2))
	budget := records * (10 + 272)
	c := newBodyCache(int64(budget))
	model := map[uint64]event.Event{}
	var used int64
	next := uint64(1)
	steps := 200_000
	if records > cacheBlockLen {
		steps = 20_000 // the model's copies grow with it
	}
	for step := range steps {
		switch op := rng.IntN(10); {
		case op < 5:
			index := next
			if rng.IntN(50) == 0 && next > 10 {
				index = next - 1 - uint64(rng.IntN(10)) // out of order: replaces or fills a gap
			} else {
				next++
			}
			ev := cacheRecord(index, rng.IntN(20))
			if old, ok := model[index]; ok {
				used -= cost(&old)
			}
			model[index] = ev
			used += cost(&ev)
			c.add(ev)
		case op < 8 && (records < cacheBlockLen || op < 6):
			index := next - uint64(rng.IntN(int(min(next, 100))))
			if old, ok := model[index]; ok {
				used -= cost(&old)
				delete(model, index)
			}
			c.remove(index)
		default:
			durable := next - uint64(rng.IntN(int(min(next, 30))))
			target := int64(budget/2 + rng.IntN(budget/2))
			if rng.IntN(4) == 0 {
				target = used - int64(rng.IntN(5*(10+272))) // a little: the common case
			}
			live := slices.Sorted(maps.Keys(model))
			var keep []uint64
			kept := map[uint64]bool{}
			for _, index := range live {
				if rng.IntN(3) == 0 {
					keep = append(keep, index)
					kept[index] = true
				}
			}
			if rng.IntN(2) == 0 {
				keep = append(keep, next+1) // not held: ignored
			}
			drop := func(index uint64) {
				old := model[index]
				used -= cost(&old)
				delete(model, index)
			}
			for _, index := range slices.Backward(live) {
				if used <= target {
					break
				}
				if index <= durable && !kept[index] {
					drop(index)
				}
			}
			for i := len(keep) - 1; i >= 0 && used > target; i-- {
				if _, ok := model[keep[i]]; ok && keep[i] <= durable {
					drop(keep[i])
				}
			}
			c.trim(target, durable, keep)
		}
		if c.used != used || c.live != len(model) {
			t.Fatalf("step %d: cache holds %d records in %d bytes, model %d in %d", step, c.live, c.used, len(model), used)
		}
		probe := next - uint64(rng.IntN(int(min(next, 200))))
		want, wok := model[probe]
		got, gok := c.get(probe)
		if wok != gok || got.Index != want.Index || len(got.Message) != len(want.Message) {
			t.Fatalf("step %d: get(%d) = %d/%d bytes/%v, model %d/%d bytes/%v", step, probe,
				got.Index, len(got.Message), gok, want.Index, len(want.Message), wok)
		}
		if step%100 == 0 {
			checkCacheLayout(t, c)
		}
		if step%1000 == 0 {
			// seek finds the first record held at or after an index.
			want := uint64(0)
			for index := range model {
				if index >= probe && (want == 0 || index < want) {
					want = index
				}
			}
			k, i := c.seek(probe)
			if got := uint64(0); k < len(c.blocks) {
				got = c.blocks[k].recs[i].Index
				if got != want {
					t.Fatalf("step %d: seek(%d) found %d, want %d", step, probe, got, want)
				}
			} else if want != 0 {
				t.Fatalf("step %d: seek(%d) found nothing, want %d", step, probe, want)
			}
		}
	}
}

// checkCacheLayout checks what the cache's search relies on: no empty
// block, indexes ascending across slots (gone ones included), and the
// counts of slots and records held.
func checkCacheLayout(t *testing.T, c *bodyCache) {
	t.Helper()
	slots, live := 0, 0
	var last uint64
	for k, b := range c.blocks {
		if len(b.recs) <= b.head || k > 0 && b.head != 0 {
			t.Fatalf("block %d of %d: %d slots from %d", k, len(c.blocks), len(b.recs), b.head)
		}
		for _, ev := range b.recs[b.head:] {
			if ev.Index <= last && !(k == 0 && ev.Index == 0) {
				t.Fatalf("block %d: index %d after %d", k, ev.Index, last)
			}
			last = ev.Index
			slots++
			if ev.Type != 0 {
				live++
			}
		}
	}
	if slots != c.slots || live != c.live {
		t.Fatalf("%d slots, %d held; the cache counts %d, %d", slots, live, c.slots, c.live)
	}
}
