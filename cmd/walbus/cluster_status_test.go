package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walbus/walbus/admin"
	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/broker/replica"
)

// TestClusterStatus runs three nodes, sends to the queue's leader, and
// reads the cluster as an operator does: walbus cluster status (as a
// table and as JSON), GET /cluster, the roles in /health and the Raft
// figures in /metrics. The leader is then killed with SIGKILL: cluster
// status names it as not answering, and the new leader in a later term.
func TestClusterStatus(t *testing.T) {
	ctx := context.Background()
	nodes := startThree(t, "status", ordersConfig(t, ""), "--raft-tick", "50ms")
	leader := leaderNode(t, nodes, 0)
	client := nodes[leader].sdkClient()
	sender, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "body %d", i)}, nil); err != nil {
			t.Fatalf("send %d to the leader: %v", i, err)
		}
	}
	client.Close(ctx)
	all := []string{nodes[1].http, nodes[2].http, nodes[3].http}

	// Followers learn the commit index with the leader's next message:
	// wait until every node has applied it and the leader replicates to
	// both followers. The nodes are named both ways --http takes them.
	report := awaitReport(t, []string{"--http", all[0], "--http", all[1] + "," + all[2]}, func(r clusterReport) bool {
		g := r.group("orders")
		if r.Answered != 3 || g == nil || len(g.Replicas) != 3 {
			return false
		}
		for _, rep := range g.Replicas {
			if !rep.Answered || *rep.Lag != 0 || rep.Progress == nil || rep.Progress.State != "replicate" ||
				rep.Progress.Match < g.Commit {
				return false
			}
		}
		return true
	})
	g := report.group("orders")
	if report.Cluster != "status" || len(report.Members) != 3 || len(report.NotAnswering) != 0 {
		t.Fatalf("report: %+v", report)
	}
	for _, m := range report.Members {
		if !m.Answered || m.HTTP != nodes[int(m.Node)].http || m.Peer == "" {
			t.Fatalf("member %+v; node %d is at %s", m, m.Node, nodes[int(m.Node)].http)
		}
	}
	if g.Leader != uint64(leader) || g.Term == 0 || g.Commit < 5 {
		t.Fatalf("group %+v; node %d leads, 5 sends committed", g, leader)
	}
	for _, rep := range g.Replicas {
		if rep.Term != g.Term || *rep.Applied != g.Commit {
			t.Fatalf("replica %+v of group %+v", rep, g)
		}
		if want := map[bool]string{true: "leader", false: "follower"}[rep.Node == uint64(leader)]; rep.Role != want {
			t.Fatalf("node %d is %s, want %s", rep.Node, rep.Role, want)
		}
	}

	// The table: the members, then the queue's row.
	code, out, stderr := runWalbus(t, nil, "cluster", "status", "--http", strings.Join(all, ","))
	t.Logf("walbus cluster status:\n%s", out)
	if code != 0 || stderr != "" || !strings.Contains(out, "cluster status: 3 of 3 nodes asked answered") {
		t.Fatalf("cluster status: exit %d\n%s%s", code, out, stderr)
	}
	for id := 1; id <= 3; id++ {
		if row := tableRow(out, fmt.Sprint(id)); len(row) != 4 || row[2] != nodes[id].http || row[3] != "yes" {
			t.Fatalf("member %d's row %q in:\n%s", id, row, out)
		}
	}
	row := tableRow(out, "orders")
	if len(row) != 8 || row[2] != fmt.Sprint(leader) || row[3] != fmt.Sprint(g.Term) || row[4] != fmt.Sprint(g.Commit) {
		t.Fatalf("the queue's row %q in:\n%s", row, out)
	}
	for id := 1; id <= 3; id++ {
		want := fmt.Sprintf("%d (lag 0) replicate", g.Commit)
		if id == leader {
			want = fmt.Sprintf("%d (lag 0) leader", g.Commit)
		}
		if row[4+id] != want {
			t.Fatalf("node %d's cell %q, want %q:\n%s", id, row[4+id], want, out)
		}
	}

	// GET /cluster on each node: its own view.
	for id, p := range nodes {
		var st admin.ClusterStatus
		if code := getJSON(t, "http://"+p.http+"/cluster", &st); code != 200 {
			t.Fatalf("GET /cluster on node %d: %d", id, code)
		}
		if st.Node != uint64(id) || st.Cluster != "status" || len(st.Peers) != 3 || len(st.Groups) != 2 ||
			st.Groups[0].Entity != broker.MetaEntity || st.Groups[0].Leader == 0 {
			t.Fatalf("node %d's /cluster: %+v", id, st)
		}
		o := st.Groups[1]
		if o.Entity != "orders" || o.Group == 0 || o.ID != uint64(id) || o.Leader != uint64(leader) || o.Term != g.Term {
			t.Fatalf("node %d's group: %+v", id, o)
		}
		if id == leader && (o.Role != "leader" || !o.Serving || len(o.Progress) != 3) ||
			id != leader && (o.Role != "follower" || o.Serving || o.Progress != nil) {
			t.Fatalf("node %d (node %d leads): %+v", id, leader, o)
		}
	}

	// /health: the role of each node.
	for id, p := range nodes {
		var h struct{ Cluster admin.ClusterHealth }
		if code := getJSON(t, "http://"+p.http+"/health", &h); code != 200 {
			t.Fatalf("GET /health on node %d: %d", id, code)
		}
		c := h.Cluster
		if id == leader && (c.Role != "leader" || !slices.Equal(c.Leading, []string{"orders"}) || len(c.Following) != 0) ||
			id != leader && (c.Role != "follower" || len(c.Leading) != 0 || !slices.Equal(c.Following, []string{"orders"})) {
			t.Fatalf("node %d's health (node %d leads): %+v", id, leader, c)
		}
	}

	// /metrics: the Raft figures.
	elections := 0.0
	for id, p := range nodes {
		text := getText(t, "http://"+p.http+"/metrics")
		want := map[bool]float64{true: 1, false: 0}[id == leader]
		if v := metricValue(t, text, `walbus_raft_leader{entity="orders"}`); v != want {
			t.Fatalf("node %d: walbus_raft_leader %v, want %v", id, v, want)
		}
		if v := metricValue(t, text, `walbus_raft_term{entity="orders"}`); v != float64(g.Term) {
			t.Fatalf("node %d: walbus_raft_term %v, want %d", id, v, g.Term)
		}
		if commit, applied := metricValue(t, text, `walbus_raft_commit_index{entity="orders"}`),
			metricValue(t, text, `walbus_raft_applied_index{entity="orders"}`); commit < float64(g.Commit) || applied > commit ||
			metricValue(t, text, `walbus_raft_apply_lag{entity="orders"}`) != commit-applied {
			t.Fatalf("node %d: commit %v, applied %v; the group committed %d", id, commit, applied, g.Commit)
		}
		elections += metricValue(t, text, "walbus_raft_elections_total")
		metricValue(t, text, "walbus_raft_leader_changes_total")
		// Five sends, each its own append (the SDK waits for each).
		if n := metricValue(t, text, "walbus_raft_commit_duration_seconds_count"); id == leader && n < 5 {
			t.Fatalf("node %d, the leader: %v commits timed", id, n)
		}
	}
	if elections < 1 {
		t.Fatal("no node counts an election")
	}

	// The leader dies: it does not answer, and another leads in a later
	// term.
	nodes[leader].kill()
	next := leaderNode(t, nodes, leader)
	report = awaitReport(t, []string{"--http", strings.Join(all, ",")}, func(r clusterReport) bool {
		g := r.group("orders")
		return g != nil && g.Leader == uint64(next)
	})
	if report.Answered != 2 || len(report.NotAnswering) != 1 || report.NotAnswering[0].HTTP != nodes[leader].http ||
		report.group("orders").Term <= g.Term {
		t.Fatalf("after node %d's death: %+v", leader, report)
	}
	code, out, stderr = runWalbus(t, nil, "cluster", "status", "--http", strings.Join(all, ","))
	t.Logf("walbus cluster status, node %d killed:\n%s", leader, out)
	if code != 0 || !strings.Contains(out, "cluster status: 2 of 3 nodes asked answered") ||
		!strings.Contains(out, "not answering: "+nodes[leader].http+" (") {
		t.Fatalf("cluster status after node %d's death: exit %d\n%s%s", leader, code, out, stderr)
	}
	if row := tableRow(out, fmt.Sprint(leader)); len(row) != 4 || row[2] != "-" || row[3] != "no" {
		t.Fatalf("the dead member's row %q in:\n%s", row, out)
	}
	row = tableRow(out, "orders")
	if len(row) != 8 || row[2] != fmt.Sprint(next) || !strings.HasPrefix(row[4+leader], "?") {
		t.Fatalf("the queue's row %q after node %d's death, node %d leads:\n%s", row, leader, next, out)
	}
}

// TestClusterStatusUsage: usage errors exit 2, a report with no answer 1,
// and a single node has no /cluster and no Raft figures.
func TestClusterStatusUsage(t *testing.T) {
	single := startWalbus(t, t.TempDir())
	nobody := freeAddr(t)
	for _, c := range []struct {
		name   string
		args   []string
		code   int
		output string // expected in stdout+stderr
	}{
		{"no command", []string{"cluster"}, 2, "Usage:"},
		{"unknown command", []string{"cluster", "frobnicate"}, 2, `unknown command "frobnicate"`},
		{"help", []string{"cluster", "status", "--help"}, 0, "-json"},
		{"no nodes", []string{"cluster", "status"}, 2, "name at least one node: --http"},
		{"an empty address", []string{"cluster", "status", "--http", "127.0.0.1:1,"}, 2, "an empty address"},
		{"an argument", []string{"cluster", "status", "--http", "127.0.0.1:1", "orders"}, 2, `unexpected argument "orders"`},
		{"unknown flag", []string{"cluster", "status", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{"nobody answers", []string{"cluster", "status", "--http", nobody}, 1, "not answering: " + nobody + " ("},
		{"a single node", []string{"cluster", "status", "--http", single.http}, 1, "404: not a node of a cluster"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runWalbus(t, nil, c.args...)
			if code != c.code || !strings.Contains(stdout+stderr, c.output) {
				t.Fatalf("exit %d (want %d); output does not contain %q:\n%s%s", code, c.code, c.output, stdout, stderr)
			}
		})
	}
	if text := getText(t, "http://"+single.http+"/metrics"); strings.Contains(text, "walbus_raft_") {
		t.Fatalf("a single node shows Raft figures:\n%s", text)
	}
}

// awaitReport runs walbus cluster status --json with args until its
// report is what done wants, for up to 15 s.
func awaitReport(t *testing.T, args []string, done func(clusterReport) bool) clusterReport {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := statusJSON(t, 0, args...)
		if done(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster status did not come to what the test waits for: %+v", r)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// statusJSON runs walbus cluster status --json with args and decodes its
// report; the run must exit with code.
func statusJSON(t *testing.T, code int, args ...string) clusterReport {
	t.Helper()
	got, out, stderr := runWalbus(t, nil, append([]string{"cluster", "status", "--json"}, args...)...)
	var r clusterReport
	if err := json.Unmarshal([]byte(out), &r); got != code || err != nil {
		t.Fatalf("cluster status --json: exit %d (want %d), %v\n%s%s", got, code, err, out, stderr)
	}
	return r
}

// group is the report's group of entity, nil if none.
func (r clusterReport) group(entity string) *groupReport {
	for i := range r.Groups {
		if r.Groups[i].Entity == entity {
			return &r.Groups[i]
		}
	}
	return nil
}

// tableRow is the cells of the first row of a printed table whose first
// cell is first (cells are two spaces or more apart).
func tableRow(out, first string) []string {
	for line := range strings.SplitSeq(out, "\n") {
		cells := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
		if cells[0] == first {
			return cells
		}
	}
	return nil
}

// getJSON decodes the JSON at url into v and returns the status code.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil && resp.StatusCode == 200 {
		t.Fatalf("%s: %v", url, err)
	}
	return resp.StatusCode
}

// mergeClusterAnswers takes a group's leader from the highest term any
// node knows (a leader deposed in an older term is not it), its commit
// from the leader when it answered and the highest known otherwise, and
// says where nodes disagree on the cluster.
func TestMergeClusterAnswers(t *testing.T) {
	peers := map[uint64]string{1: "p1", 2: "p2", 3: "p3"}
	view := func(id, leader, term, commit, applied uint64, role string) broker.GroupStatus {
		return broker.GroupStatus{Entity: "orders", Group: 1, Status: replica.Status{ID: id, Leader: leader, Term: term,
			Role: role, Serving: role == "leader", Commit: commit, Applied: applied}}
	}
	answer := func(id uint64, cluster string, g broker.GroupStatus) nodeAnswer {
		return nodeAnswer{http: fmt.Sprint("h", id), status: &admin.ClusterStatus{Node: id, Cluster: cluster, Peers: peers,
			Groups: []broker.GroupStatus{g}}}
	}
	deposed := view(1, 1, 2, 40, 40, "leader")
	leader := view(2, 2, 3, 45, 44, "leader")
	leader.Progress = map[uint64]replica.Progress{1: {Match: 30, State: "probe"}, 2: {Match: 45, State: "replicate", Active: true},
		3: {Match: 45, State: "replicate", Active: true}}
	follower := view(3, 2, 3, 43, 41, "follower")

	r := mergeClusterAnswers([]nodeAnswer{answer(1, "demo", deposed), answer(2, "demo", leader), answer(3, "demo", follower)})
	g := r.group("orders")
	if r.Answered != 3 || len(r.Warnings) != 0 || g.Leader != 2 || g.Term != 3 || g.Commit != 45 || len(g.Replicas) != 3 {
		t.Fatalf("all three answer: %+v %+v", r, g)
	}
	var cells []string
	for _, rep := range g.Replicas {
		cells = append(cells, replicaCell(rep, *g))
	}
	want := []string{"40 (lag 5) probe, inactive in term 2", "44 (lag 1) leader", "41 (lag 4) replicate"}
	if !slices.Equal(cells, want) {
		t.Fatalf("cells %q, want %q", cells, want)
	}

	// Without the leader's answer: its follower names it, the commit is
	// the highest known, and nobody's progress is known.
	r = mergeClusterAnswers([]nodeAnswer{answer(1, "demo", deposed), {http: "h2", err: errors.New("refused")},
		answer(3, "other", follower)})
	g = r.group("orders")
	if r.Answered != 2 || len(r.NotAnswering) != 1 || len(r.Warnings) != 1 || g.Leader != 2 || g.Commit != 43 ||
		len(g.Replicas) != 2 || g.Replicas[0].Progress != nil || *g.Replicas[0].Lag != 3 {
		t.Fatalf("without the leader: %+v %+v", r, g)
	}
	if len(r.Members) != 3 || r.Members[1].Answered || r.Members[1].Peer != "p2" {
		t.Fatalf("members: %+v", r.Members)
	}
}

// entityGroups is gs without the metadata group's.
func entityGroups(gs []broker.GroupStatus) []broker.GroupStatus {
	return slices.DeleteFunc(slices.Clone(gs), func(g broker.GroupStatus) bool { return g.Entity == broker.MetaEntity })
}
