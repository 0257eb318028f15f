package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/walbus/walbus/admin"
)

// TestClusterMetadataProcesses: three nodes, the namespace replicated by
// the metadata group. With the Go SDK's administration client on nodes
// that do not lead the metadata group: a queue, a topic and its
// subscription are created (each request passed on to the node that leads
// the group it changes), every node then holds them, and the queue takes
// a message through the Go SDK and hands it back; the queue is deleted
// through another node and goes from every node. A node killed while a
// queue is created has it once it is back.
func TestClusterMetadataProcesses(t *testing.T) {
	nodes, certs := startThreeTLS(t, "meta", "--raft-tick", "50ms")
	leaderNode(t, nodes, 0) // the file's queue exists and is led
	meta := metaLeader(t, nodes, 0)
	a, b := meta%3+1, (meta+1)%3+1 // the two others
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := func(id int) *sbadmin.Client {
		return adminClient(t, nodes[id], certs, nodes[id].adminConnString("RootManageSharedAccessKey", "SAS_KEY_VALUE"))
	}
	if _, err := client(a).CreateQueue(ctx, "made", nil); err != nil {
		t.Fatalf("create a queue on node %d, which does not lead the metadata group: %v\n%s", a, err, nodes[a].logs())
	}
	if _, err := client(b).CreateTopic(ctx, "news", nil); err != nil {
		t.Fatalf("create a topic on node %d: %v", b, err)
	}
	// The topic's group elects its leader: until then the subscription
	// is refused with 503, which the client retries.
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := client(a).CreateSubscription(ctx, "news", "all", nil)
		if err == nil {
			break
		}
		if statusOf(err) != 503 || time.Now().After(deadline) {
			t.Fatalf("create a subscription on node %d: %v", a, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for id := range nodes {
		waitAdmin(t, "node holds the entities", func() bool {
			_, qerr := client(id).GetQueue(ctx, "made", nil)
			s, serr := client(id).GetSubscription(ctx, "news", "all", nil)
			return qerr == nil && serr == nil && s != nil
		})
	}

	made := waitLeads(t, nodes, "made", 0)
	sb := nodes[made].sdkClient()
	defer sb.Close(ctx)
	sender, err := sb.NewSender("made", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.SendMessage(ctx, &azservicebus.Message{Body: []byte("hello")}, nil); err != nil {
		t.Fatal(err)
	}
	receiver, err := sb.NewReceiverForQueue("made", nil)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := receiver.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(msgs) != 1 || string(msgs[0].Body) != "hello" {
		t.Fatalf("receive: %v %v", msgs, err)
	}
	if err := receiver.CompleteMessage(ctx, msgs[0], nil); err != nil {
		t.Fatal(err)
	}

	if _, err := client(b).DeleteQueue(ctx, "made", nil); err != nil {
		t.Fatalf("delete the queue on node %d: %v", b, err)
	}
	for id := range nodes {
		waitAdmin(t, "the queue gone", func() bool {
			q, err := client(id).GetQueue(ctx, "made", nil) // nil, nil: not found
			return err == nil && q == nil
		})
	}

	// A node down while a queue is created.
	down := a
	nodes[down].kill()
	meta = metaLeader(t, nodes, down)
	if _, err := client(meta).CreateQueue(ctx, "late", nil); err != nil {
		t.Fatal(err)
	}
	nodes[down].start()
	waitAdmin(t, "the node back holds the queue created while it was down", func() bool {
		q, err := client(down).GetQueue(ctx, "late", nil)
		return err == nil && q != nil
	})
}

// startThreeTLS is startThree with a certificate of walbus cert on every
// listener (the Go SDK's administration client speaks only HTTPS), which
// the nodes trust, as the SDKs do, for the requests they pass on to each
// other. It returns the nodes and the certificates' directory.
func startThreeTLS(t *testing.T, name string, args ...string) (map[int]*proc, string) {
	t.Helper()
	certs := t.TempDir()
	if code, _, errOut := runWalbus(t, nil, "cert", "--out", certs); code != 0 {
		t.Fatalf("walbus cert: %d %s", code, errOut)
	}
	t.Setenv("SSL_CERT_FILE", filepath.Join(certs, "ca.pem"))
	args = append(args, "--tls-cert", filepath.Join(certs, "server.pem"), "--tls-key", filepath.Join(certs, "server-key.pem"))
	return startThree(t, name, ordersConfig(t, ""), args...), certs
}

// metaLeader waits for a node other than not whose /health says it leads
// the metadata group.
func metaLeader(t *testing.T, nodes map[int]*proc, not int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for id, p := range nodes {
			if h, err := healthOf(p); id != not && err == nil && h.Cluster != nil && h.Cluster.Namespace == "leader" {
				return id
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no node leads the metadata group")
	return 0
}

// waitLeads waits for a node other than not whose /health says it leads
// the entity called name.
func waitLeads(t *testing.T, nodes map[int]*proc, name string, not int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for id, p := range nodes {
			if h, err := healthOf(p); id != not && err == nil && h.Cluster != nil && slices.Contains(h.Cluster.Leading, name) {
				return id
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no node leads %s", name)
	return 0
}

// waitAdmin waits until ok holds, for 30 s at most.
func waitAdmin(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, not yet: %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClusterMetadataUnderKills: queues are created one after another
// through the administration API of nodes taken in turn, while the node
// that leads the metadata group is killed with -9 every few creations
// and started again. Every creation acknowledged (201, or 409 when asked
// again after an answer that was lost) is then on every node, and the
// nodes agree on every queue's group: no acknowledged creation is lost,
// none is made twice.
func TestClusterMetadataUnderKills(t *testing.T) {
	nodes := startThree(t, "kills", ordersConfig(t, ""), "--raft-tick", "50ms")
	leaderNode(t, nodes, 0)
	var acked []string
	down, refused := 0, 0
	for i := range 36 {
		if i%9 == 4 {
			down = metaLeader(t, nodes, 0)
			nodes[down].kill()
		}
		if i%9 == 7 && down != 0 {
			nodes[down].start()
			down = 0
		}
		id := i%3 + 1
		if id == down {
			id = id%3 + 1
		}
		// Refused while the group elects (503, or the node's connection
		// cut): asked again, of the next node. A creation whose fate was
		// unknown and that was made answers 409 when asked again.
		name := fmt.Sprintf("q%02d", i)
		for try := 0; ; try++ {
			code, body := createQueue(nodes[id], name)
			if code == http.StatusCreated || code == http.StatusConflict {
				acked = append(acked, name)
				break
			}
			refused++
			if code != http.StatusServiceUnavailable && code != 0 || try == 100 {
				t.Fatalf("create %s on node %d: %d %s", name, id, code, body)
			}
			time.Sleep(50 * time.Millisecond)
			if id = id%3 + 1; id == down {
				id = id%3 + 1
			}
		}
	}
	if down != 0 {
		nodes[down].start()
	}
	t.Logf("36 queues created under 4 kills; %d requests refused meanwhile and asked again", refused)
	groups := map[int]map[string]uint64{}
	for id, p := range nodes {
		waitAdmin(t, fmt.Sprintf("node %d holds every queue acknowledged", id), func() bool {
			var st admin.ClusterStatus
			if getJSON(t, "http://"+p.http+"/cluster", &st) != 200 {
				return false
			}
			groups[id] = map[string]uint64{}
			for _, g := range st.Groups {
				groups[id][g.Entity] = g.Group
			}
			for _, name := range acked {
				if _, ok := groups[id][name]; !ok {
					return false
				}
			}
			return true
		})
	}
	for id := 2; id <= 3; id++ {
		if !maps.Equal(groups[id], groups[1]) {
			t.Fatalf("node %d holds the groups %v, node 1 %v", id, groups[id], groups[1])
		}
	}
}

// createQueue creates queue name through p's administration API with
// the root key, and returns the answer's status and body (0 and why when
// p cannot be reached: a node killed meanwhile).
func createQueue(p *proc, name string) (int, string) {
	status, _, body, err := sendQueue(p, name, "")
	if err != nil {
		return 0, err.Error()
	}
	return status, body
}
