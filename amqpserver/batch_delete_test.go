package amqpserver

import (
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/broker"
)

// batchDelete asks for count messages enqueued before before (zero: no
// cut-off) and returns how many went, failing the test unless the reply is
// what the JS SDK reads: 200 with the count as an int, or 204 with
// com.microsoft:message-not-found for none.
func (m *mgmtClient) batchDelete(count int32, before time.Time, session string) int32 {
	m.t.Helper()
	body := map[string]any{"message-count": count}
	if !before.IsZero() {
		body["enqueued-time-utc"] = before
	}
	if session != "" {
		body["session-id"] = session
	}
	status, cond, reply := m.call("com.microsoft:batch-delete-messages", body)
	switch {
	case status == 204 && cond == condMessageNotFound && reply == nil:
		return 0
	case status == 200 && cond == "":
		n, isInt := reply["message-count"].(int32)
		if !isInt || n < 1 || n > count {
			m.t.Fatalf("batch delete of %d: message-count %#v", count, reply["message-count"])
		}
		return n
	}
	m.t.Fatalf("batch delete of %d: status %d, condition %q, body %v", count, status, cond, reply)
	return 0
}

// A batch delete removes the oldest messages enqueued before its cut-off,
// up to its count, in any state but locked: a deferred and a scheduled
// message go, a locked one stays and can still be completed. The replies
// are what the JS SDK (7.10) reads; bad counts and cut-offs are refused.
func TestBatchDeleteThroughManagement(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"q": broker.DefaultConfig()})
	c := tb.client(t)
	ctx := ctxT(t)
	s, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"a", "b", "c", "d", "e"} {
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("scheduled")}}, time.Now().Add(time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	r, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []*azservicebus.ReceivedMessage
	for len(got) < 2 {
		ms, err := r.ReceiveMessages(ctx, 2-len(got), nil)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ms...)
	}
	locked, deferred := got[0], got[1]
	if err := r.DeferMessage(ctx, deferred, nil); err != nil {
		t.Fatal(err)
	}
	cutoff := time.Now()
	time.Sleep(5 * time.Millisecond) // timestamps are in milliseconds
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("late")}, nil); err != nil {
		t.Fatal(err)
	}

	tb.clients.Add(1) // the go-amqp connection below
	m := newMgmtClient(t, plainConn(t, tb.addr), "q/$management")
	if n := m.batchDelete(2, cutoff, ""); n != 2 {
		t.Fatalf("first batch delete: %d, want the deferred message and c", n)
	}
	if n := m.batchDelete(4000, cutoff, ""); n != 3 {
		t.Fatalf("second batch delete: %d, want d, e and the scheduled message", n)
	}
	if n := m.batchDelete(10, cutoff, ""); n != 0 {
		t.Fatalf("third batch delete: %d, want none left before the cut-off", n)
	}
	if _, err := r.ReceiveDeferredMessages(ctx, []int64{*deferred.SequenceNumber}, nil); err == nil {
		t.Fatal("the deleted deferred message can still be received")
	}
	peeked, err := r.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(int64(1))})
	if err != nil {
		t.Fatal(err)
	}
	if len(peeked) != 2 || string(peeked[0].Body) != "a" || string(peeked[1].Body) != "late" {
		t.Fatalf("left after the batch deletes: %v", bodies(peeked))
	}
	if n := m.batchDelete(500, time.Time{}, ""); n != 1 {
		t.Fatalf("batch delete without a cut-off: %d, want the late message", n)
	}
	if err := r.CompleteMessage(ctx, locked, nil); err != nil {
		t.Fatalf("completing the locked message, which no batch delete takes: %v", err)
	}
	if peeked, err := r.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(int64(1))}); err != nil || len(peeked) != 0 {
		t.Fatalf("left at the end: %v, %v", bodies(peeked), err)
	}
	e, _ := tb.b.Entity("q")
	if st := e.Stats(); st.Deleted != 6 || st.Completed != 1 {
		t.Fatalf("stats: %d deleted, %d completed; want 6 and 1", st.Deleted, st.Completed)
	}

	for _, bad := range []map[string]any{
		{"message-count": int32(0)},
		{"message-count": int32(4001)},
		{"message-count": "10"},
		{},
	} {
		if status, cond, _ := m.call("com.microsoft:batch-delete-messages", bad); status != 400 || cond != condArgumentOutOfRange {
			t.Errorf("batch delete with %v: %d %q, want 400 %s", bad, status, cond, condArgumentOutOfRange)
		}
	}
	bad := map[string]any{"message-count": int64(5), "enqueued-time-utc": "yesterday"}
	if status, cond, _ := m.call("com.microsoft:batch-delete-messages", bad); status != 400 || cond != condInvalidField {
		t.Errorf("batch delete with %v: %d %q, want 400 %s", bad, status, cond, condInvalidField)
	}

	// Deleting is a receiver's operation: a key with Send alone may not.
	tb.clients.Add(1)
	conn := dial(t, tb.addr, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain("SendOnly", "send-key")})
	sendOnly, err := conn.NewSession(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("kept")}, nil); err != nil {
		t.Fatal(err)
	}
	status, cond, _ := newMgmtClient(t, sendOnly, "q/$management").call("com.microsoft:batch-delete-messages", map[string]any{"message-count": int32(1)})
	if status != 401 || cond != condUnauthorized {
		t.Errorf("batch delete with a Send key: %d %q, want 401 %s", status, cond, condUnauthorized)
	}
	if n := m.batchDelete(1, time.Time{}, ""); n != 1 {
		t.Errorf("the message a Send key could not delete: %d deleted, want 1", n)
	}
}

// On a session queue a batch delete names a session or takes them all; a
// dead-letter queue's node deletes from the dead-letter queue alone.
func TestBatchDeleteSessionsAndDeadLetters(t *testing.T) {
	tb := startBroker(t, map[string]broker.Config{"s": sessionQueue(), "q": broker.DefaultConfig()})
	c := tb.client(t)
	ctx := ctxT(t)
	s, err := c.NewSender("s", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s1", "s1", "s2"} {
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(id), SessionID: to.Ptr(id)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	tb.clients.Add(1) // the go-amqp connection below
	sess := plainConn(t, tb.addr)
	m := newMgmtClient(t, sess, "s/$management")
	if n := m.batchDelete(10, time.Time{}, "s1"); n != 2 {
		t.Fatalf("batch delete of session s1: %d, want 2", n)
	}
	if n := m.batchDelete(10, time.Time{}, "s9"); n != 0 {
		t.Fatalf("batch delete of a session with no messages: %d", n)
	}
	if n := m.batchDelete(10, time.Time{}, ""); n != 1 {
		t.Fatalf("batch delete across sessions: %d, want s2's message", n)
	}

	q, err := c.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"poison", "fine"} {
		if err := q.SendMessage(ctx, &azservicebus.Message{Body: []byte(body)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(ms) != 1 {
		t.Fatalf("receive: %d, %v", len(ms), err)
	}
	if err := r.DeadLetterMessage(ctx, ms[0], nil); err != nil {
		t.Fatal(err)
	}
	dlq := newMgmtClient(t, sess, "q/$DeadLetterQueue/$management")
	if n := dlq.batchDelete(10, time.Time{}, ""); n != 1 {
		t.Fatalf("batch delete of the dead-letter queue: %d, want 1", n)
	}
	plain := newMgmtClient(t, sess, "q/$management")
	if status, cond, _ := plain.call("com.microsoft:batch-delete-messages", map[string]any{"message-count": int32(1), "session-id": "s1"}); status != 400 || cond != condNotAllowed {
		t.Fatalf("a batch delete naming a session in a plain queue: %d %q", status, cond)
	}
	rest, err := r.PeekMessages(ctx, 10, nil)
	if err != nil || len(rest) != 1 || string(rest[0].Body) != "fine" {
		t.Fatalf("the main queue after its dead-letter queue was emptied: %v, %v", bodies(rest), err)
	}
}

func bodies(ms []*azservicebus.ReceivedMessage) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m.Body))
	}
	return out
}
