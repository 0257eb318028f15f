package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/walbus/walbus/admin"
	"github.com/walbus/walbus/broker"
)

// TestClusterReplaceNode replaces a dead node as an operator would. Three
// processes; the queue's leader holds deferred messages behind a log it
// has cut in front of its snapshots. A follower is killed and its data
// directory wiped. A fourth node starts with --join on an empty
// directory; walbus cluster add makes it a learner of the queue's group,
// which it catches up with from a snapshot, then a voter; walbus cluster
// remove takes the dead node out. The group's voters are then the two
// old nodes and the new one on every node's view; the new node leads
// once the others' turns are over and hands the deferred messages out,
// bodies and all. A second add of the same node changes nothing, a
// remove of a node not in the group neither, and bad flags are usage
// errors. Stopped, every node's data directory passes walbus verify, and
// walbus state, replay and dump read it; walbus compact refuses it.
func TestClusterReplaceNode(t *testing.T) {
	config := ordersConfig(t, "")
	peers := map[int]string{}
	for id := 1; id <= 4; id++ {
		peers[id] = freeAddr(t)
	}
	peerList := func(n int) string {
		var out []string
		for id := 1; id <= n; id++ {
			out = append(out, fmt.Sprintf("%d=%s", id, peers[id]))
		}
		return strings.Join(out, ",")
	}
	nodes := map[int]*proc{}
	for id := 1; id <= 3; id++ {
		nodes[id] = startWalbus(t, t.TempDir(), append([]string{"--config", config, "--cluster", "swap",
			"--node-id", fmt.Sprint(id), "--peers", peerList(3)}, snapshotArgs...)...)
	}
	leader := leaderNode(t, nodes, 0)
	bodies := deferBacklog(t, nodes[leader], 20, 10)

	dead := leader%3 + 1
	nodes[dead].kill()
	if err := os.RemoveAll(nodes[dead].dir); err != nil {
		t.Fatal(err)
	}
	delete(nodes, dead)
	nodes[4] = startWalbus(t, t.TempDir(), append([]string{"--config", config, "--cluster", "swap",
		"--node-id", "4", "--peers", peerList(4), "--join"}, snapshotArgs...)...)
	var https []string
	for _, id := range slices.Sorted(maps.Keys(nodes)) {
		https = append(https, nodes[id].http)
	}
	http := strings.Join(https, ",")

	if h, err := healthOf(nodes[4]); err != nil || h.Cluster == nil || h.Cluster.Namespace != "joining" {
		t.Fatalf("node 4's health before it is added: %+v %v", h.Cluster, err)
	}
	code, out, errOut := runWalbus(t, nil, "cluster", "add", "--node-id", "4", "--peer", peers[4], "--http", http,
		"--timeout", "60s")
	if code != 0 || !strings.Contains(out, "orders: add-learner 4") || !strings.Contains(out, "orders: promote 4") {
		t.Fatalf("cluster add: exit %d\n%s\n%s\n%s", code, out, errOut, nodes[4].logs())
	}
	code, out, errOut = runWalbus(t, nil, "cluster", "remove", "--node-id", fmt.Sprint(dead), "--http", http, "--timeout", "60s")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("orders: remove %d", dead)) ||
		!strings.Contains(out, fmt.Sprintf("%s: remove %d", broker.MetaEntity, dead)) ||
		!strings.Contains(out, fmt.Sprintf("node %d is no longer a peer", dead)) {
		t.Fatalf("cluster remove: exit %d\n%s\n%s", code, out, errOut)
	}
	// Done already: nothing to do, exit 0.
	code, out, errOut = runWalbus(t, nil, "cluster", "add", "--node-id", "4", "--peer", peers[4], "--http", http)
	if code != 0 || strings.Contains(out, "orders:") {
		t.Fatalf("cluster add again: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut = runWalbus(t, nil, "cluster", "remove", "--node-id", "9", "--http", http)
	if code != 0 || strings.Contains(out, "orders:") {
		t.Fatalf("removing a node not in the cluster: exit %d\n%s\n%s", code, out, errOut)
	}

	var want []uint64
	for id := range nodes {
		want = append(want, uint64(id))
	}
	slices.Sort(want)
	for id, p := range nodes {
		var st admin.ClusterStatus
		getJSON(t, "http://"+p.http+"/cluster", &st)
		if len(st.Groups) != 2 {
			t.Fatalf("node %d sees the groups %+v; want the metadata group's and the queue's", id, st.Groups)
		}
		// Node 4's address came from the metadata group to every node;
		// the dead node's went.
		if _, ok := st.Peers[uint64(dead)]; ok || st.Peers[4] != peers[4] {
			t.Fatalf("node %d's peers: %v", id, st.Peers)
		}
		for _, g := range st.Groups {
			if !slices.Equal(g.Voters, want) || len(g.Learners) > 0 {
				t.Fatalf("node %d sees the group as %+v; want voters %v", id, g, want)
			}
		}
	}
	waitSnapshotReceived(t, nodes[4])
	leadOn(t, nodes, 4)
	takeDeferred(t, nodes[4], bodies)

	// The offline tools read each node's data directory as a single
	// node's: its snapshots, log and (on the new node) the archive of the
	// records its snapshot came with.
	for id, p := range nodes {
		if code := p.signal(os.Interrupt); code != 0 {
			t.Fatalf("node %d exited with %d:\n%s", id, code, p.logs())
		}
		if code, out, errOut := runWalbus(t, nil, "verify", "--data", p.dir); code != 0 {
			t.Fatalf("walbus verify on node %d: exit %d\n%s\n%s", id, code, out, errOut)
		}
		code, out, errOut := runWalbus(t, nil, "state", "--data", p.dir, "--entity", "orders")
		if code != 0 || !strings.Contains(out, "deferred") {
			t.Fatalf("walbus state on node %d: exit %d\n%s\n%s", id, code, out, errOut)
		}
		for _, tool := range []string{"replay", "dump"} {
			if code, out, errOut := runWalbus(t, nil, tool, "--data", p.dir); code != 0 {
				t.Fatalf("walbus %s on node %d: exit %d\n%s\n%s", tool, id, code, out, errOut)
			}
		}
		// Compaction offline would cut a log Raft keeps: refused.
		if code, out, errOut := runWalbus(t, nil, "compact", "--data", p.dir); code == 0 || !strings.Contains(errOut, "cluster member") {
			t.Fatalf("walbus compact on node %d: exit %d\n%s\n%s", id, code, out, errOut)
		}
	}

	for _, args := range [][]string{
		{"cluster", "add", "--peer", peers[4], "--http", http},
		{"cluster", "add", "--node-id", "4", "--http", http},
		{"cluster", "remove", "--node-id", "4"},
		{"cluster", "remove", "--node-id", "4", "--http", http, "extra"},
	} {
		if code, _, errOut := runWalbus(t, nil, args...); code != 2 {
			t.Errorf("walbus %s: exit %d, want 2\n%s", strings.Join(args, " "), code, errOut)
		}
	}
}
