package projection

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection/filter"
)

// topicLog drives an Entity as the broker does: Decide, number the events
// as the log would, Apply. It keeps every event, for replays.
type topicLog struct {
	t   testing.TB
	e   *Entity
	evs []event.Event
	now int64
}

func newTopicLog(t testing.TB) *topicLog {
	l := &topicLog{t: t, e: New(), now: 1_000_000_000}
	l.must(Configure{Name: "orders", Config: DefaultTopicConfig()})
	return l
}

func (l *topicLog) do(cmd Command) ([]event.Event, error) {
	l.t.Helper()
	evs, err := l.e.Decide(cmd, l.now)
	if err != nil {
		return nil, err
	}
	for i := range evs {
		evs[i].Index = l.e.LastIndex() + 1
		evs[i].Pos = event.Position{Offset: uint32(evs[i].Index * 100), Size: 50}
		if err := l.e.Apply(&evs[i]); err != nil {
			l.t.Fatalf("apply %s: %v", evs[i].Type, err)
		}
		l.evs = append(l.evs, evs[i])
	}
	l.now += 1_000_000
	return evs, nil
}

func (l *topicLog) must(cmd Command) []event.Event {
	l.t.Helper()
	evs, err := l.do(cmd)
	if err != nil {
		l.t.Fatalf("%T: %v", cmd, err)
	}
	return evs
}

func str(s string) *string { return &s }

func sqlRule(name, expr, action string) RuleSpec {
	return RuleSpec{Name: name, Filter: FilterSpec{Kind: FilterSQL, SQL: expr}, Action: action}
}

func send(body string, props ...filter.Property) Send {
	return Send{Messages: []Message{{Body: []byte(body), MessageID: body,
		Filter: &filter.Message{Properties: props}}}}
}

func TestTopicRouting(t *testing.T) {
	l := newTopicLog(t)
	l.must(CreateSubscription{Name: "all", Config: DefaultSubscriptionConfig()})
	l.must(CreateSubscription{Name: "red", Config: DefaultSubscriptionConfig(),
		Rules: []RuleSpec{sqlRule("isRed", "color = 'red'", "")}})
	l.must(CreateSubscription{Name: "copies", Config: DefaultSubscriptionConfig(), Rules: []RuleSpec{
		sqlRule("a", "1=1", "SET tag = 'a'"), sqlRule("b", "1=1", "SET tag = 'b'"), sqlRule("plain", "1=1", "")}})
	l.must(CreateSubscription{Name: "none", Config: DefaultSubscriptionConfig(), Rules: []RuleSpec{}})
	l.must(CreateSubscription{Name: "broken", Config: DefaultSubscriptionConfig(),
		Rules: []RuleSpec{sqlRule("div", "1/n = 1", "")}})
	corr := DefaultSubscriptionConfig()
	l.must(CreateSubscription{Name: "label", Config: corr, Rules: []RuleSpec{{Name: "l",
		Filter: FilterSpec{Kind: FilterCorrelation, Correlation: &CorrelationSpec{Subject: str("x")}}}}})

	if _, err := l.do(CreateSubscription{Name: "ALL", Config: DefaultSubscriptionConfig()}); !errors.Is(err, ErrExists) {
		t.Fatalf("a second subscription called all: %v", err)
	}
	if _, err := l.do(CreateSubscription{Name: "bad", Config: DefaultSubscriptionConfig(),
		Rules: []RuleSpec{sqlRule("r", "color = ", "")}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bad filter: %v", err)
	}

	evs := l.must(send("m1", filter.Property{Name: "Color", Value: filter.StringValue("red")},
		filter.Property{Name: "n", Value: filter.IntValue(0)}))
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type.String())
	}
	// Published; copies a and b in "copies"; broken's division by zero
	// goes to its dead-letter queue.
	if len(evs) != 4 || evs[0].Type != event.Published {
		t.Fatalf("events %v", types)
	}
	routes, err := event.DecodeRoutes(evs[0].Props)
	if err != nil {
		t.Fatal(err)
	}
	all, red, copies := l.e.Subscription("all"), l.e.Subscription("red"), l.e.Subscription("copies")
	if want := []uint32{all.Queue(), red.Queue(), copies.Queue()}; !equalU32(routes, want) {
		t.Fatalf("routes %v, want %v", routes, want)
	}
	seq := evs[0].Index
	if q := l.e.Queue(copies.Queue()); q.Counts().Available != 3 {
		t.Fatalf("copies holds %d, want 3", q.Counts().Available)
	}
	if q := l.e.Queue(l.e.Subscription("none").Queue()); q.Counts().Total != 0 {
		t.Fatal("a subscription with no rules got a message")
	}
	broken := l.e.Subscription("broken")
	dlq := l.e.Queue(event.SubqueueOf(broken.Queue(), event.KindDeadLetter))
	if dlq.Counts().Available != 1 || l.e.Queue(broken.Queue()).Counts().Total != 0 {
		t.Fatal("the failed filter did not dead-letter")
	}
	if got := l.e.Queue(l.e.Subscription("label").Queue()).Counts().Total; got != 0 {
		t.Fatalf("label got %d", got)
	}
	if got := l.e.FirstNeeded(); got != seq {
		t.Fatalf("first needed %d, want %d", got, seq)
	}

	// Settle in one subscription leaves the others alone.
	lk := l.must(Lock{Queue: all.Queue(), Receiver: "r", Max: 10, Limit: 1 << 62, Nonce: 1})
	l.must(Settle{Queue: all.Queue(), Token: lk[0].Token, Outcome: Complete})
	if l.e.Queue(all.Queue()).Counts().Total != 0 || l.e.Queue(red.Queue()).Counts().Total != 1 {
		t.Fatal("a complete in one subscription changed another")
	}

	// Rules change between sends; a deleted subscription frees its queues.
	l.must(RemoveRule{Queue: red.Queue(), Name: "isRed"})
	l.must(AddRule{Queue: red.Queue(), Rule: sqlRule("isBlue", "color = 'blue'", "")})
	if _, err := l.do(AddRule{Queue: red.Queue(), Rule: sqlRule("isBlue", "1=1", "")}); !errors.Is(err, ErrExists) {
		t.Fatalf("a duplicate rule: %v", err)
	}
	l.must(send("m2", filter.Property{Name: "color", Value: filter.StringValue("red")}))
	if l.e.Queue(red.Queue()).Counts().Total != 1 {
		t.Fatal("the removed rule still matched")
	}
	l.must(DeleteSubscription{Name: "copies"})
	if l.e.Queue(copies.Queue()) != nil {
		t.Fatal("the deleted subscription's queue is still there")
	}
	l.must(CreateSubscription{Name: "late", Config: DefaultSubscriptionConfig()})
	if late := l.e.Subscription("late"); late.Queue() <= l.e.Subscription("label").Queue() ||
		l.e.Queue(late.Queue()).Counts().Total != 0 {
		t.Fatal("a new subscription reused a number or got old messages")
	}
	l.must(send("m3"))

	// Replay and the snapshot give the same state.
	snap := l.e.Encode(nil)
	if again := replay(t, l.evs).Encode(nil); !bytes.Equal(again, snap) {
		t.Fatal("replay gives another state")
	}
	back, err := Decode(snap)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Encode(nil), snap) {
		t.Fatal("the snapshot decodes to another state")
	}
	if back.Subscription("red").Rules()[0].Name != "isBlue" {
		t.Fatal("rules lost in the snapshot")
	}
}

func TestTopicSessionsAndScheduling(t *testing.T) {
	l := newTopicLog(t)
	cfg := DefaultSubscriptionConfig()
	cfg.RequiresSession = true
	l.must(CreateSubscription{Name: "s", Config: cfg})
	s := l.e.Subscription("s")
	l.must(send("nosession"))
	if l.e.Queue(s.Queue()+1).Counts().Total != 1 {
		t.Fatal("a message without a session id did not go to the dead-letter queue")
	}
	m := Message{Body: []byte("later"), MessageID: "later", SessionID: "a", ScheduledAt: l.now + 5_000_000}
	evs := l.must(Send{Messages: []Message{m}})
	if evs[0].Type != event.Scheduled || l.e.Queue(0).Counts().Scheduled != 1 {
		t.Fatal("not scheduled at the topic")
	}
	l.now += 10_000_000
	l.must(Activate{Seq: evs[0].Index, Record: evs[0]})
	if l.e.Queue(0).Counts().Total != 0 || l.e.Queue(s.Queue()).Counts().Available != 1 {
		t.Fatal("the activated message did not reach the subscription")
	}
	if _, err := l.do(Send{Queue: s.Queue(), Messages: []Message{m}}); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("a send to a subscription: %v", err)
	}
}

func equalU32(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// allRules is an index that tries every rule: what the label index must
// agree with.
func allRules(t *topicState) *ruleIndex {
	ix := &ruleIndex{byLabel: map[string][]ruleAt{}}
	for si, s := range t.subs {
		for ri := range s.rules {
			ix.always = append(ix.always, ruleAt{si, ri})
		}
	}
	return ix
}

// The label index gives the outcome trying every rule gives, for topologies
// that mix indexed correlation filters with rules that cannot be indexed.
func TestRuleIndexAgreesWithTryingEveryRule(t *testing.T) {
	l := newTopicLog(t)
	labels := []string{"a", "b", "c", "d"}
	for i := range 40 {
		lb := labels[i%len(labels)]
		var rules []RuleSpec
		switch i % 5 {
		case 0, 1:
			rules = []RuleSpec{{Name: "c", Filter: FilterSpec{Kind: FilterCorrelation, Correlation: &CorrelationSpec{Subject: str(lb)}}}}
		case 2:
			rules = []RuleSpec{{Name: "c", Filter: FilterSpec{Kind: FilterCorrelation,
				Correlation: &CorrelationSpec{Subject: str(lb), Properties: []filter.Property{{Name: "n", Value: filter.IntValue(int64(i % 3))}}}},
				Action: "SET hit = 1"}, sqlRule("s", "n > 1", "")}
		case 3:
			rules = []RuleSpec{sqlRule("s", "sys.Label = '"+lb+"' OR n = 0", "")}
		case 4:
			rules = []RuleSpec{{Name: "c", Filter: FilterSpec{Kind: FilterCorrelation, Correlation: &CorrelationSpec{To: str(lb)}}}}
		}
		l.must(CreateSubscription{Name: fmt.Sprint("s", i), Config: DefaultSubscriptionConfig(), Rules: rules})
	}
	for i := range 30 {
		fm := &filter.Message{Properties: []filter.Property{{Name: "n", Value: filter.IntValue(int64(i % 4))}}}
		if i%7 != 0 {
			fm.Label = filter.StringValue(labels[i%len(labels)])
		}
		if i%3 == 0 {
			fm.To = filter.StringValue(labels[(i+1)%len(labels)])
		}
		cmd := Send{Messages: []Message{{Body: []byte("x"), MessageID: "m", Filter: fm}}}
		indexed, err := l.e.Decide(cmd, l.now)
		if err != nil {
			t.Fatal(err)
		}
		l.e.topic.index = allRules(&l.e.topic)
		every, err := l.e.Decide(cmd, l.now)
		l.e.topic.index = nil
		if err != nil {
			t.Fatal(err)
		}
		if len(indexed) < 1 || len(indexed) != len(every) || !bytes.Equal(indexed[0].Props, every[0].Props) {
			t.Fatalf("message %d: indexed %v, every rule %v", i, indexed, every)
		}
		for j := range indexed {
			if indexed[j].Queue != every[j].Queue || !bytes.Equal(indexed[j].Props, every[j].Props) {
				t.Fatalf("message %d event %d: indexed %+v, every rule %+v", i, j, indexed[j], every[j])
			}
		}
	}
}

// BenchmarkPublish is the routing cost of one message: N subscriptions
// with the $Default rule, or 1,000 with one Label correlation filter each
// (the index makes that close to a single subscription's).
func BenchmarkPublish(b *testing.B) {
	for _, c := range []struct {
		name  string
		subs  int
		label bool
	}{{"true/1", 1, false}, {"true/10", 10, false}, {"true/100", 100, false}, {"label/1", 1, true}, {"label/1000", 1000, true}} {
		b.Run(c.name, func(b *testing.B) {
			l := newTopicLog(&testing.T{})
			for i := range c.subs {
				var rules []RuleSpec
				if c.label {
					lb := fmt.Sprint("label-", i)
					rules = []RuleSpec{{Name: "c", Filter: FilterSpec{Kind: FilterCorrelation, Correlation: &CorrelationSpec{Subject: &lb}}}}
				}
				if _, err := l.do(CreateSubscription{Name: fmt.Sprint("s", i), Config: DefaultSubscriptionConfig(), Rules: rules}); err != nil {
					b.Fatal(err)
				}
			}
			fm := &filter.Message{Label: filter.StringValue("label-0")}
			cmd := Send{Messages: []Message{{Body: make([]byte, 1024), MessageID: "m", Filter: fm}}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.e.Decide(cmd, l.now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A rule or name that is not UTF-8 is refused: its stored form (JSON)
// could not give it back, and replay would meet another rule.
func TestRuleTextMustBeUTF8(t *testing.T) {
	l := newTopicLog(t)
	l.must(CreateSubscription{Name: "s", Config: DefaultSubscriptionConfig()})
	q := l.e.Subscription("s").Queue()
	for _, r := range []RuleSpec{
		sqlRule("r\x80x", "1=1", ""),
		sqlRule("r", "a = 'x\xff'", ""),
		sqlRule("r", "1=1", "SET a = '\xfe'"),
		{Name: "r", Filter: FilterSpec{Kind: FilterCorrelation, Correlation: &CorrelationSpec{To: str("\xc0")}}},
		{Name: "r", Filter: FilterSpec{Kind: FilterCorrelation, Correlation: &CorrelationSpec{
			Properties: []filter.Property{{Name: "k", Value: filter.StringValue("\x80")}}}}},
	} {
		if _, err := l.do(AddRule{Queue: q, Rule: r}); !errors.Is(err, ErrInvalid) {
			t.Errorf("rule %+v: %v", r, err)
		}
	}
	if _, err := l.do(CreateSubscription{Name: "s\x80", Config: DefaultSubscriptionConfig()}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a subscription name that is not UTF-8: %v", err)
	}
}

// An action that sets sys.TimeToLive gives its copy that time to live,
// within the topic's default; the message as sent keeps its own.
func TestActionTimeToLive(t *testing.T) {
	l := newTopicLog(t)
	l.must(CreateSubscription{Name: "s", Config: DefaultSubscriptionConfig(), Rules: []RuleSpec{
		sqlRule("plain", "1=1", ""), sqlRule("short", "1=1", "SET sys.Label = 'x'")}})
	// Rules take no parameters yet (the administration API will give
	// them), and the language has no duration literal: the action is
	// compiled here with one.
	l.e.topic.subs[0].rules[1].action, _ = filter.CompileActionParams("SET sys.TimeToLive = @ttl",
		map[string]filter.Value{"ttl": filter.DurationValue(time.Minute)})
	evs := l.must(Send{Messages: []Message{{Body: []byte("x"), MessageID: "m", TTL: time.Hour}}})
	if len(evs) != 2 || evs[1].Type != event.Copied {
		t.Fatalf("events %v", evs)
	}
	if got := time.Duration(evs[0].Until - evs[0].Time); got != time.Hour {
		t.Errorf("the message as sent lives %v", got)
	}
	if got := time.Duration(evs[1].Until - evs[1].Time); got != time.Minute {
		t.Errorf("the copy lives %v", got)
	}
}

// topicSeed is a topic with subscriptions of every kind holding
// messages, locks, copies and dead-lettered messages: a seed for FuzzDecode.
func topicSeed(t testing.TB) *Entity {
	l := newTopicLog(t)
	l.must(CreateSubscription{Name: "all", Config: DefaultSubscriptionConfig()})
	cfg := DefaultSubscriptionConfig()
	cfg.RequiresSession = true
	l.must(CreateSubscription{Name: "sessions", Config: cfg})
	l.must(CreateSubscription{Name: "copies", Config: DefaultSubscriptionConfig(), Rules: []RuleSpec{
		sqlRule("a", "1=1", "SET tag = 'a'"), {Name: "c", Filter: FilterSpec{Kind: FilterCorrelation,
			Correlation: &CorrelationSpec{Subject: str("x"), Properties: []filter.Property{{Name: "n", Value: filter.IntValue(1)}}}}}}})
	l.must(CreateSubscription{Name: "gone", Config: DefaultSubscriptionConfig()})
	for i := range 5 {
		l.must(Send{Messages: []Message{{Body: []byte("x"), MessageID: fmt.Sprint(i), SessionID: "s",
			Filter: &filter.Message{Label: filter.StringValue("x"), Properties: []filter.Property{{Name: "n", Value: filter.IntValue(int64(i % 2))}}}}}})
	}
	l.must(DeleteSubscription{Name: "gone"})
	all := l.e.Subscription("all").Queue()
	lk := l.must(Lock{Queue: all, Receiver: "r", Max: 2, Limit: 1 << 62, Nonce: 7})
	l.must(Settle{Queue: all, Token: lk[0].Token, Outcome: DeadLetter, Reason: "r"})
	return l.e
}

// A topic's snapshot stores each message's position once, and a
// subscription's untouched messages as runs: 50 subscriptions of 2,000
// messages cost their definitions (config and rules) more than one, not a
// position per message each; a fragmented subscription costs about two
// bytes a message more; and the state decodes to itself.
func TestSnapshotOfManySubscriptionsIsSmall(t *testing.T) {
	size := func(subs int, fragment bool) int {
		l := newTopicLog(t)
		for i := range subs {
			l.must(CreateSubscription{Name: fmt.Sprint("s", i), Config: DefaultSubscriptionConfig()})
		}
		for i := range 2000 {
			l.must(Send{Messages: []Message{{Body: []byte("x"), MessageID: fmt.Sprint(i)}}})
		}
		if fragment {
			q := l.e.Subscription("s0").Queue()
			for _, ev := range l.must(Lock{Queue: q, Receiver: "r", Max: 2000, Limit: 1 << 62, Nonce: 1}) {
				if ev.Seq%2 == 0 {
					l.must(Settle{Queue: q, Token: ev.Token, Outcome: Complete})
				} else {
					l.must(Settle{Queue: q, Token: ev.Token, Outcome: Release})
				}
			}
		}
		raw := l.e.Encode(nil)
		back, err := Decode(raw)
		if err != nil || !bytes.Equal(back.Encode(nil), raw) {
			t.Fatalf("%d subscriptions: decode %v", subs, err)
		}
		return len(raw)
	}
	one, fifty, fragmented := size(1, false), size(50, false), size(50, true)
	t.Logf("1 subscription: %d bytes; 50: %d; 50, one fragmented: %d", one, fifty, fragmented)
	if fifty > one+50*512 {
		t.Errorf("50 subscriptions take %d bytes, one takes %d", fifty, one)
	}
	if fragmented > fifty+3*1000+64 {
		t.Errorf("a subscription holding every other message adds %d bytes for 1,000 messages", fragmented-fifty)
	}
}
