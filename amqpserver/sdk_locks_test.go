package amqpserver

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walbus/walbus/broker"
)

func sbCode(err error) azservicebus.Code {
	var sbErr *azservicebus.Error
	if errors.As(err, &sbErr) {
		return sbErr.Code
	}
	return ""
}

func TestSDKRenewLockAndLockExpiry(t *testing.T) {
	cfg := broker.DefaultConfig()
	cfg.LockDuration = 2 * time.Second
	tb := startBroker(t, map[string]broker.Config{"q1": cfg})
	c := tb.client(t)
	sendBodies(t, c, "q1", "a", "b")
	r, _ := c.NewReceiverForQueue("q1", nil)
	msgs := receiveN(t, r, 2)
	before := *msgs[0].LockedUntil
	time.Sleep(100 * time.Millisecond)
	if err := r.RenewMessageLock(ctxT(t), msgs[0], nil); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if !msgs[0].LockedUntil.After(before) {
		t.Fatalf("renewal did not extend the lock: %v -> %v", before, *msgs[0].LockedUntil)
	}
	// Let b's lock run out: settling (a disposition) and renewing (through
	// $management, status 410) fail with CodeLockLost, in Service Bus's
	// words (the SDK's TestReceiver_RenewMessageLock looks for them).
	time.Sleep(time.Until(*msgs[1].LockedUntil) + 300*time.Millisecond)
	const lockLost = "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue"
	if err := r.CompleteMessage(ctxT(t), msgs[1], nil); sbCode(err) != azservicebus.CodeLockLost || !strings.Contains(err.Error(), lockLost) {
		t.Fatalf("complete after lock expiry: %v", err)
	}
	if err := r.RenewMessageLock(ctxT(t), msgs[1], nil); sbCode(err) != azservicebus.CodeLockLost ||
		!strings.Contains(err.Error(), "status code 410 and description: "+lockLost) {
		t.Fatalf("renew after lock expiry: %v", err)
	}
	// The expired lock counted a delivery.
	again := receiveN(t, r, 2)
	for _, m := range again {
		if string(m.Body) == "b" && m.DeliveryCount != 2 {
			t.Fatalf("b redelivered with DeliveryCount %d", m.DeliveryCount)
		}
	}
}

// A lock outlives its receive link: a new receiver settles and renews by
// lock token alone, through $management (azservicebus's
// TestReceiver_SettleWithOnlyLockToken).
func TestSDKSettleWithOnlyLockToken(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q1": broker.DefaultConfig()})
	c := tb.client(t)
	for _, outcome := range []string{"complete", "abandon", "deadletter", "defer"} {
		sendBodies(t, c, "q1", outcome)
		r, _ := c.NewReceiverForQueue("q1", nil)
		m := receiveN(t, r, 1)[0]
		token := m.LockToken
		r.Close(ctxT(t))
		r2, _ := c.NewReceiverForQueue("q1", nil)
		bare := &azservicebus.ReceivedMessage{LockToken: token}
		if err := r2.RenewMessageLock(ctxT(t), bare, nil); err != nil || bare.LockedUntil == nil {
			t.Fatalf("%s: renew by token: %v", outcome, err)
		}
		var err error
		switch outcome {
		case "complete":
			err = r2.CompleteMessage(ctxT(t), bare, nil)
		case "abandon":
			err = r2.AbandonMessage(ctxT(t), bare, nil)
		case "deadletter":
			err = r2.DeadLetterMessage(ctxT(t), bare, nil)
		case "defer":
			err = r2.DeferMessage(ctxT(t), bare, nil)
		}
		if err != nil {
			t.Fatalf("%s by token: %v", outcome, err)
		}
		peek, _ := r2.PeekMessages(ctxT(t), 10, nil)
		switch {
		case outcome == "abandon" && (len(peek) != 1 || peek[0].DeliveryCount != 2):
			t.Fatalf("abandon by token: %v", peek)
		case outcome == "defer" && (len(peek) != 1 || peek[0].State != azservicebus.MessageStateDeferred):
			t.Fatalf("defer by token: %v", peek)
		case outcome == "complete" || outcome == "deadletter":
			if len(peek) != 0 {
				t.Fatalf("%s by token left %d messages", outcome, len(peek))
			}
		}
		// Clear the queue for the next round.
		for _, p := range peek {
			if p.State == azservicebus.MessageStateDeferred {
				d, _ := r2.ReceiveDeferredMessages(ctxT(t), []int64{*p.SequenceNumber}, nil)
				r2.CompleteMessage(ctxT(t), d[0], nil)
			} else {
				m := receiveN(t, r2, 1)[0]
				r2.CompleteMessage(ctxT(t), m, nil)
			}
		}
		r2.Close(ctxT(t))
	}
	if n := tb.srv.OperationCounts()["com.microsoft:update-disposition"]; n != 4+1 {
		t.Fatalf("%d update-disposition requests; settling by token goes through $management", n)
	}
}
