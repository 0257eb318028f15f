package amqpserver

import (
	"context"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/broker"
)

func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSendReceiveAccept runs the whole server in process (AMQP, the
// broker, the log without fsync) under go-amqp clients: 64 senders of one
// 1 KB message each in flight, one receiver with 256 credit accepting
// every message. It reports the process CPU per message, clients
// included, and allocations per message: the figures to watch when
// changing the path a message takes.
func BenchmarkSendReceiveAccept(b *testing.B) {
	br, _, err := broker.Open(broker.Options{Dir: b.TempDir(), Sync: broker.SyncNone})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := br.CreateQueue("q", broker.DefaultConfig()); err != nil {
		b.Fatal(err)
	}
	keys, _ := sas.NewKeys(sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE", Rights: sas.Manage})
	srv := New(br, Config{Keys: keys})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	defer func() {
		srv.Shutdown(context.Background())
		br.Close()
	}()
	ctx := context.Background()
	dial := func() *amqp.Session {
		conn, err := amqp.Dial(ctx, "amqp://"+ln.Addr().String(),
			&amqp.ConnOptions{SASLType: amqp.SASLTypePlain("RootManageSharedAccessKey", "SAS_KEY_VALUE")})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		s, err := conn.NewSession(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	snd, err := dial().NewSender(ctx, "q", nil)
	if err != nil {
		b.Fatal(err)
	}
	rcv, err := dial().NewReceiver(ctx, "q", &amqp.ReceiverOptions{Credit: 256})
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 1024)
	run := func(n int) {
		var wg sync.WaitGroup
		wg.Go(func() {
			for range n {
				m, err := rcv.Receive(ctx, nil)
				if err == nil {
					err = rcv.AcceptMessage(ctx, m)
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
		const senders = 64
		for s := range senders {
			wg.Go(func() {
				for i := s; i < n; i += senders {
					if err := snd.Send(ctx, &amqp.Message{Data: [][]byte{body}}, nil); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	run(2000) // warm up
	b.ReportAllocs()
	cpu := processCPU()
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N)/1e3, "cpu-µs/msg")
}

// BenchmarkInbound maps a 1 KB message as the Go SDK sends it (no
// message-id, so the broker assigns one and rewrites the properties) and
// one that carries its own id (stored as it came).
func BenchmarkInbound(b *testing.B) {
	for _, tc := range []struct {
		name string
		id   any
	}{{"assigned-id", nil}, {"own-id", "4f6b2a0e-6f0c-4d7e-9b1a-2c3d4e5f6a7b"}} {
		m := &amqp.Message{
			Properties:            &amqp.MessageProperties{MessageID: tc.id, ContentType: ptr("application/json")},
			ApplicationProperties: map[string]any{"tenant": "contoso", "attempt": int32(3)},
			Data:                  [][]byte{make([]byte, 1024)},
		}
		raw, err := m.MarshalBinary()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := inbound(raw, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReceiveProcessSendAMQP is broker's BenchmarkReceiveProcessSend
// through the protocol, with the project's frame client: requests
// received from "in" on a peek-lock link, and for each a 1 KiB reply to
// "out", n at a time: in a transaction on "in" whose replies go through
// it (a send-via sender: transactional transfers and dispositions, then
// the discharge), or without one (an accept and a send to "out" on its own
// sender, each answered before the next round). Durable logs, the whole
// server in process; the CPU per round is the process's, client included.
// A run ends when "out" holds every reply.
//
//	go test ./amqpserver -run '^$' -bench ReceiveProcessSendAMQP -benchtime 1000x
func BenchmarkReceiveProcessSendAMQP(b *testing.B) {
	for _, n := range []int{1, 10} {
		for _, txn := range []bool{true, false} {
			name := fmt.Sprintf("n=%d/plain", n)
			if txn {
				name = fmt.Sprintf("n=%d/transaction", n)
			}
			b.Run(name, func(b *testing.B) {
				br, addr := startRawWith(b, Config{}, broker.Options{})
				in, err := br.CreateQueue("in", broker.DefaultConfig())
				if err != nil {
					b.Fatal(err)
				}
				out, err := br.CreateQueue("out", broker.DefaultConfig())
				if err != nil {
					b.Fatal(err)
				}
				body := dataMessage(string(make([]byte, 1024)))
				backlog := make([]broker.Message, 0, b.N*n)
				for range b.N * n {
					backlog = append(backlog, broker.Message{Body: body})
				}
				for len(backlog) > 0 {
					k := min(len(backlog), 1000)
					done := make(chan error, 1)
					in.Send(broker.MainQueue, backlog[:k], func(err error) { done <- err })
					if err := <-done; err != nil {
						b.Fatal(err)
					}
					backlog = backlog[k:]
				}
				c := dialTxn(b, addr)
				c.attachJS(2, "r", "in", false)
				c.attachVia(3, "in", "out")
				c.attachSender(4, "out")
				var received uint32
				b.ResetTimer()
				cpu := processCPU()
				for range b.N {
					c.send(0, &frames.Flow{NextIncomingID: frames.Some(received), IncomingWindow: 1 << 20,
						NextOutgoingID: c.sent, OutgoingWindow: 1 << 20, Handle: frames.Some[uint32](2),
						DeliveryCount: frames.Some(received), LinkCredit: frames.Some(uint32(n))}, nil)
					ids := make([]uint32, 0, n)
					for len(ids) < n {
						if p, _ := c.frame(); p != nil {
							if tr, ok := p.(*frames.Transfer); ok {
								ids = append(ids, tr.DeliveryID.Or(0))
							}
						}
					}
					received += uint32(n)
					if !txn {
						sends := make([]uint32, n)
						for i, id := range ids {
							c.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: id, State: &frames.Accepted{}}, nil)
							sends[i] = c.transfer(4, nil, body)
						}
						for i, id := range ids {
							c.disposition(frames.RoleSender, id)
							c.outcome(sends[i])
						}
						continue
					}
					t := c.declare()
					state := &frames.TransactionalState{TxnID: t, Outcome: &frames.Accepted{}}
					sends := make([]uint32, n)
					for i, id := range ids {
						sends[i] = c.transfer(3, &frames.TransactionalState{TxnID: t}, body)
						c.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: id, State: state}, nil)
					}
					for _, s := range sends {
						c.outcome(s)
					}
					if _, ok := c.discharge(t, false).(*frames.Accepted); !ok {
						b.Fatal("commit refused")
					}
					for _, id := range ids {
						c.disposition(frames.RoleSender, id)
					}
				}
				for {
					if cnt, _ := out.Counts(broker.MainQueue); cnt.Total == uint64(b.N*n) {
						break
					}
					time.Sleep(100 * time.Microsecond)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rounds/s")
				b.ReportMetric(float64((processCPU()-cpu).Microseconds())/float64(b.N), "cpu-µs/round")
			})
		}
	}
}
