package admin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/broker/replica"
)

func group(entity string, serving bool) broker.GroupStatus {
	role := "follower"
	if serving {
		role = "leader"
	}
	return broker.GroupStatus{Entity: entity, Group: 1, Status: replica.Status{Role: role, Serving: serving}}
}

// A node's role is what its members serve: a leader that has not yet
// applied what came before its term does not count as leading.
func TestClusterHealthRole(t *testing.T) {
	notYet := group("c", false)
	notYet.Role = "leader"
	for _, c := range []struct {
		name      string
		groups    []broker.GroupStatus
		role      string
		leading   []string
		following []string
	}{
		{"no entities", nil, "none", []string{}, []string{}},
		{"leads all", []broker.GroupStatus{group("a", true), group("b", true)}, "leader", []string{"a", "b"}, []string{}},
		{"leads none", []broker.GroupStatus{group("a", false), group("b", false)}, "follower", []string{}, []string{"a", "b"}},
		{"mixed", []broker.GroupStatus{group("a", true), group("b", false)}, "mixed", []string{"a"}, []string{"b"}},
		{"leader not serving yet", []broker.GroupStatus{notYet}, "follower", []string{}, []string{"c"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := NewClusterHealth(ClusterStatus{Node: 2, Groups: c.groups})
			if h.Node != 2 || h.Role != c.role || !slices.Equal(h.Leading, c.leading) || !slices.Equal(h.Following, c.following) {
				t.Fatalf("got %+v, want role %s leading %v following %v", h, c.role, c.leading, c.following)
			}
		})
	}
}

// GET /cluster is 404 on a single node; on a cluster's node it is 503
// until the broker is ready, then the status as JSON. With a SAS token it
// is the administration API's, which may hold a queue named cluster.
func TestClusterEndpoint(t *testing.T) {
	h := &Health{}
	var apiPaths []string
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		apiPaths = append(apiPaths, r.URL.Path)
		w.WriteHeader(http.StatusTeapot)
	})
	srv := httptest.NewServer(Handler(h, NewMetrics(), api))
	defer srv.Close()
	get := func(path string, token bool) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if token {
			req.Header.Set("Authorization", "SharedAccessSignature sr=x&sig=y&se=1&skn=k")
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	h.Ready(1)
	if code, body := get("/cluster", false); code != 404 {
		t.Fatalf("single node: %d %s", code, body)
	}
	if code, _ := get("/cluster", true); code != http.StatusTeapot || !slices.Equal(apiPaths, []string{"/cluster"}) {
		t.Fatalf("with a token: %d, the API saw %v", code, apiPaths)
	}
	if _, body := get("/health", false); strings.Contains(body, "cluster") {
		t.Fatalf("single node's health: %s", body)
	}

	h = &Health{}
	srv = httptest.NewServer(Handler(h, NewMetrics(), api))
	defer srv.Close()
	h.SetCluster(func() ClusterStatus {
		return ClusterStatus{Node: 1, Cluster: "demo", Peers: map[uint64]string{1: "127.0.0.1:5401", 2: "127.0.0.1:5402"},
			Groups: []broker.GroupStatus{group("orders", true)}}
	})
	if code, body := get("/cluster", false); code != 503 {
		t.Fatalf("a node starting: %d %s", code, body)
	}
	h.Ready(1)
	code, body := get("/cluster", false)
	var st struct {
		Node    uint64
		Cluster string
		Peers   map[string]string
		Groups  []map[string]any
	}
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("a node: %d %s (%v)", code, body, err)
	}
	if st.Node != 1 || st.Cluster != "demo" || st.Peers["2"] != "127.0.0.1:5402" || len(st.Groups) != 1 ||
		st.Groups[0]["entity"] != "orders" || st.Groups[0]["role"] != "leader" || st.Groups[0]["serving"] != true {
		t.Fatalf("a node's status: %s", body)
	}
	_, body = get("/health", false)
	if !strings.Contains(body, `"cluster":{"node":1,"role":"leader","leading":["orders"],"following":[]}`) {
		t.Fatalf("a node's health: %s", body)
	}
}

// The Raft figures appear once a node's counters are given, and not on a
// single node; the commit hook feeds the histogram.
func TestRaftMetrics(t *testing.T) {
	scrape := func(m *Metrics) string {
		t.Helper()
		srv := httptest.NewServer(Handler(&Health{}, m, nil))
		defer srv.Close()
		resp, err := srv.Client().Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if body := scrape(NewMetrics()); strings.Contains(body, "walbus_raft_") {
		t.Fatalf("a single node shows Raft figures:\n%s", body)
	}
	m := NewMetrics()
	c := &replica.Counters{}
	m.SetRaftCounters(c)
	c.Elections.Add(2)
	c.LeaderChanges.Add(3)
	c.SnapshotsSent.Add(4)
	c.SnapshotsReceived.Add(5)
	c.Commit(3 * time.Millisecond)
	body := scrape(m)
	for _, want := range []string{"walbus_raft_elections_total 2", "walbus_raft_leader_changes_total 3",
		"walbus_raft_snapshots_sent_total 4", "walbus_raft_snapshots_received_total 5",
		"walbus_raft_commit_duration_seconds_count 1", `walbus_raft_commit_duration_seconds_bucket{le="0.0032"} 1`,
		`walbus_raft_commit_duration_seconds_bucket{le="0.0016"} 0`} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("no %q in:\n%s", want, body)
		}
	}
}

// A node's role in the metadata group, from its member's view of it.
func TestNamespaceRole(t *testing.T) {
	for _, c := range []struct {
		g    broker.GroupStatus
		want string
	}{
		{broker.GroupStatus{}, "joining"},
		{broker.GroupStatus{Status: replica.Status{Voters: []uint64{1, 2, 3}, Learners: []uint64{4}}}, "learner"},
		{broker.GroupStatus{Status: replica.Status{Voters: []uint64{1, 2, 3}, Leader: 1}}, "removed"},
		{broker.GroupStatus{Status: replica.Status{Voters: []uint64{1, 2, 4}, Leader: 4, Serving: true}}, "leader"},
		{broker.GroupStatus{Status: replica.Status{Voters: []uint64{1, 2, 4}, Leader: 1}}, "follower"},
		{broker.GroupStatus{Status: replica.Status{Voters: []uint64{1, 2, 4}}}, ""},
	} {
		if got := namespaceRole(4, c.g); got != c.want {
			t.Errorf("node 4 in %+v: %q, want %q", c.g.Status, got, c.want)
		}
	}
}
