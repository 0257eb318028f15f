package broker

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/snapshot"
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
		sendBacklog(b, e, n)
		e.Sync()
		if n == 1_000_000 {
			br.Close() // writes the snapshot at 1M
		} else {
			br.shutdown(false) // the tail stays unsnapshotted
		}
	}
	fill(1_000_000)
	fill(100_000)
	restarts(b, opts, func(er EntityRecovery) bool { return er.Replayed == 100_000 && er.Snapshot != 0 })
}

// restarts opens the broker of opts b.N times, each from the same data
// (shut down without a snapshot), and reports the mean time to open. ok
// checks the first entity's recovery.
func restarts(b *testing.B, opts Options, ok func(EntityRecovery) bool) {
	b.ResetTimer()
	var took time.Duration
	for range b.N {
		start := time.Now()
		br, rec, err := Open(opts)
		if err != nil {
			b.Fatal(err)
		}
		took += time.Since(start)
		if er := rec.Entities[0]; !ok(er) {
			b.Fatalf("recovery %+v", er)
		}
		b.StopTimer()
		br.shutdown(false)
		b.StartTimer()
	}
	b.ReportMetric(took.Seconds()/float64(b.N), "s/restart")
}

// sendBacklog sends n 1 KiB messages to e, a thousand at a time.
func sendBacklog(b *testing.B, e *Entity, n int) {
	body := make([]byte, 1024)
	batch := make([]projection.Message, 1000)
	for sent := 0; sent < n; sent += len(batch) {
		for i := range batch {
			batch[i] = projection.Message{Body: body}
		}
		ch := make(chan error, 1)
		e.Send(event.MainQueue, batch, func(err error) { ch <- err })
		if err := <-ch; err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSendReceiveComplete measures the broker core without AMQP: 64
// single 1 KB sends in flight (durable, fsync always), one peek-lock
// receiver with 256 credit that completes every message. It reports the
// process CPU per message (all goroutines, the benchmark's own included).
func BenchmarkSendReceiveComplete(b *testing.B) {
	for _, sync := range []log.SyncPolicy{log.SyncAlways, log.SyncNone} {
		for _, seg := range []int{1 << 20, 2 << 20, 8 << 20} {
			b.Run(fmt.Sprintf("%s/seg=%dMiB", sync, seg>>20), func(b *testing.B) {
				br := openBench(b, Options{Dir: b.TempDir(), Sync: sync, SegmentSize: seg})
				e, err := br.CreateQueue("q", projection.DefaultConfig())
				if err != nil {
					b.Fatal(err)
				}
				deliveries := make(chan Delivery, 1024)
				r, err := e.Attach(ReceiverOptions{Name: "r", Deliver: func(d Delivery) { deliveries <- d }})
				if err != nil {
					b.Fatal(err)
				}
				const credit = 256
				r.SetLimit(credit)
				done := make(chan struct{})
				go func() { // the receiver: complete each message, top up credit
					defer close(done)
					settled := make(chan error, credit)
					for n := 1; n <= b.N; n++ {
						d := <-deliveries
						e.Settle(event.MainQueue, Settlement{Token: d.Token, Outcome: projection.Complete}, func(err error) { settled <- err })
						if n%64 == 0 {
							for range 64 {
								if err := <-settled; err != nil {
									b.Error(err)
								}
							}
							r.SetLimit(uint64(n + credit))
						}
					}
				}()
				body := make([]byte, 1024)
				inflight := make(chan struct{}, 64)
				cpu0 := cpuTime()
				b.ResetTimer()
				for range b.N {
					inflight <- struct{}{}
					e.Send(event.MainQueue, []projection.Message{{Body: body}}, func(err error) {
						if err != nil {
							b.Error(err)
						}
						<-inflight
					})
				}
				<-done
				b.StopTimer()
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e3, "cpu-µs/msg")
				br.Close()
			})
		}
	}
}

// BenchmarkSendBatches sends batches of 100 1 KB messages, 4 batches in
// flight, to a queue nobody receives from: the broker side of a batched
// send, with the record cache full and evicting.
func BenchmarkSendBatches(b *testing.B) {
	for _, sync := range []log.SyncPolicy{log.SyncAlways, log.SyncNone} {
		b.Run(sync.String(), func(b *testing.B) {
			br := openBench(b, Options{Dir: b.TempDir(), Sync: sync})
			defer br.Close()
			e, err := br.CreateQueue("q", projection.DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			const batch = 100
			msgs := make([]projection.Message, batch)
			for i := range msgs {
				msgs[i].Body = make([]byte, 1024)
			}
			inflight := make(chan struct{}, 4)
			b.SetBytes(1024)
			cpu0 := cpuTime()
			b.ResetTimer()
			for n := 0; n < b.N; n += batch {
				inflight <- struct{}{}
				e.Send(event.MainQueue, msgs, func(err error) {
					if err != nil {
						b.Error(err)
					}
					<-inflight
				})
			}
			for range cap(inflight) {
				inflight <- struct{}{}
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e3, "cpu-µs/msg")
		})
	}
}

func openBench(b *testing.B, opts Options) *Broker {
	br, _, err := Open(opts)
	if err != nil {
		b.Fatal(err)
	}
	return br
}

// BenchmarkRestartTopic100Subs measures restart of a topic with 100
// subscriptions holding a backlog of 100k 1 KB messages each (sent once),
// every tenth subscription having completed every other message (a
// fragmented subscription): load the snapshot, then replay a 10k-message
// tail written after it.
func BenchmarkRestartTopic100Subs(b *testing.B) {
	dir := b.TempDir()
	opts := Options{Dir: dir, Sync: log.SyncNone, SnapshotEvery: 1 << 30, SnapshotBytes: 1 << 40, CacheBytes: 1 << 20}
	const subs = 100
	var snaps string
	fill := func(n int, settle bool) {
		br, _, err := Open(opts)
		if err != nil {
			b.Fatal(err)
		}
		e, err := br.Entity("t")
		if err != nil {
			if e, err = br.CreateTopic("t", DefaultTopicConfig()); err != nil {
				b.Fatal(err)
			}
			for i := range subs {
				if err := e.CreateSubscription(fmt.Sprint("s", i), DefaultSubscriptionConfig(), nil); err != nil {
					b.Fatal(err)
				}
			}
		}
		sendBacklog(b, e, n)
		if settle {
			for i := 0; i < subs; i += 10 {
				q, _ := e.SubscriptionQueue(fmt.Sprint("s", i))
				ch := make(chan Delivery, 1024)
				r, err := e.Attach(ReceiverOptions{Name: "r", Queue: q, Deliver: func(d Delivery) { ch <- d }})
				if err != nil {
					b.Fatal(err)
				}
				for k := 0; k < n; k += 1000 {
					r.SetLimit(uint64(k + 1000))
					for j := range 1000 {
						d := <-ch
						out := Release
						if j%2 == 0 {
							out = Complete
						}
						done := make(chan error, 1)
						e.Settle(q, Settlement{Token: d.Token, Outcome: out}, func(err error) { done <- err })
						if err := <-done; err != nil {
							b.Fatal(err)
						}
					}
				}
				r.Detach(nil)
			}
		}
		e.Sync()
		snaps = layout.SnapshotDir(e.dir)
		if settle {
			br.Close() // writes the snapshot
		} else {
			br.shutdown(false) // the tail stays unsnapshotted
		}
	}
	fill(100_000, true)
	fill(10_000, false)
	infos, err := snapshot.List(snaps)
	if err != nil || len(infos) != 1 {
		b.Fatalf("snapshots %v: %v", infos, err)
	}
	restarts(b, opts, func(er EntityRecovery) bool { return er.Snapshot != 0 && er.Replayed != 0 })
	b.ReportMetric(float64(infos[0].Size), "snapshot-bytes")
	if raw, err := snapshot.Read(infos[0]); err == nil {
		b.ReportMetric(float64(len(raw)), "snapshot-raw-bytes")
	}
}

// BenchmarkReceiveProcessSend: a message received from "in", completed
// and a reply sent to "out", n at a time: as one transaction on "in"
// whose replies go through it (send-via: into its log, then on to "out"),
// or as the same work without one (a settle on "in" and a send to "out",
// each durable before the next round). Both on durable logs (fsync per
// group commit); a run ends when "out" holds every reply, so the
// transfers behind the commits are counted. With the process's CPU per
// round:
//
//	go test ./broker -run '^$' -bench ReceiveProcessSend -benchtime 2000x
func BenchmarkReceiveProcessSend(b *testing.B) {
	for _, n := range []int{1, 10} {
		for _, txn := range []bool{true, false} {
			name := fmt.Sprintf("n=%d/plain", n)
			if txn {
				name = fmt.Sprintf("n=%d/transaction", n)
			}
			b.Run(name, func(b *testing.B) {
				br, _, err := Open(Options{Dir: b.TempDir(), IdleCheckpoint: -1})
				if err != nil {
					b.Fatal(err)
				}
				defer br.Close()
				in, err := br.CreateQueue("in", projection.DefaultConfig())
				if err != nil {
					b.Fatal(err)
				}
				out, err := br.CreateQueue("out", projection.DefaultConfig())
				if err != nil {
					b.Fatal(err)
				}
				body := make([]byte, 1024)
				got := make(chan Delivery, n)
				r, err := in.Attach(ReceiverOptions{Name: "r", Deliver: func(d Delivery) { got <- d }})
				if err != nil {
					b.Fatal(err)
				}
				sendBacklog(b, in, b.N*n)
				b.ResetTimer()
				cpu := cpuTime()
				var limit uint64
				for range b.N {
					limit += uint64(n)
					r.SetLimit(limit)
					tx := Transaction{Transfers: []TxTransfer{{To: "out"}}}
					for range n {
						d := <-got
						tx.Settles = append(tx.Settles, TxSettle{Settlement: Settlement{Token: d.Token, Outcome: projection.Complete}})
						tx.Transfers[0].Messages = append(tx.Transfers[0].Messages, projection.Message{Body: body})
					}
					done := make(chan error, 2*n)
					if txn {
						in.Commit(tx, func(err error) { done <- err })
						if err := <-done; err != nil {
							b.Fatal(err)
						}
						continue
					}
					for i := range n {
						in.Settle(event.MainQueue, tx.Settles[i].Settlement, func(err error) { done <- err })
						out.Send(event.MainQueue, tx.Transfers[0].Messages[i:i+1], func(err error) { done <- err })
					}
					for range 2 * n {
						if err := <-done; err != nil {
							b.Fatal(err)
						}
					}
				}
				for {
					c, err := out.Counts(event.MainQueue)
					if err != nil {
						b.Fatal(err)
					}
					if c.Total == uint64(b.N*n) {
						break
					}
					time.Sleep(100 * time.Microsecond)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rounds/s")
				b.ReportMetric(float64((cpuTime()-cpu).Microseconds())/float64(b.N), "cpu-µs/round")
			})
		}
	}
}
