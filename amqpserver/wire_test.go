package amqpserver

import (
	"bytes"
	"errors"
	"testing"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/amqpserver/transport"
	"github.com/walbus/walbus/broker"
)

// plainConn dials with SASL PLAIN, so no CBS dance is needed.
func plainConn(t *testing.T, addr string) *amqp.Session {
	t.Helper()
	conn := dial(t, addr, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain("RootManageSharedAccessKey", "SAS_KEY_VALUE")})
	sess, err := conn.NewSession(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

// Every disposition outcome maps to its settlement and gets a settled reply;
// the broker's view afterwards shows the effect.
func TestDispositionOutcomes(t *testing.T) {
	b, addr := startRaw(t, Config{})
	sess := plainConn(t, addr)
	snd, err := sess.NewSender(ctxT(t), "q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"accept", "release", "abandon", "defer", "deadletter"} {
		if err := snd.Send(ctxT(t), &amqp.Message{Data: [][]byte{[]byte(body)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A pre-settled send is stored too, with no outcome to wait for.
	if err := snd.Send(ctxT(t), &amqp.Message{Data: [][]byte{[]byte("presettled")}}, &amqp.SendOptions{Settled: true}); err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctxT(t), "q1", &amqp.ReceiverOptions{Credit: -1, SettlementMode: amqp.ReceiverSettleModeSecond.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.IssueCredit(5); err != nil {
		t.Fatal(err)
	}
	msgs := map[string]*amqp.Message{}
	for range 5 {
		m, err := rcv.Receive(ctxT(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(m.DeliveryTag) != 16 || m.DeliveryAnnotations["x-opt-lock-token"] == nil {
			t.Fatalf("a peek-lock delivery needs a lock token: tag % x", m.DeliveryTag)
		}
		msgs[string(m.GetData())] = m
	}
	ctx := ctxT(t)
	if err := rcv.AcceptMessage(ctx, msgs["accept"]); err != nil {
		t.Fatalf("accept: %v", err)
	}
	if err := rcv.ReleaseMessage(ctx, msgs["release"]); err != nil {
		t.Fatalf("release: %v", err)
	}
	if err := rcv.ModifyMessage(ctx, msgs["abandon"], &amqp.ModifyMessageOptions{Annotations: amqp.Annotations{"why": "retry"}}); err != nil {
		t.Fatalf("modify (abandon): %v", err)
	}
	if err := rcv.ModifyMessage(ctx, msgs["defer"], &amqp.ModifyMessageOptions{UndeliverableHere: true}); err != nil {
		t.Fatalf("modify undeliverable-here (defer): %v", err)
	}
	if err := rcv.RejectMessage(ctx, msgs["deadletter"], &amqp.Error{Condition: condDeadLetter,
		Info: map[string]any{"DeadLetterReason": "r", "DeadLetterErrorDescription": "d"}}); err != nil {
		t.Fatalf("reject (dead-letter): %v", err)
	}

	e, _ := b.Entity("q1")
	peek, err := e.Peek(broker.MainQueue, 1, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range peek {
		got[string(bodyOf(t, d.Message))] = d.State.String() + ":" + string(rune('0'+d.Deliveries))
	}
	want := map[string]string{"release": "available:0", "abandon": "available:1", "defer": "deferred:0", "presettled": "available:0"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s, want %s (all: %v)", k, got[k], v, got)
		}
	}
	if _, ok := got["accept"]; ok {
		t.Error("the accepted message is still there")
	}
	dlq, _ := e.Peek(broker.DeadLetterQueue, 1, 10, "")
	if len(dlq) != 1 || len(dlq[0].Overlays) != 1 || dlq[0].Overlays[0].Reason != "r" {
		t.Fatalf("dead-letter queue: %+v", dlq)
	}
}

func bodyOf(t *testing.T, raw []byte) []byte {
	var m amqp.Message
	if err := m.UnmarshalBinary(raw); err != nil {
		t.Fatal(err)
	}
	return m.GetData()
}

// Drain is answered at once: what is available comes first, then the
// remaining credit is given back.
func TestDrain(t *testing.T) {
	_, addr := startRaw(t, Config{})
	sess := plainConn(t, addr)
	snd, _ := sess.NewSender(ctxT(t), "q1", nil)
	snd.Send(ctxT(t), &amqp.Message{Data: [][]byte{[]byte("one")}}, nil)
	rcv, err := sess.NewReceiver(ctxT(t), "q1", &amqp.ReceiverOptions{Credit: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv.IssueCredit(10); err != nil {
		t.Fatal(err)
	}
	m, err := rcv.Receive(ctxT(t), nil)
	if err != nil || string(m.GetData()) != "one" {
		t.Fatalf("receive: %v", err)
	}
	rcv.AcceptMessage(ctxT(t), m)
	// Nine credits are left; the drain gives them back at once.
	if err := rcv.DrainCredit(ctxT(t), nil); err != nil {
		t.Fatalf("drain: %v", err)
	}
	// After the drain, a new message waits for new credit.
	snd.Send(ctxT(t), &amqp.Message{Data: [][]byte{[]byte("two")}}, nil)
	if err := rcv.IssueCredit(1); err != nil {
		t.Fatal(err)
	}
	if m, err := rcv.Receive(ctxT(t), nil); err != nil || string(m.GetData()) != "two" {
		t.Fatalf("receive after drain: %v", err)
	}
}

// Messages of a megabyte and more cross the link in many frames each way.
func TestMultiFrameMessages(t *testing.T) {
	cfg := Config{Transport: transport.Config{MaxFrameSize: 4096, MaxMessageSize: 8 << 20}}
	cfg.Keys, _ = sas.NewKeys(sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE", Rights: sas.Manage})
	b, addr := startRaw(t, cfg)
	big := broker.DefaultConfig()
	big.MaxMessageSize = 8 << 20
	if err := b.UpdateQueue("q1", big); err != nil {
		t.Fatal(err)
	}
	sess := plainConn(t, addr)
	snd, err := sess.NewSender(ctxT(t), "q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("0123456789abcdef"), 2<<20/16)
	if err := snd.Send(ctxT(t), &amqp.Message{Data: [][]byte{body}}, nil); err != nil {
		t.Fatalf("send 2 MB: %v", err)
	}
	rcv, err := sess.NewReceiver(ctxT(t), "q1", &amqp.ReceiverOptions{Credit: 1, MaxMessageSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	m, err := rcv.Receive(ctxT(t), nil)
	if err != nil || !bytes.Equal(m.GetData(), body) {
		t.Fatalf("receive 2 MB: %v", err)
	}
	// Past the entity's limit: rejected with message-size-exceeded.
	small := broker.DefaultConfig()
	small.MaxMessageSize = 1 << 20
	b.UpdateQueue("q1", small)
	err = snd.Send(ctxT(t), &amqp.Message{Data: [][]byte{body}}, nil)
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Condition != condMessageTooLarge {
		t.Fatalf("oversize for the entity: %v", err)
	}
}
