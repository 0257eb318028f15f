package projection

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/walbus/walbus/log/event"
)

// queued builds an entity with n available messages by applying Enqueued
// events (bodies are not kept by the state, so none are allocated).
func queued(tb testing.TB, n int, ttl bool) *Entity {
	e := New()
	cfg := DefaultConfig()
	if ttl {
		cfg.DefaultTTL = time.Hour
	}
	ev := event.Event{Type: event.EntityCreated, Index: 1, Props: cfg.Encode()}
	if err := e.Apply(&ev); err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		ev := event.Event{Type: event.Enqueued, Index: uint64(i + 2), Time: 1,
			Pos: event.Position{Offset: uint32(i % 8192 * 1024), Size: 1024}}
		if ttl {
			ev.Until = int64(time.Hour) + int64(i)
		}
		if err := e.Apply(&ev); err != nil {
			tb.Fatal(err)
		}
	}
	return e
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkStateBytesPerMessage reports the projection and index memory per
// queued message, bodies excluded (they stay in the log).
func BenchmarkStateBytesPerMessage(b *testing.B) {
	const n = 1_000_000
	for _, ttl := range []bool{false, true} {
		b.Run(fmt.Sprintf("ttl=%v", ttl), func(b *testing.B) {
			for range b.N {
				before := heapInUse()
				e := queued(b, n, ttl)
				after := heapInUse()
				b.ReportMetric(float64(after-before)/n, "bytes/msg")
				runtime.KeepAlive(e)
			}
		})
	}
}

// BenchmarkApply measures replay speed: events applied per second for the
// common life of a message (enqueued, locked, completed).
func BenchmarkApply(b *testing.B) {
	e := queued(b, 0, false)
	idx := uint64(1)
	evs := make([]event.Event, 0, 3)
	b.ResetTimer()
	for i := range b.N {
		seq := idx + 1
		evs = append(evs[:0],
			event.Event{Type: event.Enqueued, Index: seq, Time: int64(i)},
			event.Event{Type: event.Locked, Index: seq + 1, Time: int64(i), Seq: seq, Until: int64(i) + 1e9, Receiver: "r"},
			event.Event{Type: event.Completed, Index: seq + 2, Time: int64(i), Seq: seq})
		for j := range evs {
			if err := e.Apply(&evs[j]); err != nil {
				b.Fatal(err)
			}
		}
		idx += 3
	}
	b.ReportMetric(float64(3*b.N)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkSnapshotEncodeDecode1M: the canonical encoding of a 1M-message
// queue and its decoding, the core of snapshot write and restart.
func BenchmarkSnapshotEncodeDecode1M(b *testing.B) {
	e := queued(b, 1_000_000, true)
	raw := e.Encode(nil)
	b.Run("encode", func(b *testing.B) {
		for range b.N {
			raw = e.Encode(raw[:0])
		}
		b.ReportMetric(float64(len(raw)), "bytes")
	})
	b.Run("decode", func(b *testing.B) {
		for range b.N {
			if _, err := Decode(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}
