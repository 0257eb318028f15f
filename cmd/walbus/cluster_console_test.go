package main

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"

	"github.com/walbus/walbus/amqpserver/sas"
)

// TestClusterReadsItsWrites: three nodes, and the Go SDK's administration
// client on nodes that do not lead what it changes. What it creates
// through a node it reads back through that node at once, and what it
// deletes is gone there at once: the node that passed the request on
// answers once it applied the change itself. The queue and the topic are
// the metadata group's to create; the subscription and its rule, the
// topic's leader's.
func TestClusterReadsItsWrites(t *testing.T) {
	nodes, certs := startThreeTLS(t, "readback", "--raft-tick", "50ms", "--leader-balance", "0")
	leaderNode(t, nodes, 0) // the file's queue exists and is led
	meta := metaLeader(t, nodes, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := func(id int) *sbadmin.Client {
		return adminClient(t, nodes[id], certs, nodes[id].adminConnString("RootManageSharedAccessKey", "SAS_KEY_VALUE"))
	}

	other := meta%3 + 1
	ac := client(other)
	if _, err := ac.CreateQueue(ctx, "made", nil); err != nil {
		t.Fatalf("create a queue on node %d, which does not lead the metadata group: %v\n%s", other, err, nodes[other].logs())
	}
	if q, err := ac.GetQueue(ctx, "made", nil); err != nil || q == nil {
		t.Fatalf("node %d, right after it created the queue: %+v %v", other, q, err)
	}
	if _, err := ac.DeleteQueue(ctx, "made", nil); err != nil {
		t.Fatalf("delete the queue on node %d: %v", other, err)
	}
	if q, err := ac.GetQueue(ctx, "made", nil); err != nil || q != nil { // nil, nil: not found
		t.Fatalf("node %d, right after it deleted the queue: %+v %v", other, q, err)
	}
	if _, err := ac.CreateTopic(ctx, "news", nil); err != nil {
		t.Fatalf("create a topic on node %d: %v", other, err)
	}
	if got, err := ac.GetTopic(ctx, "news", nil); err != nil || got == nil {
		t.Fatalf("node %d, right after it created the topic: %+v %v", other, got, err)
	}

	news := waitLeads(t, nodes, "news", 0)
	follower := client(news%3 + 1)
	if _, err := follower.CreateSubscription(ctx, "news", "all", nil); err != nil {
		t.Fatalf("create a subscription on node %d, which does not lead the topic: %v", news%3+1, err)
	}
	if s, err := follower.GetSubscription(ctx, "news", "all", nil); err != nil || s == nil {
		t.Fatalf("node %d, right after it created the subscription: %+v %v", news%3+1, s, err)
	}
	rule := &sbadmin.CreateRuleOptions{Name: toPtr("red"), Filter: &sbadmin.SQLFilter{Expression: "colour = 'red'"}}
	if _, err := follower.CreateRule(ctx, "news", "all", rule); err != nil {
		t.Fatalf("create a rule on node %d: %v", news%3+1, err)
	}
	if r, err := follower.GetRule(ctx, "news", "all", "red", nil); err != nil || r == nil {
		t.Fatalf("node %d, right after it created the rule: %+v %v", news%3+1, r, err)
	}
	if _, err := follower.DeleteSubscription(ctx, "news", "all", nil); err != nil {
		t.Fatalf("delete the subscription on node %d: %v", news%3+1, err)
	}
	if s, err := follower.GetSubscription(ctx, "news", "all", nil); err != nil || s != nil {
		t.Fatalf("node %d, right after it deleted the subscription: %+v %v", news%3+1, s, err)
	}
}

// TestClusterForwardsConsole: the console's JSON requests that change an
// entity are passed on to the node that leads it. A message sent through
// a node that does not lead the queue is on the leader's node when the
// answer comes, and a purge through that node removes it there; a
// message too large to be passed on is refused with 503.
func TestClusterForwardsConsole(t *testing.T) {
	nodes, _ := startThreeTLS(t, "console", "--raft-tick", "50ms", "--leader-balance", "0")
	leader := leaderNode(t, nodes, 0)
	follower := nodes[leader%3+1]
	token := sas.Sign("sb://"+follower.http+"/", sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE"},
		time.Now().Add(time.Hour), sas.GoStyle)

	code, out := apiCall(t, follower, "POST", "/$walbus/send/orders",
		map[string]any{"body": "through a follower", "messageId": "m1"}, "Authorization", token)
	if code != 200 || out["sent"] != 1.0 || out["messageId"] != "m1" {
		t.Fatalf("send through node %d, which does not lead the queue: %d %v\n%s", leader%3+1, code, out, follower.logs())
	}
	_, msgs, _ := pageOf(t, nodes[leader], "orders")
	if len(msgs) != 1 || msgs[0]["messageId"] != "m1" ||
		msgs[0]["body"] != base64.StdEncoding.EncodeToString([]byte("through a follower")) {
		t.Fatalf("the queue on the leader's node %d: %v", leader, msgs)
	}

	code, out = apiCall(t, follower, "POST", "/$walbus/purge/orders", nil, "Authorization", token)
	if code != 200 || out["purged"] != 1.0 {
		t.Fatalf("purge through node %d: %d %v", leader%3+1, code, out)
	}
	if _, msgs, _ := pageOf(t, nodes[leader], "orders"); len(msgs) != 0 {
		t.Fatalf("the queue on the leader's node after the purge: %v", msgs)
	}

	// Over a megabyte of JSON: the node does not keep it to send again.
	code, out = apiCall(t, follower, "POST", "/$walbus/send/orders",
		map[string]any{"body": strings.Repeat("x", 1<<20)}, "Authorization", token)
	if errText, _ := out["error"].(string); code != 503 || !strings.Contains(errText, "does not lead") {
		t.Fatalf("a large send through node %d: %d %v", leader%3+1, code, out)
	}
}
