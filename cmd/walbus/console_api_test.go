package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// consoleCall makes one request of the console's JSON API as the console
// does from loopback (no key), and decodes the answer.
func consoleCall(t *testing.T, p *proc, method, path string, body any, header ...string) (int, map[string]any) {
	t.Helper()
	return apiCall(t, p, method, path, body, append([]string{"X-Walbus-Console", "1"}, header...)...)
}

// apiCall makes one request of walbus's HTTP API with the headers given
// as name, value pairs ("Host" sets the request's host), and decodes a
// JSON answer (any other is {"text": ...}).
func apiCall(t *testing.T, p *proc, method, path string, body any, header ...string) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+p.http+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, raw)
		}
	} else {
		out = map[string]any{"text": string(raw)}
	}
	return resp.StatusCode, out
}

// consoleOK is consoleCall that expects 200.
func consoleOK(t *testing.T, p *proc, method, path string, body any) map[string]any {
	t.Helper()
	code, out := consoleCall(t, p, method, path, body)
	if code != http.StatusOK {
		t.Fatalf("%s %s: %d %v", method, path, code, out)
	}
	return out
}

// pageOf reads a page of messages: their SequenceNumbers, the messages, and
// where the next page starts.
func pageOf(t *testing.T, p *proc, path string) ([]int64, []map[string]any, int64) {
	t.Helper()
	out := consoleOK(t, p, "GET", "/$walbus/messages/"+path, nil)
	var seqs []int64
	var msgs []map[string]any
	for _, m := range out["messages"].([]any) {
		m := m.(map[string]any)
		seqs = append(seqs, int64(m["sequenceNumber"].(float64)))
		msgs = append(msgs, m)
	}
	return seqs, msgs, int64(out["next"].(float64))
}

// The console's JSON API on a real walbus, checked against the Go SDK: a
// message sent from it is what a receiver gets (body, system and
// application properties, session, topic rules); pages of every state
// with their dead-letter fields; sessions; a scheduled message cancelled;
// a message's audit trail; and the errors.
func TestConsoleAPI(t *testing.T) {
	p := startWalbus(t, t.TempDir())
	walbus := managing(t, p)
	walbus(0, "queue", "create", "orders", "--max-delivery-count", "3")
	walbus(0, "queue", "create", "tasks", "--sessions")
	walbus(0, "topic", "create", "news")
	walbus(0, "subscription", "create", "news", "all")
	walbus(0, "subscription", "create", "news", "red")
	walbus(0, "rule", "delete", "news", "red", "$Default")
	walbus(0, "rule", "create", "news", "red", "red", "--sql", "colour = 'red'")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := p.sdkClient()
	defer c.Close(ctx)
	receiver := func(entity string) *azservicebus.Receiver {
		r, err := c.NewReceiverForQueue(entity, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(ctx) })
		return r
	}
	receiveOne := func(r *azservicebus.Receiver) *azservicebus.ReceivedMessage {
		t.Helper()
		msgs, err := r.ReceiveMessages(ctx, 1, nil)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("receive: %v %d", err, len(msgs))
		}
		return msgs[0]
	}

	// A send from the console is what a receiver gets.
	out := consoleOK(t, p, "POST", "/$walbus/send/orders", map[string]any{
		"body": `{"order": 7}`, "contentType": "application/json", "messageId": "m-7", "correlationId": "c-7",
		"subject": "new order", "to": "shipping", "replyTo": "replies", "timeToLive": "PT1H",
		"applicationProperties": map[string]any{"count": 3, "price": 2.5, "rush": true, "who": "ann"},
	})
	if out["messageId"] != "m-7" || out["sent"] != 1.0 {
		t.Fatalf("send answered %v", out)
	}
	orders := receiver("orders")
	m := receiveOne(orders)
	if string(m.Body) != `{"order": 7}` || m.MessageID != "m-7" || *m.CorrelationID != "c-7" || *m.Subject != "new order" ||
		*m.To != "shipping" || *m.ReplyTo != "replies" || *m.ContentType != "application/json" || *m.TimeToLive != time.Hour {
		t.Fatalf("received %+v", m)
	}
	if m.ApplicationProperties["count"] != int64(3) || m.ApplicationProperties["price"] != 2.5 ||
		m.ApplicationProperties["rush"] != true || m.ApplicationProperties["who"] != "ann" {
		t.Fatalf("application properties %v", m.ApplicationProperties)
	}

	// The browser shows it as the receiver got it, locked now.
	seqs, msgs, next := pageOf(t, p, "orders")
	if len(seqs) != 1 || seqs[0] != *m.SequenceNumber || next != 0 {
		t.Fatalf("page %v next %d, want [%d]", seqs, next, *m.SequenceNumber)
	}
	v := msgs[0]
	props := v["properties"].(map[string]any)
	app := v["applicationProperties"].(map[string]any)
	body, _ := base64.StdEncoding.DecodeString(v["body"].(string))
	if v["state"] != "locked" || v["lockedUntil"] == nil || v["bodyType"] != "data" || string(body) != `{"order": 7}` ||
		props["subject"] != "new order" || props["correlationId"] != "c-7" || app["count"] != 3.0 || app["rush"] != true ||
		v["deliveryCount"] != 0.0 {
		t.Fatalf("browsed %v", v)
	}

	// Dead-lettered, with its reason, kept properties and a delivery
	// count; the audit trail follows it there.
	if err := orders.DeadLetterMessage(ctx, m, &azservicebus.DeadLetterOptions{Reason: to.Ptr("bad order"),
		ErrorDescription: to.Ptr("no such item")}); err != nil {
		t.Fatal(err)
	}
	seqs, msgs, _ = pageOf(t, p, "orders/$DeadLetterQueue")
	if len(seqs) != 1 || msgs[0]["deadLetterReason"] != "bad order" || msgs[0]["deadLetterErrorDescription"] != "no such item" ||
		msgs[0]["applicationProperties"].(map[string]any)["who"] != "ann" {
		t.Fatalf("dead-letter page %v", msgs)
	}
	out = consoleOK(t, p, "GET", fmt.Sprintf("/$walbus/audit/orders?seq=%d", seqs[0]), nil)
	lives := out["lives"].([]any)
	life := lives[0].(map[string]any)
	var types []string
	for _, s := range life["steps"].([]any) {
		types = append(types, s.(map[string]any)["type"].(string))
	}
	if len(lives) != 1 || life["outcome"] != "dead-lettered" || !slices.Contains(types, "enqueued") || !slices.Contains(types, "dead-lettered") {
		t.Fatalf("audit: %v", out)
	}

	// States: deferred and scheduled apart from active; pages follow
	// SequenceNumbers.
	for i := range 5 {
		consoleOK(t, p, "POST", "/$walbus/send/orders", map[string]any{"body": fmt.Sprint("page ", i)})
	}
	d := receiveOne(orders)
	if err := orders.DeferMessage(ctx, d, nil); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	out = consoleOK(t, p, "POST", "/$walbus/send/orders", map[string]any{"body": "later", "scheduledEnqueueTime": at.Format(time.RFC3339)})
	scheduled := int64(out["sequenceNumber"].(float64))
	peeked, err := orders.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(scheduled)})
	if err != nil || len(peeked) != 1 || peeked[0].State != azservicebus.MessageStateScheduled || !peeked[0].ScheduledEnqueueTime.Equal(at) {
		t.Fatalf("scheduled message %d: %v %+v", scheduled, err, peeked)
	}
	if seqs, _, _ = pageOf(t, p, "orders?state=deferred"); !slices.Equal(seqs, []int64{*d.SequenceNumber}) {
		t.Fatalf("deferred %v, want %d", seqs, *d.SequenceNumber)
	}
	if seqs, _, _ = pageOf(t, p, "orders?state=scheduled"); !slices.Equal(seqs, []int64{scheduled}) {
		t.Fatalf("scheduled %v, want %d", seqs, scheduled)
	}
	active, _, _ := pageOf(t, p, "orders?state=active")
	if len(active) != 4 || slices.Contains(active, *d.SequenceNumber) {
		t.Fatalf("active %v", active)
	}
	var paged []int64
	for from := int64(1); from != 0; {
		seqs, _, next := pageOf(t, p, fmt.Sprintf("orders?max=2&from=%d", from))
		if len(seqs) > 2 || next != 0 && next <= from {
			t.Fatalf("page from %d: %v next %d", from, seqs, next)
		}
		paged, from = append(paged, seqs...), next
	}
	if all, _, _ := pageOf(t, p, "orders?max=500"); !slices.Equal(paged, all) || len(all) != 6 {
		t.Fatalf("paged %v, all at once %v", paged, all)
	}

	// Cancel the scheduled message.
	if out = consoleOK(t, p, "POST", "/$walbus/cancel/orders", map[string]any{"sequenceNumbers": []int64{scheduled, 999}}); out["cancelled"] != 1.0 {
		t.Fatalf("cancel: %v", out)
	}
	if seqs, _, _ = pageOf(t, p, "orders?state=scheduled"); len(seqs) != 0 {
		t.Fatalf("still scheduled: %v", seqs)
	}

	// A topic's scheduled messages wait in the topic itself.
	out = consoleOK(t, p, "POST", "/$walbus/send/news", map[string]any{"body": "later", "scheduledEnqueueTime": at.Format(time.RFC3339)})
	topicScheduled := int64(out["sequenceNumber"].(float64))
	if seqs, _, _ = pageOf(t, p, "news?state=scheduled"); !slices.Equal(seqs, []int64{topicScheduled}) {
		t.Fatalf("the topic's scheduled messages %v, want %d", seqs, topicScheduled)
	}
	if out = consoleOK(t, p, "POST", "/$walbus/cancel/news", map[string]any{"sequenceNumbers": []int64{topicScheduled}}); out["cancelled"] != 1.0 {
		t.Fatalf("cancel on the topic: %v", out)
	}

	// A topic's rules see what the console sends.
	consoleOK(t, p, "POST", "/$walbus/send/news", map[string]any{"body": "r", "applicationProperties": map[string]any{"colour": "red"}})
	consoleOK(t, p, "POST", "/$walbus/send/news", map[string]any{"body": "b", "applicationProperties": map[string]any{"colour": "blue"}})
	if seqs, _, _ = pageOf(t, p, "news/Subscriptions/all"); len(seqs) != 2 {
		t.Fatalf("all has %v", seqs)
	}
	if _, msgs, _ = pageOf(t, p, "news/Subscriptions/red"); len(msgs) != 1 || msgs[0]["applicationProperties"].(map[string]any)["colour"] != "red" {
		t.Fatalf("red has %v", msgs)
	}

	// Sessions: a message sent to one, the session listed, then held and
	// with state.
	consoleOK(t, p, "POST", "/$walbus/send/tasks", map[string]any{"body": "t", "sessionId": "s-1"})
	out = consoleOK(t, p, "GET", "/$walbus/sessions/tasks", nil)
	if ss := out["sessions"].([]any); len(ss) != 1 || ss[0].(map[string]any)["id"] != "s-1" || ss[0].(map[string]any)["messages"] != 1.0 ||
		ss[0].(map[string]any)["locked"] != false {
		t.Fatalf("sessions %v", out)
	}
	sr, err := c.AcceptSessionForQueue(ctx, "tasks", "s-1", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sr.Close(ctx)
	if err := sr.SetSessionState(ctx, []byte("halfway"), nil); err != nil {
		t.Fatal(err)
	}
	out = consoleOK(t, p, "GET", "/$walbus/sessions/tasks", nil)
	s := out["sessions"].([]any)[0].(map[string]any)
	if state, _ := base64.StdEncoding.DecodeString(s["state"].(string)); s["locked"] != true || string(state) != "halfway" {
		t.Fatalf("held session %v", s)
	}

	// An amqp-value body shows as JSON.
	sender, err := c.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close(ctx)
	if err := sender.SendAMQPAnnotatedMessage(ctx, &azservicebus.AMQPAnnotatedMessage{
		Body: azservicebus.AMQPAnnotatedMessageBody{Value: map[string]any{"k": int64(1)}}}, nil); err != nil {
		t.Fatal(err)
	}
	_, msgs, _ = pageOf(t, p, "orders?max=500")
	last := msgs[len(msgs)-1]
	if body, _ := base64.StdEncoding.DecodeString(last["body"].(string)); last["bodyType"] != "value" || !json.Valid(body) || !strings.Contains(string(body), `"k": 1`) {
		t.Fatalf("value body %v: %s", last, body)
	}

	// Errors.
	for _, e := range []struct {
		method, path string
		body         any
		want         int
	}{
		{"GET", "/$walbus/messages/nothing", nil, 404},
		{"GET", "/$walbus/messages/orders?max=0", nil, 400},
		{"GET", "/$walbus/messages/orders?state=gone", nil, 400},
		{"GET", "/$walbus/messages/orders?from=x", nil, 400},
		{"POST", "/$walbus/messages/orders", nil, 405},
		{"POST", "/$walbus/send/orders/$DeadLetterQueue", map[string]any{"body": "x"}, 400},
		{"POST", "/$walbus/send/news/Subscriptions/all", map[string]any{"body": "x"}, 400},
		{"POST", "/$walbus/send/orders", map[string]any{"body": "x", "timeToLive": "soon"}, 400},
		{"POST", "/$walbus/send/orders", map[string]any{"body": "x", "scheduledEnqueueTime": "tomorrow"}, 400},
		{"POST", "/$walbus/send/orders", map[string]any{"body": "x", "applicationProperties": map[string]any{"l": []int{1}}}, 400},
		{"POST", "/$walbus/send/orders", map[string]any{"body": "%%", "bodyEncoding": "base64"}, 400},
		{"POST", "/$walbus/send/orders", "not an object", 400},
		{"POST", "/$walbus/send/tasks", map[string]any{"body": "no session"}, 400},
		{"POST", "/$walbus/send/orders", map[string]any{"body": strings.Repeat("x", 1100<<10)}, 413},
		{"POST", "/$walbus/cancel/orders", map[string]any{}, 400},
		{"GET", "/$walbus/sessions/orders", nil, 400},
		{"GET", "/$walbus/audit/orders?seq=zero", nil, 400},
		{"GET", "/$walbus/nothing/orders", nil, 405},
		{"POST", "/$walbus/nothing/orders", nil, 404},
	} {
		if code, out := consoleCall(t, p, e.method, e.path, e.body); code != e.want || out["error"] == "" {
			t.Errorf("%s %s: %d %v, want %d", e.method, e.path, code, out, e.want)
		}
	}
}

// Without a key the API answers only the console's requests from loopback
// to a loopback host; a key signs the console in elsewhere, and only one
// with Manage rights.
func TestConsoleSignIn(t *testing.T) {
	p := startWalbus(t, t.TempDir(), "--key", "reader=listen-only-key:Listen")
	plain := func(path string, header ...string) int {
		t.Helper()
		code, _ := apiCall(t, p, "GET", path, nil, header...)
		return code
	}
	if code := plain("/$walbus/overview"); code != 401 {
		t.Fatalf("without the console's header: %d", code)
	}
	if code, _ := consoleCall(t, p, "GET", "/$walbus/overview", nil); code != 200 {
		t.Fatalf("the console from loopback: %d", code)
	}
	// A name that resolves to loopback today may not tomorrow (DNS
	// rebinding): only loopback names and addresses go without a key.
	for _, host := range []string{"localhost", "[::1]:80", "127.0.0.2"} {
		if code, _ := consoleCall(t, p, "GET", "/$walbus/overview", nil, "Host", host); code != 200 {
			t.Errorf("Host %s: %d", host, code)
		}
	}
	if code, _ := consoleCall(t, p, "GET", "/$walbus/overview", nil, "Host", "walbus.example.com"); code != 401 {
		t.Fatalf("Host walbus.example.com: %d", code)
	}
	// A token that is given must be good, even from loopback.
	if code, _ := consoleCall(t, p, "GET", "/$walbus/overview", nil, "Authorization", "SharedAccessSignature sr=x&sig=y&se=1&skn=z"); code != 401 {
		t.Fatalf("a bad token: %d", code)
	}

	signIn := func(name, key string) (int, map[string]any) {
		return consoleCall(t, p, "POST", "/$walbus/token", map[string]string{"keyName": name, "key": key}, "Host", "walbus.example.com")
	}
	for _, k := range [][2]string{{"RootManageSharedAccessKey", "wrong"}, {"nobody", "SAS_KEY_VALUE"}, {"reader", "listen-only-key"}} {
		if code, out := signIn(k[0], k[1]); code != 401 || out["token"] != nil {
			t.Errorf("sign in as %s: %d %v", k[0], code, out)
		}
	}
	code, out := signIn("RootManageSharedAccessKey", "SAS_KEY_VALUE")
	token, _ := out["token"].(string)
	if code != 200 || !strings.HasPrefix(token, "SharedAccessSignature ") {
		t.Fatalf("sign in: %d %v", code, out)
	}
	if code, _ := consoleCall(t, p, "GET", "/$walbus/overview", nil, "Host", "walbus.example.com", "Authorization", token); code != 200 {
		t.Fatalf("with the token: %d", code)
	}
	if code := plain("/$walbus/overview", "Authorization", token); code != 200 {
		t.Fatalf("with the token, no console header: %d", code)
	}

	// The page itself needs no key; it and its files say where they may
	// load from.
	for _, path := range []string{"/", "/$console/app.js", "/$console/app.css"} {
		resp, err := http.Get("http://" + p.http + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || len(b) == 0 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("%s: %d, %d bytes, CSP %q", path, resp.StatusCode, len(b), resp.Header.Get("Content-Security-Policy"))
		}
	}
	if code := plain("/$console/nothing.js"); code != 404 {
		t.Errorf("a file the console lacks: %d", code)
	}
}
