package simulation

import (
	"slices"

	pb "go.etcd.io/raft/v3/raftpb"
)

// replacement is a member being replaced, as an operator replaces a dead
// node: the newcomer joins as a learner, is promoted to voter once it has
// caught up, and then the victim is removed.
type replacement struct {
	newcomer, victim uint64
	phase, since     int // the step it is at, and for how many steps
}

// membership replaces a member now and then (when begin, during the
// storm), and moves a replacement under way on: each step is proposed by
// whoever leads, and again every 2 s until the leader's configuration
// shows it (a proposal may be lost with its leader).
func (s *sim) membership(begin bool) {
	leader := s.leader()
	if s.err != nil || leader == nil {
		return
	}
	// Only a leader that applied its whole log sees the newest
	// configuration: one just elected could otherwise propose adding the
	// newcomer as a learner again after its promotion, demoting it.
	if !s.caughtUp(leader) {
		return
	}
	cs := leader.group.ConfState()
	if s.repl == nil {
		if !begin || s.rng.IntN(300) != 0 {
			return
		}
		// The victim: a voter other than the leader, and not one an
		// earlier replacement removed (a leader that has not applied
		// that removal yet still lists it).
		var others []uint64
		for _, id := range cs.GetVoters() {
			if id != leader.id && !s.nodes[id-1].removed {
				others = append(others, id)
			}
		}
		if len(others) == 0 || len(cs.GetLearners()) > 0 || len(cs.GetVotersOutgoing()) > 0 {
			return
		}
		n := s.add(uint64(len(s.nodes)+1), true)
		if s.err != nil {
			return
		}
		s.repl = &replacement{newcomer: n.id, victim: others[s.rng.IntN(len(others))]}
	}
	r := s.repl
	var change pb.ConfChangeType
	var who uint64
	phase := 0
	switch {
	case !slices.Contains(cs.GetLearners(), r.newcomer) && !slices.Contains(cs.GetVoters(), r.newcomer):
		change, who, phase = pb.ConfChangeType_ConfChangeAddLearnerNode, r.newcomer, 1
	case slices.Contains(cs.GetLearners(), r.newcomer):
		if newcomer := s.nodes[r.newcomer-1]; newcomer.group.Applied()+10 < leader.group.Applied() {
			return // not caught up yet
		}
		change, who, phase = pb.ConfChangeType_ConfChangeAddNode, r.newcomer, 2
	case slices.Contains(cs.GetVoters(), r.victim):
		change, who, phase = pb.ConfChangeType_ConfChangeRemoveNode, r.victim, 3
	default:
		s.nodes[r.victim-1].removed = true
		s.repl = nil
		s.stats.Replaced++
		return
	}
	if phase != r.phase {
		r.phase, r.since = phase, 0
	}
	if r.since++; r.since%20 != 1 {
		return
	}
	leader.group.ProposeConfChange(&pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{{Type: &change, NodeId: &who}}})
}
