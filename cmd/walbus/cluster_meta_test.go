package main

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
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
	certs := t.TempDir()
	if code, _, errOut := runWalbus(t, nil, "cert", "--out", certs); code != 0 {
		t.Fatalf("walbus cert: %d %s", code, errOut)
	}
	t.Setenv("SSL_CERT_FILE", filepath.Join(certs, "ca.pem")) // the nodes pass requests on over HTTPS
	nodes := startThree(t, "meta", ordersConfig(t, ""), "--raft-tick", "50ms",
		"--tls-cert", filepath.Join(certs, "server.pem"), "--tls-key", filepath.Join(certs, "server-key.pem"))
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
