package admin

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/walbus/walbus/broker"
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
	a := &API{logger: slog.New(slog.DiscardHandler), Node: 1, Forward: func(node uint64) (string, bool) {
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
