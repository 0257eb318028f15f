// Package admin is walbus's HTTP side: /health for readiness, /metrics for
// Prometheus.
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
}

// Ready marks the broker ready to serve n entities.
func (h *Health) Ready(entities int) {
	h.entities.Store(int64(entities))
	h.ready.Store(true)
}

// Stopping marks the start of shutdown.
func (h *Health) Stopping() { h.stopping.Store(true) }

func (h *Health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	status, code := "ok", http.StatusOK
	switch {
	case h.stopping.Load():
		status, code = "stopping", http.StatusServiceUnavailable
	case !h.ready.Load():
		status, code = "starting", http.StatusServiceUnavailable
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(struct {
		Status   string `json:"status"`
		Entities int64  `json:"entities"`
	}{status, h.entities.Load()})
}

// Handler serves /health and /metrics.
func Handler(h *Health, m *Metrics) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /health", h)
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	return mux
}
