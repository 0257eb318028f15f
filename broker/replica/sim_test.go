package replica

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// The simulation: an entity's group of three or five members in one
// goroutine, on a network that drops, delays, duplicates and reorders
// messages and is cut into partitions, with members that crash (losing
// what they had not synced), pause and come back; the entity's projection
// is the state machine and the leader decides clients' operations, as the
// broker's actor will. Every step checks that members that applied an
// index applied the same entry and hold the same state; at the end, after
// the network heals, that every acknowledged send is still there or its
// completion was acknowledged, that no message was completed twice, and
// that the group serves again. Members' clocks differ by up to 3 s, as
// machines' do, and now and then a member is replaced (a newcomer joins as
// a learner, is promoted, then the old one is removed).
//
// WALBUS_SIM_SEEDS sets how many seeds run (200 by default, 20 under the
// race detector; make full-size runs 2,000); WALBUS_SIM_SEED runs one. A
// seed draws the same network, faults and operations every time, but not
// Raft's own election jitter (etcd raft takes it from crypto/rand, with no
// way to seed it), so a rare failure may take a few runs to show again.
func TestSimulatedGroup(t *testing.T) {
	seeds := 200
	if raceEnabled || testing.Short() {
		seeds = 20
	}
	if s := os.Getenv("WALBUS_SIM_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		seeds = n
	}
	first := uint64(1)
	if s := os.Getenv("WALBUS_SIM_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		first, seeds = n, 1
	}
	stats := &simStats{}
	for seed := first; seed < first+uint64(seeds); seed++ {
		s := newSim(t, seed)
		s.stats = stats
		s.run(600)
		stats.seeds++
		for _, n := range s.nodes {
			stats.terms = max(stats.terms, int(n.group.Term()))
		}
		if t.Failed() {
			t.Fatalf("seed %d failed (WALBUS_SIM_SEED=%d runs it alone)", seed, seed)
		}
	}
	t.Logf("%d seeds: %d operations acknowledged, %d crashes (%d power cuts before a sync), %d snapshots sent, %d restored, %d members replaced, highest term %d",
		stats.seeds, stats.acks, stats.crashes, stats.powerCuts, stats.snapshots, stats.restores, stats.replaced, stats.terms)
	if stats.seeds >= 20 && (stats.crashes == 0 || stats.powerCuts == 0 || stats.snapshots == 0 || stats.restores == 0 || stats.replaced == 0) {
		t.Errorf("the seeds missed a fault the simulation means to bring: %+v", *stats)
	}
}

// Simulated time: one step is one Raft tick of 100 ms.
const (
	stepNanos    = int64(100 * time.Millisecond)
	lockDuration = 2 * time.Second
)

type sim struct {
	t     *testing.T
	seed  uint64
	rng   *rand.Rand
	now   int64
	nodes []*simNode
	peers []uint64
	net   []inFlight
	cut   map[[2]uint64]bool // links down, both ways listed
	// What every member that applied an index saw there: the entry's and
	// the state's digests.
	entries map[uint64][32]byte
	states  map[uint64][32]byte
	nextID  uint64
	// The clients' history.
	ackedSends     map[uint64]string // SequenceNumber -> MessageId, acknowledged
	ackedCompletes map[uint64]int    // SequenceNumber -> acknowledged completions
	triedCompletes map[uint64]bool   // completions asked, whatever came of them
	configured     bool
	acks           int
	storm          bool // faults happen, power cuts among them
	stats          *simStats
	repl           *replacement // a member being replaced, nil for none
}

// replacement is a member being replaced, as an operator replaces a dead
// node: the newcomer joins as a learner, is promoted to voter once it has
// caught up, and then the victim is removed.
type replacement struct {
	newcomer, victim uint64
	phase, since     int // the step it is at, and for how many steps
}

// simStats count what the seeds went through, to show the simulation
// does what it means to.
type simStats struct {
	seeds, acks, crashes, powerCuts, snapshots, restores, terms, replaced int
}

type inFlight struct {
	at  int64
	msg *pb.Message
}

type simNode struct {
	id      uint64
	storage *simStorage
	group   *Group
	m       *entityMachine
	down    int // steps until it starts again after a crash; 0 while up
	paused  int // steps left of a pause (SIGSTOP)
	pending map[uint64]*op
	term    uint64 // the term its pending operations were proposed in
	skew    int64  // how far its clock is from the simulation's, ns
	join    bool   // added to the group that exists: starts with no peers
	removed bool   // replaced: out of the group, and of the simulation
}

// op is a client's operation the leader proposed, waiting for its entry.
type op struct {
	kind     string // configure, send, lock, settle
	outcome  projection.Outcome
	seq      uint64 // of the message settled
	messages []string
}

func newSim(t *testing.T, seed uint64) *sim {
	s := &sim{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		now: 1_800_000_000 * int64(time.Second), cut: map[[2]uint64]bool{},
		entries: map[uint64][32]byte{}, states: map[uint64][32]byte{},
		ackedSends: map[uint64]string{}, ackedCompletes: map[uint64]int{}, triedCompletes: map[uint64]bool{}}
	n := 3
	if s.rng.IntN(3) == 0 {
		n = 5
	}
	var peers []uint64
	for i := range n {
		peers = append(peers, uint64(i+1))
	}
	s.peers = peers
	for _, id := range peers {
		// Clocks of different machines differ by up to 3 s.
		skew := int64(s.rng.IntN(7)-3) * int64(time.Second)
		node := &simNode{id: id, storage: newSimStorage(), pending: map[uint64]*op{}, skew: skew}
		s.nodes = append(s.nodes, node)
		s.start(node)
	}
	return s
}

// start makes node's member from what its storage holds.
func (s *sim) start(n *simNode) {
	n.m = newEntityMachine(s, n)
	var applied uint64
	if snap, _ := n.storage.Snapshot(); snap.GetMetadata().GetIndex() > 0 {
		if err := n.m.Restore(snap); err != nil {
			s.t.Fatalf("seed %d: node %d restores its snapshot: %v", s.seed, n.id, err)
		}
		applied = snap.GetMetadata().GetIndex()
	}
	n.storage.cut = func() bool { return s.storm && s.rng.IntN(400) == 0 }
	peers := s.peers
	if n.join {
		peers = nil
	}
	g, err := New(Config{ID: n.id, Peers: peers, ElectionTicks: 10, HeartbeatTicks: 1}, n.storage, n.m, applied)
	if err != nil {
		s.t.Fatalf("seed %d: node %d: %v", s.seed, n.id, err)
	}
	n.group = g
	n.pending = map[uint64]*op{}
}

func (s *sim) up(n *simNode) bool { return !n.removed && n.down == 0 && n.paused == 0 }

// member picks a member at random.
func (s *sim) member() *simNode {
	for {
		if n := s.nodes[s.rng.IntN(len(s.nodes))]; !n.removed {
			return n
		}
	}
}

// leader is a member that believes it leads and is up.
func (s *sim) leader() *simNode {
	var leader *simNode
	for _, n := range s.nodes {
		if s.up(n) && n.group.IsLeader() {
			leader = n
		}
	}
	return leader
}

func (s *sim) run(steps int) {
	// The storm: faults, then a calm in which the group must serve.
	for i := 0; i < steps && !s.t.Failed(); i++ {
		s.step(true, true)
	}
	s.heal()
	before := s.acks
	for i := 0; i < 300 && !s.t.Failed(); i++ {
		s.step(false, true)
	}
	// A replacement under way finishes.
	for i := 0; i < 600 && s.repl != nil && !s.t.Failed(); i++ {
		s.step(false, true)
	}
	if s.repl != nil {
		s.t.Errorf("seed %d: replacing member %d by %d is stuck at step %d", s.seed, s.repl.victim, s.repl.newcomer, s.repl.phase)
	}
	// Quiet, until the last commit reaches every member (a leader elected
	// at the very end, when a replacement removed the one before, needs a
	// few steps more to bring everyone its first entry).
	for i := 0; i < 200 && !s.t.Failed() && !s.converged(); i++ {
		s.step(false, false)
	}
	if !s.t.Failed() && s.acks == before {
		s.t.Errorf("seed %d: the group acknowledged nothing in the 30 s after the network healed", s.seed)
	}
	s.check()
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
				n.storage = n.storage.afterCrash()
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
// gone, and its clients' pending operations have no answer.
func (s *sim) crash(n *simNode) {
	s.stats.crashes++
	n.down = 3 + s.rng.IntN(30)
	n.pending = map[uint64]*op{}
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
		if err := n.group.Step(f.msg); err != nil && !errors.Is(err, ErrStopped) {
			s.t.Errorf("seed %d: node %d steps %s: %v", s.seed, n.id, f.msg.GetType(), err)
		}
	}
}

// sameEntries checks the entries n applied after index from, of every
// kind (configuration changes too), against what other members applied
// at those indexes: Raft's log matching, seen from outside.
func (s *sim) sameEntries(n *simNode, from uint64) {
	to := n.group.Applied()
	if first, _ := n.storage.FirstIndex(); from+1 < first {
		from = first - 1 // restored from a snapshot: those are in it
	}
	if to <= from {
		return
	}
	ents, err := n.storage.Entries(from+1, to+1, math.MaxUint64)
	if err != nil {
		s.t.Fatalf("seed %d: node %d reads its entries %d to %d: %v", s.seed, n.id, from+1, to, err)
	}
	for _, e := range ents {
		h := sha256.Sum256(binary.BigEndian.AppendUint64(append([]byte{byte(e.GetType())}, e.GetData()...), e.GetTerm()))
		if want, seen := s.entries[e.GetIndex()]; seen && want != h {
			s.t.Errorf("seed %d: node %d applied another entry at %d", s.seed, n.id, e.GetIndex())
		}
		s.entries[e.GetIndex()] = h
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
		s.stats.snapshots++
	}
	if from := s.nodes[m.GetFrom()-1]; from.down == 0 && !from.removed {
		from.group.ReportSnapshot(m.GetTo(), ok)
	}
}

// process lets every member do what Raft has ready until none has.
func (s *sim) process() {
	for range 20 {
		busy := false
		for _, n := range s.nodes {
			if !s.up(n) {
				continue
			}
			from := n.group.Applied()
			did, err := n.group.Process(s.send)
			s.sameEntries(n, from)
			if errors.Is(err, errPowerCut) {
				s.stats.powerCuts++
				s.crash(n)
				continue
			}
			if err != nil {
				s.t.Fatalf("seed %d: node %d: %v", s.seed, n.id, err)
			}
			busy = busy || did
			if t := n.group.Term(); len(n.pending) > 0 && (t != n.term || !n.group.IsLeader()) {
				n.pending = map[uint64]*op{} // its clients get an error: outcome unknown
			}
		}
		if !busy {
			return
		}
	}
}

// client has the leader decide one operation, as the broker's actor does:
// against the state it applied, once it has applied its whole log (so no
// decision of an older term is still to come), one at a time.
func (s *sim) client() {
	leader := s.leader()
	if leader == nil || len(leader.pending) > 0 {
		return
	}
	if last, _ := leader.storage.LastIndex(); leader.group.Applied() != last {
		return
	}
	e := leader.m.e
	var cmd projection.Command
	o := &op{}
	switch r := s.rng.IntN(100); {
	case !s.configured:
		cfg := projection.DefaultConfig()
		cfg.LockDuration = lockDuration
		cfg.MaxDeliveryCount = 3
		cmd, o.kind = projection.Configure{Name: "orders", Config: cfg}, "configure"
	case r < 40:
		var msgs []projection.Message
		for range 1 + s.rng.IntN(3) {
			s.nextID++
			id := fmt.Sprintf("m%d", s.nextID)
			msgs = append(msgs, projection.Message{Body: []byte("body of " + id), MessageID: id})
			o.messages = append(o.messages, id)
		}
		cmd, o.kind = projection.Send{Queue: event.MainQueue, Messages: msgs}, "send"
	case r < 65:
		cmd, o.kind = projection.Lock{Queue: event.MainQueue, Receiver: "r" + strconv.Itoa(s.rng.IntN(3)),
			Max: 1 + s.rng.IntN(3), Limit: e.LastIndex(), Nonce: s.rng.Uint64()}, "lock"
	case r < 90:
		tokens := leader.m.lockedTokens()
		if len(tokens) == 0 {
			return
		}
		held := tokens[s.rng.IntN(len(tokens))]
		o.kind, o.seq = "settle", held.seq
		o.outcome = []projection.Outcome{projection.Complete, projection.Complete, projection.Abandon,
			projection.DeadLetter, projection.Defer}[s.rng.IntN(5)]
		if o.outcome == projection.Complete {
			s.triedCompletes[held.seq] = true
		}
		cmd = projection.Settle{Queue: held.queue, Token: held.token, Outcome: o.outcome}
	default:
		cmd, o.kind = projection.Tick{}, "tick"
	}
	// The leader stamps its own clock, never earlier than the log's last
	// event (docs/cluster.md, "Time").
	evs, err := e.Decide(cmd, max(s.now+leader.skew, leader.m.lastTime))
	if err != nil || len(evs) == 0 {
		return // refused, or nothing to do: the client's answer needs no entry
	}
	s.nextID++
	if err := leader.group.Propose(encodeEntry(s.nextID, evs)); err != nil {
		return // dropped (a leader stepping down): the client retries
	}
	leader.pending[s.nextID] = o
	leader.term = leader.group.Term()
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

// membership replaces a member now and then (during the storm), and moves
// a replacement under way on: each step is proposed by whoever leads, and
// again every 2 s until the leader's configuration shows it (a proposal
// may be lost with its leader).
func (s *sim) membership(begin bool) {
	leader := s.leader()
	if leader == nil {
		return
	}
	// Only a leader that applied its whole log sees the newest
	// configuration: one just elected could otherwise propose adding the
	// newcomer as a learner again after its promotion, demoting it.
	if last, _ := leader.storage.LastIndex(); leader.group.Applied() != last {
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
		n := &simNode{id: uint64(len(s.nodes) + 1), storage: newSimStorage(), join: true,
			skew: int64(s.rng.IntN(7)-3) * int64(time.Second)}
		s.nodes = append(s.nodes, n)
		s.start(n)
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
		s.stats.replaced++
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

// acked is the answer to a client whose operation committed.
func (s *sim) acked(o *op, evs []event.Event) {
	s.acks++
	s.stats.acks++
	switch o.kind {
	case "configure":
		s.configured = true
	case "send":
		for _, ev := range evs {
			if ev.Type == event.Enqueued {
				s.ackedSends[ev.Index] = ev.MessageID
			}
		}
	case "settle":
		if o.outcome == projection.Complete {
			if s.ackedCompletes[o.seq]++; s.ackedCompletes[o.seq] > 1 {
				s.t.Errorf("seed %d: message %d completed twice", s.seed, o.seq)
			}
		}
	}
}

// compact has members snapshot now and then, so that one far behind
// catches up by snapshot.
func (s *sim) compact() {
	for _, n := range s.nodes {
		if !s.up(n) || s.rng.IntN(40) != 0 || n.group.Applied() == 0 {
			continue
		}
		if err := n.storage.compact(n.group.Applied(), n.group.ConfState(), n.m.snapshot()); err != nil {
			s.t.Fatalf("seed %d: node %d compacts: %v", s.seed, n.id, err)
		}
	}
}

// check looks at the end state: every member applied all the leader
// committed; nothing acknowledged was lost or completed twice.
func (s *sim) check() {
	leader := s.leader()
	if leader == nil {
		s.t.Errorf("seed %d: no leader after the calm", s.seed)
		return
	}
	for _, n := range s.nodes {
		if s.up(n) && n.group.Applied() < leader.group.Applied() {
			st := n.group.node.Status()
			s.t.Errorf("seed %d: node %d applied up to %d, the leader %d applied %d; it is %s in term %d, commit %d, leader %d; leader term %d commit %d, progress %v, conf %v",
				s.seed, n.id, n.group.Applied(), leader.id, leader.group.Applied(), st.RaftState, st.GetTerm(), st.GetCommit(), st.Lead,
				leader.group.Term(), leader.group.node.Status().GetCommit(), leader.group.node.Status().Progress[n.id], leader.group.ConfState())
		}
	}
	if voters := leader.group.ConfState().GetVoters(); len(voters) != len(s.peers) {
		s.t.Errorf("seed %d: the group ends with voters %v, want %d", s.seed, voters, len(s.peers))
	}
	e := leader.m.e
	present := func(seq uint64) bool {
		for _, q := range []uint32{event.MainQueue, event.DeadLetterQueue} {
			if queue := e.Queue(q); queue != nil {
				if _, ok := queue.Message(seq); ok {
					return true
				}
			}
		}
		return false
	}
	for _, seq := range slices.Sorted(maps.Keys(s.ackedSends)) {
		if !present(seq) && !s.triedCompletes[seq] {
			s.t.Errorf("seed %d: acknowledged send %d (%s) is lost", s.seed, seq, s.ackedSends[seq])
		}
	}
	for _, seq := range slices.Sorted(maps.Keys(s.ackedCompletes)) {
		if present(seq) {
			s.t.Errorf("seed %d: message %d is still there after its completion was acknowledged", s.seed, seq)
		}
	}
}

// entityMachine is the entity's projection as the group's state machine.
type entityMachine struct {
	s        *sim
	n        *simNode
	e        *projection.Entity
	lastTime int64
	tokens   map[event.LockToken]lockHeld // locks seen applied, some since settled
}

type lockHeld struct {
	queue uint32
	seq   uint64
	token event.LockToken
}

func newEntityMachine(s *sim, n *simNode) *entityMachine {
	return &entityMachine{s: s, n: n, e: projection.New(), tokens: map[event.LockToken]lockHeld{}}
}

// Apply gives the entry's events their log indexes, the next after the
// projection's last (the same on every member, since they apply the same
// entries in the same order), and applies them.
func (m *entityMachine) Apply(index uint64, data []byte) error {
	id, evs, err := decodeEntry(data)
	if err != nil {
		return err
	}
	for i := range evs {
		ev := &evs[i]
		ev.Index = m.e.LastIndex() + 1
		ev.Pos = event.Position{Offset: uint32(ev.Index * 7 % 100000), Size: uint32(event.RecordSize(ev))}
		if err := m.e.Apply(ev); err != nil {
			return fmt.Errorf("event %d (%s): %w", ev.Index, ev.Type, err)
		}
		m.lastTime = max(m.lastTime, ev.Time)
		if ev.Type == event.Locked {
			m.tokens[ev.Token] = lockHeld{queue: ev.Queue, seq: ev.Seq, token: ev.Token}
		}
	}
	s := m.s
	state := sha256.Sum256(m.e.Encode(nil))
	if want, seen := s.states[index]; seen && want != state {
		s.t.Errorf("seed %d: node %d holds another state after %d", s.seed, m.n.id, index)
	}
	s.states[index] = state
	if o := m.n.pending[id]; o != nil {
		delete(m.n.pending, id)
		s.acked(o, evs)
	}
	return nil
}

// lockedTokens are the locks of the messages still locked, in
// SequenceNumber order.
func (m *entityMachine) lockedTokens() []lockHeld {
	var out []lockHeld
	for _, h := range m.tokens {
		if q := m.e.Queue(h.queue); q != nil {
			if meta, ok := q.Message(h.seq); ok && meta.State == index.Locked {
				out = append(out, h)
			}
		}
	}
	slices.SortFunc(out, func(a, b lockHeld) int { return int(a.seq) - int(b.seq) })
	return out
}

// snapshot is the machine's state for a Raft snapshot.
func (m *entityMachine) snapshot() []byte {
	data := binary.BigEndian.AppendUint64(nil, uint64(m.lastTime))
	return m.e.Encode(data)
}

func (m *entityMachine) Restore(snap *pb.Snapshot) error {
	data := snap.GetData()
	if len(data) < 8 {
		return fmt.Errorf("snapshot of %d bytes", len(data))
	}
	e, err := projection.Decode(data[8:])
	if err != nil {
		return err
	}
	m.e, m.lastTime = e, int64(binary.BigEndian.Uint64(data))
	m.s.stats.restores++
	clear(m.tokens)
	return nil
}

// An entry is a proposal's id, then its events' records, each after its
// length.
func encodeEntry(id uint64, evs []event.Event) []byte {
	b := binary.BigEndian.AppendUint64(nil, id)
	for i := range evs {
		ev := evs[i]
		ev.Index = uint64(i + 1) // the member's own index is given at apply
		rec := event.AppendRecord(nil, &ev)
		b = binary.AppendUvarint(b, uint64(len(rec)))
		b = append(b, rec...)
	}
	return b
}

func decodeEntry(b []byte) (uint64, []event.Event, error) {
	if len(b) < 8 {
		return 0, nil, fmt.Errorf("entry of %d bytes", len(b))
	}
	id, rest := binary.BigEndian.Uint64(b), b[8:]
	var evs []event.Event
	for len(rest) > 0 {
		n, w := binary.Uvarint(rest)
		if w <= 0 || uint64(len(rest)-w) < n {
			return 0, nil, errors.New("truncated record in entry")
		}
		ev, err := event.DecodeRecord(rest[w : w+int(n)])
		if err != nil {
			return 0, nil, err
		}
		evs = append(evs, ev)
		rest = rest[w+int(n):]
	}
	return id, evs, nil
}
