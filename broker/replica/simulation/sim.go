// Package simulation runs a Raft group of replica.Group members in one
// goroutine, under a simulated network and clock, with faults, and checks
// it at every step (docs/cluster.md, "How it is tested").
//
// The group has three or five members. The network drops, delays,
// duplicates and reorders messages and is cut into partitions, one link
// or one member at a time. Members crash (kill -9), pause (SIGSTOP), and
// lose power before a sync, so that what they had not synced is gone;
// they snapshot and compact, so that one far behind catches up by
// snapshot; their clocks differ by up to 3 s; and now and then one is
// replaced as an operator replaces a dead node: a newcomer joins as a
// learner, is promoted once it has caught up, then the old one is
// removed. After a storm of faults the network heals, and the group must
// serve again and converge.
//
// What the group replicates is the test's: a Workload gives each member
// its state machine and plays the clients, which the leader serves. The
// simulation checks at every applied index that every member that
// applied it applied the same entry (configuration changes too) and holds
// the same state (the machine's Digest), and at the end that a leader
// serves with as many voters as the group began with, every member
// caught up, and whatever the workload checks.
//
// A run is a function of its seed: the network, the faults and the
// clients' choices are drawn from it. Raft's own election jitter is not
// (etcd raft takes it from crypto/rand and cannot be seeded), so a rare
// failure may take a few runs to show again.
//
// A test runs seeds in a loop:
//
//	first, n, err := simulation.Seeds(200)
//	for seed := first; seed < first+uint64(n); seed++ {
//		stats, err := simulation.Run(simulation.Config{Seed: seed}, newWorkload(seed))
//		...
//	}
package simulation

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime/debug"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/walbus/walbus/broker/replica"
)

// Step is the simulation's unit of time: one Raft tick.
const Step = 100 * time.Millisecond

const stepNanos = int64(Step)

// Start is the simulated time at which every run begins, in Unix ns.
const Start = 1_800_000_000 * int64(time.Second)

// Config says what group to simulate.
type Config struct {
	Seed uint64
	// Members is how many voters the group has; 0 draws 3, or 5 one
	// time in three.
	Members int
	// Steps is how long the storm of faults lasts (600 steps if 0). A
	// calm of 300 steps follows, then as long as a replacement under way
	// and the convergence of the members take.
	Steps int
	// Storage makes a new member's storage, empty (nil:
	// NewMemoryStorage). A member that crashed starts again on what
	// AfterCrash gives.
	Storage func(id uint64) (Storage, error)
}

// Machine is a member's state machine.
type Machine interface {
	replica.StateMachine
	// Snapshot is the state as of the last index applied, for a Raft
	// snapshot: Restore takes it back.
	Snapshot() []byte
	// Digest stands for the whole state (a hash of its canonical
	// encoding, say): two members that applied the same index must give
	// the same one.
	Digest() []byte
}

// Workload is what the group replicates and who asks for it. Its methods
// run on the simulation's goroutine; those called during a member's
// Process (Machine's, Acked) must not call back into a Group. An error
// from any of them, a Machine's Apply included, fails the run.
type Workload interface {
	// Machine makes member n's state machine, empty. The simulation
	// restores it from n's snapshot, if n has one, before n starts.
	Machine(n *Node) Machine
	// Next is the clients' turn on leader, which has applied its whole
	// log (so its state is all the group committed, and no decision of
	// an earlier leader is still to come) and has no operation pending.
	// It returns the data of the entry to propose (replica.EncodeEntry)
	// and what to remember of it, or no data for nothing now.
	Next(leader *Node) (data []byte, op any, err error)
	// Acked says that the entry leader proposed for op was committed and
	// that leader applied it at index, in the term it proposed it in:
	// the client's answer. It runs right after leader's Machine applied
	// it. An operation whose leader crashed, or lost its term, before
	// then has no answer: its outcome is unknown, as a timeout's is.
	Acked(leader *Node, index uint64, op any) error
	// Check looks at the end state: the network healed, the group
	// converged on leader.
	Check(leader *Node) error
}

// Node is one member of the simulated group.
type Node struct {
	s       *sim
	id      uint64
	storage Storage
	group   *replica.Group
	machine Machine
	down    int // steps until it starts again after a crash; 0 while up
	paused  int // steps left of a pause (SIGSTOP)
	pending *proposal
	skew    int64 // how far its clock is from the simulation's, ns
	join    bool  // added to the group that exists: starts with no peers
	removed bool  // replaced: out of the group, and of the simulation
}

// proposal is a client's operation the leader proposed, waiting for its
// entry.
type proposal struct {
	data []byte
	op   any
	term uint64
}

// ID is the member's Raft id.
func (n *Node) ID() uint64 { return n.id }

// Group is the member's replica.Group.
func (n *Node) Group() *replica.Group { return n.group }

// Machine is the member's state machine, as Workload.Machine made it.
func (n *Node) Machine() Machine { return n.machine }

// Storage is what the member persists to.
func (n *Node) Storage() Storage { return n.storage }

// Clock is the time on the member's machine, in Unix ns: the
// simulation's, give or take its skew.
func (n *Node) Clock() int64 { return n.s.now + n.skew }

// Stats count what runs went through, to show that the simulation does
// what it means to.
type Stats struct {
	Runs      int
	Acks      int // operations acknowledged
	Crashes   int // power cuts included
	PowerCuts int // crashes before a sync, which lose what was staged
	Snapshots int // snapshots that reached a member
	Restores  int // snapshots restored, at a start or from the leader
	Replaced  int // members replaced
	Term      uint64
}

// Add counts o's too.
func (s *Stats) Add(o Stats) {
	s.Runs += o.Runs
	s.Acks += o.Acks
	s.Crashes += o.Crashes
	s.PowerCuts += o.PowerCuts
	s.Snapshots += o.Snapshots
	s.Restores += o.Restores
	s.Replaced += o.Replaced
	s.Term = max(s.Term, o.Term)
}

// Missed names the faults the runs never brought, for a test to insist
// on after enough of them.
func (s Stats) Missed() []string {
	var out []string
	for _, c := range []struct {
		name string
		n    int
	}{{"crash", s.Crashes}, {"power cut", s.PowerCuts}, {"snapshot sent", s.Snapshots},
		{"snapshot restored", s.Restores}, {"member replaced", s.Replaced}, {"acknowledgement", s.Acks}} {
		if c.n == 0 {
			out = append(out, c.name)
		}
	}
	return out
}

func (s Stats) String() string {
	return fmt.Sprintf("%d runs: %d operations acknowledged, %d crashes (%d power cuts before a sync), %d snapshots sent, %d restored, %d members replaced, highest term %d",
		s.Runs, s.Acks, s.Crashes, s.PowerCuts, s.Snapshots, s.Restores, s.Replaced, s.Term)
}

type sim struct {
	cfg   Config
	w     Workload
	rng   *rand.Rand
	now   int64
	nodes []*Node // by id: nodes[i] has id i+1
	peers []uint64
	net   []inFlight
	cut   map[[2]uint64]bool // links down, both ways listed
	// What every member that applied an index saw there: the entry's and
	// the state's digests.
	entries map[uint64][32]byte
	states  map[uint64]string
	storm   bool // faults happen, power cuts among them
	stats   Stats
	repl    *replacement // a member being replaced, nil for none
	err     error        // the first failure: the run stops there
}

type inFlight struct {
	at  int64
	msg *pb.Message
}

// Run simulates one group under cfg for w, and returns what it went
// through and the first failure of a check, if any: the run stops there.
func Run(cfg Config, w Workload) (stats Stats, err error) {
	if cfg.Steps == 0 {
		cfg.Steps = 600
	}
	if cfg.Storage == nil {
		cfg.Storage = func(uint64) (Storage, error) { return NewMemoryStorage(), nil }
	}
	s := &sim{cfg: cfg, w: w, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		now: Start, cut: map[[2]uint64]bool{}, entries: map[uint64][32]byte{}, states: map[uint64]string{}}
	s.stats.Runs = 1
	// Raft panics where it finds its own invariants broken (a log that
	// lost what it acknowledged, say): that is a failure of the run, to
	// report with its seed like any other.
	defer func() {
		if r := recover(); r != nil {
			stats, err = s.stats, fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	members := cfg.Members
	if members == 0 {
		members = 3
		if s.rng.IntN(3) == 0 {
			members = 5
		}
	}
	for i := range members {
		s.peers = append(s.peers, uint64(i+1))
	}
	for _, id := range s.peers {
		s.add(id, false)
	}
	if s.err == nil {
		s.run()
	}
	for _, n := range s.nodes {
		if n.group != nil {
			s.stats.Term = max(s.stats.Term, n.group.Term())
		}
		if n.storage != nil {
			if err := n.storage.Close(); err != nil && s.err == nil && !errors.Is(err, ErrPowerCut) {
				s.failf("node %d: close its storage: %w", n.id, err)
			}
		}
	}
	return s.stats, s.err
}

func (s *sim) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}

func (s *sim) failf(format string, args ...any) { s.fail(fmt.Errorf(format, args...)) }

// add makes a member with a new storage and starts it.
func (s *sim) add(id uint64, join bool) *Node {
	// Clocks of different machines differ by up to 3 s.
	n := &Node{s: s, id: id, join: join, skew: int64(s.rng.IntN(7)-3) * int64(time.Second)}
	s.nodes = append(s.nodes, n)
	storage, err := s.cfg.Storage(id)
	if err != nil {
		s.failf("node %d: new storage: %w", id, err)
		return n
	}
	n.storage = storage
	s.start(n)
	return n
}

// start makes n's member from what its storage holds.
func (s *sim) start(n *Node) {
	n.machine = s.w.Machine(n)
	n.pending = nil
	snap, err := n.storage.Snapshot()
	if err != nil {
		s.failf("node %d: read its snapshot: %w", n.id, err)
		return
	}
	var applied uint64
	if index := snap.GetMetadata().GetIndex(); index > 0 {
		if err := n.machine.Restore(snap); err != nil {
			s.failf("node %d: restore its snapshot at %d: %w", n.id, index, err)
			return
		}
		s.stats.Restores++
		applied = index
	}
	n.storage.PowerCut(func() bool { return s.storm && s.rng.IntN(400) == 0 })
	peers := s.peers
	if n.join {
		peers = nil
	}
	g, err := replica.New(replica.Config{ID: n.id, Peers: peers, ElectionTicks: 10, HeartbeatTicks: 1},
		n.storage, member{n}, applied)
	if err != nil {
		s.failf("node %d: %w", n.id, err)
		return
	}
	n.group = g
}

func (s *sim) up(n *Node) bool { return !n.removed && n.down == 0 && n.paused == 0 }

// member picks a member at random.
func (s *sim) member() *Node {
	for {
		if n := s.nodes[s.rng.IntN(len(s.nodes))]; !n.removed {
			return n
		}
	}
}

// leader is a member that believes it leads and is up.
func (s *sim) leader() *Node {
	var leader *Node
	for _, n := range s.nodes {
		if s.up(n) && n.group.IsLeader() {
			leader = n
		}
	}
	return leader
}

// caughtUp reports whether n applied its whole log: a leader that has
// holds all the group committed, and no decision of an earlier term is
// still to come.
func (s *sim) caughtUp(n *Node) bool {
	last, err := n.storage.LastIndex()
	return err == nil && n.group.Applied() == last
}

func (s *sim) run() {
	// The storm: faults, then a calm in which the group must serve.
	for i := 0; i < s.cfg.Steps && s.err == nil; i++ {
		s.step(true, true)
	}
	s.heal()
	before := s.stats.Acks
	for i := 0; i < 300 && s.err == nil; i++ {
		s.step(false, true)
	}
	// A replacement under way finishes.
	for i := 0; i < 600 && s.repl != nil && s.err == nil; i++ {
		s.step(false, true)
	}
	if s.err == nil && s.repl != nil {
		s.failf("replacing member %d by %d is stuck at step %d", s.repl.victim, s.repl.newcomer, s.repl.phase)
	}
	// Quiet, until the last commit reaches every member (a leader elected
	// at the very end, when a replacement removed the one before, needs a
	// few steps more to bring everyone its first entry).
	for i := 0; i < 200 && s.err == nil && !s.converged(); i++ {
		s.step(false, false)
	}
	if s.err == nil && s.stats.Acks == before {
		s.failf("the group acknowledged nothing in the 30 s after the network healed")
	}
	if s.err == nil {
		s.check()
	}
}

func (s *sim) step(faults, clients bool) {
	s.now += stepNanos
	s.storm = faults
	if faults {
		s.fault()
	}
	for _, n := range s.nodes {
		switch {
		case n.removed:
		case n.down > 0:
			if n.down--; n.down == 0 {
				storage, err := n.storage.AfterCrash()
				if err != nil {
					s.failf("node %d: storage after a crash: %w", n.id, err)
					return
				}
				n.storage = storage
				s.start(n)
			}
		case n.paused > 0:
			n.paused--
		default:
			n.group.Tick()
		}
	}
	s.deliver()
	s.process()
	s.membership(faults)
	if clients {
		s.client()
		s.process()
	}
	s.compact()
}

// process lets every member do what Raft has ready until none has.
func (s *sim) process() {
	for range 20 {
		busy := false
		for _, n := range s.nodes {
			if s.err != nil {
				return
			}
			if !s.up(n) {
				continue
			}
			from := n.group.Applied()
			did, err := n.group.Process(s.send)
			s.sameEntries(n, from)
			if errors.Is(err, ErrPowerCut) {
				s.stats.PowerCuts++
				s.crash(n)
				continue
			}
			if err != nil {
				s.failf("node %d: %w", n.id, err)
				return
			}
			busy = busy || did
			if p := n.pending; p != nil && (n.group.Term() != p.term || !n.group.IsLeader()) {
				n.pending = nil // its client gets an error: outcome unknown
			}
		}
		if !busy {
			return
		}
	}
}

// client gives the workload's clients a turn on the leader, as the
// broker's actor serves them: against the state it applied, once it has
// applied its whole log, one operation at a time.
func (s *sim) client() {
	leader := s.leader()
	if leader == nil || leader.pending != nil || !s.caughtUp(leader) {
		return
	}
	data, op, err := s.w.Next(leader)
	if err != nil {
		s.fail(err)
		return
	}
	if len(data) == 0 {
		return
	}
	if err := leader.group.Propose(data); err != nil {
		return // dropped (a leader stepping down): the client tries again
	}
	leader.pending = &proposal{data: data, op: op, term: leader.group.Term()}
}

// member is a node's Machine as its Group sees it: each index applied is
// checked against what the other members applied there, and answers its
// client if the node proposed it.
type member struct{ n *Node }

func (m member) Apply(index uint64, data []byte) error {
	n, s := m.n, m.n.s
	if err := n.machine.Apply(index, data); err != nil {
		return err
	}
	state := string(n.machine.Digest())
	if want, seen := s.states[index]; seen && want != state {
		return fmt.Errorf("node %d holds another state after %d", n.id, index)
	}
	s.states[index] = state
	p := n.pending
	if p == nil || data == nil {
		return nil // no proposal, or an entry without events: not a client's
	}
	n.pending = nil
	if n.group.Term() != p.term || !n.group.IsLeader() {
		return nil // not known to be its own: no answer
	}
	// In its term the leader proposed nothing else with data since it
	// applied its whole log, so this entry is that proposal.
	if string(data) != string(p.data) {
		return fmt.Errorf("node %d applied at %d another entry than the one it proposed in term %d", n.id, index, p.term)
	}
	s.stats.Acks++
	return s.w.Acked(n, index, p.op)
}

func (m member) Restore(snap *pb.Snapshot) error {
	m.n.s.stats.Restores++
	return m.n.machine.Restore(snap)
}

// sameEntries checks the entries n applied after index from, of every
// kind (configuration changes too), against what other members applied
// at those indexes: Raft's log matching, seen from outside.
func (s *sim) sameEntries(n *Node, from uint64) {
	to := n.group.Applied()
	if first, _ := n.storage.FirstIndex(); from+1 < first {
		from = first - 1 // restored from a snapshot: those are in it
	}
	if to <= from {
		return
	}
	ents, err := n.storage.Entries(from+1, to+1, math.MaxUint64)
	if err != nil {
		s.failf("node %d: read its entries %d to %d: %w", n.id, from+1, to, err)
		return
	}
	for _, e := range ents {
		h := sha256.Sum256(binary.BigEndian.AppendUint64(append([]byte{byte(e.GetType())}, e.GetData()...), e.GetTerm()))
		if want, seen := s.entries[e.GetIndex()]; seen && want != h {
			s.failf("node %d applied another entry at %d", n.id, e.GetIndex())
			return
		}
		s.entries[e.GetIndex()] = h
	}
}

// converged reports whether a leader is up and every member up has
// applied what it applied.
func (s *sim) converged() bool {
	leader := s.leader()
	if leader == nil {
		return false
	}
	for _, n := range s.nodes {
		if s.up(n) && n.group.Applied() != leader.group.Applied() {
			return false
		}
	}
	return true
}

// compact has members snapshot now and then, so that one far behind
// catches up by snapshot.
func (s *sim) compact() {
	for _, n := range s.nodes {
		if s.err != nil || !s.up(n) || s.rng.IntN(40) != 0 || n.group.Applied() == 0 {
			continue
		}
		if err := n.storage.Compact(n.group.Applied(), n.group.ConfState(), n.machine.Snapshot()); err != nil {
			s.failf("node %d: compact at %d: %w", n.id, n.group.Applied(), err)
		}
	}
}

// check looks at the end state: a leader, every member caught up, as
// many voters as the group began with; then the workload's own checks.
func (s *sim) check() {
	leader := s.leader()
	if leader == nil {
		s.failf("no leader after the calm")
		return
	}
	for _, n := range s.nodes {
		if s.up(n) && n.group.Applied() < leader.group.Applied() {
			s.failf("node %d applied up to %d in term %d (leader %d), the leader %d applied %d in term %d, conf %v",
				n.id, n.group.Applied(), n.group.Term(), n.group.Leader(), leader.id, leader.group.Applied(),
				leader.group.Term(), leader.group.ConfState())
			return
		}
	}
	if voters := leader.group.ConfState().GetVoters(); len(voters) != len(s.peers) {
		s.failf("the group ends with voters %v, want %d", voters, len(s.peers))
		return
	}
	if err := s.w.Check(leader); err != nil {
		s.fail(err)
	}
}
