package simulation

import (
	"errors"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/walbus/walbus/broker/replica"
)

// fault brings one of the nemesis's moves now and then.
func (s *sim) fault() {
	r := s.rng.IntN(1000)
	n := s.member()
	switch {
	case r < 8 && n.down == 0: // kill -9
		s.crash(n)
	case r < 12 && s.up(n): // SIGSTOP for a while
		n.paused = 5 + s.rng.IntN(40)
	case r < 20: // cut a node off from the others
		s.heal()
		for _, o := range s.nodes {
			if o != n {
				s.cut[[2]uint64{n.id, o.id}], s.cut[[2]uint64{o.id, n.id}] = true, true
			}
		}
	case r < 26: // cut one link
		o := s.member()
		if o != n {
			s.cut[[2]uint64{n.id, o.id}] = true
		}
	case r < 40:
		s.heal()
	}
}

func (s *sim) heal() {
	clear(s.cut)
	for _, n := range s.nodes {
		n.paused = 0
	}
}

// crash stops n as kill -9 or a power cut does: what it had not synced is
// gone, and its client's pending operation has no answer.
func (s *sim) crash(n *Node) {
	s.stats.Crashes++
	n.down = 3 + s.rng.IntN(30)
	n.pending = nil
}

// send puts a message on the network, where it may be lost, duplicated,
// or delayed past later ones.
func (s *sim) send(m *pb.Message) {
	if s.cut[[2]uint64{m.GetFrom(), m.GetTo()}] || s.rng.IntN(50) == 0 {
		s.snapshotSent(m, false)
		return
	}
	delay := int64(s.rng.IntN(3)) * stepNanos / 2
	if s.rng.IntN(20) == 0 {
		delay += int64(s.rng.IntN(20)) * stepNanos
	}
	s.net = append(s.net, inFlight{at: s.now + delay, msg: m})
	if s.rng.IntN(100) == 0 {
		s.net = append(s.net, inFlight{at: s.now + delay + stepNanos, msg: m})
	}
}

// deliver hands the members the messages due, in any order.
func (s *sim) deliver() {
	var due, later []inFlight
	for _, f := range s.net {
		if f.at <= s.now {
			due = append(due, f)
		} else {
			later = append(later, f)
		}
	}
	s.net = later
	s.rng.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
	for _, f := range due {
		n := s.nodes[f.msg.GetTo()-1]
		if !s.up(n) || s.cut[[2]uint64{f.msg.GetFrom(), f.msg.GetTo()}] {
			s.snapshotSent(f.msg, false)
			continue
		}
		s.snapshotSent(f.msg, true)
		if err := n.group.Step(f.msg); err != nil && !errors.Is(err, replica.ErrStopped) {
			s.failf("node %d steps %s: %w", n.id, f.msg.GetType(), err)
			return
		}
	}
}

// snapshotSent tells the sender of a snapshot whether it arrived, as the
// transport that streams it does: until then Raft sends that member
// nothing more.
func (s *sim) snapshotSent(m *pb.Message, ok bool) {
	if m.GetType() != pb.MessageType_MsgSnap {
		return
	}
	if ok {
		s.stats.Snapshots++
	}
	if from := s.nodes[m.GetFrom()-1]; from.down == 0 && !from.removed {
		from.group.ReportSnapshot(m.GetTo(), ok)
	}
}
