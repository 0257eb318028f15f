package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// TestClusterFailover kills the queue's leader with SIGKILL, again and
// again, and after each kill sends through the Go SDK to whichever node
// leads next until a send is acknowledged; then it starts the killed node
// again. It asserts that every kill is followed by an acknowledged send
// on another node, and logs the failover times (kill to first
// acknowledged send): their median and worst are the figures in
// docs/cluster.md. Three kills in make test; WALBUS_FAILOVER_KILLS=20
// measures.
func TestClusterFailover(t *testing.T) {
	kills := 3
	if s := os.Getenv("WALBUS_FAILOVER_KILLS"); s != "" {
		fmt.Sscan(s, &kills)
	}
	ctx := context.Background()
	nodes := startThree(t, "failover", ordersConfig(t, ""))
	h := newHistory(nodes)
	var took []time.Duration
	for k := range kills {
		leader := leaderNode(t, nodes, 0)
		nodes[leader].kill()
		start := time.Now()
		for n := 0; ; n++ {
			if time.Since(start) > time.Minute {
				t.Fatalf("kill %d: no send acknowledged a minute after the leader %d was killed", k, leader)
			}
			next := h.leader()
			if next == 0 || next == leader {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			c := h.client(next)
			s, err := c.NewSender("orders", nil)
			if err == nil {
				sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				err = s.SendMessage(sctx, &azservicebus.Message{Body: []byte(fmt.Sprintf("after kill %d", k))}, nil)
				cancel()
			}
			c.Close(ctx)
			if err == nil {
				took = append(took, time.Since(start))
				break
			}
		}
		nodes[leader].start()
	}
	slices.Sort(took)
	t.Logf("failover (kill -9 of the leader to the first acknowledged send) over %d kills: median %v, worst %v, all %v",
		len(took), took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), took)
}
