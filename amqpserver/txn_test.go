package amqpserver

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/broker"
)

// heldFrame is a frame read while looking for a disposition.
type heldFrame struct {
	p       frames.Performative
	payload []byte
}

// txnClient is a frame client with a coordinator link on handle 0.
type txnClient struct {
	*frameClient
	sent uint32                           // deliveries sent: the session's next delivery-id
	seen map[seenKey]frames.DeliveryState // dispositions read and not yet asked for, per delivery
	held []heldFrame                      // other frames read meanwhile
}

func dialTxn(t testing.TB, addr string) *txnClient {
	t.Helper()
	c := &txnClient{frameClient: dialFrames(t, addr)}
	c.send(0, &frames.Attach{Name: "txn-ctrl", Handle: 0, Role: frames.RoleSender,
		Source:      &frames.Source{},
		Coordinator: &frames.Coordinator{Capabilities: []encoding.Symbol{"amqp:local-transactions"}}}, nil)
	if a := expectFrame[*frames.Attach](c.frameClient); a.Coordinator == nil {
		t.Fatalf("coordinator refused: %+v", a)
	}
	expectFrame[*frames.Flow](c.frameClient)
	return c
}

// txnOnQ1 starts a broker with cfg and returns its queue q1 and a
// transaction client with a sender to it on handle 1.
func txnOnQ1(t *testing.T, cfg Config) (*broker.Entity, *txnClient) {
	t.Helper()
	b, addr := startRaw(t, cfg)
	e, _ := b.Entity("q1")
	c := dialTxn(t, addr)
	c.attachSender(1, "q1")
	return e, c
}

// controlMessage is a message whose body is the amqp-value v.
func controlMessage(v interface{ AppendTo([]byte) []byte }) []byte {
	return v.AppendTo([]byte{0x00, 0x53, 0x77})
}

// dataMessage is a message with one data section.
func dataMessage(body string) []byte {
	return encoding.AppendBinary([]byte{0x00, 0x53, 0x75}, []byte(body))
}

// transfer sends one unsettled delivery on handle and returns its id.
func (c *txnClient) transfer(handle uint32, state frames.DeliveryState, payload []byte) uint32 {
	id := c.sent
	c.sent++
	c.send(0, &frames.Transfer{Handle: handle, DeliveryID: frames.Some(id), DeliveryTag: []byte(fmt.Sprint(id)),
		MessageFormat: frames.Some[uint32](0), State: state}, payload)
	return id
}

// outcome waits for our disposition of delivery id, which we sent, and
// returns its state.
func (c *txnClient) outcome(id uint32) frames.DeliveryState {
	c.t.Helper()
	return c.disposition(frames.RoleReceiver, id)
}

// disposition returns the state of the server's disposition of delivery
// id in the role given (receiver: of one we sent; sender: of one it
// sent), waiting for it unless it came already.
func (c *txnClient) disposition(role frames.Role, id uint32) frames.DeliveryState {
	c.t.Helper()
	key := seenKey{role, id}
	for {
		if s, ok := c.seen[key]; ok {
			delete(c.seen, key)
			return s
		}
		p, payload := c.frameClient.next()
		d, ok := p.(*frames.Disposition)
		if !ok {
			c.held = append(c.held, heldFrame{p, bytes.Clone(payload)})
			continue
		}
		if c.seen == nil {
			c.seen = make(map[seenKey]frames.DeliveryState)
		}
		for i := d.First; ; i++ { // a disposition may settle a range
			c.seen[seenKey{d.Role, i}] = d.State
			if i == d.LastID() {
				break
			}
		}
	}
}

// seenKey names a delivery a disposition settled.
type seenKey struct {
	role frames.Role
	id   uint32
}

// frame returns the next frame other than the dispositions disposition
// looks for.
func (c *txnClient) frame() (frames.Performative, []byte) {
	if len(c.held) > 0 {
		f := c.held[0]
		c.held = c.held[1:]
		return f.p, f.payload
	}
	return c.frameClient.next()
}

// declare declares a transaction and returns its id.
func (c *txnClient) declare() []byte {
	c.t.Helper()
	d, ok := c.outcome(c.transfer(0, nil, controlMessage(&frames.Declare{}))).(*frames.Declared)
	if !ok || len(d.TxnID) == 0 {
		c.t.Fatalf("declare answered %+v", d)
	}
	return d.TxnID
}

// discharge ends txn and returns the outcome.
func (c *txnClient) discharge(txn []byte, fail bool) frames.DeliveryState {
	c.t.Helper()
	return c.outcome(c.transfer(0, nil, controlMessage(&frames.Discharge{TxnID: txn, Fail: fail})))
}

// attachSender attaches a sending link to address on handle.
func (c *txnClient) attachSender(handle uint32, address string) {
	c.t.Helper()
	c.send(0, &frames.Attach{Name: "s-" + address, Handle: handle, Role: frames.RoleSender,
		Source: &frames.Source{}, Target: &frames.Target{Address: address}}, nil)
	if a := expectFrame[*frames.Attach](c.frameClient); a.Target == nil {
		c.t.Fatalf("sender to %s refused", address)
	}
	expectFrame[*frames.Flow](c.frameClient)
}

// receiveFirst sends a message to q1 through the broker and receives it
// on a peek-lock link on handle 2, as the JS SDK does: it returns the
// delivery's id and its lock token.
func (c *txnClient) receiveFirst(e *broker.Entity) (uint32, encoding.UUID) {
	c.t.Helper()
	done := make(chan error, 1)
	e.Send(broker.MainQueue, []broker.Message{{Body: dataMessage("first")}}, func(err error) { done <- err })
	if err := <-done; err != nil {
		c.t.Fatal(err)
	}
	c.attachJS(2, "r", "q1", false)
	c.flow(2, 0, 1, false)
	for {
		p, _ := c.frameClient.next()
		if tr, ok := p.(*frames.Transfer); ok {
			lock, _ := tokenFromTag(tr.DeliveryTag) // the tag is in .NET GUID order
			return tr.DeliveryID.Or(0), encoding.UUID(lock)
		}
	}
}

// rejectedWith checks that s is a rejection with condition cond.
func rejectedWith(t *testing.T, s frames.DeliveryState, cond string) {
	t.Helper()
	r, ok := s.(*frames.Rejected)
	if !ok || r.Error == nil || string(r.Error.Condition) != cond {
		t.Fatalf("outcome %+v, want rejected with %s", s, cond)
	}
}

// Sends in a transaction are accepted provisionally and enqueued only at
// commit; a roll back leaves nothing; discharging an unknown or finished
// transaction, or sending in one, gets amqp:transaction:unknown-id.
func TestTransactionalSends(t *testing.T) {
	e, c := txnOnQ1(t, Config{})

	count := func() uint64 {
		t.Helper()
		if err := e.Sync(); err != nil {
			t.Fatal(err)
		}
		n, _ := e.Counts(broker.MainQueue)
		return n.Total
	}
	txn := c.declare()
	for i := range 3 {
		s, ok := c.outcome(c.transfer(1, &frames.TransactionalState{TxnID: txn}, dataMessage(fmt.Sprint("m", i)))).(*frames.TransactionalState)
		if !ok || string(s.TxnID) != string(txn) {
			t.Fatalf("provisional outcome %+v", s)
		}
		if _, accepted := s.Outcome.(*frames.Accepted); !accepted {
			t.Fatalf("provisional outcome %+v, want accepted", s.Outcome)
		}
	}
	if n := count(); n != 0 {
		t.Fatalf("%d messages before the commit", n)
	}
	if _, ok := c.discharge(txn, false).(*frames.Accepted); !ok {
		t.Fatal("commit refused")
	}
	if n := count(); n != 3 {
		t.Fatalf("%d messages after the commit, want 3", n)
	}
	rejectedWith(t, c.discharge(txn, false), condTxnUnknown)
	rejectedWith(t, c.outcome(c.transfer(1, &frames.TransactionalState{TxnID: txn}, dataMessage("late"))), condTxnUnknown)

	rolled := c.declare()
	c.outcome(c.transfer(1, &frames.TransactionalState{TxnID: rolled}, dataMessage("rolled back")))
	if _, ok := c.discharge(rolled, true).(*frames.Accepted); !ok {
		t.Fatal("roll back refused")
	}
	if n := count(); n != 3 {
		t.Fatalf("%d messages after a roll back, want 3", n)
	}
	rejectedWith(t, c.discharge([]byte("never declared"), false), condTxnUnknown)
}

// A transaction works on one entity: work on a second is refused with
// Service Bus's text, and the commit does the rest. Detaching the
// coordinator rolls back what it did not discharge.
func TestTransactionSpansOneEntity(t *testing.T) {
	b, addr := startRaw(t, Config{})
	if _, err := b.CreateQueue("q2", broker.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	q1, _ := b.Entity("q1")
	q2, _ := b.Entity("q2")
	c := dialTxn(t, addr)
	c.attachSender(1, "q1")
	c.attachSender(2, "q2")
	txn := c.declare()
	c.outcome(c.transfer(1, &frames.TransactionalState{TxnID: txn}, dataMessage("to q1")))
	s := c.outcome(c.transfer(2, &frames.TransactionalState{TxnID: txn}, dataMessage("to q2")))
	rejectedWith(t, s, condNotAllowed)
	if !strings.Contains(s.(*frames.Rejected).Error.Description, "cannot span multiple top-level entities") {
		t.Fatalf("span refused with %q", s.(*frames.Rejected).Error.Description)
	}
	if _, ok := c.discharge(txn, false).(*frames.Accepted); !ok {
		t.Fatal("commit refused")
	}
	q1.Sync()
	n1, _ := q1.Counts(broker.MainQueue)
	n2, _ := q2.Counts(broker.MainQueue)
	if n1.Total != 1 || n2.Total != 0 {
		t.Fatalf("q1 %d, q2 %d after the commit; want 1 and 0", n1.Total, n2.Total)
	}

	// Undischarged work goes with the coordinator link.
	open := c.declare()
	c.outcome(c.transfer(1, &frames.TransactionalState{TxnID: open}, dataMessage("never committed")))
	c.send(0, &frames.Detach{Handle: 0, Closed: true}, nil)
	expectFrame[*frames.Detach](c.frameClient)
	q1.Sync()
	if n, _ := q1.Counts(broker.MainQueue); n.Total != 1 {
		t.Fatalf("q1 holds %d after the coordinator detached with a transaction open, want 1", n.Total)
	}
}

// A settlement in a transaction keeps the lock until the commit, which
// completes the message; a commit whose lock is gone is rolled back as a
// whole, sends included.
func TestTransactionalSettlement(t *testing.T) {
	e, c := txnOnQ1(t, Config{})
	delivery, _ := c.receiveFirst(e)
	txn := c.declare()
	c.outcome(c.transfer(1, &frames.TransactionalState{TxnID: txn}, dataMessage("reply")))
	c.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: delivery,
		State: &frames.TransactionalState{TxnID: txn, Outcome: &frames.Accepted{}}}, nil)
	e.Sync()
	if n, _ := e.Counts(broker.MainQueue); n.Total != 1 || n.Locked != 1 {
		t.Fatalf("before the commit: %+v, want the first message, locked", n)
	}
	if _, ok := c.discharge(txn, false).(*frames.Accepted); !ok {
		t.Fatal("commit refused")
	}
	// The commit settles the disposition the receiver left unsettled.
	if s, ok := c.disposition(frames.RoleSender, delivery).(*frames.TransactionalState); !ok || string(s.TxnID) != string(txn) {
		t.Fatalf("the delivery was settled with %+v", s)
	}
	e.Sync()
	peek, _ := e.Peek(broker.MainQueue, 1, 10, "")
	if len(peek) != 1 || !strings.Contains(string(peek[0].Message), "reply") {
		t.Fatalf("after the commit the queue holds %d messages, want the reply alone", len(peek))
	}
}

// A commit whose settlement can no longer be done (the lock ran out) is
// refused with amqp:transaction:rollback, and none of its work happens.
// Declares must be sent unsettled.
func TestTransactionRolledBackWhenTheLockIsGone(t *testing.T) {
	clock := broker.NewFakeClock(time.Now())
	b, addr := startRawWith(t, Config{}, broker.Options{Clock: clock})
	e, _ := b.Entity("q1")
	c := dialTxn(t, addr)
	c.attachSender(1, "q1")
	delivery, _ := c.receiveFirst(e)
	txn := c.declare()
	c.outcome(c.transfer(1, &frames.TransactionalState{TxnID: txn}, dataMessage("reply")))
	c.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: delivery, Settled: true,
		State: &frames.TransactionalState{TxnID: txn, Outcome: &frames.Accepted{}}}, nil)
	clock.Advance(2 * time.Minute) // past the lock
	s := c.discharge(txn, false)
	rejectedWith(t, s, condTxnRollback)
	if !strings.Contains(s.(*frames.Rejected).Error.Description, "lock") {
		t.Fatalf("rolled back with %q", s.(*frames.Rejected).Error.Description)
	}
	e.Sync()
	peek, _ := e.Peek(broker.MainQueue, 1, 10, "")
	if len(peek) != 1 || !strings.Contains(string(peek[0].Message), "first") {
		t.Fatalf("after a rolled-back commit the queue holds %d messages, want the first alone", len(peek))
	}

	// A pre-settled declare ends the coordinator link.
	c.send(0, &frames.Transfer{Handle: 0, DeliveryID: frames.Some(c.sent), DeliveryTag: []byte("x"),
		MessageFormat: frames.Some[uint32](0), Settled: true}, controlMessage(&frames.Declare{}))
	for {
		p, _ := c.frameClient.next()
		if d, ok := p.(*frames.Detach); ok {
			if d.Handle != 0 || d.Error == nil || d.Error.Condition != "amqp:illegal-state" {
				t.Fatalf("detach %+v", d)
			}
			break
		}
	}
}

// Settling by lock token through $management in a transaction waits for
// the commit, as a transactional disposition does.
func TestTransactionalSettleByLockToken(t *testing.T) {
	e, c := managementOnQ1(t)
	_, token := c.receiveFirst(e)
	txn := c.declare()
	req := encodeRequest(encoding.Map{{Key: "operation", Value: "com.microsoft:update-disposition"}},
		encoding.Map{{Key: "lock-tokens", Value: encoding.Array{Code: encoding.CodeUUID, Elements: []any{token}}},
			{Key: "disposition-status", Value: "completed"}})
	if s, ok := c.outcome(c.transfer(3, &frames.TransactionalState{TxnID: txn}, req)).(*frames.TransactionalState); !ok || string(s.TxnID) != string(txn) {
		t.Fatalf("the request's transfer was settled with %+v", s)
	}
	for {
		// The response, on the reply link (under the server's handle).
		p, payload := c.frame()
		if _, ok := p.(*frames.Transfer); ok {
			resp, err := parseRequest(payload)
			if err != nil {
				t.Fatal(err)
			}
			if v, _ := resp.props.Get("statusCode"); v != int32(200) {
				t.Fatalf("response %+v", resp.props)
			}
			break
		}
	}
	e.Sync()
	if n, _ := e.Counts(broker.MainQueue); n.Total != 1 || n.Locked != 1 {
		t.Fatalf("before the commit: %+v, want the message, locked", n)
	}
	if _, ok := c.discharge(txn, false).(*frames.Accepted); !ok {
		t.Fatal("commit refused")
	}
	e.Sync()
	if n, _ := e.Counts(broker.MainQueue); n.Total != 0 {
		t.Fatalf("after the commit: %+v, want the message completed", n)
	}
}

// A transaction not discharged within TxnTimeout is rolled back; its
// discharge then says it ran out, and its work never happens.
func TestTransactionTimeout(t *testing.T) {
	e, c := txnOnQ1(t, Config{TxnTimeout: 20 * time.Millisecond})
	txn := c.declare()
	c.outcome(c.transfer(1, &frames.TransactionalState{TxnID: txn}, dataMessage("too late")))
	time.Sleep(time.Second) // waiting for the timeout to pass, not timing anything
	rejectedWith(t, c.discharge(txn, false), condTxnTimeout)
	e.Sync()
	if n, _ := e.Counts(broker.MainQueue); n.Total != 0 {
		t.Fatalf("%d messages from a transaction that ran out", n.Total)
	}
}

// managementOnQ1 starts a broker and returns its queue q1 and a
// transaction client with q1's $management node attached: requests on
// handle 3, their answers on handle 4 (with credit for ten).
func managementOnQ1(t *testing.T) (*broker.Entity, *txnClient) {
	t.Helper()
	b, addr := startRaw(t, Config{})
	e, _ := b.Entity("q1")
	c := dialTxn(t, addr)
	c.attachSender(3, "q1/$management")
	c.attachJS(4, "replies", "q1/$management", false)
	c.flow(4, 0, 10, false)
	return e, c
}

// attachVia attaches a sender to address through via on handle and
// returns the answer: the attach, and the detach when it is refused.
func (c *txnClient) attachVia(handle uint32, via string, to any) (*frames.Attach, *frames.Detach) {
	c.t.Helper()
	c.send(0, &frames.Attach{Name: fmt.Sprint("via-", handle), Handle: handle, Role: frames.RoleSender, Source: &frames.Source{},
		Target:     &frames.Target{Address: via},
		Properties: encoding.Map{{Key: encoding.Symbol(transferDestinationProp), Value: to}}}, nil)
	a := expectFrame[*frames.Attach](c.frameClient)
	if a.Target == nil {
		return a, expectFrame[*frames.Detach](c.frameClient)
	}
	expectFrame[*frames.Flow](c.frameClient)
	return a, nil
}

// waitTotal waits until queue 0 of e holds n messages.
func waitTotal(t *testing.T, e *broker.Entity, n uint64) {
	t.Helper()
	waitCounts(t, e, fmt.Sprint(n, " messages"), func(c broker.Counts) bool { return c.Total == n })
}

// waitCounts waits until the counts of queue 0 of e are as want says
// (what describes them).
func waitCounts(t *testing.T, e *broker.Entity, what string, want func(broker.Counts) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := e.Counts(broker.MainQueue)
		if err == nil && want(c) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %+v (%v), want %s", e.Name(), c, err, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Receive, process, send through the received message's queue to
// another: the commit completes the message and the reply reaches its
// destination (named by a whole URI, as the .NET SDK names it); a roll
// back sends nothing and keeps the lock. Outside a transaction a send
// through the via goes straight on.
func TestSendViaInTransaction(t *testing.T) {
	b, addr := startRaw(t, Config{})
	q2, err := b.CreateQueue("q2", broker.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	q1, _ := b.Entity("q1")
	c := dialTxn(t, addr)
	c.attachSender(1, "q1")
	delivery, _ := c.receiveFirst(q1)
	if _, refused := c.attachVia(3, "q1", "sb://"+addr+"/q2"); refused != nil {
		t.Fatalf("send-via refused: %+v", refused.Error)
	}

	rolled := c.declare()
	c.outcome(c.transfer(3, &frames.TransactionalState{TxnID: rolled}, dataMessage("rolled back")))
	c.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: delivery,
		State: &frames.TransactionalState{TxnID: rolled, Outcome: &frames.Accepted{}}}, nil)
	if _, ok := c.discharge(rolled, true).(*frames.Accepted); !ok {
		t.Fatal("roll back refused")
	}

	txn := c.declare()
	s, ok := c.outcome(c.transfer(3, &frames.TransactionalState{TxnID: txn}, dataMessage("reply"))).(*frames.TransactionalState)
	if !ok || string(s.TxnID) != string(txn) {
		t.Fatalf("provisional outcome %+v", s)
	}
	c.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: delivery,
		State: &frames.TransactionalState{TxnID: txn, Outcome: &frames.Accepted{}}}, nil)
	if err := q1.Sync(); err != nil {
		t.Fatal(err)
	}
	if n, _ := q2.Counts(broker.MainQueue); n.Total != 0 {
		t.Fatalf("q2 holds %d before the commit", n.Total)
	}
	if _, ok := c.discharge(txn, false).(*frames.Accepted); !ok {
		t.Fatal("commit refused")
	}
	waitTotal(t, q2, 1)
	waitTotal(t, q1, 0)
	q2.Sync() // counts show what peeks show once it is durable
	got, _ := q2.Peek(broker.MainQueue, 0, 10, "")
	if len(got) != 1 || !strings.Contains(string(got[0].Message), "reply") {
		t.Fatalf("q2 holds %d messages, want the reply", len(got))
	}

	if _, ok := c.outcome(c.transfer(3, nil, dataMessage("no transaction"))).(*frames.Accepted); !ok {
		t.Fatal("a send-via outside a transaction was refused")
	}
	waitTotal(t, q2, 2)
}

// A via is a queue, a destination a queue or a topic that exists; each
// other attach is refused with the condition saying why, and work through
// a via joins the via's transaction, not the destination's.
func TestSendViaRefusals(t *testing.T) {
	b, addr := startRaw(t, Config{})
	for _, q := range []string{"q2", "q3"} {
		if _, err := b.CreateQueue(q, broker.DefaultConfig()); err != nil {
			t.Fatal(err)
		}
	}
	topic, err := b.CreateTopic("t1", broker.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := topic.CreateSubscription("s1", broker.DefaultSubscriptionConfig(), nil); err != nil {
		t.Fatal(err)
	}
	c := dialTxn(t, addr)
	for i, tc := range []struct {
		via  string
		to   any
		cond string
	}{
		{"q1", "missing", condNotFound},
		{"missing", "q2", condNotFound},
		{"t1", "q2", condNotAllowed},
		{"q1/$DeadLetterQueue", "q2", condNotAllowed},
		{"q1", "t1/Subscriptions/s1", condNotAllowed},
		{"q1", int32(7), condInvalidField},
	} {
		_, d := c.attachVia(uint32(10+i), tc.via, tc.to)
		if d == nil || d.Error == nil || string(d.Error.Condition) != tc.cond {
			t.Errorf("via %s to %v: detach %+v, want %s", tc.via, tc.to, d, tc.cond)
		}
	}
	if _, d := c.attachVia(1, "q1", "t1"); d != nil {
		t.Fatalf("send-via to a topic refused: %+v", d.Error)
	}
	if _, d := c.attachVia(2, "q2", "q3"); d != nil {
		t.Fatalf("send-via refused: %+v", d.Error)
	}
	txn := c.declare()
	c.outcome(c.transfer(1, &frames.TransactionalState{TxnID: txn}, dataMessage("via q1")))
	rejectedWith(t, c.outcome(c.transfer(2, &frames.TransactionalState{TxnID: txn}, dataMessage("via q2"))), condNotAllowed)
	if _, ok := c.discharge(txn, false).(*frames.Accepted); !ok {
		t.Fatal("commit refused")
	}
}

// A transaction holds at most 100 operations: the 101st is rejected with
// amqp:resource-limit-exceeded and the commit does the 100. A disposition
// in a transaction the connection does not hold is rejected with
// amqp:transaction:unknown-id, and its lock stays.
func TestTransactionLimits(t *testing.T) {
	e, c := txnOnQ1(t, Config{})
	delivery, _ := c.receiveFirst(e)
	txn := c.declare()
	for i := range broker.MaxTxOps {
		if _, ok := c.outcome(c.transfer(1, &frames.TransactionalState{TxnID: txn}, dataMessage(fmt.Sprint(i)))).(*frames.TransactionalState); !ok {
			t.Fatalf("send %d refused", i)
		}
	}
	rejectedWith(t, c.outcome(c.transfer(1, &frames.TransactionalState{TxnID: txn}, dataMessage("one too many"))), condResourceLimit)
	if _, ok := c.discharge(txn, false).(*frames.Accepted); !ok {
		t.Fatal("commit refused")
	}
	e.Sync()
	if n, _ := e.Counts(broker.MainQueue); n.Total != 1+broker.MaxTxOps {
		t.Fatalf("%d messages after the commit, want the first and %d", n.Total, broker.MaxTxOps)
	}

	c.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: delivery,
		State: &frames.TransactionalState{TxnID: []byte("nobody's"), Outcome: &frames.Accepted{}}}, nil)
	rejectedWith(t, c.disposition(frames.RoleSender, delivery), condTxnUnknown)
	if n, _ := e.Counts(broker.MainQueue); n.Locked != 1 {
		t.Fatalf("after a disposition in an unknown transaction: %+v, want the first still locked", n)
	}
}

// A sender through a via needs Send on the via and on the destination:
// with a token for the via alone it is refused, and it works once a token
// for the destination comes too.
func TestSendViaNeedsSendOnBoth(t *testing.T) {
	b, addr := startRaw(t, Config{})
	q2, err := b.CreateQueue("q2", broker.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	key := sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE"}
	conn := dial(t, addr, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
	for _, q := range []string{"q1", "q2"} {
		aud := "sb://" + addr + "/" + q
		if status, desc := putTokenRaw(t, conn, aud, sas.Sign(aud, key, time.Now().Add(time.Hour), sas.JSStyle)); status != 202 {
			t.Fatalf("put-token for %s: %d %s", q, status, desc)
		}
		sess, err := conn.NewSession(ctxT(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		snd, err := sess.NewSender(ctxT(t), "q1", &amqp.SenderOptions{
			Properties: map[string]any{transferDestinationProp: "q2"}})
		if q == "q1" {
			var amqpErr *amqp.Error
			if !errors.As(err, &amqpErr) || amqpErr.Condition != condUnauthorized {
				t.Fatalf("send-via with a token for the via alone: %v, want unauthorized-access", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("send-via with tokens for both: %v", err)
		}
		if err := snd.Send(ctxT(t), amqp.NewMessage([]byte("through q1")), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitTotal(t, q2, 1)
}

// scheduleInTxn sends a schedule-message request for messages scheduled at
// the given times on handle 3 (q1's $management) in txn, and returns the
// SequenceNumbers of its answer.
func (c *txnClient) scheduleInTxn(txn []byte, at ...time.Time) []int64 {
	c.t.Helper()
	var entries encoding.List
	for i, when := range at {
		raw := marshal(c.t, &amqp.Message{
			Annotations: amqp.Annotations{"x-opt-scheduled-enqueue-time": when},
			Properties:  &amqp.MessageProperties{MessageID: fmt.Sprintf("scheduled-%d", i)},
			Data:        [][]byte{[]byte("later")},
		})
		entries = append(entries, encoding.Map{{Key: "message-id", Value: fmt.Sprintf("scheduled-%d", i)}, {Key: "message", Value: raw}})
	}
	req := encodeRequest(encoding.Map{{Key: "operation", Value: "com.microsoft:schedule-message"}},
		encoding.Map{{Key: "messages", Value: entries}})
	c.outcome(c.transfer(3, &frames.TransactionalState{TxnID: txn}, req))
	for {
		p, payload := c.frame()
		if _, ok := p.(*frames.Transfer); !ok {
			continue
		}
		resp, err := parseRequest(payload)
		if err != nil {
			c.t.Fatal(err)
		}
		if v, _ := resp.props.Get("statusCode"); v != int32(200) {
			c.t.Fatalf("schedule in a transaction answered %+v", resp.props)
		}
		v, _ := resp.bodyMap().Get("sequence-numbers")
		arr, _ := v.(encoding.Array)
		var seqs []int64
		for _, e := range arr.Elements {
			seqs = append(seqs, e.(int64))
		}
		return seqs
	}
}

// A schedule in a transaction answers with its SequenceNumbers at once,
// but its messages show and activate only after the commit: one due
// already arrives then, the other waits for its time. A roll back cancels
// what it scheduled.
func TestTransactionalSchedule(t *testing.T) {
	e, c := managementOnQ1(t)

	txn := c.declare()
	seqs := c.scheduleInTxn(txn, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if len(seqs) != 2 || seqs[0] >= seqs[1] {
		t.Fatalf("sequence numbers %v", seqs)
	}
	visible := func() []int64 {
		t.Helper()
		if err := e.Sync(); err != nil {
			t.Fatal(err)
		}
		ds, err := e.Peek(broker.MainQueue, 0, 10, "")
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, d := range ds {
			out = append(out, int64(d.Seq))
		}
		return out
	}
	time.Sleep(20 * time.Millisecond) // the due one would have activated by now
	if got := visible(); len(got) != 0 {
		t.Fatalf("before the commit, a peek shows %v", got)
	}
	if _, ok := c.discharge(txn, false).(*frames.Accepted); !ok {
		t.Fatal("commit refused")
	}
	waitCounts(t, e, "the due message available and the other scheduled", func(n broker.Counts) bool {
		return n.Total == 2 && n.Available == 1 && n.Scheduled == 1
	})
	// The due one went live under a new number (as any activation); the
	// other keeps the number the schedule gave.
	if got := visible(); len(got) != 2 || !slices.Contains(got, seqs[1]) || slices.Contains(got, seqs[0]) {
		t.Fatalf("after the commit, a peek shows %v; scheduled were %v", got, seqs)
	}

	rolled := c.declare()
	c.scheduleInTxn(rolled, time.Now().Add(time.Hour))
	if _, ok := c.discharge(rolled, true).(*frames.Accepted); !ok {
		t.Fatal("roll back refused")
	}
	waitCounts(t, e, "what the commit left, after a roll back", func(n broker.Counts) bool {
		return n.Total == 2 && n.Scheduled == 1
	})
}

// A connection that drops with a transaction open rolls it back: what it
// scheduled is cancelled, and the lock it settled is still held.
func TestDroppedConnectionRollsBack(t *testing.T) {
	e, c := managementOnQ1(t)
	delivery, _ := c.receiveFirst(e)
	txn := c.declare()
	c.scheduleInTxn(txn, time.Now().Add(time.Hour))
	c.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: delivery,
		State: &frames.TransactionalState{TxnID: txn, Outcome: &frames.Accepted{}}}, nil)
	if n, _ := e.Counts(broker.MainQueue); n.Total != 2 || n.Scheduled != 1 {
		t.Fatalf("with the transaction open: %+v", n)
	}
	c.nc.Close()
	waitCounts(t, e, "the received message alone, still locked", func(n broker.Counts) bool {
		return n.Total == 1 && n.Locked == 1
	})
}
