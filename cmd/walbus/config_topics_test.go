package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// writeTopicConfig writes an emulator Config.json with one topic whose
// subscriptions are given as JSON.
func writeTopicConfig(t *testing.T, subscriptions string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "Config.json")
	body := `{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [],
		"Topics": [{"Name": "news", "Properties": {"DefaultMessageTimeToLive": "PT1H"},
			"Subscriptions": [` + subscriptions + `]}]}], "Logging": {"Type": "File"}}}`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// receiveBodies drains what a subscription holds now, completing it.
func receiveBodies(t *testing.T, client *azservicebus.Client, topic, sub string) []string {
	t.Helper()
	r, err := client.NewReceiverForSubscription(topic, sub, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	var out []string
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		msgs, err := r.ReceiveMessages(ctx, 10, nil)
		cancel()
		if err != nil && ctx.Err() == nil {
			t.Fatal(err)
		}
		if len(msgs) == 0 {
			return out
		}
		for _, m := range msgs {
			out = append(out, string(m.Body))
			if err := r.CompleteMessage(context.Background(), m, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestConfigTopics: a Config.json topic gets its subscriptions and rules
// (a subscription without Rules gets $Default); started again with changed
// rules, the subscription's rules become the file's and messages sent
// after follow them; a bad filter stops the start with its place.
func TestConfigTopics(t *testing.T) {
	data := t.TempDir()
	ctx := context.Background()
	first := writeTopicConfig(t, `{"Name": "all"},
		{"Name": "red", "Rules": [{"Name": "isRed", "Properties": {"FilterType": "Sql",
			"SqlFilter": {"SqlExpression": "color = 'red'"}}}]},
		{"Name": "label", "Rules": [{"Name": "byLabel", "Properties": {"FilterType": "Correlation",
			"CorrelationFilter": {"Label": "urgent", "Properties": {"n": 1}},
			"Action": {"SqlExpression": "SET tagged = TRUE"}}}]}`)
	p := startWalbus(t, data, "--config", first)
	client := p.sdkClient()
	s, err := client.NewSender("news", nil)
	if err != nil {
		t.Fatal(err)
	}
	subject := "urgent"
	for _, m := range []*azservicebus.Message{
		{Body: []byte("red"), ApplicationProperties: map[string]any{"color": "red"}},
		{Body: []byte("blue"), ApplicationProperties: map[string]any{"color": "blue"}},
		{Body: []byte("urgent"), Subject: &subject, ApplicationProperties: map[string]any{"n": int64(1)}},
	} {
		if err := s.SendMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(receiveBodies(t, client, "news", "all"), ","); got != "red,blue,urgent" {
		t.Fatalf("all got %s", got)
	}
	if got := strings.Join(receiveBodies(t, client, "news", "red"), ","); got != "red" {
		t.Fatalf("red got %s", got)
	}
	r, _ := client.NewReceiverForSubscription("news", "label", nil)
	msgs, err := r.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "urgent" || msgs[0].ApplicationProperties["tagged"] != true ||
		msgs[0].ApplicationProperties["RuleName"] != "byLabel" {
		t.Fatalf("label got %v, %v", msgs, err)
	}
	client.Close(ctx)
	p.kill()

	// The red subscription now wants blue; everything else is the same.
	second := writeTopicConfig(t, `{"Name": "all"},
		{"Name": "red", "Rules": [{"Name": "isBlue", "Properties": {"FilterType": "Sql",
			"SqlFilter": {"SqlExpression": "color = 'blue'"}}}]},
		{"Name": "label", "Rules": [{"Name": "byLabel", "Properties": {"FilterType": "Correlation",
			"CorrelationFilter": {"Label": "urgent", "Properties": {"n": 1}},
			"Action": {"SqlExpression": "SET tagged = TRUE"}}}]}`)
	p = startWalbus(t, data, "--config", second)
	if logs := p.logs(); !strings.Contains(logs, "rule removed") || !strings.Contains(logs, "rule=isRed") ||
		!strings.Contains(logs, "rule added from the file") || strings.Contains(logs, "rule=byLabel") {
		t.Fatalf("the rule change is not reported as it should be:\n%s", logs)
	}
	client = p.sdkClient()
	s, _ = client.NewSender("news", nil)
	for _, c := range []string{"red", "blue"} {
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte(c), ApplicationProperties: map[string]any{"color": c}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(receiveBodies(t, client, "news", "red"), ","); got != "blue" {
		t.Fatalf("red got %s after its rule changed", got)
	}
	// Each subscription has its own figures; "all" holds the two
	// messages sent since the restart.
	text := getText(t, "http://"+p.http+"/metrics")
	for _, want := range []string{
		`walbus_subscription_messages{entity="news",state="available",subqueue="active",subscription="all"} 2`,
		`walbus_subscription_messages{entity="news",state="available",subqueue="deadletter",subscription="red"} 0`,
		`walbus_subscription_enqueued_total{entity="news",subscription="red"} 1`,
		`walbus_subscription_completed_total{entity="news",subscription="red"} 1`,
		`walbus_messages_sent_total{entity="news"} 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	client.Close(ctx)
	p.kill()

	bad := writeTopicConfig(t, `{"Name": "x", "Rules": [{"Name": "r", "Properties": {"FilterType": "Sql",
		"SqlFilter": {"SqlExpression": "color = = 'red'"}}}]}`)
	code, stdout, stderr := runWalbus(t, nil, "serve", "--data", data, "--amqp", "127.0.0.1:0", "--http", "", "--config", bad)
	if out := stdout + stderr; code != 2 || !strings.Contains(out, "Subscriptions[0].Rules[0].Properties") ||
		!strings.Contains(out, "line 1, column 9") {
		t.Fatalf("exit %d for a bad filter:\n%s", code, out)
	}
}

// TestConfigForwardingThroughTopics: from Config.json, a queue forwards to
// a topic, one of its subscriptions forwards what it gets to a queue, and
// another sends its dead-lettered messages to a queue; all seen through
// the Go SDK, as Service Bus shows them.
func TestConfigForwardingThroughTopics(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "Config.json")
	body := `{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
		"Queues": [{"Name": "inbox", "Properties": {"ForwardTo": "news"}}, {"Name": "out"}, {"Name": "dead"}],
		"Topics": [{"Name": "news", "Subscriptions": [
			{"Name": "fwd", "Properties": {"ForwardTo": "out"}},
			{"Name": "dl", "Properties": {"ForwardDeadLetteredMessagesTo": "dead"}}]}]}],
		"Logging": {"Type": "File"}}}`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startWalbus(t, t.TempDir(), "--config", path)
	client := p.sdkClient()
	defer client.Close(ctx)
	s, err := client.NewSender("inbox", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("hello"), MessageID: toPtr("m1")}, nil); err != nil {
		t.Fatal(err)
	}
	receiveOne := func(r *azservicebus.Receiver, what string) *azservicebus.ReceivedMessage {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a hang guard
		defer cancel()
		msgs, err := r.ReceiveMessages(rctx, 1, nil)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("%s: %v, %v", what, msgs, err)
		}
		return msgs[0]
	}

	out, _ := client.NewReceiverForQueue("out", nil)
	m := receiveOne(out, "out")
	if string(m.Body) != "hello" || m.MessageID != "m1" || m.DeadLetterReason != nil || m.DeadLetterSource != nil {
		t.Fatalf("out got %q %s, dead-letter reason %v, source %v", m.Body, m.MessageID, m.DeadLetterReason, m.DeadLetterSource)
	}
	if err := out.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}

	dl, _ := client.NewReceiverForSubscription("news", "dl", nil)
	m = receiveOne(dl, "news/Subscriptions/dl")
	if err := dl.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: toPtr("not today")}); err != nil {
		t.Fatal(err)
	}
	dead, _ := client.NewReceiverForQueue("dead", nil)
	m = receiveOne(dead, "dead")
	if string(m.Body) != "hello" || m.DeadLetterReason == nil || *m.DeadLetterReason != "not today" ||
		m.DeadLetterSource == nil || *m.DeadLetterSource != "news/Subscriptions/dl" {
		t.Fatalf("dead got %q, dead-letter reason %v, source %v", m.Body, m.DeadLetterReason, m.DeadLetterSource)
	}
	// The subscriptions keep nothing: what they got moved on.
	for _, sub := range []string{"fwd", "dl"} {
		r, _ := client.NewReceiverForSubscription("news", sub, nil)
		if left, err := r.PeekMessages(ctx, 10, nil); err != nil || len(left) != 0 {
			t.Fatalf("%s keeps %d messages (%v)", sub, len(left), err)
		}
	}
}
