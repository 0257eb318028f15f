package admin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbus/walbus/broker/replica"
)

// SetRaftCounters makes a cluster's node show its Raft figures: the
// node's counters c, each entity's group as its member sees it (read from
// the broker at scrape time), and the commit latency of the leader's
// appends, which it has c.Commit observe. Call it before c reaches the
// broker (broker.Cluster.Counters): the members read c.Commit without a
// lock. On a single node it is not called, and none of these appear.
func (m *Metrics) SetRaftCounters(c *replica.Counters) {
	commit := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "walbus_raft_commit_duration_seconds",
		Help:    "Time from a leader's proposal of an append to its commit by a quorum (fsyncs and a round trip).",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 18)})
	c.Commit = func(d time.Duration) { commit.Observe(d.Seconds()) }
	m.reg.MustRegister(commit, raftCollector{m, c})
}

var (
	raftLabels        = []string{"entity"}
	descRaftTerm      = prometheus.NewDesc("walbus_raft_term", "The entity's Raft term as this node's member knows it.", raftLabels, nil)
	descRaftLeader    = prometheus.NewDesc("walbus_raft_leader", "1 while this node leads the entity's group and serves it, else 0.", raftLabels, nil)
	descRaftCommit    = prometheus.NewDesc("walbus_raft_commit_index", "The entity's committed Raft index as this node knows it.", raftLabels, nil)
	descRaftApplied   = prometheus.NewDesc("walbus_raft_applied_index", "The Raft index this node applied to the entity.", raftLabels, nil)
	descRaftApplyLag  = prometheus.NewDesc("walbus_raft_apply_lag", "Raft entries this node knows committed and has not applied (commit index minus applied).", raftLabels, nil)
	descRaftElections = prometheus.NewDesc("walbus_raft_elections_total",
		"Campaigns this node's members started (pre-votes that came to nothing not counted).", nil, nil)
	descRaftLeaderChanges = prometheus.NewDesc("walbus_raft_leader_changes_total",
		"Times one of this node's members saw its group's leader change.", nil, nil)
	descRaftSnapshotsSent = prometheus.NewDesc("walbus_raft_snapshots_sent_total",
		"Snapshots this node's leaders handed to the peer transport for a follower.", nil, nil)
	descRaftSnapshotsReceived = prometheus.NewDesc("walbus_raft_snapshots_received_total",
		"Leaders' snapshots this node's members restored.", nil, nil)
)

// raftCollector reads the node's Raft counters and every entity's group
// status at scrape time.
type raftCollector struct {
	m *Metrics
	c *replica.Counters
}

func (rc raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRaftTerm, descRaftLeader, descRaftCommit, descRaftApplied, descRaftApplyLag,
		descRaftElections, descRaftLeaderChanges, descRaftSnapshotsSent, descRaftSnapshotsReceived} {
		ch <- d
	}
}

func (rc raftCollector) Collect(ch chan<- prometheus.Metric) {
	for d, v := range map[*prometheus.Desc]uint64{descRaftElections: rc.c.Elections.Load(),
		descRaftLeaderChanges: rc.c.LeaderChanges.Load(), descRaftSnapshotsSent: rc.c.SnapshotsSent.Load(),
		descRaftSnapshotsReceived: rc.c.SnapshotsReceived.Load()} {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	b := rc.m.broker.Load()
	if b == nil {
		return
	}
	for _, g := range b.ClusterStatus() {
		ch <- prometheus.MustNewConstMetric(descRaftTerm, prometheus.GaugeValue, float64(g.Term), g.Entity)
		ch <- prometheus.MustNewConstMetric(descRaftLeader, prometheus.GaugeValue, boolValue(g.Serving), g.Entity)
		ch <- prometheus.MustNewConstMetric(descRaftCommit, prometheus.GaugeValue, float64(g.Commit), g.Entity)
		ch <- prometheus.MustNewConstMetric(descRaftApplied, prometheus.GaugeValue, float64(g.Applied), g.Entity)
		ch <- prometheus.MustNewConstMetric(descRaftApplyLag, prometheus.GaugeValue, float64(applyLag(g.Commit, g.Applied)), g.Entity)
	}
}

// applyLag is commit − applied, 0 where applied is ahead (it never is in
// one member's status; in reports of different nodes it can be).
func applyLag(commit, applied uint64) uint64 {
	if applied >= commit {
		return 0
	}
	return commit - applied
}
