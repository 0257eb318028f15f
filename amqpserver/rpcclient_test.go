package amqpserver

import (
	"fmt"
	"testing"

	"github.com/Azure/go-amqp"
)

// mgmtClient makes request-response calls to a node ($management, $cbs)
// over go-amqp as the SDKs do: an unsettled request on a sender link to
// the node, the reply on a receiver link whose target is the request's
// reply-to.
type mgmtClient struct {
	t   *testing.T
	snd *amqp.Sender
	rcv *amqp.Receiver
	n   int
}

func newMgmtClient(t *testing.T, sess *amqp.Session, node string) *mgmtClient {
	t.Helper()
	snd, err := sess.NewSender(ctxT(t), node, nil)
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctxT(t), node, &amqp.ReceiverOptions{TargetAddress: "mgmt-reply", Credit: 10})
	if err != nil {
		t.Fatal(err)
	}
	return &mgmtClient{t: t, snd: snd, rcv: rcv}
}

// request sends a request with these application properties and body
// value and returns the reply, which it accepts after checking that it
// correlates to the request's message-id.
func (m *mgmtClient) request(props map[string]any, value any) *amqp.Message {
	m.t.Helper()
	m.n++
	id := fmt.Sprintf("req-%d", m.n)
	req := &amqp.Message{
		Properties:            &amqp.MessageProperties{MessageID: id, ReplyTo: strPtr("mgmt-reply")},
		ApplicationProperties: props,
		Value:                 value,
	}
	if err := m.snd.Send(ctxT(m.t), req, nil); err != nil {
		m.t.Fatal(err)
	}
	resp, err := m.rcv.Receive(ctxT(m.t), nil)
	if err != nil {
		m.t.Fatal(err)
	}
	if err := m.rcv.AcceptMessage(ctxT(m.t), resp); err != nil {
		m.t.Fatal(err)
	}
	if resp.Properties == nil || resp.Properties.CorrelationID != id {
		m.t.Fatalf("%v: reply correlated to %+v, want %s", props["operation"], resp.Properties, id)
	}
	return resp
}

// call sends $management operation op with body and returns the reply's
// status code, error condition and body.
func (m *mgmtClient) call(op string, body map[string]any) (status int32, condition string, reply map[string]any) {
	m.t.Helper()
	resp := m.request(map[string]any{"operation": op}, body)
	status, _ = resp.ApplicationProperties["statusCode"].(int32)
	switch cond := resp.ApplicationProperties["errorCondition"].(type) {
	case string: // how go-amqp reads a symbol
		condition = cond
	case nil:
	default:
		m.t.Fatalf("%s: errorCondition is a %T", op, cond)
	}
	reply, _ = resp.Value.(map[string]any)
	return status, condition, reply
}
