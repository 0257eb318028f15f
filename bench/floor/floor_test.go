package floor_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/bench/floor"
)

func serve(t *testing.T) string {
	t.Helper()
	return serveFloor(t, floor.New())
}

func serveFloor(t *testing.T, srv *floor.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	t.Cleanup(func() {
		ln.Close()
		<-served
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	return ln.Addr().String()
}

// floors are the plain floor and both durable ones, each with the file it
// syncs to ("" for none).
func floors(t *testing.T) map[string]func() (*floor.Server, string) {
	durable := func(how floor.Write) func() (*floor.Server, string) {
		return func() (*floor.Server, string) {
			path := filepath.Join(t.TempDir(), "floor.log")
			srv, err := floor.NewDurable(path, how)
			if err != nil {
				t.Fatal(err)
			}
			return srv, path
		}
	}
	return map[string]func() (*floor.Server, string){
		"plain":     func() (*floor.Server, string) { return floor.New(), "" },
		"append":    durable(floor.Append),
		"overwrite": durable(floor.Overwrite),
	}
}

func sdkClient(t *testing.T, addr string) *azservicebus.Client {
	t.Helper()
	c, err := azservicebus.NewClientFromConnectionString(
		"Endpoint=sb://"+addr+";SharedAccessKeyName=any;SharedAccessKey=any;UseDevelopmentEmulator=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// The Go SDK sends to each floor, receives in both modes, and completes;
// messages come back whole, in order, and once. A durable floor has each
// message in its file by the time the send returns.
func TestSDKSendsReceivesAndCompletes(t *testing.T) {
	for name, open := range floors(t) {
		t.Run(name, func(t *testing.T) {
			srv, path := open()
			sdkRoundTrip(t, serveFloor(t, srv), path)
		})
	}
}

func sdkRoundTrip(t *testing.T, addr, path string) {
	// A hang guard, not a speed test: the overwrite floor fsyncs a whole
	// file per message, which a busy disk makes slow.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := sdkClient(t, addr)
	const n = 20
	for _, q := range []string{"peeklock", "rad"} {
		s, err := c.NewSender(q, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			body := fmt.Sprintf("%s %d", q, i)
			msg := &azservicebus.Message{Body: []byte(body),
				ApplicationProperties: map[string]any{"i": int64(i)}}
			if err := s.SendMessage(ctx, msg, nil); err != nil {
				t.Fatalf("%s: send %d: %v", q, i, err)
			}
			if path == "" {
				continue
			}
			if b, err := os.ReadFile(path); err != nil || !bytes.Contains(b, []byte(body)) {
				t.Fatalf("%s: send %d returned before the file had it (%v)", q, i, err)
			}
		}
		// A batch needs the max-message-size of the attach.
		b, err := s.NewMessageBatch(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.AddMessage(&azservicebus.Message{Body: []byte(q + " batch")}, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.SendMessageBatch(ctx, b, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, mode := range []azservicebus.ReceiveMode{azservicebus.ReceiveModePeekLock, azservicebus.ReceiveModeReceiveAndDelete} {
		q := "peeklock"
		if mode == azservicebus.ReceiveModeReceiveAndDelete {
			q = "rad"
		}
		r, err := c.NewReceiverForQueue(q, &azservicebus.ReceiverOptions{ReceiveMode: mode})
		if err != nil {
			t.Fatal(err)
		}
		if peeked, err := r.PeekMessages(ctx, 1, nil); err != nil || len(peeked) != 0 {
			t.Fatalf("%s: peek: %d messages, %v (the floor keeps no browsable log)", q, len(peeked), err)
		}
		var got []*azservicebus.ReceivedMessage
		for len(got) < n+1 {
			msgs, err := r.ReceiveMessages(ctx, 1, nil)
			if err != nil {
				t.Fatalf("%s: receive: %v", q, err)
			}
			for _, m := range msgs {
				if mode == azservicebus.ReceiveModePeekLock {
					if err := r.CompleteMessage(ctx, m, nil); err != nil {
						t.Fatalf("%s: complete: %v", q, err)
					}
				}
			}
			got = append(got, msgs...)
		}
		for i, m := range got[:n] {
			if want := fmt.Sprintf("%s %d", q, i); string(m.Body) != want || m.ApplicationProperties["i"] != int64(i) {
				t.Fatalf("%s: message %d is %q %v, want %q", q, i, m.Body, m.ApplicationProperties, want)
			}
		}
		if string(got[n].Body) != q+" batch" {
			t.Fatalf("%s: last message %q", q, got[n].Body)
		}
		short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
		more, err := r.ReceiveMessages(short, 1, nil)
		cancelShort()
		if len(more) != 0 {
			t.Fatalf("%s: %d messages after all were received (%v)", q, len(more), err)
		}
	}
}

// go-amqp with credit and unsettled sends, as walbus bench drives it.
func TestGoAMQPSendsAndAccepts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := amqp.Dial(ctx, "amqp://"+serve(t), &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous(), IdleTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctx, "q", &amqp.ReceiverOptions{Credit: 8})
	if err != nil {
		t.Fatal(err)
	}
	// More than the floor's first grant of credit to a sender, so it
	// must top it up; and idle gaps longer than the heartbeat period the
	// client asked for.
	const n = 1500
	for i := range n {
		if err := snd.Send(ctx, amqp.NewMessage([]byte(fmt.Sprint(i))), nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if i == 0 || i == n-1 {
			time.Sleep(1200 * time.Millisecond)
		}
	}
	for i := range n {
		m, err := rcv.Receive(ctx, nil)
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if string(m.GetData()) != fmt.Sprint(i) {
			t.Fatalf("message %d is %q", i, m.GetData())
		}
		if err := rcv.AcceptMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
}
