package broker

import (
	"maps"
	"slices"
	"time"
)

// Leaders are spread over the nodes (docs/cluster.md, "Clients: any node,
// proxied to leaders"). Every node holds every entity, and each member
// knows its group's leader, so each node sees how many groups every node
// leads. A node that leads more than its share (the groups with a leader
// over the voters, rounded up) hands one group a round to the voter that
// leads the fewest, once that one holds everything committed; the others
// do the same, so the cluster settles with every node within one of its
// share. Elections after a failure, or a node that comes back, undo the
// spread; the balancer restores it.

// defaultBalanceEvery is how often a node looks at the spread.
const defaultBalanceEvery = 5 * time.Second

func (b *Broker) runBalancer() {
	c := b.opts.Cluster
	every := c.BalanceEvery
	if every == 0 {
		every = defaultBalanceEvery
	}
	if every < 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-b.quit:
			return
		case <-t.C:
		}
		b.balance()
	}
}

// balance hands one group this node leads beyond its share to the voter
// that leads the fewest, if one is due.
func (b *Broker) balance() {
	self := b.opts.Cluster.ID
	groups := b.ClusterStatus()
	led := map[uint64]int{}
	voters := map[uint64]bool{}
	total := 0
	groups = slices.DeleteFunc(groups, func(g GroupStatus) bool { return g.Entity == MetaEntity })
	for _, g := range groups {
		for _, v := range g.Voters {
			voters[v] = true
		}
		if g.Leader != 0 {
			led[g.Leader]++
			total++
		}
	}
	if len(voters) < 2 {
		return
	}
	share := (total + len(voters) - 1) / len(voters)
	if led[self] <= share {
		return
	}
	for _, g := range groups {
		if g.Role != "leader" || !g.Serving {
			continue
		}
		// The voter that leads the fewest and holds everything committed.
		var to uint64
		for _, v := range slices.Sorted(maps.Keys(voters)) {
			pr, ok := g.Progress[v]
			if v == self || !ok || !pr.Active || pr.Match < g.Commit || !slices.Contains(g.Voters, v) {
				continue
			}
			if led[v]+1 < led[self] && (to == 0 || led[v] < led[to]) {
				to = v
			}
		}
		if to == 0 {
			continue
		}
		e, err := b.Entity(g.Entity)
		if err != nil {
			continue
		}
		if l, ok := (*e.logRef.Load()).(memberLog); ok && l.TransferLeader(to) == nil {
			b.logger.Info("entity's leadership handed over", "entity", g.Entity, "to", to, "led_here", led[self], "share", share)
		}
		return
	}
}
