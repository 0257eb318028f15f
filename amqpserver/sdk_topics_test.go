package amqpserver

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walbus/walbus/broker"
)

// Topics through the Go SDK: a sender on the topic, receivers on
// "<topic>/Subscriptions/<name>" (docs/compatibility.md §4).

// makeTopic creates a topic whose subscriptions have the given rules (nil:
// the $Default rule) and the default subscription config, or cfgs' where
// given.
func makeTopic(t *testing.T, tb *testBroker, topic string, rules map[string][]broker.RuleSpec, cfgs map[string]broker.Config) *broker.Entity {
	t.Helper()
	e, err := tb.b.CreateTopic(topic, broker.DefaultTopicConfig())
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(rules))
	for name := range rules {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		cfg, found := cfgs[name]
		if !found {
			cfg = broker.DefaultSubscriptionConfig()
		}
		if err := e.CreateSubscription(name, cfg, rules[name]); err != nil {
			t.Fatalf("subscription %s: %v", name, err)
		}
	}
	return e
}

func ruleSQL(name, sql, action string) broker.RuleSpec {
	return broker.RuleSpec{Name: name, Filter: broker.FilterSpec{Kind: broker.FilterSQL, SQL: sql}, Action: action}
}

func sendToTopic(t *testing.T, c *azservicebus.Client, topic string, msgs ...*azservicebus.Message) {
	t.Helper()
	s, err := c.NewSender(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctxT(t))
	for _, m := range msgs {
		if err := s.SendMessage(ctxT(t), m, nil); err != nil {
			t.Fatalf("send %q to %s: %v", m.Body, topic, err)
		}
	}
}

func subscriptionReceiver(t *testing.T, c *azservicebus.Client, topic, sub string, opts *azservicebus.ReceiverOptions) *azservicebus.Receiver {
	t.Helper()
	r, err := c.NewReceiverForSubscription(topic, sub, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// receiveExactly receives exactly n messages, completing each if complete is
// set, and then checks that no more come within a short wait.
func receiveExactly(t *testing.T, r *azservicebus.Receiver, n int, complete bool) []*azservicebus.ReceivedMessage {
	t.Helper()
	var out []*azservicebus.ReceivedMessage
	for len(out) < n {
		msgs, err := r.ReceiveMessages(ctxT(t), n-len(out), nil)
		if err != nil {
			t.Fatalf("receive %d of %d: %v", len(out), n, err)
		}
		out = append(out, msgs...)
	}
	if complete {
		for _, m := range out {
			if err := r.CompleteMessage(ctxT(t), m, nil); err != nil {
				t.Fatalf("complete %q: %v", m.Body, err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if more, err := r.ReceiveMessages(ctx, 10, nil); err == nil && len(more) > 0 {
		t.Fatalf("%d more messages than the %d expected, the first %q", len(more), n, more[0].Body)
	}
	return out
}

// strOrNil is *p, or "<nil>".
func strOrNil(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func sortedBodies(msgs []*azservicebus.ReceivedMessage) []string {
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, string(m.Body))
	}
	sort.Strings(out)
	return out
}

// Every subscription gets a copy of every message, under the topic's
// SequenceNumber.
func TestSDKTopicFanOut(t *testing.T) {
	tb := startBroker(t, nil)
	makeTopic(t, tb, "news", map[string][]broker.RuleSpec{"s1": nil, "s2": nil, "s3": nil}, nil)
	c := tb.client(t)
	sendToTopic(t, c, "news", &azservicebus.Message{Body: []byte("a")}, &azservicebus.Message{Body: []byte("b")},
		&azservicebus.Message{Body: []byte("c")})
	seqs := map[string]int64{}
	for _, sub := range []string{"s1", "s2", "s3"} {
		msgs := receiveExactly(t, subscriptionReceiver(t, c, "news", sub, nil), 3, true)
		if got := sortedBodies(msgs); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Fatalf("%s received %q", sub, got)
		}
		for _, m := range msgs {
			if m.SequenceNumber == nil {
				t.Fatalf("%s: %q without a SequenceNumber", sub, m.Body)
			}
			if seq, seen := seqs[string(m.Body)]; seen && seq != *m.SequenceNumber {
				t.Errorf("%s: %q has SequenceNumber %d, another subscription %d", sub, m.Body, *m.SequenceNumber, seq)
			}
			seqs[string(m.Body)] = *m.SequenceNumber
		}
	}
}

// SQL filters on application and system properties, and a correlation
// filter, pick each subscription's messages.
func TestSDKTopicFilters(t *testing.T) {
	tb := startBroker(t, nil)
	urgent := "urgent"
	makeTopic(t, tb, "orders", map[string][]broker.RuleSpec{
		"red":   {ruleSQL("red", "color = 'red'", "")},
		"label": {ruleSQL("label", "sys.Label = 'urgent'", "")},
		"corr":  {ruleSQL("corr", "sys.CorrelationId = 'c-1'", "")},
		"big":   {ruleSQL("big", "qty > 10", "")},
		"match": {{Name: "match", Filter: broker.FilterSpec{Kind: broker.FilterCorrelation, Correlation: &broker.CorrelationSpec{
			Subject: &urgent, Properties: []broker.FilterProperty{{Name: "k", Value: broker.StringValue("v")}}}}}},
	}, nil)
	c := tb.client(t)
	sendToTopic(t, c, "orders",
		&azservicebus.Message{Body: []byte("m1"), ApplicationProperties: map[string]any{"color": "red", "qty": int32(5)}},
		&azservicebus.Message{Body: []byte("m2"), Subject: to.Ptr("urgent"), ApplicationProperties: map[string]any{"qty": int64(20), "k": "v"}},
		&azservicebus.Message{Body: []byte("m3"), CorrelationID: to.Ptr("c-1"), ApplicationProperties: map[string]any{"color": "blue", "qty": 11}},
		&azservicebus.Message{Body: []byte("m4"), Subject: to.Ptr("urgent"), ApplicationProperties: map[string]any{"k": "w", "qty": "99"}},
	)
	for sub, want := range map[string][]string{
		"red": {"m1"}, "label": {"m2", "m4"}, "corr": {"m3"}, "big": {"m2", "m3"}, "match": {"m2"},
	} {
		if got := sortedBodies(receiveExactly(t, subscriptionReceiver(t, c, "orders", sub, nil), len(want), true)); !slices.Equal(got, want) {
			t.Errorf("%s received %q, want %q", sub, got, want)
		}
	}
}

// A rule with an action makes its own copy: it carries RuleName and the
// action's changes. A subscription whose true rule and action rule both
// match gets two copies, with their own SequenceNumbers.
func TestSDKTopicRuleActions(t *testing.T) {
	tb := startBroker(t, nil)
	tag := ruleSQL("tag", "color = 'red'", "SET sys.Label = 'tagged'; SET extra = 1; REMOVE color")
	makeTopic(t, tb, "acts", map[string][]broker.RuleSpec{
		"tagger": {tag},
		"both":   {{Name: "all", Filter: broker.FilterSpec{Kind: broker.FilterTrue}}, tag},
	}, nil)
	c := tb.client(t)
	sendToTopic(t, c, "acts",
		&azservicebus.Message{Body: []byte("red"), Subject: to.Ptr("plain"), ApplicationProperties: map[string]any{"color": "red", "keep": "k"}},
		&azservicebus.Message{Body: []byte("blue"), ApplicationProperties: map[string]any{"color": "blue"}})

	checkTagged := func(sub string, m *azservicebus.ReceivedMessage) {
		t.Helper()
		props := m.ApplicationProperties
		if string(m.Body) != "red" || props["RuleName"] != "tag" || m.Subject == nil || *m.Subject != "tagged" ||
			props["extra"] != int64(1) || props["keep"] != "k" {
			t.Errorf("%s: the action's copy: body %q, subject %v, properties %#v", sub, m.Body, strOrNil(m.Subject), props)
		}
		if _, found := props["color"]; found {
			t.Errorf("%s: REMOVE color left %#v", sub, props["color"])
		}
	}
	msgs := receiveExactly(t, subscriptionReceiver(t, c, "acts", "tagger", nil), 1, true)
	checkTagged("tagger", msgs[0])

	msgs = receiveExactly(t, subscriptionReceiver(t, c, "acts", "both", nil), 3, true)
	var copies, plain []*azservicebus.ReceivedMessage
	for _, m := range msgs {
		if _, named := m.ApplicationProperties["RuleName"]; named {
			copies = append(copies, m)
		} else {
			plain = append(plain, m)
		}
	}
	if len(copies) != 1 || len(plain) != 2 {
		t.Fatalf("both: %d copies by the action, %d unchanged; want 1 and 2", len(copies), len(plain))
	}
	checkTagged("both", copies[0])
	seqs := map[int64]bool{}
	for _, m := range msgs {
		if seqs[*m.SequenceNumber] {
			t.Errorf("both: SequenceNumber %d twice", *m.SequenceNumber)
		}
		seqs[*m.SequenceNumber] = true
		if string(m.Body) == "red" && m.ApplicationProperties["RuleName"] == nil &&
			(m.ApplicationProperties["color"] != "red" || m.Subject == nil || *m.Subject != "plain") {
			t.Errorf("both: the unchanged copy changed: %v %#v", strOrNil(m.Subject), m.ApplicationProperties)
		}
	}
}

// Settlement, deferral, peek and the dead-letter queue work on a
// subscription as on a queue.
func TestSDKSubscriptionSettlement(t *testing.T) {
	tb := startBroker(t, nil)
	makeTopic(t, tb, "work", map[string][]broker.RuleSpec{"w": nil}, nil)
	c := tb.client(t)
	sendToTopic(t, c, "work", &azservicebus.Message{Body: []byte("a")}, &azservicebus.Message{Body: []byte("b")},
		&azservicebus.Message{Body: []byte("c")}, &azservicebus.Message{Body: []byte("d")})
	r := subscriptionReceiver(t, c, "work", "w", nil)
	got := map[string]*azservicebus.ReceivedMessage{}
	for _, m := range receiveExactly(t, r, 4, false) {
		got[string(m.Body)] = m
	}
	ctx := ctxT(t)
	if err := r.CompleteMessage(ctx, got["a"], nil); err != nil {
		t.Fatal(err)
	}
	if err := r.AbandonMessage(ctx, got["b"], nil); err != nil {
		t.Fatal(err)
	}
	if err := r.DeferMessage(ctx, got["c"], nil); err != nil {
		t.Fatal(err)
	}
	if err := r.DeadLetterMessage(ctx, got["d"], &azservicebus.DeadLetterOptions{Reason: to.Ptr("bad"), ErrorDescription: to.Ptr("very bad")}); err != nil {
		t.Fatal(err)
	}
	again := receiveExactly(t, r, 1, true)
	if string(again[0].Body) != "b" || again[0].DeliveryCount != 2 {
		t.Errorf("after abandon: %q, delivery count %d", again[0].Body, again[0].DeliveryCount)
	}
	deferred, err := r.ReceiveDeferredMessages(ctx, []int64{*got["c"].SequenceNumber}, nil)
	if err != nil || len(deferred) != 1 || string(deferred[0].Body) != "c" {
		t.Fatalf("receive deferred: %v %v", deferred, err)
	}
	if err := r.CompleteMessage(ctx, deferred[0], nil); err != nil {
		t.Fatalf("complete the deferred message: %v", err)
	}

	dlq := subscriptionReceiver(t, c, "work", "w", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	dead := receiveExactly(t, dlq, 1, true)
	if string(dead[0].Body) != "d" || dead[0].DeadLetterReason == nil || *dead[0].DeadLetterReason != "bad" ||
		dead[0].DeadLetterErrorDescription == nil || *dead[0].DeadLetterErrorDescription != "very bad" {
		t.Errorf("dead-lettered: %q %v %v", dead[0].Body, strOrNil(dead[0].DeadLetterReason), strOrNil(dead[0].DeadLetterErrorDescription))
	}

	sendToTopic(t, c, "work", &azservicebus.Message{Body: []byte("e")})
	peeked, err := r.PeekMessages(ctx, 10, nil)
	if err != nil || len(peeked) != 1 || string(peeked[0].Body) != "e" {
		t.Fatalf("peek: %v %v", peeked, err)
	}
	// The peek took no lock: the message is still there to receive.
	receiveExactly(t, r, 1, true)
}

// A session-required subscription: a session receiver gets its session;
// a message without a SessionId goes to the subscription's dead-letter
// queue, read without sessions, while the other subscription gets it.
func TestSDKSubscriptionSessions(t *testing.T) {
	tb := startBroker(t, nil)
	cfg := broker.DefaultSubscriptionConfig()
	cfg.RequiresSession = true
	makeTopic(t, tb, "sess", map[string][]broker.RuleSpec{"ss": nil, "plain": nil}, map[string]broker.Config{"ss": cfg})
	c := tb.client(t)
	sendToTopic(t, c, "sess",
		&azservicebus.Message{Body: []byte("x1"), SessionID: to.Ptr("x")},
		&azservicebus.Message{Body: []byte("x2"), SessionID: to.Ptr("x")},
		&azservicebus.Message{Body: []byte("none")})
	sr, err := c.AcceptNextSessionForSubscription(ctxT(t), "sess", "ss", nil)
	if err != nil {
		t.Fatalf("accept next session: %v", err)
	}
	defer sr.Close(context.Background())
	if sr.SessionID() != "x" {
		t.Fatalf("session %q", sr.SessionID())
	}
	if got := sessionBodies(t, sr, 2); !slices.Equal(got, []string{"x1", "x2"}) {
		t.Errorf("session x: %q", got)
	}
	if err := sr.SetSessionState(ctxT(t), []byte("state"), nil); err != nil {
		t.Fatalf("set session state: %v", err)
	}
	if state, err := sr.GetSessionState(ctxT(t), nil); err != nil || string(state) != "state" {
		t.Fatalf("get session state: %q %v", state, err)
	}
	if err := sr.RenewSessionLock(ctxT(t), nil); err != nil {
		t.Fatalf("renew session lock: %v", err)
	}

	dlq := subscriptionReceiver(t, c, "sess", "ss", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	dead := receiveExactly(t, dlq, 1, true)
	if string(dead[0].Body) != "none" || dead[0].DeadLetterReason == nil || *dead[0].DeadLetterReason != "Session id is null." {
		t.Errorf("dead-lettered: %q, reason %v", dead[0].Body, strOrNil(dead[0].DeadLetterReason))
	}
	if got := sortedBodies(receiveExactly(t, subscriptionReceiver(t, c, "sess", "plain", nil), 3, true)); !slices.Equal(got, []string{"none", "x1", "x2"}) {
		t.Errorf("plain: %q", got)
	}
}

// A filter that fails to evaluate dead-letters the message in its
// subscription (DeadLetteringOnFilterEvaluationExceptions is on by
// default).
func TestSDKSubscriptionFilterError(t *testing.T) {
	tb := startBroker(t, nil)
	makeTopic(t, tb, "divs", map[string][]broker.RuleSpec{"div": {ruleSQL("div", "1/n = 1", "")}}, nil)
	c := tb.client(t)
	sendToTopic(t, c, "divs",
		&azservicebus.Message{Body: []byte("zero"), ApplicationProperties: map[string]any{"n": int32(0)}},
		&azservicebus.Message{Body: []byte("one"), ApplicationProperties: map[string]any{"n": int32(1)}})
	if got := sortedBodies(receiveExactly(t, subscriptionReceiver(t, c, "divs", "div", nil), 1, true)); !slices.Equal(got, []string{"one"}) {
		t.Errorf("div: %q", got)
	}
	dead := receiveExactly(t, subscriptionReceiver(t, c, "divs", "div", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}), 1, true)
	if string(dead[0].Body) != "zero" || dead[0].DeadLetterReason == nil || *dead[0].DeadLetterReason != "FilterEvaluationException" {
		t.Errorf("dead-lettered: %q, reason %v", dead[0].Body, strOrNil(dead[0].DeadLetterReason))
	}
}

// Messages scheduled on a topic wait there, reach the subscriptions when
// due, and can be cancelled before.
func TestSDKTopicScheduledMessages(t *testing.T) {
	tb := startBroker(t, nil)
	makeTopic(t, tb, "sched", map[string][]broker.RuleSpec{"s": nil, "red": {ruleSQL("red", "color = 'red'", "")}}, nil)
	c := tb.client(t)
	s, err := c.NewSender("sched", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	due := time.Now().Add(2 * time.Second)
	seqs, err := s.ScheduleMessages(ctxT(t), []*azservicebus.Message{
		{Body: []byte("soon"), ApplicationProperties: map[string]any{"color": "red"}}}, due, nil)
	if err != nil || len(seqs) != 1 {
		t.Fatalf("schedule: %v %v", seqs, err)
	}
	later, err := s.ScheduleMessages(ctxT(t), []*azservicebus.Message{{Body: []byte("cancelled")}}, time.Now().Add(time.Hour), nil)
	if err != nil || len(later) != 1 {
		t.Fatalf("schedule: %v %v", later, err)
	}
	if err := s.CancelScheduledMessages(ctxT(t), later, nil); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	r := subscriptionReceiver(t, c, "sched", "s", nil)
	msgs := receiveExactly(t, r, 1, true)
	if string(msgs[0].Body) != "soon" || time.Now().Before(due) {
		t.Errorf("received %q at %v, due %v", msgs[0].Body, time.Now(), due)
	}
	if got := sortedBodies(receiveExactly(t, subscriptionReceiver(t, c, "sched", "red", nil), 1, true)); !slices.Equal(got, []string{"soon"}) {
		t.Errorf("red: %q (rules apply when the message activates)", got)
	}
	// The topic holds nothing more: the cancelled message is gone.
	e, _ := tb.b.Entity("sched")
	if left, err := e.Peek(broker.MainQueue, 1, 10, ""); err != nil || len(left) != 0 {
		t.Errorf("the topic holds %d messages (%v), want none", len(left), err)
	}
}

// Links the wrong way round, and missing subscriptions, fail at once with
// errors the SDK does not retry.
func TestSDKTopicAddressErrors(t *testing.T) {
	tb := startBroker(t, nil)
	makeTopic(t, tb, "t1", map[string][]broker.RuleSpec{"s1": nil}, nil)
	c, err := azservicebus.NewClientFromConnectionString(tb.connString("RootManageSharedAccessKey", "SAS_KEY_VALUE"),
		&azservicebus.ClientOptions{RetryOptions: azservicebus.RetryOptions{MaxRetries: 3, RetryDelay: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	tb.clients.Add(1)
	defer c.Close(context.Background())
	// Retries would take 30 s: the errors must come well before.
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
		t.Cleanup(cancel)
		return ctx
	}

	r, _ := c.NewReceiverForQueue("t1", nil)
	_, err = r.ReceiveMessages(short(), 1, nil)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Cannot receive from a topic") {
		t.Errorf("receive from a topic: %v", err)
	}
	s, _ := c.NewSender("t1/Subscriptions/s1", nil)
	err = s.SendMessage(short(), &azservicebus.Message{Body: []byte("x")}, nil)
	if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Cannot send to a subscription") {
		t.Errorf("send to a subscription: %v", err)
	}
	missing, _ := c.NewReceiverForSubscription("t1", "nope", nil)
	if _, err := missing.ReceiveMessages(short(), 1, nil); sbCode(err) != azservicebus.CodeNotFound {
		t.Errorf("receive from a missing subscription: %v", err)
	}
	if _, err := missing.PeekMessages(short(), 1, nil); sbCode(err) != azservicebus.CodeNotFound {
		t.Errorf("peek a missing subscription: %v", err)
	}
	dlq, _ := c.NewReceiverForQueue("t1/$DeadLetterQueue", nil)
	if _, err := dlq.ReceiveMessages(short(), 1, nil); sbCode(err) != azservicebus.CodeNotFound {
		t.Errorf("receive from a topic's dead-letter queue: %v", err)
	}
	// And the right way round works on the same client.
	sendToTopic(t, c, "t1", &azservicebus.Message{Body: []byte("ok")})
	receiveExactly(t, subscriptionReceiver(t, c, "t1", "s1", nil), 1, true)
}

// Subscriptions, their rules and the messages not yet received are all
// there after a restart, and rules still route new sends.
func TestSDKTopicSurvivesRestart(t *testing.T) {
	tb := startBroker(t, nil)
	tb.reconnects = true
	makeTopic(t, tb, "keep", map[string][]broker.RuleSpec{
		"all": nil,
		"red": {ruleSQL("red", "color = 'red'", ""), ruleSQL("tag", "color = 'red'", "SET sys.Label = 'tagged'")},
	}, nil)
	c := tb.client(t)
	red := func(body string) *azservicebus.Message {
		return &azservicebus.Message{Body: []byte(body), ApplicationProperties: map[string]any{"color": "red"}}
	}
	sendToTopic(t, c, "keep", red("r1"), &azservicebus.Message{Body: []byte("b1")}, red("r2"))
	receiveExactly(t, subscriptionReceiver(t, c, "keep", "all", nil), 3, false) // locked, not completed: they come back
	tb.restart(t)

	e, err := tb.b.Entity("keep")
	if err != nil || !e.IsTopic() {
		t.Fatalf("after restart: %v", err)
	}
	subs, err := e.Subscriptions()
	if err != nil || len(subs) != 2 {
		t.Fatalf("subscriptions after restart: %+v %v", subs, err)
	}
	for _, s := range subs {
		if s.Name == "red" && (len(s.Rules) != 2 || s.Rules[0].Name != "red" || s.Rules[1].Action == "") {
			t.Errorf("red's rules after restart: %+v", s.Rules)
		}
	}

	c2 := tb.client(t)
	sendToTopic(t, c2, "keep", red("r3"), &azservicebus.Message{Body: []byte("b2")})
	// Peek shows the messages whatever became of the locks taken before
	// the restart (they may or may not have been written).
	all := subscriptionReceiver(t, c2, "keep", "all", nil)
	peeked, err := all.PeekMessages(ctxT(t), 10, nil)
	if err != nil || !slices.Equal(sortedBodies(peeked), []string{"b1", "b2", "r1", "r2", "r3"}) {
		t.Fatalf("all after restart: %q %v", sortedBodies(peeked), err)
	}
	msgs := receiveExactly(t, subscriptionReceiver(t, c2, "keep", "red", nil), 6, true)
	if got := sortedBodies(msgs); !slices.Equal(got, []string{"r1", "r1", "r2", "r2", "r3", "r3"}) {
		t.Fatalf("red after restart: %q", got)
	}
	tagged := 0
	for _, m := range msgs {
		if m.Subject != nil && *m.Subject == "tagged" && m.ApplicationProperties["RuleName"] == "tag" {
			tagged++
		}
	}
	if tagged != 3 {
		t.Errorf("%d copies made by the action, want 3", tagged)
	}
}

// A subscription's $management node serves the operations a receiver
// makes there: lock renewal (Go), and the session list and batch delete
// the JS SDK sends (through a plain go-amqp client here).
func TestSubscriptionManagementNode(t *testing.T) {
	tb := startBroker(t, nil)
	cfg := broker.DefaultSubscriptionConfig()
	cfg.RequiresSession = true
	makeTopic(t, tb, "t", map[string][]broker.RuleSpec{"ss": nil, "plain": nil}, map[string]broker.Config{"ss": cfg})
	c := tb.client(t)
	sendToTopic(t, c, "t",
		&azservicebus.Message{Body: []byte("a1"), SessionID: to.Ptr("a")},
		&azservicebus.Message{Body: []byte("b1"), SessionID: to.Ptr("b")},
		&azservicebus.Message{Body: []byte("b2"), SessionID: to.Ptr("b")})

	r := subscriptionReceiver(t, c, "t", "plain", nil)
	msgs, err := r.ReceiveMessages(ctxT(t), 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v %v", msgs, err)
	}
	before := *msgs[0].LockedUntil
	time.Sleep(10 * time.Millisecond)
	if err := r.RenewMessageLock(ctxT(t), msgs[0], nil); err != nil || !msgs[0].LockedUntil.After(before) {
		t.Fatalf("renew lock: %v, locked until %v (was %v)", err, msgs[0].LockedUntil, before)
	}
	if err := r.CompleteMessage(ctxT(t), msgs[0], nil); err != nil {
		t.Fatal(err)
	}

	tb.clients.Add(1) // the go-amqp connection below
	sess := plainConn(t, tb.addr)
	m := newMgmtClient(t, sess, "t/Subscriptions/ss/$management")
	status, cond, reply := m.call("com.microsoft:get-message-sessions", map[string]any{"skip": int32(0), "top": int32(10)})
	if ids, _ := reply["sessions-ids"].([]string); status != 200 || !slices.Equal(ids, []string{"a", "b"}) {
		t.Fatalf("list sessions: %d %q %#v", status, cond, reply)
	}
	if n := m.batchDelete(10, time.Time{}, "b"); n != 2 {
		t.Fatalf("batch delete of session b: %d, want 2", n)
	}
	plain := newMgmtClient(t, sess, "t/Subscriptions/plain/$management")
	if n := plain.batchDelete(10, time.Time{}, ""); n != 2 {
		t.Fatalf("batch delete on plain: %d, want the 2 left", n)
	}
	sr, err := c.AcceptNextSessionForSubscription(ctxT(t), "t", "ss", nil)
	if err != nil || sr.SessionID() != "a" {
		t.Fatalf("accept next session after deleting b's messages: %v", err)
	}
	defer sr.Close(context.Background())
	if got := sessionBodies(t, sr, 1); !slices.Equal(got, []string{"a1"}) {
		t.Errorf("session a: %q", got)
	}
}
