package admin

import (
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// /health is 503 until the broker is ready, 200 while it serves (with
// "degraded" and a reason while it serves in part), and 503 again once
// shutdown starts, so a poller never reaches a half-ready broker.
func TestHealthStates(t *testing.T) {
	h := &Health{}
	srv := httptest.NewServer(Handler(h, NewMetrics(), nil))
	defer srv.Close()
	get := func() (int, string) {
		resp, err := srv.Client().Get(srv.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(); code != 503 || !strings.Contains(body, `"starting"`) {
		t.Fatalf("before ready: %d %s", code, body)
	}
	h.Ready(3)
	if code, body := get(); code != 200 || !strings.Contains(body, `"ok"`) || !strings.Contains(body, `"entities":3`) {
		t.Fatalf("ready: %d %s", code, body)
	}
	held := 5 // entities made since, through the API or the metadata group
	h.SetEntities(func() int { return held })
	if _, body := get(); !strings.Contains(body, `"entities":5`) {
		t.Fatalf("with entities counted: %s", body)
	}
	var reason atomic.Value
	reason.Store("disk low: new messages are refused")
	h.SetDegraded(func() string { return reason.Load().(string) })
	if code, body := get(); code != 200 || !strings.Contains(body, `"status":"degraded"`) || !strings.Contains(body, "disk low") {
		t.Fatalf("degraded: %d %s", code, body)
	}
	reason.Store("")
	if code, body := get(); code != 200 || !strings.Contains(body, `"status":"ok"`) || strings.Contains(body, "reason") {
		t.Fatalf("degraded no more: %d %s", code, body)
	}
	h.Stopping()
	if code, body := get(); code != 503 || !strings.Contains(body, `"stopping"`) {
		t.Fatalf("stopping: %d %s", code, body)
	}
	// /metrics works without a broker attached yet (during recovery).
	resp, err := srv.Client().Get(srv.URL + "/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("metrics before the broker is open: %v", err)
	}
	resp.Body.Close()
}
