// Package replica is one node's member of an entity's Raft group
// (docs/cluster.md): etcd raft's RawNode with the shell around it that
// persists what Raft hands back, sends its messages and applies committed
// entries to a state machine, in the order Raft's contract requires.
//
// A Group does no IO of its own and starts no goroutine: its owner drives
// it from one goroutine with Tick, Step, Propose and Process, and gives it
// the Storage to persist to and the Transport to send with. That keeps it
// deterministic, so a whole cluster runs in one test under a simulated
// network and clock (sim_test.go).
package replica

import (
	"errors"
	"fmt"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Storage is where a Group keeps its log, hard state and snapshot. Reads
// (raft.Storage) see everything staged; Sync makes it durable. Nothing a
// message depends on is sent before the Sync that covers it.
type Storage interface {
	raft.Storage
	// Stage adds entries (replacing any from the first one's index on, as
	// a new leader's log overrules an uncommitted suffix) and sets the
	// hard state (nil: unchanged).
	Stage(hs *pb.HardState, entries []*pb.Entry) error
	// StageSnapshot replaces the log with snap.
	StageSnapshot(snap *pb.Snapshot) error
	// Sync makes everything staged durable.
	Sync() error
}

// StateMachine is what the group replicates: committed entries are applied
// to it in order, on every member.
type StateMachine interface {
	// Apply applies the committed entry at index. An entry without
	// events (a new leader's empty entry, a change of membership) comes
	// with nil data: it still takes one log index (LogStorage writes a
	// Marker record for it), so a machine that numbers its events as the
	// log does counts it (docs/cluster.md). An error stops the group: a
	// member that cannot apply what the others did must not go on (its
	// state would diverge).
	Apply(index uint64, data []byte) error
	// Restore replaces the state with a snapshot's.
	Restore(snap *pb.Snapshot) error
}

// Transport sends a message to another member. It may drop it: Raft
// sends again what matters.
type Transport func(m *pb.Message)

// Config configures a member.
type Config struct {
	ID uint64 // this member, not 0
	// Peers are every voting member of a new group, this one included. A
	// member joining a group that exists has none: it starts empty and
	// learns the group from its leader (a snapshot, then the log).
	Peers []uint64
	// ElectionTicks and HeartbeatTicks are Raft's timers in Ticks
	// (defaults 10 and 1).
	ElectionTicks, HeartbeatTicks int
	// Logger receives Raft's own messages; nil discards them.
	Logger raft.Logger
}

// Group is one member of a Raft group.
type Group struct {
	id      uint64
	node    *raft.RawNode
	storage Storage
	sm      StateMachine
	applied uint64
	conf    *pb.ConfState // the membership as of applied
	// confs are the memberships applied since the start, each with the
	// index it took effect at, for snapshots at earlier indexes.
	confs []confAt
	err   error // sticky: after a failed persist or apply the member stops
}

type confAt struct {
	index uint64
	conf  *pb.ConfState
}

// ErrStopped is what a stopped Group answers; Err says why it stopped.
var ErrStopped = errors.New("the replica stopped")

// New starts a member on storage. A storage that holds nothing starts a
// new group of cfg.Peers; one that holds a log takes up where it left off
// (the applied index is what the state machine had: its snapshot's, after
// a restart, with the entries after it applied again).
func New(cfg Config, storage Storage, sm StateMachine, applied uint64) (*Group, error) {
	if cfg.ID == 0 {
		return nil, errors.New("replica: a member's id cannot be 0")
	}
	rc := &raft.Config{
		ID:              cfg.ID,
		ElectionTick:    cfg.ElectionTicks,
		HeartbeatTick:   cfg.HeartbeatTicks,
		Storage:         storage,
		Applied:         applied,
		MaxSizePerMsg:   1 << 20,
		MaxInflightMsgs: 256,
		// A member cut off from the majority steps down, and one that
		// comes back does not depose a healthy leader.
		CheckQuorum: true,
		PreVote:     true,
		// A leader the group removed hands over rather than leading a
		// group it is no longer in until its term ends.
		StepDownOnRemoval: true,
		Logger:            cfg.Logger,
	}
	if rc.ElectionTick == 0 {
		rc.ElectionTick = 10
	}
	if rc.HeartbeatTick == 0 {
		rc.HeartbeatTick = 1
	}
	if rc.Logger == nil {
		rc.Logger = discard{}
	}
	last, err := storage.LastIndex()
	if err != nil {
		return nil, err
	}
	hs, conf, err := storage.InitialState()
	if err != nil {
		return nil, err
	}
	fresh := last == 0 && raft.IsEmptyHardState(hs)
	node, err := raft.NewRawNode(rc)
	if err != nil {
		return nil, err
	}
	if fresh && len(cfg.Peers) > 0 {
		peers := make([]raft.Peer, len(cfg.Peers))
		for i, id := range cfg.Peers {
			peers[i] = raft.Peer{ID: id}
		}
		if err := node.Bootstrap(peers); err != nil {
			return nil, fmt.Errorf("replica: bootstrap: %w", err)
		}
	}
	g := &Group{id: cfg.ID, node: node, storage: storage, sm: sm, applied: applied, conf: conf}
	g.confs = []confAt{{index: applied, conf: conf}}
	return g, nil
}

// Tick advances Raft's clock by one tick.
func (g *Group) Tick() { g.node.Tick() }

// Step hands the member a message from another.
func (g *Group) Step(m *pb.Message) error {
	if g.err != nil {
		return ErrStopped
	}
	err := g.node.Step(m)
	if errors.Is(err, raft.ErrStepPeerNotFound) || errors.Is(err, raft.ErrStepLocalMsg) {
		return nil // from a member no longer in the group, or malformed: dropped
	}
	return err
}

// Propose asks the group to commit data. It is not committed until Apply
// sees it; a leader change may drop it, and then nobody applies it.
func (g *Group) Propose(data []byte) error {
	if g.err != nil {
		return ErrStopped
	}
	return g.node.Propose(data)
}

// ProposeConfChange asks the group to change its membership: one change
// at a time (Raft turns a second one, while one is pending, into an empty
// entry). A new member joins as a learner and is promoted to voter once
// it has caught up (docs/cluster.md, "Membership").
func (g *Group) ProposeConfChange(cc *pb.ConfChangeV2) error {
	if g.err != nil {
		return ErrStopped
	}
	return g.node.ProposeConfChange(cc)
}

// Campaign makes the member stand for election now.
func (g *Group) Campaign() error { return g.node.Campaign() }

// ReportSnapshot tells the member whether the snapshot it sent to member
// to arrived: Raft sends that member nothing more until it knows.
func (g *Group) ReportSnapshot(to uint64, ok bool) {
	status := raft.SnapshotFailure
	if ok {
		status = raft.SnapshotFinish
	}
	g.node.ReportSnapshot(to, status)
}

// ReportUnreachable tells the member that a message to member to could
// not be sent.
func (g *Group) ReportUnreachable(to uint64) { g.node.ReportUnreachable(to) }

// Leader is the member this one believes leads (0: none known).
func (g *Group) Leader() uint64 { return g.node.BasicStatus().Lead }

// IsLeader reports whether this member leads.
func (g *Group) IsLeader() bool { return g.node.BasicStatus().RaftState == raft.StateLeader }

// Term is the member's current term.
func (g *Group) Term() uint64 { return g.node.BasicStatus().GetTerm() }

// Applied is the index of the last entry applied.
func (g *Group) Applied() uint64 { return g.applied }

// ConfState is the group's membership as of the last entry applied, for
// a snapshot taken there.
func (g *Group) ConfState() *pb.ConfState { return g.conf }

// ConfStateAt is the group's membership as of index, which must be at
// or below the last applied and after the member's start: a snapshot at
// index carries it.
func (g *Group) ConfStateAt(index uint64) (*pb.ConfState, error) {
	for i := len(g.confs) - 1; i >= 0; i-- {
		if g.confs[i].index <= index {
			return g.confs[i].conf, nil
		}
	}
	return nil, fmt.Errorf("replica %d: no membership known at %d (from %d on)", g.id, index, g.confs[0].index)
}

// Err is why the member stopped, nil while it runs.
func (g *Group) Err() error { return g.err }

// Process does what Raft has ready, in the order its contract asks: a
// snapshot and new entries and the hard state are staged and synced
// first; only then are messages sent (a vote or an acknowledgement must
// not outrun what it promises) and committed entries applied. It returns
// whether there was anything to do. After an error the member has
// stopped: its owner drops it and starts it again from its storage.
func (g *Group) Process(send Transport) (bool, error) {
	if g.err != nil {
		return false, g.err
	}
	if !g.node.HasReady() {
		return false, nil
	}
	rd := g.node.Ready()
	if err := g.persist(&rd); err != nil {
		g.err = err
		return true, err
	}
	for _, m := range rd.Messages {
		send(m)
	}
	for _, e := range rd.CommittedEntries {
		if err := g.apply(e); err != nil {
			g.err = err
			return true, err
		}
	}
	g.node.Advance(rd)
	return true, nil
}

func (g *Group) persist(rd *raft.Ready) error {
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := g.storage.StageSnapshot(rd.Snapshot); err != nil {
			return fmt.Errorf("replica %d: stage snapshot: %w", g.id, err)
		}
	}
	var hs *pb.HardState
	if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
		hs = rd.HardState
	}
	if hs != nil || len(rd.Entries) > 0 {
		if err := g.storage.Stage(hs, rd.Entries); err != nil {
			return fmt.Errorf("replica %d: stage: %w", g.id, err)
		}
	}
	if !raft.IsEmptySnap(rd.Snapshot) || hs != nil || len(rd.Entries) > 0 {
		if err := g.storage.Sync(); err != nil {
			return fmt.Errorf("replica %d: sync: %w", g.id, err)
		}
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := g.sm.Restore(rd.Snapshot); err != nil {
			return fmt.Errorf("replica %d: restore snapshot %d: %w", g.id, rd.Snapshot.GetMetadata().GetIndex(), err)
		}
		g.applied = rd.Snapshot.GetMetadata().GetIndex()
		g.conf = rd.Snapshot.GetMetadata().GetConfState()
		g.confs = []confAt{{index: g.applied, conf: g.conf}}
	}
	return nil
}

func (g *Group) apply(e *pb.Entry) error {
	index := e.GetIndex()
	if index <= g.applied {
		return nil // in the snapshot restored, or applied before a restart
	}
	var data []byte // nil for an entry without events
	if e.GetType() == pb.EntryType_EntryNormal {
		data = e.GetData()
	}
	if len(data) == 0 {
		data = nil
	}
	if err := g.sm.Apply(index, data); err != nil {
		return fmt.Errorf("replica %d: apply %d: %w", g.id, index, err)
	}
	switch e.GetType() {
	case pb.EntryType_EntryConfChange:
		var cc pb.ConfChange
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("replica %d: configuration change %d: %w", g.id, index, err)
		}
		g.conf = g.node.ApplyConfChange(&cc)
		g.confs = append(g.confs, confAt{index: index, conf: g.conf})
		g.confChanged(index)
	case pb.EntryType_EntryConfChangeV2:
		var cc pb.ConfChangeV2
		if err := proto.Unmarshal(e.GetData(), &cc); err != nil {
			return fmt.Errorf("replica %d: configuration change %d: %w", g.id, index, err)
		}
		g.conf = g.node.ApplyConfChange(&cc)
		g.confs = append(g.confs, confAt{index: index, conf: g.conf})
		g.confChanged(index)
	}
	g.applied = index
	return nil
}

// ConfWatcher is a StateMachine that hears of the membership changes its
// Group applies, after the entry's Apply.
type ConfWatcher interface {
	ConfChanged(index uint64, cs *pb.ConfState)
}

func (g *Group) confChanged(index uint64) {
	if w, ok := g.sm.(ConfWatcher); ok {
		w.ConfChanged(index, g.conf)
	}
}

// discard is a raft.Logger that says nothing (Raft's panics still panic).
type discard struct{}

func (discard) Debug(...any)            {}
func (discard) Debugf(string, ...any)   {}
func (discard) Error(...any)            {}
func (discard) Errorf(string, ...any)   {}
func (discard) Info(...any)             {}
func (discard) Infof(string, ...any)    {}
func (discard) Warning(...any)          {}
func (discard) Warningf(string, ...any) {}
func (discard) Fatal(v ...any)          { panic(fmt.Sprint(v...)) }
func (discard) Fatalf(f string, v ...any) {
	panic(fmt.Sprintf(f, v...))
}
func (discard) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (discard) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
