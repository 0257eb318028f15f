package broker

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// TestClusterTopicFailsOver: a topic in a cluster. Its leader creates
// two subscriptions (one with a SQL filter and an action) and takes
// sends; the followers hold the same subscriptions, rules and copies. A
// copy is locked, the leader goes away, and the new leader has it all:
// the lock settles there with its token, the rule's copy keeps its
// changes, a rule added there applies to the next send, and a deleted
// subscription stays deleted when the old leader comes back.
func TestClusterTopicFailsOver(t *testing.T) {
	c := newCluster(t)
	c.create("news", func(b *Broker) error {
		_, err := b.CreateTopic("news", DefaultTopicConfig())
		return err
	})
	news := func(id uint64) *Entity { return c.entityOn(id, "news") }
	leaderOf := func(not uint64) uint64 { return c.leaderOfEntity("news", not) }
	leader := leaderOf(0)
	// The first call waits for the leader to record the topic's creation.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := news(leader).CreateSubscription("all", DefaultSubscriptionConfig(), nil)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrNotLeader) || time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := news(leader).CreateSubscription("red", DefaultSubscriptionConfig(), []RuleSpec{{Name: "red",
		Filter: FilterSpec{Kind: FilterSQL, SQL: "color = 'red'"}, Action: "SET sys.Label = 'hot'"}}); err != nil {
		t.Fatal(err)
	}
	if err := news(leader).CreateSubscription("doomed", DefaultSubscriptionConfig(), nil); err != nil {
		t.Fatal(err)
	}
	follower := leader%3 + 1
	if err := news(follower).CreateSubscription("nope", DefaultSubscriptionConfig(), nil); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a subscription created on a follower: %v", err)
	}
	sendSync(t, news(leader), colored("a", "red"), colored("b", "blue"))

	holds := func(id uint64, sub string, want ...string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			q, err := news(id).SubscriptionQueue(sub)
			var got []string
			if err == nil {
				got = peekIDs(t, news(id), q)
			}
			if slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: %s holds %v (%v), want %v", id, sub, got, err, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for id := uint64(1); id <= 3; id++ {
		holds(id, "all", "a", "b")
		holds(id, "red", "a")
		holds(id, "doomed", "a", "b")
	}

	red, _ := news(leader).SubscriptionQueue("red")
	_, ch := peekLock(t, news(leader), red, 1)
	locked := nextDelivery(t, ch)
	if err := news(leader).DeleteSubscription("doomed"); err != nil {
		t.Fatal(err)
	}

	c.down(leader)
	next := leaderOf(leader)
	e := news(next)
	settleSync(t, e, locked, Settlement{Outcome: Abandon})
	red, _ = e.SubscriptionQueue("red")
	_, ch = peekLock(t, e, red, 1)
	d := nextDelivery(t, ch)
	if string(d.Message) != "a" || len(d.Overlays) != 1 || d.Overlays[0].Rule != "red" ||
		len(d.Overlays[0].Changes) != 1 || d.Overlays[0].Changes[0].Value.Text() != "hot" || d.Deliveries != 1 {
		t.Fatalf("the copy on the new leader: %q, %d earlier deliveries, %+v", d.Message, d.Deliveries, d.Overlays)
	}
	settleSync(t, e, d, Settlement{Outcome: Complete})
	all, _ := e.SubscriptionQueue("all")
	if err := e.AddRule(all, RuleSpec{Name: "blue", Filter: FilterSpec{Kind: FilterSQL, SQL: "color = 'blue'"}}); err != nil {
		t.Fatal(err)
	}
	sendSync(t, e, colored("c", "red"), colored("d", "blue"))

	c.open(leader)
	for id := uint64(1); id <= 3; id++ {
		holds(id, "all", "a", "b", "c", "d") // $Default and blue: d once
		holds(id, "red", "c")
		if _, err := news(id).SubscriptionQueue("doomed"); !errors.Is(err, ErrEntityNotFound) {
			t.Fatalf("node %d: the deleted subscription: %v", id, err)
		}
	}
}

// TestClusterSessionsFailOver: a session queue in a cluster. On its
// leader a receiver accepts session s1, sets its state and completes its
// first message; the leader goes away with the session still locked. On
// the new leader the session is locked until its lock runs out (as a
// session lock is lost in Service Bus); then it is accepted there, with
// its state, and hands out its second message; s2 is untouched.
func TestClusterSessionsFailOver(t *testing.T) {
	c := newCluster(t)
	cfg := projection.DefaultConfig()
	cfg.RequiresSession, cfg.LockDuration = true, time.Second
	c.create("jobs", func(b *Broker) error {
		_, err := b.CreateQueue("jobs", cfg)
		return err
	})
	jobs := func(id uint64) *Entity { return c.entityOn(id, "jobs") }
	leaderOf := func(not uint64) uint64 { return c.leaderOfEntity("jobs", not) }
	leader := leaderOf(0)
	sendUntilCreated(t, jobs(leader), []projection.Message{{MessageID: "m1", SessionID: "s1", Body: []byte("1")}})
	sendSync(t, jobs(leader), projection.Message{MessageID: "m2", SessionID: "s1", Body: []byte("2")},
		projection.Message{MessageID: "m3", SessionID: "s2", Body: []byte("3")})

	accept := func(e *Entity, session string) (*Receiver, <-chan Delivery, error) {
		ch := make(chan Delivery, 10)
		r, err := e.Attach(ReceiverOptions{Name: "s", Queue: event.MainQueue, Mode: PeekLock, Sessions: true, Deliver: func(d Delivery) { ch <- d }})
		if err != nil {
			return nil, nil, err
		}
		res := make(chan error, 1)
		r.AcceptSession(session, 0, func(_ SessionLock, err error) { res <- err })
		if err := <-res; err != nil {
			r.Detach(nil)
			return nil, nil, err
		}
		return r, ch, nil
	}
	r, ch, err := accept(jobs(leader), "s1")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	r.SetSessionState([]byte("state of s1"), func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.SetLimit(1)
	d := nextDelivery(t, ch)
	if d.MessageID != "m1" {
		t.Fatalf("s1's first message is %s", d.MessageID)
	}
	settleSync(t, jobs(leader), d, Settlement{Outcome: Complete})

	c.down(leader)
	next := leaderOf(leader)
	var locked error
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, ch, err = accept(jobs(next), "s1")
		if err == nil {
			break
		}
		if locked == nil {
			locked = err
		}
		if errors.Is(err, ErrNotLeader) || time.Now().After(deadline) {
			t.Fatalf("accept s1 on the new leader: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if locked == nil {
		t.Fatal("s1 was accepted on the new leader at once: its lock from the old one was not there")
	}
	state, err := r.SessionState()
	if err != nil || string(state) != "state of s1" {
		t.Fatalf("s1's state on the new leader: %q, %v", state, err)
	}
	r.SetLimit(1)
	if d := nextDelivery(t, ch); d.MessageID != "m2" {
		t.Fatalf("s1's next message on the new leader is %s", d.MessageID)
	}
	r2, ch2, err := accept(jobs(next), "s2")
	if err != nil {
		t.Fatal(err)
	}
	r2.SetLimit(1)
	if d := nextDelivery(t, ch2); d.MessageID != "m3" {
		t.Fatalf("s2's message is %s", d.MessageID)
	}
}

// TestClusterTransactionFailsOver: a transaction committed on a queue's
// leader (a send and a completion, together) is on every node, one that
// cannot be done is refused whole, and a follower refuses a commit. After
// a failover the new leader holds the transaction's outcome and settles
// the lock it left alone.
func TestClusterTransactionFailsOver(t *testing.T) {
	c := newCluster(t)
	leader := c.leaderOf(0)
	sendUntilCreated(t, c.entity(leader), []projection.Message{{MessageID: "first", Body: []byte("0")}})
	e := c.entity(leader)
	first := peekAll(t, e)
	ds := lockTwo(t, e)
	out := []projection.Message{{MessageID: "out-1", Body: []byte("reply")}}
	bad := Transaction{ID: []byte("tx-bad"), Sends: []TxSend{{Queue: event.MainQueue, Messages: out}},
		Settles: []TxSettle{{Queue: event.MainQueue, Settlement: Settlement{Token: event.LockToken{1, 2, 3}, Outcome: Complete}}}}
	if err := commitSync(e, bad); !errors.Is(err, ErrLockLost) {
		t.Fatalf("a commit settling an unknown lock: %v", err)
	}
	good := Transaction{ID: []byte("tx-good"), Sends: []TxSend{{Queue: event.MainQueue, Messages: out}},
		Settles: []TxSettle{{Queue: event.MainQueue, Settlement: Settlement{Token: ds[0].Token, Outcome: Complete}}}}
	if err := commitSync(c.entity(leader%3+1), good); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a commit on a follower: %v", err)
	}
	if err := commitSync(e, good); err != nil {
		t.Fatal(err)
	}
	want := peekAll(t, e)
	var ids []string
	for _, d := range want {
		ids = append(ids, d.MessageID)
	}
	// lockTwo sent two and locked the two oldest; the commit took one
	// of them and sent one.
	if len(want) != len(first)+2 || slices.Contains(ids, ds[0].MessageID) || !slices.Contains(ids, "out-1") {
		t.Fatalf("after the commit the leader holds %v", ids)
	}
	for id := uint64(1); id <= 3; id++ {
		waitSame(t, c.entity(id), want)
	}
	c.down(leader)
	next := c.leaderOf(leader)
	settleSync(t, c.entity(next), ds[1], Settlement{Outcome: Complete})
	if got := peekAll(t, c.entity(next)); len(got) != len(want)-1 {
		t.Fatalf("after completing the other lock the new leader holds %d, want %d", len(got), len(want)-1)
	}
}
