package replica

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
)

// Member is one node's member of an entity's group at run time: a Group
// on its LogStorage, driven by a goroutine of its own (Raft's ticks, the
// messages of its peers, the proposals of its owner). To its owner, the
// entity's actor, it is the entity log: Append and AppendLazy take
// events and give them their log indexes at once, and DurableIndex is
// the watermark up to which the group committed them (docs/cluster.md,
// "The leader's actor"). Only a member that leads takes appends: its
// owner decides, applies at once, and answers clients once the events
// are committed, as a single node answers once they are fsynced.
//
// The owner learns the member's role and the events it did not append
// through its Owner, in the order they happen. A leader that loses its
// term fails what it had not seen committed (ErrNotLeader) and tells its
// owner to step down: what the owner applied ahead of the commit may be
// gone, so it takes its state again from what was committed.
type Member struct {
	cfg   MemberConfig
	g     *Group
	st    *LogStorage
	inbox chan *pb.Message
	props chan *proposal
	calls chan func()
	quit  chan struct{}
	done  chan struct{}

	// durable is the log index of the last record of the last entry
	// committed and applied here.
	durable atomic.Uint64
	// lead is the group's leader as Raft last said (0: none known).
	lead atomic.Uint64

	mu      sync.Mutex
	leading bool   // leads, and has applied everything before its term
	term    uint64 // the term it leads in
	next    uint64 // the log index the next event appended gets
	err     error  // why appends are refused (nil while leading)
	stopErr error  // the storage's failure that stopped the member

	// Driver goroutine only.
	pending  []*proposal // appended, not yet committed, in log order
	leadFrom uint64      // the Raft index it must apply before it serves, 0 if not leader
	closeErr error
	seen     raft.BasicStatus // the role and leader roles last saw, for Counters
}

// proposal is an append on its way: an entry (data non-nil) or a barrier.
type proposal struct {
	data  []byte
	tag   uint64 // its first log index
	last  uint64 // its last log index (a barrier's: what it waits for)
	term  uint64
	done  func(error)
	entry bool
	at    time.Time // when it was proposed
	// change, if set, makes the entry a membership change rather than
	// data; err is why it was proposed as an empty entry instead.
	change *pb.ConfChangeSingle
	err    error
}

// MemberConfig configures a Member.
type MemberConfig struct {
	Config
	Dir  string      // the storage's directory (LogStorage)
	Log  log.Options // the entity log's
	Tick time.Duration
	// Send hands a message to the peer transport. It must not block.
	Send func(m *pb.Message)
	// Owner hears what happens, on the member's goroutine: it must not
	// block or call the member's methods other than DurableIndex.
	Owner Owner
	// OnCommit, if set, is called on the member's goroutine when
	// DurableIndex moves. It must not block.
	OnCommit func()
	// Counters, if set, add up the member's Raft figures with its node's
	// other members'.
	Counters *Counters
	// SyncCommit: the storage writes the commit index as it moves
	// (LogStorage.SyncCommit).
	SyncCommit bool
	// OnConfChange, if set, is called on the member's goroutine after a
	// membership change is applied (its entry's Owner.Apply before it).
	// Raft sends a member that is far behind the newest snapshot, and
	// drops one whose membership does not name it: a new member needs a
	// snapshot taken after it was added. It must not block.
	OnConfChange func()
}

// Owner is what a Member tells the entity's actor.
type Owner interface {
	// Apply gives committed events this member did not append (a
	// follower's, or a new leader's before it serves), with their log
	// indexes. An entry without events comes as one Marker event.
	Apply(evs []event.Event)
	// Restore replaces the state with a snapshot's, from the leader:
	// state reaches log index logIndex.
	Restore(logIndex uint64, state []byte)
	// Lead: the member leads in term and has applied all that was
	// committed before; it takes appends from log index next.
	Lead(term, next uint64)
	// StepDown: the member led and does no more. What the owner applied
	// after log index committed may be gone: it takes its state again
	// from the log up to there, and applies what comes after.
	StepDown(committed uint64)
}

// inboxSize is how many peers' messages wait for a member before Step
// drops them. A member takes all that wait before it processes, so a
// burst costs one sync; dropped ones are sent again by Raft, but a
// dropped heartbeat can start an election.
const inboxSize = 8192

// ErrNotLeader refuses an append to a member that does not lead, or
// fails one whose fate its lost term left unknown.
var ErrNotLeader = errors.New("replica: not the group's leader")

// OpenMember opens the storage in cfg.Dir and starts the member.
func OpenMember(cfg MemberConfig) (*Member, error) {
	if cfg.Tick == 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = discard{}
	}
	st, err := OpenLogStorage(cfg.Dir, cfg.Log)
	if err != nil {
		return nil, err
	}
	st.SyncCommit = cfg.SyncCommit
	m := &Member{cfg: cfg, st: st, inbox: make(chan *pb.Message, inboxSize), props: make(chan *proposal, 1024),
		calls: make(chan func()), quit: make(chan struct{}), done: make(chan struct{}), err: ErrNotLeader}
	snap, _ := st.Snapshot()
	applied := snap.GetMetadata().GetIndex()
	if applied > 0 {
		logIndex, state, err := DecodeSnapshot(snap.GetData())
		if err != nil {
			st.Close()
			return nil, err
		}
		cfg.Owner.Restore(logIndex, state)
		m.durable.Store(logIndex)
	}
	if m.g, err = New(cfg.Config, st, memberMachine{m}, applied); err != nil {
		st.Close()
		return nil, err
	}
	go m.run()
	return m, nil
}

// Step hands the member a message from a peer. It drops it if the member
// is behind on its messages (Raft sends again what matters).
func (m *Member) Step(msg *pb.Message) {
	select {
	case m.inbox <- msg:
	default:
	}
}

// Err is why the member stopped (its storage failed), nil while it runs.
func (m *Member) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stopErr
}

// Leading reports whether the member leads and serves, and its term.
func (m *Member) Leading() (bool, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leading, m.term
}

// Leader is the group's leader as this member last heard (0: none
// known). It is safe for concurrent use.
func (m *Member) Leader() uint64 { return m.lead.Load() }

// DurableIndex is the log index up to which the group committed the
// entity's records (and this member applied them).
func (m *Member) DurableIndex() uint64 { return m.durable.Load() }

// Append gives evs the next log indexes and proposes them as one entry.
// done, if not nil, is called on the member's goroutine once the entry is
// committed, or with ErrNotLeader if the member lost its term first (the
// entry may still be committed by the next leader: its fate is unknown,
// as a timeout's is). An empty evs makes done a barrier for every append
// before it. Appends come from one goroutine at a time (the owner's
// actor): the indexes they are given are the order they must reach Raft
// in.
func (m *Member) Append(evs []event.Event, done func(error)) (uint64, error) {
	m.mu.Lock()
	if err := m.err; err != nil {
		m.mu.Unlock()
		return 0, err
	}
	first := m.next
	for i := range evs {
		evs[i].Index = first + uint64(i)
		evs[i].Flags &^= event.FlagContinued
		if i < len(evs)-1 {
			evs[i].Flags |= event.FlagContinued
		}
		// The size its record will have in the log (the first of an
		// entry carries Raft's fields): the owner counts bytes by it.
		// Where it goes is known once it is written (Position).
		rec := evs[i]
		if i == 0 {
			rec.Term = 1
		}
		evs[i].Pos = event.Position{Size: uint32(event.RecordSize(&rec))}
	}
	p := &proposal{tag: first, last: first + uint64(len(evs)) - 1, term: m.term, done: done}
	if len(evs) > 0 {
		p.data, p.entry = EncodeEntry(first, evs), true
		m.next += uint64(len(evs))
	}
	m.mu.Unlock()
	if !p.entry && done == nil {
		return first, nil
	}
	select {
	case m.props <- p:
	case <-m.done:
		return 0, ErrNotLeader
	}
	return first, nil
}

// AppendChange is Append for one step of a membership change for node
// (AddLearner, Promote, Remove): the entry takes one log index, which it
// returns, and carries no events (its owner applies a Marker there, as
// every member does). done is called once it is committed, with an error
// if the step did not fit the group's membership when Raft took it (a
// learner added twice, a promotion of a node that is not a learner, the
// last voter removed): an empty entry took its place.
func (m *Member) AppendChange(step string, node uint64, done func(error)) (uint64, error) {
	var t pb.ConfChangeType
	switch step {
	case AddLearner:
		t = pb.ConfChangeType_ConfChangeAddLearnerNode
	case Promote:
		t = pb.ConfChangeType_ConfChangeAddNode
	case Remove:
		t = pb.ConfChangeType_ConfChangeRemoveNode
	default:
		return 0, fmt.Errorf("replica: no membership step %q", step)
	}
	if node == 0 {
		return 0, errors.New("replica: a member's id cannot be 0")
	}
	m.mu.Lock()
	if err := m.err; err != nil {
		m.mu.Unlock()
		return 0, err
	}
	index := m.next
	m.next++
	p := &proposal{tag: index, last: index, term: m.term, done: done, entry: true,
		change: &pb.ConfChangeSingle{Type: t.Enum(), NodeId: proto.Uint64(node)}}
	m.mu.Unlock()
	select {
	case m.props <- p:
	case <-m.done:
		return 0, ErrNotLeader
	}
	return index, nil
}

// proposeChange proposes p's membership change if it fits the group's
// membership now, or an empty entry in its place (the log index was
// given): Raft would panic applying a change that leaves no voter. One
// proposed while another is under way Raft itself turns into an empty
// entry.
func (m *Member) proposeChange(p *proposal) error {
	cs := m.g.ConfState()
	node := p.change.GetNodeId()
	voter, learner := slices.Contains(cs.GetVoters(), node), slices.Contains(cs.GetLearners(), node)
	switch p.change.GetType() {
	case pb.ConfChangeType_ConfChangeAddLearnerNode:
		if voter || learner {
			p.err = fmt.Errorf("replica: node %d is in the group already", node)
		}
	case pb.ConfChangeType_ConfChangeAddNode:
		if !learner {
			p.err = fmt.Errorf("replica: node %d is not a learner of the group", node)
		}
	case pb.ConfChangeType_ConfChangeRemoveNode:
		switch {
		case !voter && !learner:
			p.err = fmt.Errorf("replica: node %d is not in the group", node)
		case voter && len(cs.GetVoters()) == 1:
			p.err = fmt.Errorf("replica: node %d is the group's last voter", node)
		}
	}
	if p.err != nil {
		return m.g.Propose(nil)
	}
	return m.g.ProposeConfChange(&pb.ConfChangeV2{Changes: []*pb.ConfChangeSingle{p.change}})
}

// ownChange is the pending membership change whose entry is entry index,
// at log index first, if it is this member's: an entry without data at
// that log index, of the term it was proposed in (another leader's empty
// entry there would be of a later term).
func (m *Member) ownChange(index, first uint64, data []byte) *proposal {
	if len(m.pending) == 0 || data != nil {
		return nil
	}
	p := m.pending[0]
	if p.change == nil || p.tag != first {
		return nil
	}
	if term, err := m.st.Term(index); err != nil || term != p.term {
		return nil
	}
	return p
}

// AppendLazy is Append with nobody waiting for the commit.
func (m *Member) AppendLazy(evs []event.Event) (uint64, error) { return m.Append(evs, nil) }

// Compact makes state, the owner's state as of log index logIndex, the
// member's snapshot, and drops the log in front of it, but for the
// records from log index keep on, which the state still reads (0: none):
// a member far behind then catches up from the snapshot
// (Owner.Restore). logIndex must end an entry the member committed and
// applied.
func (m *Member) Compact(logIndex uint64, state []byte, keep uint64) error {
	res := make(chan error, 1)
	call := func() {
		index, ok := m.st.EntryEnding(logIndex)
		switch {
		case !ok:
			res <- fmt.Errorf("replica %d: no entry to snapshot ends at log index %d", m.cfg.ID, logIndex)
			return
		case index > m.g.Applied():
			res <- fmt.Errorf("replica %d: entry %d is not applied yet (%d is)", m.cfg.ID, index, m.g.Applied())
			return
		}
		cs, err := m.g.ConfStateAt(index)
		if err == nil {
			err = m.st.CreateSnapshotKeeping(index, cs, EncodeSnapshot(logIndex, state), keep)
		}
		res <- err
	}
	select {
	case m.calls <- call:
		return <-res
	case <-m.done:
		return ErrStopped
	}
}

// ReportSnapshot tells the member whether the snapshot it sent to
// member to arrived (the transport knows): until then Raft sends that
// member nothing more.
func (m *Member) ReportSnapshot(to uint64, ok bool) {
	select {
	case m.calls <- func() { m.g.ReportSnapshot(to, ok) }:
	case <-m.done:
	}
}

// ReportUnreachable tells the member that its messages to member to did
// not go: a leader then probes it rather than streaming to it.
func (m *Member) ReportUnreachable(to uint64) {
	select {
	case m.calls <- func() { m.g.ReportUnreachable(to) }:
	case <-m.done:
	}
}

// Position is where the record at log index sits in its segment: the
// events the owner appended or was given carry no position of their own.
// It is safe for concurrent use.
func (m *Member) Position(index uint64) (event.Position, bool) { return m.st.Position(index) }

// Log is the entity log under the member, for reading records back.
func (m *Member) Log() *log.Log { return m.st.Log() }

// Close stops the member and closes its storage. Appends not yet
// committed fail with ErrNotLeader.
func (m *Member) Close() error {
	select {
	case <-m.quit:
	default:
		close(m.quit)
	}
	<-m.done
	return m.closeErr
}

func (m *Member) run() {
	defer close(m.done)
	tick := time.NewTicker(m.cfg.Tick)
	defer tick.Stop()
	send := func(msg *pb.Message) {
		if c := m.cfg.Counters; c != nil && msg.GetType() == pb.MsgSnap {
			c.SnapshotsSent.Add(1)
		}
		m.cfg.Send(msg)
	}
	for {
		select {
		case <-m.quit:
			m.fail(ErrNotLeader)
			m.closeErr = m.st.Close()
			return
		case <-tick.C:
			m.g.Tick()
		case call := <-m.calls:
			call()
		case msg := <-m.inbox:
			m.step(msg)
		case p := <-m.props:
			m.propose(p)
		}
		// Take what else is queued, messages and proposals: one Process,
		// so one sync, for all of them. A follower that synced each
		// append on its own would hold its leader to one round of fsyncs
		// per message.
	more:
		for range 1024 {
			select {
			case msg := <-m.inbox:
				m.step(msg)
			case p := <-m.props:
				m.propose(p)
			default:
				break more
			}
		}
		m.roles(false)
		for {
			did, err := m.g.Process(send)
			if err != nil {
				// The storage failed: the member stops, as an entity
				// whose log failed does, and is opened again.
				err = fmt.Errorf("replica %d: %w", m.cfg.ID, err)
				m.mu.Lock()
				m.stopErr = err
				m.mu.Unlock()
				m.fail(err)
				<-m.quit
				m.closeErr = m.st.Close()
				return
			}
			m.roles(!did)
			if !did {
				break
			}
		}
	}
}

func (m *Member) step(msg *pb.Message) {
	if err := m.g.Step(msg); err != nil && !errors.Is(err, ErrStopped) {
		m.cfg.Logger.Warningf("replica %d: step %s: %v", m.cfg.ID, msg.GetType(), err)
	}
}

// propose hands p to Raft. A leader that cannot propose has lost its
// term: what it appended fails.
func (m *Member) propose(p *proposal) {
	if m.leadFrom == 0 || p.term != m.g.Term() {
		fail(p, ErrNotLeader)
		m.fail(ErrNotLeader)
		return
	}
	if p.entry {
		p.at = time.Now()
		var err error
		if p.change != nil {
			err = m.proposeChange(p)
		} else {
			err = m.g.Propose(p.data)
		}
		if err != nil {
			fail(p, ErrNotLeader)
			m.fail(ErrNotLeader)
			return
		}
	}
	m.pending = append(m.pending, p)
	m.release()
}

func fail(p *proposal, err error) {
	if p.done != nil {
		p.done(err)
	}
}

// roles follows the member's role: a member that leads serves once it
// has applied what came before its term; one that led and no longer
// does (or whose term moved on) steps down. settled says that Raft has
// nothing more ready: what it appended (a new leader's empty entry) is
// in the storage.
func (m *Member) roles(settled bool) {
	bs := m.g.node.BasicStatus()
	m.lead.Store(bs.Lead)
	if c := m.cfg.Counters; c != nil {
		if bs.RaftState == raft.StateCandidate && m.seen.RaftState != raft.StateCandidate {
			c.Elections.Add(1)
		}
		if bs.Lead != 0 && bs.Lead != m.seen.Lead {
			c.LeaderChanges.Add(1)
		}
		m.seen = bs
	}
	leader, term := m.g.IsLeader(), m.g.Term()
	m.mu.Lock()
	serving, ledTerm := m.leading, m.term
	m.mu.Unlock()
	if (serving || m.leadFrom != 0) && (!leader || term != ledTerm) {
		m.fail(ErrNotLeader)
		serving = false
	}
	if !leader {
		return
	}
	if m.leadFrom == 0 {
		if !settled {
			return
		}
		last, _ := m.st.LastIndex()
		m.leadFrom = last // its empty entry is there: Raft appends it on election
		m.mu.Lock()
		m.term = term
		m.mu.Unlock()
	}
	if !serving && m.g.Applied() >= m.leadFrom {
		next := m.st.nextLogIndex()
		m.mu.Lock()
		m.leading, m.next, m.err = true, next, nil
		m.mu.Unlock()
		m.cfg.Owner.Lead(term, next)
	}
}

// fail ends a leadership, or the hope of one: appends in flight fail,
// and an owner that served steps down.
func (m *Member) fail(err error) {
	for _, p := range m.pending {
		fail(p, err)
	}
	m.pending = nil
	m.leadFrom = 0
	m.mu.Lock()
	serving := m.leading
	m.leading, m.err = false, err
	m.mu.Unlock()
	if serving {
		m.cfg.Owner.StepDown(m.durable.Load())
	}
	for {
		select {
		case p := <-m.props:
			fail(p, err)
			continue
		default:
		}
		return
	}
}

// release calls done for appends the group committed, in log order.
func (m *Member) release() {
	durable := m.durable.Load()
	n := 0
	for _, p := range m.pending {
		if p.entry || p.last > durable {
			break
		}
		fail(p, nil)
		n++
	}
	m.pending = m.pending[n:]
}

// memberMachine applies committed entries for a Member: the leader's own
// were applied by its owner when appended; the rest go to the owner.
type memberMachine struct{ m *Member }

func (mm memberMachine) Apply(index uint64, data []byte) error {
	m := mm.m
	first, last, err := m.st.LogIndex(index)
	if err != nil {
		return fmt.Errorf("entry %d: %w", index, err)
	}
	var tag uint64
	evs := []event.Event{{Type: event.Marker}}
	if data != nil {
		if tag, evs, err = DecodeEntry(data); err != nil {
			return fmt.Errorf("entry %d: %w", index, err)
		}
	}
	if uint64(len(evs)) != last-first+1 {
		return fmt.Errorf("entry %d: %d events in log indexes %d to %d", index, len(evs), first, last)
	}
	m.durable.Store(last)
	if m.cfg.OnCommit != nil {
		m.cfg.OnCommit()
	}
	m.release() // barriers that wait for what came before
	if p := m.ownChange(index, first, data); p != nil {
		// Its own membership change (or the empty entry that stood in
		// for it): the owner counted its log index when it appended.
		m.pending = m.pending[1:]
		fail(p, p.err)
		m.release()
		return nil
	}
	if len(m.pending) > 0 && data != nil && m.pending[0].entry && m.pending[0].change == nil && m.pending[0].tag == tag && tag == first {
		// Its own, appended in this term: the owner has it.
		p := m.pending[0]
		m.pending = m.pending[1:]
		if c := m.cfg.Counters; c != nil && c.Commit != nil {
			c.Commit(time.Since(p.at))
		}
		fail(p, p.err)
		m.release()
		return nil
	}
	if len(m.pending) > 0 && m.pending[0].entry && first >= m.pending[0].tag {
		// Another entry where this member's own was to be: its term is
		// over, whatever it believes.
		m.fail(ErrNotLeader)
	}
	for i := range evs {
		evs[i].Index = first + uint64(i)
		evs[i].Term, evs[i].Entry, evs[i].Tag = 0, 0, 0
		evs[i].Pos, _ = m.st.Position(evs[i].Index)
	}
	m.cfg.Owner.Apply(evs)
	m.release()
	return nil
}

func (mm memberMachine) ConfChanged(uint64, *pb.ConfState) {
	if f := mm.m.cfg.OnConfChange; f != nil {
		f()
	}
}

func (mm memberMachine) Restore(snap *pb.Snapshot) error {
	logIndex, state, err := DecodeSnapshot(snap.GetData())
	if err != nil {
		return err
	}
	mm.m.durable.Store(logIndex)
	if c := mm.m.cfg.Counters; c != nil {
		c.SnapshotsReceived.Add(1)
	}
	mm.m.cfg.Owner.Restore(logIndex, state)
	return nil
}
