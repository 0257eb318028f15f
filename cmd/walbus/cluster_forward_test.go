package main

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/admin"
	"github.com/walbus/walbus/amqpserver/sas"
)

// TestClusterForwardsAdmin runs three nodes with a certificate (the Go
// SDK's administration client speaks only HTTPS) and changes the queue's
// settings with that client through a node that does not lead the queue:
// the node passes the request on to the leader's node, over HTTPS to the
// URL the leader advertised, and the leader's node then shows the change.
// A request another node passed on already is not passed on again: the
// follower answers it 503 with Retry-After.
func TestClusterForwardsAdmin(t *testing.T) {
	// No leader balancing: the queue's leader stays where it was found.
	nodes, certs := startThreeTLS(t, "forward", "--raft-tick", "50ms", "--leader-balance", "0")
	leader := leaderNode(t, nodes, 0)
	follower := leader%3 + 1

	// Every node knows its own URL, derived from --http and the
	// certificate, and the leader's, from its hellos; the leader, whose
	// followers answer it, knows all three.
	urlOf := func(id int) string { return "https://" + nodes[id].http }
	for id, p := range nodes {
		knows := []int{id, leader}
		if id == leader {
			knows = []int{1, 2, 3}
		}
		var st admin.ClusterStatus
		if code := getJSON(t, "http://"+p.http+"/cluster", &st); code != 200 {
			t.Fatalf("GET /cluster on node %d: %d", id, code)
		}
		for _, k := range knows {
			if st.HTTP[uint64(k)] != urlOf(k) {
				t.Fatalf("node %d has %q for node %d, want %q: %+v", id, st.HTTP[uint64(k)], k, urlOf(k), st.HTTP)
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := func(id int) string { return nodes[id].adminConnString("RootManageSharedAccessKey", "SAS_KEY_VALUE") }
	ac := adminClient(t, nodes[follower], certs, root(follower))
	got, err := ac.GetQueue(ctx, "orders", nil)
	if err != nil || got == nil {
		t.Fatalf("get the queue on node %d: %+v %v", follower, got, err)
	}
	if *got.MaxDeliveryCount == 3 || *got.LockDuration == "PT45S" {
		t.Fatalf("the queue has the settings the test gives it already: %+v", got.QueueProperties)
	}
	props := got.QueueProperties
	props.MaxDeliveryCount, props.LockDuration = toPtr[int32](3), toPtr("PT45S")
	updated, err := ac.UpdateQueue(ctx, "orders", props, nil)
	if err != nil {
		t.Fatalf("update the queue on node %d, which does not lead it: %v\n%s", follower, err, nodes[follower].logs())
	}
	if *updated.MaxDeliveryCount != 3 || *updated.LockDuration != "PT45S" {
		t.Fatalf("the update answered %+v", updated.QueueProperties)
	}
	onLeader, err := adminClient(t, nodes[leader], certs, root(leader)).GetQueue(ctx, "orders", nil)
	if err != nil || onLeader == nil || *onLeader.MaxDeliveryCount != 3 || *onLeader.LockDuration != "PT45S" {
		t.Fatalf("the queue on the leader's node %d: %+v %v", leader, onLeader, err)
	}
	// The follower did not take the lead meanwhile: the request went to
	// the leader's node.
	if h, err := healthOf(nodes[follower]); err != nil || h.Cluster == nil || slices.Contains(h.Cluster.Leading, "orders") {
		t.Fatalf("node %d's health: %+v %v", follower, h, err)
	}

	status, header, body := putQueue(t, nodes[follower], "orders", "<MaxDeliveryCount>4</MaxDeliveryCount>",
		"X-Walbus-Forwarded", "9")
	if status != http.StatusServiceUnavailable || header.Get("Retry-After") != "1" || !strings.Contains(body, "does not lead") {
		t.Fatalf("an update passed on already, on a node that does not lead: %d %v %s", status, header, body)
	}
	status, _, body = putQueue(t, nodes[follower], "orders", "<MaxDeliveryCount>4</MaxDeliveryCount>")
	if status != http.StatusOK || !strings.Contains(body, "<MaxDeliveryCount>4</MaxDeliveryCount>") {
		t.Fatalf("an update on a node that does not lead: %d %s", status, body)
	}
}

// putQueue updates queue name on p with a plain HTTP request of the root
// key, its description's elements those given, with the headers given as
// name, value pairs.
func putQueue(t *testing.T, p *proc, name, elements string, header ...string) (int, http.Header, string) {
	t.Helper()
	status, h, body, err := sendQueue(p, name, elements, append([]string{"If-Match", "*"}, header...)...)
	if err != nil {
		t.Fatal(err)
	}
	return status, h, body
}

// sendQueue puts a description of queue name, its elements those given,
// to p's administration API with the root key and the headers given as
// name, value pairs: a creation, or with If-Match an update. It fails when
// p cannot be reached.
func sendQueue(p *proc, name, elements string, header ...string) (int, http.Header, string, error) {
	doc := `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription ` +
		`xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect">` + elements +
		`</QueueDescription></content></entry>`
	req, err := http.NewRequest(http.MethodPut, "http://"+p.http+"/"+name, strings.NewReader(doc))
	if err != nil {
		return 0, nil, "", err
	}
	req.Header.Set("Authorization", sas.Sign("sb://"+p.http+"/", sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE"},
		time.Now().Add(time.Hour), sas.GoStyle))
	req.Header.Set("Content-Type", "application/atom+xml")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b), nil
}

// TestAdvertisedHTTP: the URL a node advertises is --advertise-http, or
// else made of the HTTP listener's: https with a certificate, --http's
// host unless it names none (then the peer address's), the port bound.
func TestAdvertisedHTTP(t *testing.T) {
	for _, c := range []struct {
		advertise, httpFlag, bound, peer string
		tls                              bool
		want                             string
	}{
		{"http://lb.example:80", "127.0.0.1:5300", "127.0.0.1:5300", "10.0.0.5:7000", true, "http://lb.example:80"},
		{"", "", "", "10.0.0.5:7000", false, ""},
		{"", "127.0.0.1:0", "127.0.0.1:41234", "127.0.0.1:7000", false, "http://127.0.0.1:41234"},
		{"", "node1.example:5300", "10.0.0.5:5300", "10.0.0.5:7000", true, "https://node1.example:5300"},
		{"", ":5300", "[::]:5300", "10.0.0.5:7000", true, "https://10.0.0.5:5300"},
		{"", "0.0.0.0:5300", "0.0.0.0:5300", "node1.example:7000", false, "http://node1.example:5300"},
		{"", "[::]:5300", "[::]:5300", "[fd00::5]:7000", false, "http://[fd00::5]:5300"},
	} {
		cfg := &clusterConfig{node: 1, nodes: map[uint64]string{1: c.peer, 2: "10.0.0.6:7000"}, advertise: c.advertise}
		if got := cfg.httpURL(c.httpFlag, c.bound, c.tls); got != c.want {
			t.Errorf("--advertise-http %q, --http %q bound at %s, peer address %s, TLS %v: %q, want %q",
				c.advertise, c.httpFlag, c.bound, c.peer, c.tls, got, c.want)
		}
	}
	for in, want := range map[string]string{
		"http://10.0.0.5:9090":     "http://10.0.0.5:9090",
		"https://node1.example/":   "https://node1.example",
		"http://[fd00::5]:5300":    "http://[fd00::5]:5300",
		"10.0.0.5:9090":            "",
		"ftp://node1.example":      "",
		"http://":                  "",
		"http://:5300":             "",
		"http://node1.example/api": "",
		"http://node1.example?a=b": "",
		"http://u:p@node1.example": "",
		"http://" + strings.Repeat("a", 1020) + ".example": "",
	} {
		got, err := checkNodeURL(in)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("--advertise-http %q: %q, %v; want %q", in, got, err, want)
		}
	}
	code, _, errOut := runWalbus(t, nil, "serve", "--data", t.TempDir(), "--amqp", "127.0.0.1:0", "--http", "",
		"--cluster", "c", "--node-id", "1", "--peers", "1=127.0.0.1:1,2=127.0.0.1:2,3=127.0.0.1:3", "--advertise-http", "node1:5300")
	if code != 2 || !strings.Contains(errOut, "--advertise-http") {
		t.Fatalf("a bad --advertise-http: exit %d, %s", code, errOut)
	}
}
