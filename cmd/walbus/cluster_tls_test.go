package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walbus/walbus/admin"
)

// TestClusterPeerTLS: three nodes whose peer links are mutual TLS with
// certificates of one authority (walbus cert). Two share it and elect a
// leader that takes sends; the third presents a certificate of another
// authority and is refused both ways, so it never hears of a leader nor
// applies anything. Half the TLS flags is a usage error.
func TestClusterPeerTLS(t *testing.T) {
	ours, theirs := t.TempDir(), t.TempDir()
	for _, dir := range []string{ours, theirs} {
		if code, _, errOut := runWalbus(t, nil, "cert", "--out", dir, "--host", "127.0.0.1"); code != 0 {
			t.Fatalf("walbus cert: %d %s", code, errOut)
		}
	}
	tlsArgs := func(dir string) []string {
		return []string{"--peer-tls-cert", filepath.Join(dir, "server.pem"), "--peer-tls-key", filepath.Join(dir, "server-key.pem"),
			"--peer-tls-ca", filepath.Join(dir, "ca.pem")}
	}
	config := ordersConfig(t, "")
	var peers []string
	for id := 1; id <= 3; id++ {
		peers = append(peers, fmt.Sprintf("%d=%s", id, freeAddr(t)))
	}
	nodes := map[int]*proc{}
	for id := 1; id <= 3; id++ {
		dir := ours
		if id == 3 {
			dir = theirs
		}
		nodes[id] = startWalbus(t, t.TempDir(), append([]string{"--config", config, "--cluster", "tls", "--node-id", fmt.Sprint(id),
			"--peers", strings.Join(peers, ","), "--raft-tick", "50ms"}, tlsArgs(dir)...)...)
	}
	outsider := nodes[3]
	delete(nodes, 3)
	leader := leaderNode(t, nodes, 0)
	ctx := context.Background()
	client := nodes[leader].sdkClient()
	defer client.Close(ctx)
	sender, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := sender.SendMessage(ctx, &azservicebus.Message{Body: fmt.Appendf(nil, "m%d", i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Raft would have told the outsider of the leader within a heartbeat;
	// give it many elections' worth.
	time.Sleep(2 * time.Second)
	var st admin.ClusterStatus
	getJSON(t, "http://"+outsider.http+"/cluster", &st)
	// It holds the metadata group's member alone, which heard of no
	// leader, so it never learned of the queue.
	if len(st.Groups) != 1 || st.Groups[0].Leader != 0 || st.Groups[0].Commit > 3 {
		t.Fatalf("the node of another authority took part: %+v\n%s", st.Groups, outsider.logs())
	}
	getJSON(t, "http://"+nodes[leader].http+"/cluster", &st)
	if pr := st.Groups[1].Progress[3]; st.Groups[1].Entity != "orders" || pr.Match != 0 {
		t.Fatalf("the leader's view of the outsider: %+v", pr)
	}

	code, _, errOut := runWalbus(t, nil, "serve", "--data", t.TempDir(), "--amqp", "127.0.0.1:0", "--http", "",
		"--cluster", "tls", "--node-id", "1", "--peers", strings.Join(peers, ","), "--peer-tls-cert", filepath.Join(ours, "server.pem"))
	if code != 2 || !strings.Contains(errOut, "--peer-tls-ca") {
		t.Fatalf("half the TLS flags: exit %d, %s", code, errOut)
	}
}
