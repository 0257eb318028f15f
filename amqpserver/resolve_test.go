package amqpserver

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/broker"
)

// topicBroker opens a broker with a queue "q1" and a topic "t1" with
// subscriptions "s1" and "s2".
func topicBroker(t *testing.T) (*broker.Broker, *broker.Entity) {
	t.Helper()
	b, _, err := broker.Open(broker.Options{Dir: t.TempDir(), Sync: broker.SyncNone, FilterMessage: FilterMessage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	if _, err := b.CreateQueue("q1", broker.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	topic, err := b.CreateTopic("t1", broker.DefaultTopicConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"s1", "s2"} {
		if err := topic.CreateSubscription(name, broker.DefaultSubscriptionConfig(), nil); err != nil {
			t.Fatal(err)
		}
	}
	return b, topic
}

// Subscription addresses name the topic's queues of that subscription, the
// words matched in any case; a topic has no dead-letter queues; wrong
// paths and missing subscriptions are not found.
func TestResolveTopicAddresses(t *testing.T) {
	b, topic := topicBroker(t)
	s1, err := topic.SubscriptionQueue("s1")
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := topic.SubscriptionQueue("s2")
	if s1 == s2 || s1 == broker.MainQueue {
		t.Fatalf("subscription queues %d and %d", s1, s2)
	}
	for addr, want := range map[string]uint32{
		"t1":                                   broker.MainQueue,
		"T1":                                   broker.MainQueue,
		"t1/Subscriptions/s1":                  s1,
		"t1/subscriptions/S1":                  s1,
		"t1/SUBSCRIPTIONS/s2":                  s2,
		"t1/Subscriptions/s1/$DeadLetterQueue": s1 + 1,
		"t1/Subscriptions/s1/$deadletterqueue": s1 + 1,
		"t1/Subscriptions/s2/$Transfer/$DeadLetterQueue": s2 + 2,
		"t1/subscriptions/s2/$transfer/$deadletterqueue": s2 + 2,
		"q1/$DeadLetterQueue":                            broker.DeadLetterQueue,
	} {
		e, q, err := b.Resolve(addr)
		if err != nil || q != want {
			t.Errorf("%s: queue %d, %v; want %d", addr, q, err, want)
			continue
		}
		wantEntity := "t1"
		if strings.HasPrefix(addr, "q1") {
			wantEntity = "q1"
		}
		if e.Name() != wantEntity {
			t.Errorf("%s: entity %s", addr, e.Name())
		}
	}
	for _, addr := range []string{
		"t1/$DeadLetterQueue", "t1/$Transfer/$DeadLetterQueue", "t1/s1", "t1/Subscriptions/nope",
		"t1/Subscriptions/nope/$DeadLetterQueue", "t1/Subscriptions/", "t1/Subscriptions/s1/extra",
		"nope/Subscriptions/s1", "q1/Subscriptions/s1", "/Subscriptions/s1", "t1/Subscriptions/s1/$other",
		"t1/Sub\u017fcriptions/s1",
	} {
		if _, _, err := b.Resolve(addr); !errors.Is(err, broker.ErrEntityNotFound) {
			t.Errorf("%s: %v, want not found", addr, err)
		}
	}
	_, _, err = b.Resolve("t1/Subscriptions/nope")
	if !strings.Contains(err.Error(), "The messaging entity '") || !strings.Contains(err.Error(), "could not be found.") {
		t.Errorf("a missing subscription: %q, want Service Bus's text", err)
	}
}

// A token for a subscription of a missing subscription is refused with
// 404, as for a missing queue; one for an existing subscription, or below
// it, is accepted.
func TestPutTokenForSubscriptions(t *testing.T) {
	b, _ := topicBroker(t)
	root := sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE", Rights: sas.Manage}
	keys, err := sas.NewKeys(root)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for aud, status := range map[string]int32{
		"amqp://localhost:5672/t1":                                     202,
		"amqp://localhost:5672/t1/Subscriptions/s1":                    202,
		"amqp://localhost:5672/t1/subscriptions/S1/$management":        202,
		"amqp://localhost:5672/t1/Subscriptions/s1/$DeadLetterQueue":   202,
		"amqp://localhost:5672/t1/Subscriptions/nope":                  404,
		"amqp://localhost:5672/t1/Subscriptions/nope/$management":      404,
		"amqp://localhost:5672/t1/Subscriptions/nope/$DeadLetterQueue": 404,
		"amqp://localhost:5672/t9/Subscriptions/s1":                    404,
		"amqp://localhost:5672/q1/Subscriptions/s1":                    404,
	} {
		req := &rpcRequest{body: sas.Sign(aud, root, now.Add(time.Hour), sas.GoStyle),
			props: mapOf("operation", "put-token", "type", sasTokenType, "name", aud)}
		var cs claims
		resp := putToken(req, keys, b, &cs, now)
		if resp.status != status {
			t.Errorf("%s: %d %q, want %d", aud, resp.status, resp.description, status)
			continue
		}
		if status == 404 && (resp.condition != condNotFound || resp.description != "The messaging entity '"+aud+"' could not be found.") {
			t.Errorf("%s: %s %q", aud, resp.condition, resp.description)
		}
	}
}

// The conditions of the errors topics add.
func TestClassifyTopicErrors(t *testing.T) {
	for _, c := range []struct {
		err    error
		cond   string
		status int32
	}{
		{broker.ErrEntityExists, "com.microsoft:entity-already-exists", 409},
		{broker.ErrQuotaExceeded, "amqp:resource-limit-exceeded", 403},
		{broker.ErrEntityNotFound, "amqp:not-found", 404},
	} {
		if cond, status := classify(c.err); cond != c.cond || status != c.status {
			t.Errorf("%v: %s %d, want %s %d", c.err, cond, status, c.cond, c.status)
		}
	}
}
