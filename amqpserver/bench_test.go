package amqpserver

import (
	"context"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

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
