package broker

import (
	"testing"
	"time"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/projection"
)

// BenchmarkRestart1M measures restart of an entity holding 1M queued 1 KB
// messages: load the snapshot taken at 1M, then replay a 100k-event tail
// written after it (which the crash left unsnapshotted).
func BenchmarkRestart1M(b *testing.B) {
	dir := b.TempDir()
	opts := Options{Dir: dir, Sync: log.SyncNone, SnapshotEvery: 1 << 30, SnapshotBytes: 1 << 40, CacheBytes: 1 << 20}
	fill := func(n int) {
		br, _, err := Open(opts)
		if err != nil {
			b.Fatal(err)
		}
		e, err := br.Entity("q")
		if err != nil {
			e, err = br.CreateQueue("q", projection.DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
		}
		body := make([]byte, 1024)
		batch := make([]projection.Message, 1000)
		for sent := 0; sent < n; sent += len(batch) {
			for i := range batch {
				batch[i] = projection.Message{Body: body}
			}
			ch := make(chan error, 1)
			e.Send(log.MainQueue, batch, func(err error) { ch <- err })
			if err := <-ch; err != nil {
				b.Fatal(err)
			}
		}
		e.Sync()
		if n == 1_000_000 {
			br.Close() // writes the snapshot at 1M
		} else {
			br.shutdown(false) // the tail stays unsnapshotted
		}
	}
	fill(1_000_000)
	fill(100_000)
	b.ResetTimer()
	var took time.Duration
	for range b.N {
		start := time.Now()
		br, rec, err := Open(opts)
		if err != nil {
			b.Fatal(err)
		}
		took += time.Since(start)
		er := rec.Entities[0]
		if er.Replayed != 100_000 || er.Snapshot == 0 {
			b.Fatalf("recovery %+v", er)
		}
		b.StopTimer()
		br.shutdown(false)
		b.StartTimer()
	}
	b.ReportMetric(took.Seconds()/float64(b.N), "s/restart")
}
