package log

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tidwall/wal"

	"github.com/walbus/walbus/log/event"
)

var producerCounts = []int{1, 16, 64, 256}

// BenchmarkDurableAppend1KB: durable appends of 1 KB events through group
// commit under SyncAlways; one op is one acknowledged append.
func BenchmarkDurableAppend1KB(b *testing.B) {
	for _, producers := range producerCounts {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			l, _, err := Open(b.TempDir(), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			var batches, records atomic.Int64
			l.opts.OnCommit = func(s CommitStats) { batches.Add(1); records.Add(int64(s.Records)) }
			body := make([]byte, 1024-event.MinRecordSize-10)
			runProducers(b, producers, func() func() {
				evs := []event.Event{{Type: event.Enqueued, Time: 1, Message: body}}
				ch := make(chan error, 1)
				done := func(err error) { ch <- err }
				return func() {
					if _, err := l.Append(evs, done); err != nil {
						b.Error(err)
					}
					if err := <-ch; err != nil {
						b.Error(err)
					}
				}
			})
			if n := batches.Load(); n > 0 {
				b.ReportMetric(float64(records.Load())/float64(n), "records/batch")
			}
		})
	}
}

// BenchmarkRawTidwall1KB is the baseline for BenchmarkDurableAppend1KB:
// tidwall/wal with the simplest group commit (take everything queued, write
// it as one batch, fsync, release), no envelope, no positions.
func BenchmarkRawTidwall1KB(b *testing.B) {
	for _, producers := range producerCounts {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			w, err := wal.Open(b.TempDir(), &wal.Options{NoSync: true, SegmentSize: 8 << 20})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			var mu sync.Mutex
			cond := sync.NewCond(&mu)
			var queue []chan struct{}
			stop := false
			body := make([]byte, 1024)
			go func() {
				var batch wal.Batch
				next := uint64(1)
				for {
					mu.Lock()
					for len(queue) == 0 && !stop {
						cond.Wait()
					}
					q := queue
					queue = nil
					done := stop
					mu.Unlock()
					if done && len(q) == 0 {
						return
					}
					for range q {
						batch.Write(next, body)
						next++
					}
					if err := w.WriteBatch(&batch); err != nil {
						panic(err)
					}
					w.Sync()
					for _, c := range q {
						c <- struct{}{}
					}
				}
			}()
			runProducers(b, producers, func() func() {
				c := make(chan struct{}, 1)
				return func() {
					mu.Lock()
					queue = append(queue, c)
					cond.Signal()
					mu.Unlock()
					<-c
				}
			})
			mu.Lock()
			stop = true
			cond.Signal()
			mu.Unlock()
		})
	}
}

// runProducers spreads b.N operations over n goroutines, each with its own
// operation from newOp, and reports appends per second.
func runProducers(b *testing.B, n int, newOp func() func()) {
	ops := make([]func(), n)
	for i := range ops {
		ops[i] = newOp()
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	b.SetBytes(1024)
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				op()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}

// BenchmarkScan1KB: replay speed from disk, reading, checking and decoding
// 1 KB records (what recovery does for the log tail).
func BenchmarkScan1KB(b *testing.B) {
	const n = 100_000
	l, _, err := Open(b.TempDir(), Options{Sync: SyncNone})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	body := make([]byte, 1024-event.MinRecordSize-10)
	for range n {
		if _, err := l.Append([]event.Event{{Type: event.Enqueued, Time: 1, Message: body}}, nil); err != nil {
			b.Fatal(err)
		}
	}
	done := make(chan error, 1)
	l.Append(nil, func(err error) { done <- err })
	<-done
	b.SetBytes(n * 1024)
	b.ResetTimer()
	for range b.N {
		count := 0
		if err := l.Scan(1, func(*event.Event) error { count++; return nil }); err != nil || count != n {
			b.Fatalf("scanned %d: %v", count, err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "events/s")
}
