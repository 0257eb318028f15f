// Package admin is walbus's HTTP side: /health for readiness, /metrics for
// Prometheus, /cluster for a cluster's node.
package admin

import (
	"encoding/json"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Health is the broker's readiness: ready once every entity is recovered
// and the listeners accept, not ready again once shutdown starts.
type Health struct {
	ready    atomic.Bool
	stopping atomic.Bool
	entities atomic.Int64
	count    atomic.Pointer[func() int]
	degraded atomic.Pointer[func() string]
	cluster  atomic.Pointer[func() ClusterStatus]
}

// SetDegraded makes /health ask reason whether the broker serves only in
// part (a low disk): a reason that is not "" makes the status "degraded",
// still 200, with the reason beside it.
func (h *Health) SetDegraded(reason func() string) { h.degraded.Store(&reason) }

// SetEntities makes /health say count(), the entities the broker holds
// now, rather than those it was ready with.
func (h *Health) SetEntities(count func() int) { h.count.Store(&count) }

// Ready marks the broker ready to serve n entities.
func (h *Health) Ready(entities int) {
	h.entities.Store(int64(entities))
	h.ready.Store(true)
}

// Stopping marks the start of shutdown.
func (h *Health) Stopping() { h.stopping.Store(true) }

func (h *Health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	status, code, reason := "ok", http.StatusOK, ""
	switch {
	case h.stopping.Load():
		status, code = "stopping", http.StatusServiceUnavailable
	case !h.ready.Load():
		status, code = "starting", http.StatusServiceUnavailable
	default:
		if f := h.degraded.Load(); f != nil {
			if reason = (*f)(); reason != "" {
				status = "degraded"
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	var cluster *ClusterHealth
	if f := h.cluster.Load(); f != nil && h.ready.Load() {
		c := NewClusterHealth((*f)())
		cluster = &c
	}
	entities := h.entities.Load()
	if f := h.count.Load(); f != nil && h.ready.Load() {
		entities = int64((*f)())
	}
	json.NewEncoder(w).Encode(struct {
		Status   string         `json:"status"`
		Reason   string         `json:"reason,omitempty"`
		Entities int64          `json:"entities"`
		Cluster  *ClusterHealth `json:"cluster,omitempty"`
	}{status, reason, entities, cluster})
}

// Handler serves /health, /metrics and /cluster, and everything else
// with api (the administration API; nil for none).
func Handler(h *Health, m *Metrics, api http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /health", h)
	mux.Handle("GET /cluster", clusterHandler{h, api})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	if api != nil {
		mux.Handle("/", api)
	}
	return mux
}

// Later is a handler set once it can serve: until then it answers 503, as
// the administration API does while the broker recovers.
type Later struct{ h atomic.Pointer[http.Handler] }

// Set makes h serve from now on.
func (l *Later) Set(h http.Handler) { l.h.Store(&h) }

func (l *Later) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h := l.h.Load(); h != nil {
		(*h).ServeHTTP(w, r)
		return
	}
	w.Header().Set("Retry-After", "1")
	http.Error(w, "walbus is starting", http.StatusServiceUnavailable)
}
