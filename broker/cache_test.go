package broker

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/walbus/walbus/log/event"
)

func cacheRecord(index uint64, size int) event.Event {
	return event.Event{Type: event.Enqueued, Index: index, Message: make([]byte, size)}
}

func TestBodyCacheKeepsRemovesAndEvicts(t *testing.T) {
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
	// Only records up to 600 are durable: eviction stops there although
	// the cache stays over budget.
	c.evict(600)
	if _, ok := c.get(600); ok {
		t.Fatal("durable record 600 kept while over budget")
	}
	if _, ok := c.get(601); !ok {
		t.Fatal("record 601, not durable, evicted")
	}
	// All durable: down to the budget, newest kept.
	c.evict(1000)
	if c.live != 100 || c.used != 100*cost(&event.Event{Message: make([]byte, 10)}) {
		t.Fatalf("after eviction: %d records, %d bytes", c.live, c.used)
	}
	if _, ok := c.get(900); ok {
		t.Fatal("record 900 kept")
	}
	if _, ok := c.get(901); !ok {
		t.Fatal("record 901 evicted")
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
		c.evict(i)
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
// eviction order must agree.
func TestBodyCacheMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const budget = 40 * (10 + 272)
	c := newBodyCache(budget)
	model := map[uint64]event.Event{}
	var used int64
	next := uint64(1)
	for step := range 200_000 {
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
		case op < 8:
			index := next - uint64(rng.IntN(int(min(next, 100))))
			if old, ok := model[index]; ok {
				used -= cost(&old)
				delete(model, index)
			}
			c.remove(index)
		default:
			durable := next - uint64(rng.IntN(int(min(next, 30))))
			live := make([]uint64, 0, len(model))
			for index := range model {
				live = append(live, index)
			}
			slices.Sort(live)
			for _, index := range live {
				if used <= budget || index > durable {
					break
				}
				old := model[index]
				used -= cost(&old)
				delete(model, index)
			}
			c.evict(durable)
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
	}
}
