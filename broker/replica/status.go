package replica

import (
	"slices"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// Status is a member's view of its group, for operators (walbus cluster
// status, /metrics).
type Status struct {
	ID     uint64 `json:"id"`
	Leader uint64 `json:"leader"` // 0 when it knows none
	Term   uint64 `json:"term"`
	// Role is Raft's: "leader", "follower", "candidate", "pre-candidate";
	// "stopped" for a member that no longer runs.
	Role string `json:"role"`
	// Serving: it leads and has applied what came before its term, so its
	// owner takes appends.
	Serving bool `json:"serving"`
	// Raft indexes: committed, applied here, the last one here, the
	// newest snapshot's.
	Commit   uint64 `json:"commit"`
	Applied  uint64 `json:"applied"`
	Last     uint64 `json:"last"`
	Snapshot uint64 `json:"snapshot"`
	// Durable is the log index of the last record committed and applied.
	Durable uint64 `json:"durable"`
	// Voters and Learners are the group's members as of the last entry
	// applied here.
	Voters   []uint64 `json:"voters"`
	Learners []uint64 `json:"learners,omitempty"`
	// Progress is each member's as the leader sees it (leader only).
	Progress map[uint64]Progress `json:"progress,omitempty"`
}

// Progress is what a leader knows of one member's log.
type Progress struct {
	Match uint64 `json:"match"` // the last Raft index it is known to hold
	Next  uint64 `json:"next"`  // the next the leader sends it
	// State is how the leader sends to it: "probe", "replicate" or
	// "snapshot" (catching up from a snapshot).
	State   string `json:"state"`
	Active  bool   `json:"active"` // heard from within an election timeout
	Learner bool   `json:"learner"`
}

// Status is the member's view of its group now.
func (m *Member) Status() Status {
	res := make(chan Status, 1)
	select {
	case m.calls <- func() { res <- m.status() }:
		return <-res
	case <-m.done:
		return Status{ID: m.cfg.ID, Role: "stopped", Durable: m.durable.Load()}
	}
}

func (m *Member) status() Status {
	rs := m.g.node.Status()
	st := Status{ID: m.cfg.ID, Leader: rs.Lead, Term: rs.GetTerm(), Role: roleName(rs.RaftState),
		Commit: rs.GetCommit(), Applied: m.g.Applied(), Snapshot: m.st.snapIndex(), Durable: m.durable.Load()}
	st.Last, _ = m.st.LastIndex()
	if cs := m.g.ConfState(); cs != nil {
		st.Voters, st.Learners = slices.Clone(cs.GetVoters()), slices.Clone(cs.GetLearners())
		slices.Sort(st.Voters)
		slices.Sort(st.Learners)
	}
	st.Serving, _ = m.Leading()
	if rs.RaftState == raft.StateLeader {
		st.Progress = map[uint64]Progress{}
		for id, pr := range rs.Progress {
			st.Progress[id] = Progress{Match: pr.Match, Next: pr.Next, State: progressName(pr.State),
				Active: pr.RecentActive, Learner: pr.IsLearner}
		}
	}
	return st
}

func roleName(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateCandidate:
		return "candidate"
	case raft.StatePreCandidate:
		return "pre-candidate"
	default:
		return "follower"
	}
}

func progressName(s tracker.StateType) string {
	switch s {
	case tracker.StateReplicate:
		return "replicate"
	case tracker.StateSnapshot:
		return "snapshot"
	default:
		return "probe"
	}
}

// Counters are a node's Raft figures, summed over its members (every
// member of a node shares one; the fields only grow).
type Counters struct {
	Elections         atomic.Uint64 // campaigns this node's members started
	LeaderChanges     atomic.Uint64 // times a member saw its group's leader change
	SnapshotsSent     atomic.Uint64 // snapshots handed to the transport
	SnapshotsReceived atomic.Uint64 // leaders' snapshots restored
	// Commit, if set, hears how long each append a leader proposed took
	// to commit. It must not block.
	Commit func(time.Duration)
}

// The steps of a membership change (docs/cluster.md, "Membership"), one
// at a time, proposed by the group's leader (Member.AppendChange).
const (
	AddLearner = "add-learner" // a node joins, without a vote, and catches up
	Promote    = "promote"     // a learner that caught up gets its vote
	Remove     = "remove"      // a member leaves the group
)

// TransferLeader asks the member, if it leads, to hand the group's
// leadership to member to: Raft brings to up to date and has it campaign
// at once. Meanwhile appends fail as in any change of leader.
func (m *Member) TransferLeader(to uint64) error {
	res := make(chan error, 1)
	select {
	case m.calls <- func() {
		if !m.g.IsLeader() {
			res <- ErrNotLeader
			return
		}
		m.g.node.TransferLeader(to)
		res <- nil
	}:
		return <-res
	case <-m.done:
		return ErrStopped
	}
}
