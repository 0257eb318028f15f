package admin

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/projection"
)

// In a cluster every node serves the administration API, but only the
// node that leads a group may change what the group holds: an entity's
// settings, its subscriptions and rules, or the namespace's entities (the
// metadata group). The broker refuses such an operation on another node
// with broker.NotLeaderError, naming the leader; the API then passes the
// request on to the leader's node, as it came (method, path, query, every
// header, the document), and passes the answer back, as the SDKs do not
// follow redirects (docs/cluster.md).

// forwardedHeader marks a request passed on by another node, whose id it
// holds. Such a request is not passed on again: two nodes that each take
// the other for the leader (one of them behind on a change of leaders)
// answer 503 rather than send it back and forth.
const forwardedHeader = "X-Walbus-Forwarded"

// forwardTransport carries the requests passed on. The nodes reach each
// other directly, never through a proxy the environment names; a node
// that answers nothing is given up on after a minute, longer than an
// operation waits for its group to commit.
var forwardTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.ResponseHeaderTimeout = time.Minute
	return t
}()

// replayBody is a request's body that keeps what is read of it, up to
// maxBody bytes (the largest document the API reads), so that the request
// can be passed on after a handler read its document.
type replayBody struct {
	io.ReadCloser
	kept []byte
	over bool // more than maxBody bytes were read: the body cannot be sent again
}

func (b *replayBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case b.over:
	case len(b.kept)+n > maxBody:
		b.over, b.kept = true, nil
	default:
		b.kept = append(b.kept, p[:n]...)
	}
	return n, err
}

// again is the body to send on: what was read of it, then what was not.
func (b *replayBody) again() io.ReadCloser {
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(b.kept), b.ReadCloser), b.ReadCloser}
}

// keepBody makes r's body one that can be sent again, when the API passes
// requests on.
func (a *API) keepBody(r *http.Request) {
	if a.Forward != nil && r.Body != nil && r.Body != http.NoBody {
		r.Body = &replayBody{ReadCloser: r.Body}
	}
}

// forwardTo is the node r goes to because it leads the group that refused
// r's operation with err, if r is to be passed on: the leader is known
// and is not this node, r was not passed on already, and its body can be
// sent again.
func (a *API) forwardTo(r *http.Request, err error) (uint64, bool) {
	node, ok := broker.LeaderOf(err)
	if !ok || a.Forward == nil || node == a.Node || r.Header.Get(forwardedHeader) != "" {
		return 0, false
	}
	if b, ok := r.Body.(*replayBody); ok && b.over {
		return 0, false
	}
	return node, true
}

// forward passes r on to node, whose group refused r's operation here
// (why), and answers with what node answers: its status, headers and
// body. A node whose URL is not known, or that cannot be reached, makes
// the answer 503, which the SDKs retry.
func (a *API) forward(w http.ResponseWriter, r *http.Request, node uint64, why error) {
	base, ok := a.Forward(node)
	target, err := url.Parse(base)
	if !ok || err != nil || target.Host == "" {
		a.unavailable(w, r, fmt.Sprintf("%v, and its HTTP URL is not known here", why))
		return
	}
	if b, ok := r.Body.(*replayBody); ok {
		r.Body = b.again()
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// The answer's links name the node the client asked.
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(forwardedHeader, strconv.FormatUint(a.Node, 10))
		},
		Transport: forwardTransport,
		ErrorLog:  slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			a.logger.Warn("cannot pass an administration request on", "method", r.Method, "path", r.URL.Path,
				"node", node, "url", base, "err", err)
			a.unavailable(w, r, fmt.Sprintf("%v, and it cannot be reached at %s: %v", why, base, err))
		},
	}
	a.logger.Debug("administration request passed on", "method", r.Method, "path", r.URL.Path, "node", node, "url", base)
	a.relay(w, r, proxy)
}

// relay has proxy pass r on and answers with what comes back. A creation
// or a deletion that succeeded is answered once this node shows it too
// (awaitShown).
func (a *API) relay(w http.ResponseWriter, r *http.Request, proxy http.Handler) {
	c, ok := changeOf(r.Method, r.URL.Path)
	if !ok {
		proxy.ServeHTTP(w, r)
		return
	}
	held := &heldAnswer{w: w}
	proxy.ServeHTTP(held, r)
	if held.succeeded() {
		a.awaitShown(r, c)
	}
	held.send()
}

// unavailable answers 503 with Retry-After: 1, which the SDKs' clients
// retry.
func (a *API) unavailable(w http.ResponseWriter, r *http.Request, detail string) {
	w.Header().Set("Retry-After", "1")
	a.fail(w, r, http.StatusServiceUnavailable, detail)
}

// A request passed on that creates or deletes an entity, a subscription
// or a rule is answered once this node shows the change too: an SDK's
// administration client reads back what it made, often on the same node,
// and this node applies what the group committed a moment after the
// leader answered. The change is made by then: the answer is the
// leader's, whether this node shows it within showWait or not.
const (
	showWait = 5 * time.Second
	showPoll = 10 * time.Millisecond
	// maxHeld bounds the answer held while the node waits; a larger one
	// goes to the client as it comes, without the wait.
	maxHeld = 4 << 20
)

// change is what a request creates or deletes: a queue or a topic, a
// topic's subscription, or a subscription's rule.
type change struct {
	entity, subscription, rule string
	gone                       bool // deleted, not created
}

// changeOf is what a request of method on path creates (PUT) or deletes
// (DELETE), if path is an entity's, a subscription's or a rule's. A PUT
// that updates names what exists already, which this node shows at once.
func changeOf(method, path string) (change, bool) {
	path = strings.Trim(path, "/")
	if method != http.MethodPut && method != http.MethodDelete || path == "" || strings.HasPrefix(path, "$") {
		return change{}, false
	}
	c := change{entity: path, gone: method == http.MethodDelete}
	segs := strings.Split(path, "/")
	at := subscriptionsAt(segs)
	if at < 0 {
		return c, true
	}
	c.entity = strings.Join(segs[:at], "/")
	switch rest := segs[at+1:]; {
	case len(rest) == 1:
		c.subscription = rest[0]
	case len(rest) == 3 && strings.EqualFold(rest[1], "Rules"):
		c.subscription, c.rule = rest[0], rest[2]
	default:
		return change{}, false
	}
	return c, true
}

// shows reports whether this node's broker shows change c.
func (a *API) shows(c change) bool {
	err := a.lookup(c)
	if c.gone {
		return errors.Is(err, broker.ErrEntityNotFound)
	}
	return err == nil
}

// lookup finds what c names in this node's broker: an error wrapping
// broker.ErrEntityNotFound when it is not there.
func (a *API) lookup(c change) error {
	e, err := a.b.Entity(c.entity)
	if err != nil || c.subscription == "" {
		return err
	}
	s, err := findSubscription(e, c.subscription)
	if err != nil || c.rule == "" {
		return err
	}
	if !slices.ContainsFunc(s.Rules, func(rs projection.RuleSpec) bool { return strings.EqualFold(rs.Name, c.rule) }) {
		return fmt.Errorf("%w: rule %s of %s/Subscriptions/%s", broker.ErrEntityNotFound, c.rule, e.Name(), s.Name)
	}
	return nil
}

// awaitShown waits until this node shows change c, which the request r
// passed on made, for showWait at most, or until r's client goes.
func (a *API) awaitShown(r *http.Request, c change) {
	ctx, cancel := context.WithTimeout(r.Context(), showWait)
	defer cancel()
	tick := time.NewTicker(showPoll)
	defer tick.Stop()
	for !a.shows(c) {
		select {
		case <-ctx.Done():
			a.logger.Warn("answering a request passed on before this node shows its change", "method", r.Method,
				"path", r.URL.Path, "err", ctx.Err())
			return
		case <-tick.C:
		}
	}
}

// heldAnswer holds the status and the body of the answer to a request
// passed on, up to maxHeld bytes, until send. Its headers are the
// client's writer's, which sends none before the status.
type heldAnswer struct {
	w      http.ResponseWriter
	status int
	body   []byte
	sent   bool // the status went to the client: the body goes on as it comes
}

func (h *heldAnswer) Header() http.Header { return h.w.Header() }

// WriteHeader keeps the final status; an informational one (1xx) is not
// passed on.
func (h *heldAnswer) WriteHeader(status int) {
	if h.status == 0 && status >= 200 {
		h.status = status
	}
}

func (h *heldAnswer) Write(p []byte) (int, error) {
	h.WriteHeader(http.StatusOK)
	if !h.sent && len(h.body)+len(p) > maxHeld {
		if err := h.send(); err != nil {
			return 0, err
		}
	}
	if h.sent {
		return h.w.Write(p)
	}
	h.body = append(h.body, p...)
	return len(p), nil
}

// succeeded reports whether the answer held is a success (2xx).
func (h *heldAnswer) succeeded() bool {
	return !h.sent && h.status >= 200 && h.status < 300
}

// send sends the status and the body held to the client, once.
func (h *heldAnswer) send() error {
	if h.sent {
		return nil
	}
	h.sent = true
	h.w.WriteHeader(cmp.Or(h.status, http.StatusOK))
	_, err := h.w.Write(h.body)
	h.body = nil
	return err
}
