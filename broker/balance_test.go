package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/walbus/walbus/projection"
)

// TestClusterLeadersSpread: six queues on three nodes, every group's
// leadership first handed to node 1. The balancer, run on every node,
// spreads them until each node leads two.
func TestClusterLeadersSpread(t *testing.T) {
	c := newCluster(t)
	names := []string{"orders"}
	for i := range 5 {
		name := fmt.Sprintf("q%d", i)
		names = append(names, name)
		c.create(name, func(b *Broker) error {
			_, err := b.CreateQueue(name, projection.DefaultConfig())
			return err
		})
	}
	leaders := func() map[uint64]int {
		led := map[uint64]int{}
		for id := uint64(1); id <= 3; id++ {
			for _, g := range c.broker(id).ClusterStatus() {
				if g.Role == "leader" && g.Serving && g.Entity != MetaEntity {
					led[id]++
				}
			}
		}
		return led
	}
	wait := func(what string, ok func(map[uint64]int) bool, each func()) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			led := leaders()
			if ok(led) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: leaders %v", what, led)
			}
			if each != nil {
				each()
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Every group to node 1.
	wait("all led by node 1", func(led map[uint64]int) bool { return led[1] == len(names) }, func() {
		for id := uint64(2); id <= 3; id++ {
			for _, g := range c.broker(id).ClusterStatus() {
				if g.Role == "leader" && g.Serving && g.Entity != MetaEntity {
					e, _ := c.broker(id).Entity(g.Entity)
					(*e.logRef.Load()).(memberLog).TransferLeader(1)
				}
			}
		}
	})
	wait("spread", func(led map[uint64]int) bool { return led[1] == 2 && led[2] == 2 && led[3] == 2 }, func() {
		for id := uint64(1); id <= 3; id++ {
			c.broker(id).balance()
		}
	})
}
