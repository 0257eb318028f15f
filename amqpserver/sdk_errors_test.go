package amqpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/broker"
)

// The errors the SDK must classify as it does against Azure.
func TestSDKErrorsClassified(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	newClient := func(cs string) *azservicebus.Client {
		c, err := azservicebus.NewClientFromConnectionString(cs, &azservicebus.ClientOptions{
			RetryOptions: azservicebus.RetryOptions{MaxRetries: -1}})
		if err != nil {
			t.Fatal(err)
		}
		tb.clients.Add(1)
		t.Cleanup(func() { c.Close(ctxT(t)) })
		return c
	}
	root := newClient(tb.connString("RootManageSharedAccessKey", "SAS_KEY_VALUE"))

	t.Run("missing queue is CodeNotFound", func(t *testing.T) {
		s, _ := root.NewSender("no-such-queue", nil)
		err := s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("x")}, nil)
		if sbCode(err) != azservicebus.CodeNotFound {
			t.Fatalf("send to a missing queue: %v", err)
		}
		r, _ := root.NewReceiverForQueue("no-such-queue", nil)
		if _, err := r.ReceiveMessages(ctxT(t), 1, nil); sbCode(err) != azservicebus.CodeNotFound {
			t.Fatalf("receive from a missing queue: %v", err)
		}
	})

	t.Run("rights", func(t *testing.T) {
		listen := newClient(tb.connString("ListenOnly", "listen-key"))
		s, _ := listen.NewSender("q1", nil)
		if err := s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("x")}, nil); sbCode(err) != azservicebus.CodeUnauthorizedAccess {
			t.Fatalf("send with a Listen key: %v", err)
		}
		send := newClient(tb.connString("SendOnly", "send-key"))
		r, _ := send.NewReceiverForQueue("q1", nil)
		if _, err := r.ReceiveMessages(ctxT(t), 1, nil); sbCode(err) != azservicebus.CodeUnauthorizedAccess {
			t.Fatalf("receive with a Send key: %v", err)
		}
		// and each key can do what it has the right for
		s2, _ := send.NewSender("q1", nil)
		if err := s2.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("ok")}, nil); err != nil {
			t.Fatalf("send with a Send key: %v", err)
		}
		r2, _ := listen.NewReceiverForQueue("q1", nil)
		if msgs, err := r2.ReceiveMessages(ctxT(t), 1, nil); err != nil || len(msgs) != 1 {
			t.Fatalf("receive with a Listen key: %v %v", msgs, err)
		}
	})

	t.Run("oversize message is ErrMessageTooLarge", func(t *testing.T) {
		s, _ := root.NewSender("q1", nil)
		err := s.SendMessage(ctxT(t), &azservicebus.Message{Body: make([]byte, 1<<20+1)}, nil)
		if !errors.Is(err, azservicebus.ErrMessageTooLarge) {
			t.Fatalf("oversize send: %v", err)
		}
	})

	t.Run("expired token is 401 ExpiredToken", func(t *testing.T) {
		key := sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE"}
		token := sas.Sign("sb://"+tb.addr, key, time.Now().Add(-time.Minute), sas.GoStyle)
		expired := newClient(fmt.Sprintf("Endpoint=sb://%s;SharedAccessSignature=%s;UseDevelopmentEmulator=true", tb.addr, token))
		s, _ := expired.NewSender("q1", nil)
		err := s.SendMessage(ctxT(t), &azservicebus.Message{Body: []byte("x")}, nil)
		if sbCode(err) != azservicebus.CodeUnauthorizedAccess || !strings.Contains(err.Error(), "ExpiredToken: The token is expired. Expiration time:") {
			t.Fatalf("expired token: %v", err)
		}
	})
}

// Scheduling a message larger than the queue takes fails at once in the
// client, as sending it does: the management link carries the queue's
// limit. A 413 from the broker instead made the Go SDK rebuild its
// connection for about 45 seconds before giving up (CodeConnectionLost).
func TestSDKScheduleOversizeFailsAtOnce(t *testing.T) {
	small := broker.DefaultConfig()
	small.MaxMessageSize = 64 << 10
	tb := startBroker(t, map[string]broker.Config{"small": small})
	s, _ := tb.client(t).NewSender("small", nil)
	ctx, cancel := contextWithTimeout(t, 10*time.Second)
	defer cancel()
	_, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: make([]byte, 100<<10)}}, time.Now().Add(time.Hour), nil)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || sbCode(err) == azservicebus.CodeConnectionLost {
		t.Fatalf("scheduling 100 KiB on a 64 KiB queue: %v", err)
	}
	if !strings.Contains(err.Error(), "message-size-exceeded") {
		t.Fatalf("scheduling 100 KiB on a 64 KiB queue: %v, want the link's message-size-exceeded", err)
	}
	// Within the limit, it is scheduled.
	if _, err := s.ScheduleMessages(ctxT(t), []*azservicebus.Message{{Body: make([]byte, 60<<10)}}, time.Now().Add(time.Hour), nil); err != nil {
		t.Fatalf("scheduling 60 KiB on a 64 KiB queue: %v", err)
	}
}
