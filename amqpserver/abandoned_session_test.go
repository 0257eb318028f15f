package amqpserver

import (
	"context"
	"testing"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/broker"
)

// go-amqp gives up a session whose begin it could not write before its
// context ended, and sends an end on that channel with its next begin. The
// broker never saw the begin: the end must not close the connection.
func TestEndOfASessionNeverBegunKeepsTheConnection(t *testing.T) {
	_, addr := startRaw(t, Config{})
	conn := dial(t, addr, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain("RootManageSharedAccessKey", "SAS_KEY_VALUE")})
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := conn.NewSession(gone, nil); err == nil {
		t.Fatal("a session began with a cancelled context")
	}
	sess, err := conn.NewSession(ctxT(t), nil) // ends the abandoned one first
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctxT(t), "q1", nil)
	if err != nil {
		t.Fatalf("attach after the end of a session never begun: %v", err)
	}
	if err := snd.Send(ctxT(t), &amqp.Message{Data: [][]byte{[]byte("still here")}}, nil); err != nil {
		t.Fatalf("send after the end of a session never begun: %v", err)
	}
}

// The same through the SDK: a first receive whose context has already
// ended leaves such a session behind, and the next link the client opens
// ends it. The connection must survive it (the SDK would reconnect, after
// failing what was in flight on it).
func TestSDKReceiveWithAnEndedContextKeepsTheConnection(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	sendBodies(t, c, "q1", "a")
	r, err := c.NewReceiverForQueue("q1", nil)
	if err != nil {
		t.Fatal(err)
	}
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.ReceiveMessages(gone, 1, nil); err == nil {
		t.Fatal("a receive with a cancelled context succeeded")
	}
	m := receiveN(t, r, 1)[0]
	if err := r.CompleteMessage(ctxT(t), m, nil); err != nil {
		t.Fatalf("complete: %v", err)
	}
	sendBodies(t, c, "q1", "b")
	if m := receiveN(t, r, 1)[0]; string(m.Body) != "b" {
		t.Fatalf("received %q", m.Body)
	}
	if n := tb.srv.ConnectionsOpened(); n != 1 {
		t.Fatalf("the client opened %d connections", n)
	}
}
