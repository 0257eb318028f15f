package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/coder/websocket"
)

// adminServer starts walbus with a certificate from `walbus cert` and
// returns it with a Go SDK administration client. The admin client always
// dials https:// on the connection string's own host and port, the AMQP
// port: walbus serves TLS, HTTP and AMQP there alike. The client trusts the
// generated authority through its transport.
func adminServer(t *testing.T, args ...string) (*proc, *sbadmin.Client) {
	t.Helper()
	p, ac, _ := adminServerCerts(t, args...)
	return p, ac
}

// adminServerCerts is adminServer, also returning the directory of the
// certificates.
func adminServerCerts(t *testing.T, args ...string) (*proc, *sbadmin.Client, string) {
	t.Helper()
	certs := t.TempDir()
	if code, out, errOut := runWalbus(t, nil, "cert", "--out", certs); code != 0 {
		t.Fatalf("walbus cert: %d %s %s", code, out, errOut)
	}
	args = append([]string{"--tls-cert", filepath.Join(certs, "server.pem"), "--tls-key", filepath.Join(certs, "server-key.pem")}, args...)
	p := startWalbus(t, t.TempDir(), args...)
	return p, adminClient(t, p, certs, p.adminConnString("RootManageSharedAccessKey", "SAS_KEY_VALUE")), certs
}

// adminConnString is p's connection string for a key, naming localhost
// (the certificate's name) and the AMQP port.
func (p *proc) adminConnString(keyName, key string) string {
	port := p.amqp[strings.LastIndexByte(p.amqp, ':')+1:]
	return fmt.Sprintf("Endpoint=sb://localhost:%s;SharedAccessKeyName=%s;SharedAccessKey=%s;UseDevelopmentEmulator=true",
		port, keyName, key)
}

func adminClient(t *testing.T, p *proc, certs, connString string) *sbadmin.Client {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(certs, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	transport := &http.Client{Timeout: 20 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	c, err := sbadmin.NewClientFromConnectionString(connString,
		&sbadmin.ClientOptions{ClientOptions: azcore.ClientOptions{Transport: transport}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func statusOf(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// Queues through the Go SDK's administration client: create with
// settings, get, runtime counts of what the SDK sent, update, list with
// paging past 100, delete, and the errors: a second create is 409, a
// missing queue reads as nil, a bad value is 400.
func TestAdminQueuesThroughTheGoSDK(t *testing.T) {
	p, ac := adminServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	created, err := ac.CreateQueue(ctx, "orders", &sbadmin.CreateQueueOptions{Properties: &sbadmin.QueueProperties{
		LockDuration: toPtr("PT45S"), MaxDeliveryCount: toPtr[int32](7), RequiresSession: toPtr(false),
		DefaultMessageTimeToLive: toPtr("PT1H"), DeadLetteringOnMessageExpiration: toPtr(true),
		UserMetadata: toPtr("the orders"), MaxSizeInMegabytes: toPtr[int32](2048),
	}})
	if err != nil {
		t.Fatalf("create: %v\n%s", err, p.logs())
	}
	if created.QueueName != "orders" || *created.LockDuration != "PT45S" || *created.MaxDeliveryCount != 7 {
		t.Fatalf("created %+v", created.QueueProperties)
	}
	if _, err := ac.CreateQueue(ctx, "orders", nil); statusOf(err) != http.StatusConflict {
		t.Fatalf("a second create: %v", err)
	}
	if _, err := ac.CreateQueue(ctx, "bad", &sbadmin.CreateQueueOptions{Properties: &sbadmin.QueueProperties{
		LockDuration: toPtr("PT10M")}}); statusOf(err) != http.StatusBadRequest {
		t.Fatalf("a lock duration over 5 minutes: %v", err)
	}
	if got, err := ac.GetQueue(ctx, "missing", nil); err != nil || got != nil {
		t.Fatalf("a missing queue: %+v %v", got, err)
	}

	got, err := ac.GetQueue(ctx, "ORDERS", nil)
	if err != nil || got == nil {
		t.Fatalf("get: %+v %v", got, err)
	}
	if *got.DefaultMessageTimeToLive != "PT1H" || !*got.DeadLetteringOnMessageExpiration ||
		*got.UserMetadata != "the orders" || *got.MaxSizeInMegabytes != 2048 || *got.Status != sbadmin.EntityStatusActive {
		t.Fatalf("get %+v", got.QueueProperties)
	}

	// What the SDK sends, the runtime properties count.
	client, err := azservicebus.NewClientFromConnectionString(p.connString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte(fmt.Sprint(i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{{Body: []byte("later")}}, time.Now().Add(time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	receiver, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := receiver.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v", err)
	}
	if err := receiver.DeadLetterMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}
	rt, err := ac.GetQueueRuntimeProperties(ctx, "orders", nil)
	if err != nil || rt == nil {
		t.Fatalf("runtime: %v", err)
	}
	if rt.ActiveMessageCount != 2 || rt.DeadLetterMessageCount != 1 || rt.ScheduledMessageCount != 1 ||
		rt.TotalMessageCount != 4 || rt.SizeInBytes <= 0 {
		t.Fatalf("runtime %+v", rt.QueueRuntimeProperties)
	}

	got.QueueProperties.MaxDeliveryCount = toPtr[int32](3)
	got.QueueProperties.UserMetadata = toPtr("changed")
	upd, err := ac.UpdateQueue(ctx, "orders", got.QueueProperties, nil)
	if err != nil || *upd.MaxDeliveryCount != 3 || *upd.UserMetadata != "changed" {
		t.Fatalf("update: %+v %v", upd, err)
	}
	got.QueueProperties.RequiresSession = toPtr(true)
	if _, err := ac.UpdateQueue(ctx, "orders", got.QueueProperties, nil); statusOf(err) != http.StatusBadRequest {
		t.Fatalf("changing RequiresSession: %v", err)
	}
	if _, err := ac.UpdateQueue(ctx, "nothere", got.QueueProperties, nil); statusOf(err) != http.StatusNotFound {
		t.Fatalf("updating a missing queue: %v", err)
	}

	for i := range 104 {
		if _, err := ac.CreateQueue(ctx, fmt.Sprintf("q%03d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	names := map[string]bool{}
	pager := ac.NewListQueuesPager(&sbadmin.ListQueuesOptions{MaxPageSize: 30})
	pages := 0
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, q := range page.Queues {
			if names[q.QueueName] {
				t.Fatalf("%s listed twice", q.QueueName)
			}
			names[q.QueueName] = true
		}
	}
	if len(names) != 105 || !names["orders"] || !names["q103"] || pages < 4 {
		t.Fatalf("listed %d queues in %d pages", len(names), pages)
	}

	if _, err := ac.DeleteQueue(ctx, "orders", nil); err != nil {
		t.Fatal(err)
	}
	if got, err := ac.GetQueue(ctx, "orders", nil); err != nil || got != nil {
		t.Fatalf("after delete: %+v %v", got, err)
	}
	if _, err := ac.DeleteQueue(ctx, "orders", nil); statusOf(err) != http.StatusNotFound {
		t.Fatalf("a second delete: %v", err)
	}
	// The deletion is durable: the queue stays gone after a restart, and
	// the others are still there.
	p.kill()
	p.start()
	if got, err := ac.GetQueue(ctx, "orders", nil); err != nil || got != nil {
		t.Fatalf("after a restart: %+v %v", got, err)
	}
	if got, err := ac.GetQueue(ctx, "q042", nil); err != nil || got == nil {
		t.Fatalf("q042 after a restart: %v", err)
	}
}

// Topics, subscriptions and rules: a subscription created with a default
// rule, rules added, listed, updated and deleted, and messages routed by
// them, through the SDK.
func TestAdminTopicsThroughTheGoSDK(t *testing.T) {
	p, ac := adminServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := ac.CreateTopic(ctx, "news", &sbadmin.CreateTopicOptions{Properties: &sbadmin.TopicProperties{
		DefaultMessageTimeToLive: toPtr("P1D")}}); err != nil {
		t.Fatalf("create topic: %v\n%s", err, p.logs())
	}
	if _, err := ac.CreateSubscription(ctx, "news", "red", &sbadmin.CreateSubscriptionOptions{
		Properties: &sbadmin.SubscriptionProperties{MaxDeliveryCount: toPtr[int32](4),
			DefaultRule: &sbadmin.RuleProperties{Name: "isRed", Filter: &sbadmin.SQLFilter{Expression: "color = 'red'"}}}}); err != nil {
		t.Fatalf("create subscription: %v", err)
	}
	if _, err := ac.CreateSubscription(ctx, "news", "all", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateSubscription(ctx, "nonews", "x", nil); statusOf(err) != http.StatusNotFound {
		t.Fatalf("a subscription of a missing topic: %v", err)
	}
	sub, err := ac.GetSubscription(ctx, "news", "red", nil)
	if err != nil || sub == nil || *sub.MaxDeliveryCount != 4 {
		t.Fatalf("get subscription: %+v %v", sub, err)
	}
	if _, err := ac.CreateRule(ctx, "news", "red", &sbadmin.CreateRuleOptions{Name: toPtr("big"),
		Filter: &sbadmin.CorrelationFilter{Subject: toPtr("big"), ApplicationProperties: map[string]any{"n": int64(5)}},
		Action: &sbadmin.SQLAction{Expression: "SET tagged = 'yes'"}}); err != nil {
		t.Fatalf("create rule: %v", err)
	}
	if _, err := ac.CreateRule(ctx, "news", "red", &sbadmin.CreateRuleOptions{Name: toPtr("broken"),
		Filter: &sbadmin.SQLFilter{Expression: "color = "}}); statusOf(err) != http.StatusBadRequest {
		t.Fatalf("a rule that does not compile: %v", err)
	}
	var rules []string
	pager := ac.NewListRulesPager("news", "red", nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page.Rules {
			rules = append(rules, r.Name)
		}
	}
	if strings.Join(rules, ",") != "big,isRed" {
		t.Fatalf("rules %v", rules)
	}
	rule, err := ac.GetRule(ctx, "news", "red", "big", nil)
	if err != nil || rule == nil {
		t.Fatalf("get rule: %v", err)
	}
	if cf, ok := rule.Filter.(*sbadmin.CorrelationFilter); !ok || *cf.Subject != "big" || cf.ApplicationProperties["n"] != int64(5) {
		t.Fatalf("rule filter %#v", rule.Filter)
	}

	client, err := azservicebus.NewClientFromConnectionString(p.connString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender("news", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*azservicebus.Message{
		{Body: []byte("r"), ApplicationProperties: map[string]any{"color": "red"}},
		{Body: []byte("b"), ApplicationProperties: map[string]any{"color": "blue"}},
		{Body: []byte("g"), Subject: toPtr("big"), ApplicationProperties: map[string]any{"n": int64(5)}},
	} {
		if err := sender.SendMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	rt, err := ac.GetSubscriptionRuntimeProperties(ctx, "news", "red", nil)
	if err != nil || rt.ActiveMessageCount != 2 {
		t.Fatalf("red holds %+v %v", rt, err)
	}
	if rt, err := ac.GetSubscriptionRuntimeProperties(ctx, "news", "all", nil); err != nil || rt.ActiveMessageCount != 3 {
		t.Fatalf("all holds %+v %v", rt, err)
	}
	trt, err := ac.GetTopicRuntimeProperties(ctx, "news", nil)
	// red has isRed (SQL) and big (correlation), all has $Default (SQL).
	if err != nil || trt.SubscriptionCount != 2 || trt.SQLFilterCount != 2 || trt.CorrelationFilterCount != 1 {
		t.Fatalf("topic runtime %+v %v", trt, err)
	}
	receiver, err := client.NewReceiverForSubscription("news", "red", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for len(got) < 2 {
		msgs, err := receiver.ReceiveMessages(ctx, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			got[string(m.Body)] = m.ApplicationProperties["tagged"]
			receiver.CompleteMessage(ctx, m, nil)
		}
	}
	if _, ok := got["r"]; !ok || got["g"] != "yes" {
		t.Fatalf("red received %v", got)
	}

	rule.Filter = &sbadmin.SQLFilter{Expression: "broken ="}
	if _, err := ac.UpdateRule(ctx, "news", "red", rule.RuleProperties); statusOf(err) != http.StatusBadRequest {
		t.Fatalf("an update to a rule that does not compile: %v", err)
	}
	if kept, err := ac.GetRule(ctx, "news", "red", "big", nil); err != nil || kept == nil {
		t.Fatalf("the rule after a refused update: %+v %v", kept, err)
	} else if _, ok := kept.Filter.(*sbadmin.CorrelationFilter); !ok {
		t.Fatalf("the rule after a refused update: %#v", kept.Filter)
	}
	rule.Filter = &sbadmin.FalseFilter{}
	if _, err := ac.UpdateRule(ctx, "news", "red", rule.RuleProperties); err != nil {
		t.Fatalf("update rule: %v", err)
	}
	if upd, err := ac.GetRule(ctx, "news", "red", "big", nil); err != nil || upd == nil {
		t.Fatalf("the updated rule: %v", err)
	} else if _, ok := upd.Filter.(*sbadmin.FalseFilter); !ok {
		t.Fatalf("the updated rule's filter: %#v", upd.Filter)
	}
	if _, err := ac.DeleteRule(ctx, "news", "red", "isRed", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.DeleteSubscription(ctx, "news", "all", nil); err != nil {
		t.Fatal(err)
	}
	if s, err := ac.GetSubscription(ctx, "news", "all", nil); err != nil || s != nil {
		t.Fatalf("a deleted subscription: %+v %v", s, err)
	}
	if _, err := ac.DeleteTopic(ctx, "news", nil); err != nil {
		t.Fatal(err)
	}
	if tp, err := ac.GetTopic(ctx, "news", nil); err != nil || tp != nil {
		t.Fatalf("a deleted topic: %+v %v", tp, err)
	}
}

// A key without Manage rights, or a wrong key, gets 401 from the
// administration API, as Service Bus answers (its own tests expect 401).
func TestAdminNeedsManage(t *testing.T) {
	certs := t.TempDir()
	if code, out, errOut := runWalbus(t, nil, "cert", "--out", certs); code != 0 {
		t.Fatalf("walbus cert: %d %s %s", code, out, errOut)
	}
	p := startWalbus(t, t.TempDir(), "--tls-cert", filepath.Join(certs, "server.pem"),
		"--tls-key", filepath.Join(certs, "server-key.pem"), "--key", "sender=c2VuZGVy:Send,Listen")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, cs := range []string{p.adminConnString("sender", "c2VuZGVy"), p.adminConnString("RootManageSharedAccessKey", "wrong")} {
		ac := adminClient(t, p, certs, cs)
		if _, err := ac.CreateQueue(ctx, "q", nil); statusOf(err) != http.StatusUnauthorized {
			t.Fatalf("%s: %v", cs, err)
		}
	}
}

// The entity commands, as a person uses them against a running walbus:
// managing returns a runner of walbus commands against p's HTTP API that
// checks their exit code and returns what they printed.
func managing(t *testing.T, p *proc) func(want int, args ...string) string {
	server := "--server=http://" + p.http
	return func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := runWalbus(t, nil, append(args, server)...)
		if code != want {
			t.Fatalf("walbus %v: exit %d, want %d\n%s%s", args, code, want, out, errOut)
		}
		return out + errOut
	}
}

// create a queue, see it listed with its counts, read it as JSON, update
// it, manage a topic's subscription and rule, delete; and the errors.
func TestEntityCommands(t *testing.T) {
	p := startWalbus(t, t.TempDir())
	walbus := managing(t, p)
	walbus(0, "queue", "create", "orders", "--lock-duration", "30s", "--max-delivery-count", "5")
	if out := walbus(0, "queue", "list"); !strings.Contains(out, "orders") || !strings.Contains(out, "active") {
		t.Fatalf("list:\n%s", out)
	}
	out := walbus(0, "queue", "get", "orders", "--format", "json")
	if !strings.Contains(out, `"LockDuration": "PT30S"`) || !strings.Contains(out, `"MaxDeliveryCount": 5`) {
		t.Fatalf("get:\n%s", out)
	}
	walbus(0, "queue", "update", "orders", "--max-delivery-count", "9")
	if out := walbus(0, "queue", "get", "orders"); !strings.Contains(out, "MaxDeliveryCount") || !strings.Contains(out, "9") {
		t.Fatalf("after update:\n%s", out)
	}
	if out := walbus(1, "queue", "create", "orders"); !strings.Contains(out, "409") {
		t.Fatalf("a second create:\n%s", out)
	}
	if out := walbus(1, "queue", "create", "bad", "--lock-duration", "10m"); !strings.Contains(out, "400") || !strings.Contains(out, "LockDuration") {
		t.Fatalf("a bad lock duration:\n%s", out)
	}
	walbus(0, "topic", "create", "events")
	walbus(0, "subscription", "create", "events", "large", "--sql", "amount > 1000")
	walbus(0, "rule", "create", "events", "large", "vip", "--label", "vip", "--action", "SET priority = 'high'")
	if out := walbus(0, "rule", "list", "events", "large"); !strings.Contains(out, "amount > 1000") || !strings.Contains(out, "priority") {
		t.Fatalf("rules:\n%s", out)
	}
	walbus(0, "queue", "delete", "orders")
	if out := walbus(1, "queue", "get", "orders"); !strings.Contains(out, "no queue orders") {
		t.Fatalf("a deleted queue:\n%s", out)
	}
	walbus(2, "queue", "create")
}

// An entity's Status is honoured: SendDisabled refuses sends and still
// lets receivers drain it, ReceiveDisabled the reverse, Disabled both, with
// the condition the SDKs classify (com.microsoft:entity-disabled); Active
// again serves both.
func TestAdminStatus(t *testing.T) {
	p, ac := adminServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := ac.CreateQueue(ctx, "q", nil); err != nil {
		t.Fatal(err)
	}
	setStatus := func(s sbadmin.EntityStatus) {
		t.Helper()
		q, err := ac.GetQueue(ctx, "q", nil)
		if err != nil {
			t.Fatal(err)
		}
		q.Status = &s
		if got, err := ac.UpdateQueue(ctx, "q", q.QueueProperties, nil); err != nil || *got.Status != s {
			t.Fatalf("status %s: %+v %v", s, got, err)
		}
	}
	client, err := azservicebus.NewClientFromConnectionString(p.connString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	send := func() error {
		s, err := client.NewSender("q", nil)
		if err != nil {
			return err
		}
		defer s.Close(ctx)
		return s.SendMessage(ctx, &azservicebus.Message{Body: []byte("m")}, nil)
	}
	receive := func() error {
		r, err := client.NewReceiverForQueue("q", nil)
		if err != nil {
			return err
		}
		defer r.Close(ctx)
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		msgs, err := r.ReceiveMessages(rctx, 1, nil)
		if err == nil && len(msgs) == 1 {
			err = r.CompleteMessage(ctx, msgs[0], nil)
		}
		return err
	}
	disabled := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "entity-disabled") {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if err := send(); err != nil {
		t.Fatal(err)
	}
	setStatus(sbadmin.EntityStatusSendDisabled)
	disabled("send to a SendDisabled queue", send())
	if err := receive(); err != nil {
		t.Fatalf("receive from a SendDisabled queue: %v", err)
	}
	setStatus(sbadmin.EntityStatusReceiveDisabled)
	if err := send(); err != nil {
		t.Fatalf("send to a ReceiveDisabled queue: %v", err)
	}
	disabled("receive from a ReceiveDisabled queue", receive())
	setStatus(sbadmin.EntityStatusDisabled)
	disabled("send to a Disabled queue", send())
	disabled("receive from a Disabled queue", receive())
	setStatus(sbadmin.EntityStatusActive)
	if err := receive(); err != nil {
		t.Fatalf("receive once Active: %v", err)
	}
}

// AMQP over WebSockets, as clients behind proxies use it: the Go SDK with
// ClientOptions.NewWebSocketConn dials wss://HOST:PORT/$servicebus/websocket
// on the AMQP port, and sends and receives through it.
func TestWebSocketsThroughTheGoSDK(t *testing.T) {
	certs := t.TempDir()
	if code, out, errOut := runWalbus(t, nil, "cert", "--out", certs); code != 0 {
		t.Fatalf("walbus cert: %d %s %s", code, out, errOut)
	}
	cfg := writeConfig(t, "q", `"LockDuration": "PT1M"`)
	p := startWalbus(t, t.TempDir(), "--config", cfg, "--tls-cert", filepath.Join(certs, "server.pem"),
		"--tls-key", filepath.Join(certs, "server-key.pem"))
	pem, err := os.ReadFile(filepath.Join(certs, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	dials := 0
	client, err := azservicebus.NewClientFromConnectionString(p.adminConnString("RootManageSharedAccessKey", "SAS_KEY_VALUE"),
		&azservicebus.ClientOptions{NewWebSocketConn: func(ctx context.Context, args azservicebus.NewWebSocketConnArgs) (net.Conn, error) {
			dials++
			if !strings.HasPrefix(args.Host, "wss://localhost:") || !strings.HasSuffix(args.Host, "/$servicebus/websocket") {
				t.Errorf("the SDK dials %s", args.Host)
			}
			c, _, err := websocket.Dial(ctx, args.Host, &websocket.DialOptions{Subprotocols: []string{"AMQPWSB10"},
				HTTPClient: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}})
			if err != nil {
				return nil, err
			}
			return websocket.NetConn(context.Background(), c, websocket.MessageBinary), nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	defer client.Close(ctx)
	sender, err := client.NewSender("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("through a websocket")}, nil); err != nil {
		t.Fatalf("send: %v\n%s", err, p.logs())
	}
	receiver, err := client.NewReceiverForQueue("q", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := receiver.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "through a websocket" {
		t.Fatalf("receive: %v %v", msgs, err)
	}
	if err := receiver.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}
	if dials == 0 {
		t.Fatal("the SDK never dialled a websocket")
	}
}

// MaxSizeInMegabytes set through the API is a quota: a send that would
// take the queue past it is refused as Service Bus refuses it
// (amqp:resource-limit-exceeded), and taken again once a receiver has
// drained the queue.
func TestAdminMaxSize(t *testing.T) {
	p, ac := adminServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := ac.CreateQueue(ctx, "small", &sbadmin.CreateQueueOptions{Properties: &sbadmin.QueueProperties{
		MaxSizeInMegabytes: toPtr[int32](1)}}); err != nil {
		t.Fatal(err)
	}
	client, err := azservicebus.NewClientFromConnectionString(p.connString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	sender, err := client.NewSender("small", nil)
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 200<<10)
	sent := 0
	var full error
	for sent < 10 {
		if full = sender.SendMessage(ctx, &azservicebus.Message{Body: body}, nil); full != nil {
			break
		}
		sent++
	}
	if full == nil || !strings.Contains(full.Error(), "resource-limit-exceeded") || sent < 4 || sent > 5 {
		t.Fatalf("after %d sends of 200 KiB into a 1 MB queue: %v", sent, full)
	}
	receiver, err := client.NewReceiverForQueue("small", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := receiver.ReceiveMessages(ctx, 2, nil)
	if err != nil || len(msgs) == 0 {
		t.Fatalf("receive: %v", err)
	}
	for _, m := range msgs {
		if err := receiver.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	sender2, err := client.NewSender("small", nil) // the SDK closed the refused link
	if err != nil {
		t.Fatal(err)
	}
	if err := sender2.SendMessage(ctx, &azservicebus.Message{Body: body}, nil); err != nil {
		t.Fatalf("a send once drained: %v", err)
	}
}

// AutoDeleteOnIdle deletes a queue nobody uses, and a subscription nobody
// receives from, once idle that long; a queue with a receiver attached, or
// in use, stays. The deletion holds across a restart. The test runs
// walbus with --test-auto-delete-scale, so Service Bus's 5-minute minimum
// takes a second.
func TestAdminAutoDeleteOnIdle(t *testing.T) {
	p, ac := adminServer(t, "--test-auto-delete-scale", "300")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	idle := &sbadmin.QueueProperties{AutoDeleteOnIdle: toPtr("PT5M")}
	for _, q := range []string{"idle", "watched", "busy"} {
		if _, err := ac.CreateQueue(ctx, q, &sbadmin.CreateQueueOptions{Properties: idle}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ac.CreateQueue(ctx, "short", &sbadmin.CreateQueueOptions{Properties: &sbadmin.QueueProperties{
		AutoDeleteOnIdle: toPtr("PT1M")}}); statusOf(err) != http.StatusBadRequest {
		t.Fatalf("an AutoDeleteOnIdle under 5 minutes: %v", err)
	}
	if _, err := ac.CreateTopic(ctx, "news", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.CreateSubscription(ctx, "news", "quiet", &sbadmin.CreateSubscriptionOptions{
		Properties: &sbadmin.SubscriptionProperties{AutoDeleteOnIdle: toPtr("PT5M")}}); err != nil {
		t.Fatal(err)
	}
	client, err := azservicebus.NewClientFromConnectionString(p.connString(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)
	watcher, err := client.NewReceiverForQueue("watched", nil)
	if err != nil {
		t.Fatal(err)
	}
	go watcher.ReceiveMessages(ctx, 1, nil) // attaches and waits
	sender, err := client.NewSender("busy", nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		// busy is used every 200 ms: never idle for its second.
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil); err != nil {
			t.Fatal(err)
		}
		q, err := ac.GetQueue(ctx, "idle", nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := ac.GetSubscription(ctx, "news", "quiet", nil)
		if err != nil {
			t.Fatal(err)
		}
		if q == nil && s == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle queue %v, quiet subscription %v: not deleted\n%s", q != nil, s != nil, p.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, q := range []string{"watched", "busy"} {
		if got, err := ac.GetQueue(ctx, q, nil); err != nil || got == nil {
			t.Fatalf("%s was deleted: %v", q, err)
		}
	}
	p.kill()
	p.start()
	if got, err := ac.GetQueue(ctx, "idle", nil); err != nil || got != nil {
		t.Fatalf("the deleted queue after a restart: %+v %v", got, err)
	}
}

// What the Go SDK's own live tests check of an entity beyond its settings,
// through its administration client: an entity's own authorization rules
// are kept (keys generated when left out) and grant their rights on that
// entity alone; AccessedAt is zero until the first use, SizeInBytes
// counts messages, not the log; a partitioned entity reports 16 times its
// size and cannot stop being partitioned; ForwardTo reads back as
// written; and a key without Manage gets 401 with the service's texts,
// except for a queue that does not exist.
func TestAdminEntityDetails(t *testing.T) {
	p, ac, certs := adminServerCerts(t, "--key", "NoManage=bm9tYW5hZ2U=:Send,Listen")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	rules := []sbadmin.AuthorizationRule{
		{KeyName: toPtr("sender"), PrimaryKey: toPtr("c2VuZGVyLXByaW1hcnk="), SecondaryKey: toPtr("c2VuZGVyLXNlY29uZA=="),
			AccessRights: []sbadmin.AccessRight{sbadmin.AccessRightSend}},
		{KeyName: toPtr("generated"), AccessRights: []sbadmin.AccessRight{sbadmin.AccessRightListen}},
	}
	created, err := ac.CreateQueue(ctx, "keyed", &sbadmin.CreateQueueOptions{Properties: &sbadmin.QueueProperties{
		AuthorizationRules: rules}})
	if err != nil {
		t.Fatal(err)
	}
	got := created.AuthorizationRules
	if len(got) != 2 || *got[0].KeyName != "sender" || *got[0].PrimaryKey != *rules[0].PrimaryKey ||
		*got[0].SecondaryKey != *rules[0].SecondaryKey || len(got[0].AccessRights) != 1 || got[0].AccessRights[0] != sbadmin.AccessRightSend {
		t.Fatalf("rules read back: %+v", got)
	}
	if got[1].PrimaryKey == nil || len(*got[1].PrimaryKey) != 44 || got[1].SecondaryKey == nil || *got[1].SecondaryKey == *got[1].PrimaryKey {
		t.Fatalf("keys not generated: %+v", got[1])
	}
	if _, err := ac.CreateQueue(ctx, "other", nil); err != nil {
		t.Fatal(err)
	}

	// The entity's key sends to it, with either of its keys, and nowhere else.
	port := p.amqp[strings.LastIndexByte(p.amqp, ':')+1:]
	entityClient := func(key string) *azservicebus.Client {
		c, err := azservicebus.NewClientFromConnectionString(fmt.Sprintf(
			"Endpoint=sb://localhost:%s;SharedAccessKeyName=sender;SharedAccessKey=%s;UseDevelopmentEmulator=true", port, key), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	for _, key := range []string{*rules[0].PrimaryKey, *rules[0].SecondaryKey} {
		s, err := entityClient(key).NewSender("keyed", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMessage(ctx, &azservicebus.Message{Body: []byte("by the entity's key")}, nil); err != nil {
			t.Fatalf("send with the entity's key: %v", err)
		}
	}
	noRetry := func(c *azservicebus.Client, q string) error {
		s, err := c.NewSender(q, nil)
		if err != nil {
			return err
		}
		return s.SendMessage(ctx, &azservicebus.Message{Body: []byte("x")}, nil)
	}
	var sbErr *azservicebus.Error
	if err := noRetry(entityClient(*rules[0].PrimaryKey), "other"); !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeUnauthorizedAccess {
		t.Fatalf("the entity's key on another queue: %v", err)
	}
	if err := noRetry(entityClient("d3Jvbmc="), "keyed"); !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeUnauthorizedAccess {
		t.Fatalf("a wrong key: %v", err)
	}
	r, err := entityClient(*rules[0].PrimaryKey).NewReceiverForQueue("keyed", nil)
	if err == nil {
		_, err = r.ReceiveMessages(ctx, 1, nil)
	}
	if !errors.As(err, &sbErr) || sbErr.Code != azservicebus.CodeUnauthorizedAccess {
		t.Fatalf("a Send key receiving: %v", err)
	}

	// AccessedAt and SizeInBytes: "other" is untouched, "keyed" holds two.
	rt, err := ac.GetQueueRuntimeProperties(ctx, "other", nil)
	if err != nil || !rt.AccessedAt.IsZero() || rt.SizeInBytes != 0 || rt.CreatedAt.IsZero() {
		t.Fatalf("untouched queue: %+v %v", rt, err)
	}
	rt, err = ac.GetQueueRuntimeProperties(ctx, "keyed", nil)
	if err != nil || rt.AccessedAt.IsZero() || rt.SizeInBytes == 0 || rt.ActiveMessageCount != 2 {
		t.Fatalf("used queue: %+v %v", rt, err)
	}

	// Partitioning.
	part, err := ac.CreateQueue(ctx, "parted", &sbadmin.CreateQueueOptions{Properties: &sbadmin.QueueProperties{
		EnablePartitioning: toPtr(true), MaxSizeInMegabytes: toPtr[int32](2048)}})
	if err != nil || *part.MaxSizeInMegabytes != 16*2048 {
		t.Fatalf("partitioned create: %v", err)
	}
	if up, err := ac.UpdateQueue(ctx, "parted", part.QueueProperties, nil); err != nil || *up.MaxSizeInMegabytes != 16*2048 {
		t.Fatalf("round trip of a partitioned queue: %v", err)
	}
	part.EnablePartitioning = toPtr(false)
	if _, err := ac.UpdateQueue(ctx, "parted", part.QueueProperties, nil); statusOf(err) != http.StatusBadRequest ||
		!strings.Contains(err.Error(), "Partitioning cannot be changed for Queue") {
		t.Fatalf("unpartitioning: %v", err)
	}

	// ForwardTo as a URL.
	url := "sb://localhost:" + port + "/other"
	fwd, err := ac.CreateQueue(ctx, "fwd", &sbadmin.CreateQueueOptions{Properties: &sbadmin.QueueProperties{ForwardTo: &url}})
	if err != nil || fwd.ForwardTo == nil || *fwd.ForwardTo != url {
		t.Fatalf("ForwardTo %v: %v", fwd.ForwardTo, err)
	}

	// Without Manage.
	low := adminClient(t, p, certs, p.adminConnString("NoManage", "bm9tYW5hZ2U="))
	if q, err := low.GetQueue(ctx, "missing", nil); err != nil || q != nil {
		t.Fatalf("a missing queue without Manage: %v %v", q, err)
	}
	for _, c := range []struct {
		err  error
		text string
	}{
		{second(low.GetQueue(ctx, "keyed", nil)), "Manage,EntityRead claims required for this operation"},
		{second(low.CreateQueue(ctx, "new", nil)), "Authorization failed for specified action: Manage,EntityWrite"},
		{second(low.DeleteQueue(ctx, "keyed", nil)), "Authorization failed for specified action: Manage,EntityDelete"},
		{second(low.GetSubscription(ctx, "t", "s", nil)), "Unauthorized access for 'GetSubscription'"},
		{second(low.CreateSubscription(ctx, "t", "s", nil)), "Unauthorized access for 'CreateOrUpdateSubscription'"},
	} {
		if statusOf(c.err) != http.StatusUnauthorized || !strings.Contains(c.err.Error(), c.text) {
			t.Errorf("want 401 %q, got %v", c.text, c.err)
		}
	}
}

func second[T any](_ T, err error) error { return err }
