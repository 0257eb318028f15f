package amqpserver

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/broker"
)

// testBroker is a real broker and AMQP server on a loopback port.
type testBroker struct {
	dir    string
	b      *broker.Broker
	srv    *Server
	addr   string
	opened uint64 // connections opened by servers before a restart
	// clients counts SDK clients; each opens at most one connection unless
	// something made it reconnect. Tests that cause reconnects on purpose
	// set reconnects.
	clients    atomic.Int64
	reconnects bool
}

func startBroker(t *testing.T, queues map[string]broker.Config) *testBroker {
	t.Helper()
	tb := &testBroker{dir: t.TempDir()}
	tb.start(t, "127.0.0.1:0")
	for name, cfg := range queues {
		if _, err := tb.b.CreateQueue(name, cfg); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// A reply the SDK reads as an error makes it tear the connection
		// down and retry: it would pass slowly, not fail, without this.
		if n, c := tb.opened+tb.srv.ConnectionsOpened(), uint64(tb.clients.Load()); n > c && !tb.reconnects && !t.Failed() {
			t.Errorf("%d clients opened %d connections: something made them reconnect", c, n)
		}
		tb.stop()
	})
	return tb
}

// start opens the broker in tb.dir and serves it on addr.
func (tb *testBroker) start(t *testing.T, addr string) {
	t.Helper()
	b, _, err := broker.Open(broker.Options{Dir: tb.dir, NewBracket: NewBracket, FilterMessage: FilterMessage})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := sas.NewKeys(
		sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE", Rights: sas.Manage},
		sas.Key{Name: "SendOnly", Value: "send-key", Rights: sas.Send},
		sas.Key{Name: "ListenOnly", Value: "listen-key", Rights: sas.Listen})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(b, Config{Keys: keys})
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	tb.b, tb.srv, tb.addr = b, srv, l.Addr().String()
}

func (tb *testBroker) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tb.srv.Shutdown(ctx)
	tb.b.Close()
}

// restart stops the broker (clients see amqp:connection:forced) and starts
// it again on the same data and address.
func (tb *testBroker) restart(t *testing.T) {
	tb.opened += tb.srv.ConnectionsOpened()
	tb.stop()
	tb.start(t, tb.addr)
}

func (tb *testBroker) connString(keyName, key string) string {
	return fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true", tb.addr, keyName, key)
}

func (tb *testBroker) client(t *testing.T) *azservicebus.Client {
	t.Helper()
	c, err := azservicebus.NewClientFromConnectionString(tb.connString("RootManageSharedAccessKey", "SAS_KEY_VALUE"), nil)
	if err != nil {
		t.Fatal(err)
	}
	tb.clients.Add(1)
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSDKSendReceiveComplete(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	ctx := ctxT(t)
	s, err := c.NewSender("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("hello")}, nil); err != nil {
		t.Fatalf("send: %v", err)
	}
	r, err := c.NewReceiverForQueue("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v %v", msgs, err)
	}
	m := msgs[0]
	if string(m.Body) != "hello" || m.DeliveryCount != 1 || m.SequenceNumber == nil || m.LockedUntil == nil {
		t.Fatalf("received %+v", m)
	}
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatalf("complete: %v", err)
	}
	peeked, err := r.PeekMessages(ctx, 10, nil)
	if err != nil || len(peeked) != 0 {
		t.Fatalf("after complete: %v %v", peeked, err)
	}
}

func contextWithTimeout(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
