package broker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/projection/filter"
)

// peekLock attaches a peek-lock receiver to queue q of e with n credits.
func peekLock(t *testing.T, e *Entity, q uint32, n uint64) (*Receiver, <-chan Delivery) {
	t.Helper()
	ch := make(chan Delivery, 100)
	r, err := e.Attach(ReceiverOptions{Name: "pl", Queue: q, Deliver: func(d Delivery) { ch <- d }})
	if err != nil {
		t.Fatal(err)
	}
	r.SetLimit(n)
	return r, ch
}

func colored(id, color string) projection.Message {
	return projection.Message{Body: []byte(id), MessageID: id,
		Filter: &filter.Message{Properties: []filter.Property{{Name: "color", Value: filter.StringValue(color)}}}}
}

// TestTopicSurvivesRestart: subscriptions, rules and what each holds (a
// rule action's copy with its changes) come back after a restart, from
// the log and then from a snapshot; a deleted subscription stays deleted
// and its receivers are told.
func TestTopicSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, Options{Dir: dir})
	news, err := b.CreateTopic("news", DefaultTopicConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateQueue("news", DefaultConfig()); !errors.Is(err, ErrEntityExists) {
		t.Fatalf("a queue named as the topic: %v", err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(news.CreateSubscription("all", DefaultSubscriptionConfig(), nil))
	must(news.CreateSubscription("gone", DefaultSubscriptionConfig(), nil))
	must(news.CreateSubscription("tagged", DefaultSubscriptionConfig(), []RuleSpec{{Name: "red",
		Filter: FilterSpec{Kind: FilterSQL, SQL: "color = 'red'"}, Action: "SET sys.Label = 'hot'; REMOVE color"}}))
	if err := news.AddRule(0, RuleSpec{Name: "x", Filter: FilterSpec{Kind: FilterTrue}}); !errors.Is(err, ErrEntityNotFound) {
		t.Fatalf("a rule on the topic's own queue: %v", err)
	}
	sendSync(t, news, colored("a", "red"), colored("b", "blue"))

	gone, _ := news.SubscriptionQueue("gone")
	lost := make(chan error, 1)
	_, err = news.Attach(ReceiverOptions{Name: "g", Queue: gone, Deliver: func(Delivery) {}, Lost: func(err error) { lost <- err }})
	must(err)
	must(news.DeleteSubscription("gone"))
	if err := <-lost; !errors.Is(err, ErrEntityNotFound) {
		t.Fatalf("the receiver of a deleted subscription was told %v", err)
	}

	check := func(b *Broker) {
		t.Helper()
		news, err := b.Entity("news")
		must(err)
		if !news.IsTopic() {
			t.Fatal("not a topic after the restart")
		}
		if _, err := news.SubscriptionQueue("GONE"); !errors.Is(err, ErrEntityNotFound) {
			t.Fatalf("the deleted subscription: %v", err)
		}
		all, err := news.SubscriptionQueue("ALL")
		must(err)
		if ids := peekIDs(t, news, all); len(ids) != 2 {
			t.Fatalf("all holds %v", ids)
		}
		tagged, err := news.SubscriptionQueue("tagged")
		must(err)
		_, ch := peekLock(t, news, tagged, 1)
		d := nextDelivery(t, ch)
		if string(d.Message) != "a" || len(d.Overlays) != 1 || d.Overlays[0].Type != Copied || d.Overlays[0].Rule != "red" {
			t.Fatalf("the copy: %q %+v", d.Message, d.Overlays)
		}
		if ch := d.Overlays[0].Changes; len(ch) != 2 || ch[0].Sys != SysLabel || ch[0].Value.Text() != "hot" ||
			!ch[1].Remove || ch[1].Name != "color" {
			t.Fatalf("the copy's changes: %+v", ch)
		}
		settleSync(t, news, d, Settlement{Outcome: Release})
		rules, err := news.Rules(tagged)
		if err != nil || len(rules) != 1 || rules[0].Action == "" || rules[0].Created == 0 {
			t.Fatalf("rules %+v, %v", rules, err)
		}
	}
	must(b.Close()) // a final snapshot
	b = openBroker(t, Options{Dir: dir})
	check(b)
	b.shutdown(false) // no snapshot: the next open replays from the last one
	b = openBroker(t, Options{Dir: dir, SnapshotEvery: 1})
	check(b)
	must(b.Close())
}

// A queue that forwards to a topic publishes what is sent to it there:
// each subscription gets it by its rules, with the hop counted.
func TestQueueForwardsToTopic(t *testing.T) {
	b := openBroker(t, Options{Dir: t.TempDir()})
	defer b.Close()
	news, err := b.CreateTopic("news", DefaultTopicConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := news.CreateSubscription("red", DefaultSubscriptionConfig(), []RuleSpec{{Name: "r",
		Filter: FilterSpec{Kind: FilterSQL, SQL: "color = 'red'"}}}); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.ForwardTo = "news"
	in, err := b.CreateQueue("inbox", cfg)
	if err != nil {
		t.Fatal(err)
	}
	sendSync(t, in, colored("a", "red"), colored("b", "blue"))
	red, _ := news.SubscriptionQueue("red")
	ds, err := news.Peek(red, 1, 10, "")
	if err != nil || len(ds) != 1 || ds[0].MessageID != "a" || ds[0].Hops != 1 {
		t.Fatalf("red holds %+v, %v", ds, err)
	}
	if c, _ := in.Counts(MainQueue); c.Total != 0 {
		t.Fatalf("the forwarding queue kept %+v", c)
	}
}

// A queue whose dead-lettered messages go to a topic: each subscription
// its rules pick gets the message once, with how it was dead-lettered,
// also after the queue's forwarder repeats it after a restart.
func TestDeadLettersForwardedToTopic(t *testing.T) {
	dir := t.TempDir()
	b := openBroker(t, Options{Dir: dir})
	news, err := b.CreateTopic("news", DefaultTopicConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"a", "b"} {
		if err := news.CreateSubscription(s, DefaultSubscriptionConfig(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := news.CreateSubscription("blue", DefaultSubscriptionConfig(), []RuleSpec{{Name: "r",
		Filter: FilterSpec{Kind: FilterSQL, SQL: "color = 'blue'"}}}); err != nil {
		t.Fatal(err)
	}
	src, err := b.CreateQueue("src", deadLettersTo("news"))
	if err != nil {
		t.Fatal(err)
	}
	sendSync(t, src, colored("m", "red"))
	_, ch := peekLock(t, src, MainQueue, 1)
	settleSync(t, src, nextDelivery(t, ch), Settlement{Outcome: DeadLetter, Reason: "bad", Description: "very"})
	for _, s := range []string{"a", "b"} {
		q, _ := news.SubscriptionQueue(s)
		var ds []Delivery
		for range 500 { // the forward is asynchronous; a hang guard
			if ds, _ = news.Peek(q, 1, 10, ""); len(ds) > 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if len(ds) != 1 || ds[0].MessageID != "m" || len(ds[0].Overlays) < 1 || ds[0].Overlays[0].Type != Forwarded ||
			ds[0].Overlays[0].Reason != "bad" || ds[0].Overlays[0].Source != "src" {
			t.Fatalf("%s holds %+v", s, ds)
		}
	}
	blue, _ := news.SubscriptionQueue("blue")
	if ds, _ := news.Peek(blue, 1, 10, ""); len(ds) != 0 {
		t.Fatalf("blue holds %+v", ds)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b = openBroker(t, Options{Dir: dir})
	defer b.Close()
	news, _ = b.Entity("news")
	a, _ := news.SubscriptionQueue("a")
	if ds, _ := news.Peek(a, 1, 10, ""); len(ds) != 1 || ds[0].Overlays[0].Reason != "bad" {
		t.Fatalf("after a restart a holds %+v", ds)
	}
}

// Subscriptions forward: one's ForwardTo moves what it gets to a queue as
// it was, another's dead-lettered messages go to a queue saying where they
// were dead-lettered; two subscriptions forwarding the same message to
// one queue put it there twice. A subscription cannot forward to its own
// topic.
func TestSubscriptionsForward(t *testing.T) {
	b := openBroker(t, Options{Dir: t.TempDir()})
	defer b.Close()
	out, err := b.CreateQueue("out", DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	dead, err := b.CreateQueue("dead", DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	news, err := b.CreateTopic("news", DefaultTopicConfig())
	if err != nil {
		t.Fatal(err)
	}
	fwd := DefaultSubscriptionConfig()
	fwd.ForwardTo = "out"
	for _, name := range []string{"f1", "f2"} {
		if err := news.CreateSubscription(name, fwd, nil); err != nil {
			t.Fatal(err)
		}
	}
	dl := DefaultSubscriptionConfig()
	dl.ForwardDeadLetteredMessagesTo = "dead"
	if err := news.CreateSubscription("dl", dl, nil); err != nil {
		t.Fatal(err)
	}
	self := DefaultSubscriptionConfig()
	self.ForwardTo = "NEWS"
	if err := news.CreateSubscription("loop", self, nil); !errors.Is(err, ErrForwarding) {
		t.Fatalf("a subscription forwarding to its topic: %v", err)
	}
	sendSync(t, news, colored("m", "red"))
	dlq, _ := news.SubscriptionQueue("dl")
	_, ch := peekLock(t, news, dlq, 1)
	settleSync(t, news, nextDelivery(t, ch), Settlement{Outcome: DeadLetter, Reason: "nope"})

	wait := func(e *Entity, n int) []Delivery {
		t.Helper()
		var ds []Delivery
		for range 500 { // the forwarders work in the background; a hang guard
			if ds, _ = e.Peek(MainQueue, 1, 10, ""); len(ds) >= n {
				return ds
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("%s holds %d messages, want %d", e.Name(), len(ds), n)
		return nil
	}
	for _, d := range wait(out, 2) {
		if d.MessageID != "m" || d.Hops != 1 || len(d.Overlays) != 1 || d.Overlays[0].Source != "" || d.Overlays[0].Reason != "" {
			t.Fatalf("out holds %+v", d)
		}
	}
	if ds := wait(dead, 1); ds[0].Overlays[0].Reason != "nope" || ds[0].Overlays[0].Source != "news/Subscriptions/dl" {
		t.Fatalf("dead holds %+v", ds[0])
	}
	for _, name := range []string{"f1", "f2", "dl"} {
		q, _ := news.SubscriptionQueue(name)
		for _, no := range []uint32{q, q + 1} {
			if c, _ := news.Counts(no); c.Total != 0 {
				t.Fatalf("%s queue %d keeps %+v", name, no, c)
			}
		}
	}
}

// A subscription nobody reads keeps the topic's log from its oldest
// message on; deleting it gives the disk back at once, not at the next
// snapshot interval.
func TestDeletedSubscriptionReleasesTheLog(t *testing.T) {
	b := openBroker(t, Options{Dir: t.TempDir(), SegmentSize: 64 << 10, IdleCheckpoint: -1})
	defer b.Close()
	news, err := b.CreateTopic("news", DefaultTopicConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"read", "slow"} {
		if err := news.CreateSubscription(s, DefaultSubscriptionConfig(), nil); err != nil {
			t.Fatal(err)
		}
	}
	read, _ := news.SubscriptionQueue("read")
	ch := make(chan Delivery, 100)
	r, err := news.Attach(ReceiverOptions{Name: "r", Queue: read, Mode: ReceiveAndDelete, Deliver: func(d Delivery) { ch <- d }})
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 1024)
	for i := range 2000 {
		sendSync(t, news, projection.Message{Body: body, MessageID: fmt.Sprint(i)})
		r.SetLimit(uint64(i + 1))
		nextDelivery(t, ch)
	}
	news.Sync()
	held := news.Bytes()
	if held < 2000*1024 {
		t.Fatalf("the log holds %d bytes: the slow subscription should keep it", held)
	}
	if err := news.DeleteSubscription("slow"); err != nil {
		t.Fatal(err)
	}
	for range 500 { // the checkpoints run on the actor and in the background; a hang guard
		if news.Bytes() < 4*64<<10 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("after the delete the log still holds %d bytes (before: %d)", news.Bytes(), held)
}

// A subscription's own settings govern its messages: its time to live
// (shorter than the topic's) with dead-lettering on expiry, and its
// MaxDeliveryCount, while another subscription of the same topic keeps the
// defaults.
func TestSubscriptionSettingsApplyToItsMessages(t *testing.T) {
	clock := NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b := openBroker(t, Options{Dir: t.TempDir(), Clock: clock, IdleCheckpoint: -1})
	defer b.Close()
	cfg := DefaultTopicConfig()
	cfg.DefaultTTL = time.Hour
	news, err := b.CreateTopic("news", cfg)
	if err != nil {
		t.Fatal(err)
	}
	short := DefaultSubscriptionConfig()
	short.DefaultTTL, short.DeadLetterOnExpiry, short.MaxDeliveryCount = time.Minute, true, 2
	if err := news.CreateSubscription("short", short, nil); err != nil {
		t.Fatal(err)
	}
	if err := news.CreateSubscription("plain", DefaultSubscriptionConfig(), nil); err != nil {
		t.Fatal(err)
	}
	sendSync(t, news, colored("a", "red"), colored("b", "red"))
	sq, _ := news.SubscriptionQueue("short")
	pq, _ := news.SubscriptionQueue("plain")

	// a: abandoned twice in "short" reaches its MaxDeliveryCount of 2.
	r, ch := peekLock(t, news, sq, 1)
	for i := range 2 {
		d := nextDelivery(t, ch)
		if d.MessageID != "a" {
			t.Fatalf("delivered %q", d.MessageID)
		}
		if d.ExpiresAt != d.EnqueuedAt+int64(time.Minute) {
			t.Fatalf("expires %v after its enqueue, want the subscription's minute", time.Duration(d.ExpiresAt-d.EnqueuedAt))
		}
		settleSync(t, news, d, Settlement{Outcome: Abandon})
		if i == 0 {
			r.SetLimit(2)
		}
	}
	r.Detach(nil)
	// Past a minute, b, which "short" still holds, expires into its
	// dead-letter queue; "plain" keeps both for the topic's hour.
	clock.Advance(2 * time.Minute)
	for _, e := range b.Entities() {
		e.Sync()
	}
	var dl []Delivery
	for range 500 { // the expiry is the actor's timer; a hang guard
		if dl, _ = news.Peek(sq+1, 1, 10, ""); len(dl) == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	reasons := map[string]bool{}
	for _, d := range dl {
		for _, ov := range d.Overlays {
			reasons[ov.Reason] = true
		}
	}
	if len(dl) != 2 || !reasons[ReasonMaxDeliveryCount] || !reasons["TTLExpiredException"] {
		t.Fatalf("short's dead-letter queue holds %+v", dl)
	}
	if c, _ := news.Counts(pq); c.Available != 2 {
		t.Fatalf("plain holds %+v", c)
	}
}
