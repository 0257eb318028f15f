package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// TestClusterProcesses runs three walbus serve --cluster processes on
// loopback. The queue's leader (as /health names it) takes 40 sends from
// the Go SDK, and a follower one more, which it passes on to the leader.
// The leader is killed with SIGKILL; another node leads within a few
// elections, and the Go SDK receives all 41 there, with the
// SequenceNumbers they had, and completes them. The killed node starts
// again, catches up from the others' logs, and shows the queue empty.
func TestClusterProcesses(t *testing.T) {
	ctx := context.Background()
	nodes := startThree(t, "test", ordersConfig(t, ""), "--raft-tick", "50ms")
	leader := leaderNode(t, nodes, 0)

	client := nodes[leader].sdkClient()
	sender, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if err := sender.SendMessage(ctx, &azservicebus.Message{MessageID: toPtr(fmt.Sprintf("m%d", i)),
			Body: fmt.Appendf(nil, "body %d", i)}, nil); err != nil {
			t.Fatalf("send %d to the leader: %v", i, err)
		}
	}

	// A follower passes a send on to the leader (docs/cluster.md, "Clients:
	// any node, proxied to leaders").
	follower := leader%3 + 1
	fc := nodes[follower].sdkClient()
	fs, err := fc.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.SendMessage(ctx, &azservicebus.Message{MessageID: toPtr("m40"), Body: []byte("body 40")}, nil); err != nil {
		t.Fatalf("a send to a follower: %v", err)
	}
	fc.Close(ctx)

	peeker, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	before, err := peeker.PeekMessages(ctx, 100, nil)
	if err != nil || len(before) != 41 {
		t.Fatalf("peek on the leader: %d messages, %v", len(before), err)
	}
	client.Close(ctx)

	got := receiveAfterFailover(t, ctx, nodes, leader, 41)
	slices.SortFunc(got, func(a, b *azservicebus.ReceivedMessage) int { return int(*a.SequenceNumber - *b.SequenceNumber) })
	for i, m := range got {
		if m.MessageID != before[i].MessageID || *m.SequenceNumber != *before[i].SequenceNumber ||
			string(m.Body) != string(before[i].Body) {
			t.Fatalf("message %d after the failover: %s #%d %q, before it %s #%d %q", i, m.MessageID, *m.SequenceNumber,
				m.Body, before[i].MessageID, *before[i].SequenceNumber, before[i].Body)
		}
	}

	// The killed node comes back and catches up: its console's overview
	// (which reads the committed state a follower holds) shows the 41
	// sends applied and the queue empty.
	nodes[leader].start()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sent, active := queueFigures(t, nodes[leader], "orders")
		if sent == 41 && active == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted node shows %v sent, %v active:\n%s", sent, active, nodes[leader].logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// receiveAfterFailover kills the queue's leader, and receives n messages
// from the queue at the node that leads it next.
func receiveAfterFailover(t *testing.T, ctx context.Context, nodes map[int]*proc, leader, n int) []*azservicebus.ReceivedMessage {
	t.Helper()
	nodes[leader].kill()
	client := nodes[leaderNode(t, nodes, leader)].sdkClient()
	defer client.Close(ctx)
	receiver, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return receiveAll(t, rctx, receiver, n)
}

// queueFigures is what p's console overview says of queue name: the
// messages it took since p started (a restarted node counts those it
// applies again) and those active now.
func queueFigures(t *testing.T, p *proc, name string) (sent, active float64) {
	t.Helper()
	status, body := consoleCall(t, p, "GET", "/$walbus/overview", nil)
	if status != 200 {
		return -1, -1
	}
	list, _ := body["entities"].([]any)
	for _, v := range list {
		e, _ := v.(map[string]any)
		if e["path"] == name {
			counts, _ := e["counts"].(map[string]any)
			sent, _ = e["sent"].(float64)
			active, _ = counts["active"].(float64)
			return sent, active
		}
	}
	return -1, -1
}

// ordersConfig writes a Config.json that creates the queue orders, with
// properties if not "" (JSON), and returns its path.
func ordersConfig(t *testing.T, properties string) string {
	t.Helper()
	queue := `{"Name": "orders"}`
	if properties != "" {
		queue = `{"Name": "orders", "Properties": ` + properties + `}`
	}
	path := filepath.Join(t.TempDir(), "Config.json")
	body := `{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [` + queue + `]}]}}`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// startThree starts the three nodes of cluster name on loopback, each on
// a data directory of its own with config, and args added.
func startThree(t *testing.T, name, config string, args ...string) map[int]*proc {
	t.Helper()
	var peers []string
	for id := 1; id <= 3; id++ {
		peers = append(peers, fmt.Sprintf("%d=%s", id, freeAddr(t)))
	}
	nodes := map[int]*proc{}
	for id := 1; id <= 3; id++ {
		nodes[id] = startWalbus(t, t.TempDir(), append([]string{"--config", config, "--cluster", name,
			"--node-id", fmt.Sprint(id), "--peers", strings.Join(peers, ",")}, args...)...)
	}
	return nodes
}

// freeAddr is a loopback address with a port nothing listens on now,
// for a node to listen at later (its peers must know the address before
// it starts). The port comes from below the kernel's ephemeral range:
// ports from ":0" and outgoing connections are drawn from that range, so
// one of them could take a port chosen there before the node binds it
// (CI saw it), or while a killed node is down. Ports are not handed out
// twice in one test process.
func freeAddr(t *testing.T) string {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var lo, hi int
		if n, _ := fmt.Sscan(string(b), &lo, &hi); n == 2 && lo > 12000 {
			low = lo
		}
	}
	freePorts.Lock()
	defer freePorts.Unlock()
	for range 1000 {
		port := 10000 + rand.IntN(low-10000)
		if freePorts.given[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		freePorts.given[port] = true
		return ln.Addr().String()
	}
	t.Fatal("no free port below the ephemeral range")
	return ""
}

// freePorts are the ports freeAddr gave.
var freePorts = struct {
	sync.Mutex
	given map[int]bool
}{given: map[int]bool{}}

type clusterHealth struct {
	Status  string `json:"status"`
	Cluster *struct {
		Node      uint64   `json:"node"`
		Leading   []string `json:"leading"`
		Namespace string   `json:"namespace"`
	} `json:"cluster"`
}

func healthOf(p *proc) (clusterHealth, error) { return healthAt(p.http) }

// healthAt reads /health at an HTTP address.
func healthAt(addr string) (clusterHealth, error) {
	var h clusterHealth
	// A short timeout: a paused node (SIGSTOP) must not hold the caller.
	client := &http.Client{Timeout: time.Second}
	resp, err := client.Get("http://" + addr + "/health")
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&h)
	return h, err
}

// leaderNode waits for a node other than not whose /health says it leads
// the queue.
func leaderNode(t *testing.T, nodes map[int]*proc, not int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for id, p := range nodes {
			if id == not {
				continue
			}
			if h, err := healthOf(p); err == nil && h.Cluster != nil && slices.Contains(h.Cluster.Leading, "orders") {
				return id
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no node leads the queue")
	return 0
}
