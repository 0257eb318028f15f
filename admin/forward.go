package admin

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"github.com/walbus/walbus/broker"
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
	proxy.ServeHTTP(w, r)
}

// unavailable answers 503 with Retry-After: 1, which the SDKs' clients
// retry.
func (a *API) unavailable(w http.ResponseWriter, r *http.Request, detail string) {
	w.Header().Set("Retry-After", "1")
	a.fail(w, r, http.StatusServiceUnavailable, detail)
}
