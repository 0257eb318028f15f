package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/projection"
)

// refusedBy runs a request through the API as a handler does that reads
// the request's document and then has its operation refused with err.
func refusedBy(a *API, r *http.Request, err error) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	a.keepBody(r)
	if _, ok := a.body(w, r); ok {
		a.brokerError(w, r, err)
	}
	return w
}

// openBroker opens a single node's broker for the length of the test.
func openBroker(t *testing.T) *broker.Broker {
	t.Helper()
	b, _, err := broker.Open(broker.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestForward: an operation another node leads is passed on to that
// node's URL as it came (method, path, query, headers, the document the
// handler read, the Host the client named), marked with this node's id,
// and the answer comes back as the node gave it.
func TestForward(t *testing.T) {
	var got *http.Request
	var gotBody string
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got, gotBody = r, string(b)
		w.Header().Set("Content-Type", "application/atom+xml;type=entry;charset=utf-8")
		w.Header().Set("X-Leader", "2")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "<entry>from the leader</entry>")
	}))
	defer leader.Close()
	// The subscription updated exists here too.
	b := openBroker(t)
	topic, err := b.CreateTopic("orders", projection.DefaultTopicConfig())
	if err == nil {
		err = topic.CreateSubscription("s", projection.DefaultSubscriptionConfig(), nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	a := &API{b: b, logger: slog.New(slog.DiscardHandler), Node: 1, Forward: func(node uint64) (string, bool) {
		return leader.URL, node == 2
	}}

	doc := "<entry>" + strings.Repeat("a description ", 1000) + "</entry>"
	r := httptest.NewRequest(http.MethodPut, "https://node1.example:5671/orders/Subscriptions/s?api-version=2021-05&x=1",
		strings.NewReader(doc))
	r.Header.Set("Authorization", "SharedAccessSignature sr=x&sig=y")
	r.Header.Set("If-Match", "*")
	r.Header.Add("X-Twice", "one")
	r.Header.Add("X-Twice", "two")
	w := refusedBy(a, r, &broker.NotLeaderError{Entity: "orders", Leader: 2})

	if w.Code != http.StatusCreated || w.Header().Get("X-Leader") != "2" || w.Body.String() != "<entry>from the leader</entry>" ||
		!strings.HasPrefix(w.Header().Get("Content-Type"), "application/atom+xml") {
		t.Fatalf("answered %d %v %q", w.Code, w.Header(), w.Body)
	}
	switch {
	case got == nil:
		t.Fatal("the request was not passed on")
	case got.Method != http.MethodPut || got.URL.Path != "/orders/Subscriptions/s" || got.URL.RawQuery != "api-version=2021-05&x=1":
		t.Fatalf("passed on as %s %s", got.Method, got.URL)
	case got.Host != "node1.example:5671":
		t.Fatalf("passed on for host %q", got.Host)
	case got.Header.Get("Authorization") != "SharedAccessSignature sr=x&sig=y" || got.Header.Get("If-Match") != "*" ||
		strings.Join(got.Header.Values("X-Twice"), ",") != "one,two":
		t.Fatalf("passed on with headers %v", got.Header)
	case got.Header.Get(forwardedHeader) != "1":
		t.Fatalf("passed on marked %q, want this node's id", got.Header.Get(forwardedHeader))
	case gotBody != doc:
		t.Fatalf("passed on %d bytes of body, the client sent %d", len(gotBody), len(doc))
	}
}

// TestForwardRefused: what is not passed on is refused with 503 and
// Retry-After, which the SDKs retry, saying why.
func TestForwardRefused(t *testing.T) {
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer up.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	urls := map[uint64]string{2: up.URL, 3: down.URL}
	cluster := &API{logger: slog.New(slog.DiscardHandler), Node: 1, Forward: func(node uint64) (string, bool) {
		u, ok := urls[node]
		return u, ok
	}}
	single := &API{logger: slog.New(slog.DiscardHandler)}
	notLeader := func(leader uint64) error { return &broker.NotLeaderError{Entity: "orders", Leader: leader} }
	for _, c := range []struct {
		name   string
		a      *API
		err    error
		header string // X-Walbus-Forwarded
		says   string
	}{
		{"passed on already", cluster, notLeader(2), "3", "node 2 does"},
		{"no leader known", cluster, notLeader(0), "", "knows no leader"},
		{"this node leads", cluster, notLeader(1), "", "node 1 does"},
		{"the leader's URL is not known", cluster, notLeader(4), "", "its HTTP URL is not known"},
		{"the leader cannot be reached", cluster, notLeader(3), "", "cannot be reached at " + down.URL},
		{"the metadata group's leader cannot be reached", cluster, &broker.NotLeaderError{Leader: 3}, "", "the namespace"},
		{"a single node", single, fmt.Errorf("send: %w", broker.ErrNotLeader), "", "does not lead"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPut, "/orders", strings.NewReader("<entry/>"))
			if c.header != "" {
				r.Header.Set(forwardedHeader, c.header)
			}
			w := refusedBy(c.a, r, c.err)
			if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), c.says) {
				t.Fatalf("answered %d %v %s; want 503, Retry-After: 1 and %q", w.Code, w.Header(), w.Body, c.says)
			}
		})
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d requests passed on", n)
	}
}

// TestReplayBody: the body sent on is the whole of what the client sent,
// whether the handler read all of it, some or none; one over maxBody
// cannot be sent again.
func TestReplayBody(t *testing.T) {
	body := strings.Repeat("x", 3000)
	for _, read := range []int{0, 1, 2999, 3000, 5000} {
		b := &replayBody{ReadCloser: io.NopCloser(strings.NewReader(body))}
		io.CopyN(io.Discard, b, int64(read))
		again, _ := io.ReadAll(b.again())
		if b.over || string(again) != body {
			t.Fatalf("after reading %d bytes: %d bytes sent again, over %v", read, len(again), b.over)
		}
	}
	b := &replayBody{ReadCloser: io.NopCloser(strings.NewReader(strings.Repeat("x", maxBody+1)))}
	io.Copy(io.Discard, b)
	if !b.over || b.kept != nil {
		t.Fatalf("over %v, %d bytes kept, after reading %d bytes", b.over, len(b.kept), maxBody+1)
	}
}

// TestChangeOf: what a request passed on creates or deletes, which the
// node waits to show before it answers; reads, the API's own paths and
// lists change nothing.
func TestChangeOf(t *testing.T) {
	for _, c := range []struct {
		method, path string
		want         change
		ok           bool
	}{
		{"PUT", "/orders", change{entity: "orders"}, true},
		{"DELETE", "/orders/", change{entity: "orders", gone: true}, true},
		{"PUT", "/shop/orders", change{entity: "shop/orders"}, true},
		{"PUT", "/news/Subscriptions/all", change{entity: "news", subscription: "all"}, true},
		{"DELETE", "/news/subscriptions/all", change{entity: "news", subscription: "all", gone: true}, true},
		{"PUT", "/news/Subscriptions/all/Rules/red", change{entity: "news", subscription: "all", rule: "red"}, true},
		{"DELETE", "/shop/news/Subscriptions/all/rules/red", change{entity: "shop/news", subscription: "all", rule: "red", gone: true}, true},
		{"GET", "/orders", change{}, false},
		{"POST", "/$walbus/send/orders", change{}, false},
		{"PUT", "/$namespaceinfo", change{}, false},
		{"DELETE", "/", change{}, false},
		{"PUT", "/news/Subscriptions", change{}, false},
		{"PUT", "/news/Subscriptions/all/Rules", change{}, false},
		{"PUT", "/news/Subscriptions/all/Other/red", change{}, false},
	} {
		got, ok := changeOf(c.method, c.path)
		if got != c.want || ok != c.ok {
			t.Errorf("%s %s: %+v %v, want %+v %v", c.method, c.path, got, ok, c.want, c.ok)
		}
	}
}

// TestHeldAnswer: the status and the body wait for send, the headers go
// to the client's writer; an informational status is not passed on; a
// body over maxHeld goes out as it comes, and is then no success to wait
// for.
func TestHeldAnswer(t *testing.T) {
	w := httptest.NewRecorder()
	h := &heldAnswer{w: w}
	h.Header().Set("Content-Type", "application/atom+xml")
	h.WriteHeader(http.StatusContinue)
	h.WriteHeader(http.StatusCreated)
	io.WriteString(h, "<entry>")
	io.WriteString(h, "</entry>")
	if w.Code != http.StatusOK || w.Body.Len() != 0 || w.Header().Get("Content-Type") != "application/atom+xml" {
		t.Fatalf("before send the client's writer has %d %v %q", w.Code, w.Header(), w.Body)
	}
	if !h.succeeded() {
		t.Fatalf("a 201 held is no success: status %d", h.status)
	}
	h.send()
	if w.Code != http.StatusCreated || w.Body.String() != "<entry></entry>" {
		t.Fatalf("sent %d %q", w.Code, w.Body)
	}

	w = httptest.NewRecorder()
	h = &heldAnswer{w: w}
	big := strings.Repeat("x", maxHeld/2+1)
	io.WriteString(h, big)
	io.WriteString(h, big)
	if h.succeeded() || w.Code != http.StatusOK || w.Body.Len() != 2*len(big) {
		t.Fatalf("an answer over maxHeld: succeeded %v, the client has %d and %d bytes", h.succeeded(), w.Code, w.Body.Len())
	}
	h.send()
	if w.Body.Len() != 2*len(big) {
		t.Fatalf("sent again: the client has %d bytes", w.Body.Len())
	}

	for _, status := range []int{http.StatusConflict, http.StatusServiceUnavailable} {
		h = &heldAnswer{w: httptest.NewRecorder()}
		h.WriteHeader(status)
		if h.succeeded() {
			t.Fatalf("a %d held is a success", status)
		}
	}
}

// TestForwardAwaitsShown: a creation or a deletion passed on is answered
// once this node's broker shows it. The leader here makes each change in
// this node's broker a moment after it answered, as a node applies what
// its group committed; the answer must come after that.
func TestForwardAwaitsShown(t *testing.T) {
	b := openBroker(t)
	var later func() error // the change the leader makes here after it answered
	var changes sync.WaitGroup
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		do := later
		changes.Go(func() {
			time.Sleep(50 * time.Millisecond)
			if err := do(); err != nil {
				t.Errorf("%s %s here: %v", r.Method, r.URL.Path, err)
			}
		})
		w.WriteHeader(http.StatusCreated)
	}))
	defer leader.Close()
	defer changes.Wait()
	a := NewAPI(b, sas.Keys{}, 1<<20, slog.New(slog.DiscardHandler))
	a.Node, a.Forward = 1, func(uint64) (string, bool) { return leader.URL, true }

	topic := func() *broker.Entity {
		e, err := b.Entity("news")
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	subscription := func() uint32 {
		q, err := topic().SubscriptionQueue("all")
		if err != nil {
			t.Fatal(err)
		}
		return q
	}
	for _, step := range []struct {
		method, path string
		do           func() error
	}{
		{"PUT", "/orders", func() error { _, err := b.CreateQueue("orders", projection.DefaultConfig()); return err }},
		{"PUT", "/news", func() error { _, err := b.CreateTopic("news", projection.DefaultTopicConfig()); return err }},
		{"PUT", "/news/Subscriptions/all", func() error {
			return topic().CreateSubscription("all", projection.DefaultSubscriptionConfig(), nil)
		}},
		{"PUT", "/news/Subscriptions/all/Rules/red", func() error {
			return topic().AddRule(subscription(), projection.RuleSpec{Name: "red", Filter: projection.FilterSpec{Kind: projection.FilterTrue}})
		}},
		{"DELETE", "/news/Subscriptions/all/Rules/red", func() error { return topic().RemoveRule(subscription(), "red") }},
		{"DELETE", "/news/Subscriptions/all", func() error { return topic().DeleteSubscription("all") }},
		{"DELETE", "/orders", func() error { return b.DeleteEntity("orders") }},
	} {
		later = step.do
		r := httptest.NewRequest(step.method, step.path, strings.NewReader("<entry/>"))
		w := refusedBy(a, r, &broker.NotLeaderError{Leader: 2})
		c, _ := changeOf(step.method, step.path)
		if w.Code != http.StatusCreated || !a.shows(c) {
			t.Fatalf("%s %s: answered %d %s, this node shows the change: %v", step.method, step.path, w.Code, w.Body, a.shows(c))
		}
	}

	// A change this node never shows is answered all the same, when the
	// wait ends (here the client's deadline, before showWait).
	later = func() error { return nil }
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodPut, "/never", strings.NewReader("<entry/>"))
	if w := refusedBy(a, r, &broker.NotLeaderError{Leader: 2}); w.Code != http.StatusCreated {
		t.Fatalf("a change not shown here: answered %d %s", w.Code, w.Body)
	}
}

// TestJSONForward: the console's JSON requests are passed on as the
// administration API's are, their body replayed; one that cannot be
// (passed on already, or a body over maxBody, which a message sent may
// have) is answered 503 with Retry-After in JSON.
func TestJSONForward(t *testing.T) {
	var gotBody atomic.Value
	leader := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotBody.Store(string(b))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"sent": 1}`)
	}))
	defer leader.Close()
	a := &API{logger: slog.New(slog.DiscardHandler), Node: 1, Forward: func(uint64) (string, bool) { return leader.URL, true }}
	notLeader := &broker.NotLeaderError{Entity: "orders", Leader: 2}
	// sent runs a console send that reads its body, as send does, and is
	// refused.
	sent := func(body string, header ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/$walbus/send/orders", strings.NewReader(body))
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		a.keepBody(r)
		io.ReadAll(io.LimitReader(r.Body, maxBody*4))
		w := httptest.NewRecorder()
		a.jsonBrokerError(w, r, notLeader)
		return w
	}

	doc := `{"body": "hello"}`
	if w := sent(doc); w.Code != http.StatusOK || w.Body.String() != `{"sent": 1}` || gotBody.Load() != doc {
		t.Fatalf("passed on: answered %d %s; the leader read %q", w.Code, w.Body, gotBody.Load())
	}
	gotBody.Store("")
	for name, w := range map[string]*httptest.ResponseRecorder{
		"passed on already": sent(doc, forwardedHeader, "3"),
		"over maxBody":      sent(`{"body": "` + strings.Repeat("x", maxBody) + `"}`),
	} {
		var answer struct{ Error string }
		err := json.Unmarshal(w.Body.Bytes(), &answer)
		if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || err != nil ||
			!strings.Contains(answer.Error, "node 2 does") {
			t.Fatalf("%s: answered %d %v %s", name, w.Code, w.Header(), w.Body)
		}
	}
	if got := gotBody.Load(); got != "" {
		t.Fatalf("the leader was sent %d bytes", len(got.(string)))
	}
}
