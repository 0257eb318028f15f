package tools

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/projection/filter"
)

// topicData writes a data directory with a topic "news": subscriptions
// all, red (a filter) and tagged (a rule with an action), messages sent,
// one completed and one dead-lettered in "all", and a copy of "tagged"
// taken by a receive-and-delete receiver and handed back.
func topicData(t *testing.T) string {
	dir := t.TempDir()
	s := newScene(t, dir, 0)
	news, err := s.b.CreateTopic("news", broker.DefaultTopicConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []struct {
		name  string
		rules []broker.RuleSpec
	}{
		{"all", nil},
		{"red", []broker.RuleSpec{{Name: "isRed", Filter: broker.FilterSpec{Kind: broker.FilterSQL, SQL: "color = 'red'"}}}},
		{"tagged", []broker.RuleSpec{{Name: "tag", Filter: broker.FilterSpec{Kind: broker.FilterTrue}, Action: "SET tag = 1"}}},
	} {
		if err := news.CreateSubscription(sub.name, broker.DefaultSubscriptionConfig(), sub.rules); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []string{"red", "blue"} {
		m := msg(c, c)
		m.Filter = &filter.Message{Properties: []filter.Property{{Name: "color", Value: filter.StringValue(c)}}}
		s.send(news, m)
	}
	all, _ := news.SubscriptionQueue("all")
	rc := s.receiver(news, all, "r", broker.PeekLock)
	rc.settle(rc.take(), projection.Complete, "")
	rc.settle(rc.take(), projection.DeadLetter, "bad")
	tagged, _ := news.SubscriptionQueue("tagged")
	rd := s.receiver(news, tagged, "rd", broker.ReceiveAndDelete)
	done := make(chan error, 1)
	news.Restore([]broker.Delivery{rd.take()}, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.close()
	return dir
}

func TestToolsOnATopic(t *testing.T) {
	data := topicData(t)
	var out bytes.Buffer
	if err := Replay(&out, data, ReplayOptions{Entity: "news"}); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{"subscription-created", "name=red", "rule-added", "published", "to=[s1,s2]",
		"to=[s1]", "copied", "rule=tag", "of=8", "restored-copy"} {
		if !strings.Contains(text, want) {
			t.Errorf("replay lacks %q:\n%s", want, text)
		}
	}
	for _, want := range []string{`completed\s+s1\s+8 `, `dead-lettered\s+s1\s+10 `, `copied\s+s3\s+9\s+of=8 rule=tag props`} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("replay lacks %s:\n%s", want, text)
		}
	}
	rep, err := State(data, "news", StateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, q := range rep.Queues {
		got[q.label()] = q.Total
	}
	if got["all"] != 0 || got["all/dlq"] != 1 || got["red"] != 1 || got["tagged"] != 2 {
		t.Fatalf("state by queue: %v", got)
	}
	findings, err := Verify(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(findings) != 0 {
		t.Fatalf("verify: %v", findings)
	}
	lives, err := Audit(data, "news", AuditOptions{MessageID: "red"})
	if err != nil || len(lives) == 0 {
		t.Fatalf("audit: %v %v", lives, err)
	}
}
