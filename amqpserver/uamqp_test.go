package amqpserver

import (
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/sas"
)

// uAMQP (the C library under the Python SDK up to 7.11) puts its token
// as soon as the $cbs sender has credit: it attaches the sender and the
// receiver ("$cbs-sender", "$cbs-receiver", both with $cbs as source and
// target), sends the put-token before the receiver's attach is answered,
// gives the receiver credit after that, and names no reply-to (message-id
// a ulong 0), and asks for unsettled deliveries (snd-settle-mode 0). The
// response must still reach it on the receiver, unsettled: sent settled,
// the transport refused it, and the client waited for ever.
func TestCBSAsUAMQPDoesIt(t *testing.T) {
	_, addr := startRaw(t, Config{})
	c := dialFrames(t, addr)
	links := []struct {
		name string
		role frames.Role
	}{{"$cbs-sender", frames.RoleSender}, {"$cbs-receiver", frames.RoleReceiver}}
	for handle, link := range links {
		c.send(0, &frames.Attach{Name: link.name, Handle: uint32(handle), Role: link.role,
			SndSettleMode: frames.Some(frames.SenderSettleUnsettled), RcvSettleMode: frames.Some(frames.ReceiverSettleFirst),
			Source: &frames.Source{Address: "$cbs"}, Target: &frames.Target{Address: "$cbs"}}, nil)
	}
	for credit := false; !credit; {
		p, _ := c.next()
		fl, isFlow := p.(*frames.Flow)
		credit = isFlow && fl.Handle.Or(9) == 0 && fl.LinkCredit.Or(0) > 0
	}
	key := sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE"}
	token := sas.Sign("sb://"+addr+"/q1", key, time.Now().Add(time.Hour), sas.GoStyle)
	req := marshal(t, &amqp.Message{
		Properties: &amqp.MessageProperties{MessageID: uint64(0)},
		ApplicationProperties: map[string]any{"name": "sb://" + addr + "/q1", "operation": "put-token",
			"type": "servicebus.windows.net:sastoken"},
		Value: token,
	})
	c.send(0, &frames.Transfer{Handle: 0, DeliveryID: frames.Some[uint32](0), DeliveryTag: []byte{1, 0, 0, 0},
		MessageFormat: frames.Some[uint32](0)}, req)
	c.flow(1, 0, 10000, false)
	for {
		p, payload := c.next()
		tr, isTransfer := p.(*frames.Transfer)
		if !isTransfer {
			continue
		}
		if tr.Handle != 1 || tr.Settled {
			t.Fatalf("response transfer %+v: want it on handle 1, unsettled as the receiver's attach asked", tr)
		}
		resp := unmarshal(t, payload)
		if status, _ := resp.ApplicationProperties["status-code"].(int32); status != 202 {
			t.Fatalf("put-token: %v", resp.ApplicationProperties)
		}
		if resp.Properties == nil || resp.Properties.CorrelationID != uint64(0) {
			t.Fatalf("correlation-id %#v, want the request's ulong message-id", resp.Properties)
		}
		return
	}
}
