package broker

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/broker/replica"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// Cluster makes a broker one node of a cluster (docs/cluster.md): each
// entity's log is its member of the entity's Raft group
// (replica.Member), and the entity's actor serves on the member that
// leads. Until the metadata group places entities, every node holds every
// entity and the nodes must create them alike: an entity's group is its
// id in the namespace.
type Cluster struct {
	ID    uint64   // this node, not 0
	Peers []uint64 // every node, this one included
	// Send hands a message for an entity's group to the peer transport.
	// It must not block.
	Send func(group uint64, m *pb.Message)
	// Tick is Raft's tick (100 ms if 0); an election takes 10 of them.
	Tick time.Duration
	// Counters, if set, add up the node's Raft figures (for /metrics).
	Counters *replica.Counters
	// BalanceEvery is how often the node looks at how leaders are spread
	// and hands a group it leads beyond its share to another node
	// (balance.go; 5 s if 0, never if negative).
	BalanceEvery time.Duration
	// OnPeer, if set, is told a node's peer address ("" when the node
	// left) as the metadata group records it (Broker.RecordPeer), and
	// at the start, each node the namespace names. It is called with the
	// broker locked: it must not call it.
	OnPeer func(id uint64, addr string)
	// Join: the node joins a cluster that exists. An entity it has no
	// log for starts outside its group and waits for the group's leader
	// to add it (ChangeMembership); without Join, such an entity founds
	// its group with Peers.
	Join bool
}

// ErrNotLeader refuses an operation on an entity this node does not lead
// in a cluster: the client tries again, on the leader's node.
var ErrNotLeader = errors.New("this node does not lead the entity")

// NotLeaderError is ErrNotLeader with the node that leads the group
// (Leader, 0 when this node knows none), for a front end that passes the
// operation on to it.
type NotLeaderError struct {
	Entity string // "" for the metadata group
	Leader uint64
}

func (e *NotLeaderError) Error() string {
	what := "the entity " + e.Entity
	if e.Entity == "" {
		what = "the namespace (the metadata group)"
	}
	if e.Leader == 0 {
		return fmt.Sprintf("this node does not lead %s, and knows no leader", what)
	}
	return fmt.Sprintf("this node does not lead %s; node %d does", what, e.Leader)
}

func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }

// LeaderOf is the node that leads the group that refused with err, if err
// says one.
func LeaderOf(err error) (uint64, bool) {
	var nl *NotLeaderError
	if errors.As(err, &nl) && nl.Leader != 0 {
		return nl.Leader, true
	}
	return 0, false
}

// Step hands the broker a message from a peer for an entity's group. A
// message for an entity it does not hold is dropped: Raft sends again.
func (b *Broker) Step(group uint64, m *pb.Message) {
	if group == MetaGroup && b.meta != nil {
		b.meta.member.Step(m)
		return
	}
	if member := b.member(group); member != nil {
		member.Step(m)
	}
}

// ReportSnapshot tells entity group's member whether the snapshot it
// sent to node to arrived whole (the peer transport knows).
func (b *Broker) ReportSnapshot(group, to uint64, ok bool) {
	if group == MetaGroup && b.meta != nil {
		b.meta.member.ReportSnapshot(to, ok)
		return
	}
	if m := b.member(group); m != nil {
		m.ReportSnapshot(to, ok)
	}
}

// ReportUnreachable tells every entity's member that node to could not be
// reached.
func (b *Broker) ReportUnreachable(to uint64) {
	if b.meta != nil {
		b.meta.member.ReportUnreachable(to)
	}
	for _, e := range b.Entities() {
		if l, ok := (*e.logRef.Load()).(memberLog); ok {
			l.ReportUnreachable(to)
		}
	}
}

// ChangeMembership has the entity's group take one step of a membership
// change for node (replica.AddLearner, Promote or Remove), if this node
// leads it (ErrNotLeader otherwise). It returns once the group committed
// the step, or with why it did not fit the group's membership.
func (e *Entity) ChangeMembership(step string, node uint64) error {
	done := make(chan error, 1)
	_, err := call(e, func(e *Entity) (bool, error) {
		l, ok := e.log.(memberLog)
		switch {
		case !ok:
			return false, errors.New("not a cluster's entity")
		case e.failed != nil:
			return false, e.failed
		case e.following():
			return false, ErrNotLeader
		}
		index, err := l.AppendChange(step, node, func(err error) { done <- err })
		if errors.Is(err, replica.ErrNotLeader) {
			return false, ErrNotLeader
		}
		if err != nil {
			return false, err
		}
		// The step takes a log index, as every member's marker there.
		return true, e.applyAppended([]event.Event{{Type: event.Marker, Index: index}}, nil)
	})
	if err != nil {
		return err
	}
	select {
	case err := <-done:
		if errors.Is(err, replica.ErrNotLeader) {
			err = ErrNotLeader // its fate is unknown: the caller looks again
		}
		return err
	case <-time.After(membershipWait):
		return fmt.Errorf("entity %s: the group has not committed %s %d after %v", e.name, step, node, membershipWait)
	}
}

// membershipWait bounds ChangeMembership's wait for the commit.
const membershipWait = 30 * time.Second

// GroupStatus is one entity's group as this node's member sees it.
type GroupStatus struct {
	Entity string `json:"entity"`
	Group  uint64 `json:"group"`
	replica.Status
}

// ClusterStatus is every entity's group as this node's members see it,
// by entity name, after the metadata group's (MetaEntity; none on a
// single node). It does not wait for the entities' actors.
func (b *Broker) ClusterStatus() []GroupStatus {
	var out []GroupStatus
	if b.meta != nil {
		out = append(out, GroupStatus{Entity: MetaEntity, Group: MetaGroup, Status: b.meta.member.Status()})
	}
	for _, e := range b.Entities() {
		if l, ok := (*e.logRef.Load()).(memberLog); ok {
			out = append(out, GroupStatus{Entity: e.name, Group: e.id, Status: l.Status()})
		}
	}
	slices.SortFunc(out, func(a, b GroupStatus) int { return strings.Compare(a.Entity, b.Entity) })
	return out
}

// member is the group member of the entity whose group is group, if this
// node holds it.
func (b *Broker) member(group uint64) *replica.Member {
	v, ok := b.byGroup.Load(group)
	if !ok {
		return nil
	}
	if l, ok := (*v.(*Entity).logRef.Load()).(memberLog); ok {
		return l.Member
	}
	return nil
}

// Leading is the names of the entities this node leads, sorted (every
// entity, on a single node).
func (b *Broker) Leading() []string {
	out := []string{}
	for _, e := range b.Entities() {
		if e.Leading() {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out
}

// Leading reports whether this node leads the entity (always, on a
// single node).
func (e *Entity) Leading() bool {
	ok, _ := call(e, func(e *Entity) (bool, error) { return !e.following(), nil })
	return ok
}

// LeaderNode says whether this node leads the entity and serves it, and
// when not, the node that leads it as this node last heard (0: none
// known). A single node always leads. It does not wait for the actor.
func (e *Entity) LeaderNode() (leading bool, leader uint64) {
	l, ok := (*e.logRef.Load()).(memberLog)
	if !ok {
		return true, 0
	}
	leading, _ = l.Member.Leading()
	return leading, l.Leader()
}

// raftState is what an entity's actor knows of its group member.
type raftState struct {
	gen     uint64 // which member the inbox's items came from
	leading bool
	cfg     *projection.Config // the entity's config, for its leader to record when none is
	// founders found the entity's group if it has no log here (nil: the
	// cluster's Peers; see Entity.founders).
	founders []uint64
	mu       sync.Mutex
	inbox    []raftItem // what the member told, for the actor
}

type raftItem struct {
	gen uint64
	f   func(*Entity)
}

// following reports whether the entity is in a cluster and does not lead.
func (e *Entity) following() bool { return e.b.opts.Cluster != nil && !e.raft.leading }

// memberLog is a group member as the actor's log: appends and the
// watermark are the member's, reads are its entity log's.
type memberLog struct{ *replica.Member }

func (l memberLog) FirstIndex() uint64 { return l.Log().FirstIndex() }
func (l memberLog) LastIndex() uint64  { return l.Log().LastIndex() }
func (l memberLog) Scan(from uint64, fn func(*event.Event) error) error {
	return l.Log().Scan(from, fn)
}
func (l memberLog) Bytes() int64 { return l.Log().Bytes() }

// ReadAhead reads by the position the member's storage recorded: the
// actor's events never went through log.Append, so the positions they
// carry are not the records'.
func (l memberLog) ReadAhead(index uint64, _ event.Position, w *log.Window) (event.Event, error) {
	pos, ok := l.Position(index)
	if !ok {
		return event.Event{}, fmt.Errorf("read index %d: not in the member's log", index)
	}
	return l.Log().ReadAhead(index, pos, w)
}

// Reclaimable and TruncateFront: a member's log is cut by its snapshots
// (Member.Compact), not by the entity's compaction.
func (l memberLog) Reclaimable(uint64) int64 { return 0 }
func (l memberLog) TruncateFront(uint64) (uint64, error) {
	return l.Log().FirstIndex(), nil
}

// loadMember opens the entity's member. Its state comes from the member:
// every committed entry is applied again (Owner.Apply), from the Raft
// snapshot if there is one.
func (e *Entity) loadMember() error {
	b, c := e.b, e.b.opts.Cluster
	e.raft.gen++
	e.raft.leading = false
	e.st = projection.New()
	owner := &entityOwner{e: e, gen: e.raft.gen}
	wake := func() {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
	archives, err := log.OpenArchives(layout.ArchiveDir(e.dir))
	if err != nil {
		return fmt.Errorf("entity %s: %w", e.name, err)
	}
	e.closeArchives()
	e.setArchives(archives)
	opts := b.logOptions(e.name, nil, func(error) { wake() }, e.bracket)
	// A snapshot for a member behind is sent with the records it reads,
	// off the member's goroutine, once the member is known.
	var m *replica.Member
	opened := make(chan struct{})
	send := func(msg *pb.Message) {
		if msg.GetType() == pb.MsgSnap {
			go func() {
				<-opened
				e.sendSnapshot(m, msg)
			}()
			return
		}
		c.Send(e.id, msg)
	}
	m, err = replica.OpenMember(replica.MemberConfig{
		Config: replica.Config{ID: c.ID, Peers: e.founders()},
		Dir:    e.dir, Log: opts, Tick: c.Tick,
		Send:     send,
		Owner:    owner,
		OnCommit: wake,
		Counters: c.Counters,
		// A snapshot soon after a membership change: a node just added
		// takes none from before it.
		OnConfChange: func() { owner.tell(func(e *Entity) { e.snap.sinceLast = max(e.snap.sinceLast, b.opts.SnapshotEvery) }) },
	})
	if err != nil {
		return fmt.Errorf("entity %s: %w", e.name, err)
	}
	close(opened)
	if layout.LogDir(e.dir) != m.Log().Dir() {
		m.Close()
		return fmt.Errorf("entity %s: its member's log is in %s, not %s", e.name, m.Log().Dir(), layout.LogDir(e.dir))
	}
	l := memberLog{m}
	e.log = l
	var el entityLog = l
	e.logRef.Store(&el)
	e.window = log.Window{}
	// Until its log says how it was created, the entity is as the
	// namespace created it (a topic, say, to a front end's checks).
	cfg := e.st.Config()
	if !e.st.Created() && e.raft.cfg != nil {
		cfg = *e.raft.cfg
	}
	e.cfg.Store(&cfg)
	e.fwd = forwarders{gen: e.fwd.gen}
	e.durable = m.DurableIndex()
	return nil
}

// raftTold runs what the member told, in order, on the actor.
func (e *Entity) raftTold() {
	e.raft.mu.Lock()
	items := e.raft.inbox
	e.raft.inbox = nil
	e.raft.mu.Unlock()
	for _, it := range items {
		if it.gen == e.raft.gen && e.failed == nil {
			it.f(e)
		}
	}
}

// entityOwner is the entity's actor as its member's Owner: it queues
// what the member says and wakes the actor, never blocking the member.
type entityOwner struct {
	e   *Entity
	gen uint64
}

func (o *entityOwner) tell(f func(*Entity)) {
	e := o.e
	e.raft.mu.Lock()
	e.raft.inbox = append(e.raft.inbox, raftItem{gen: o.gen, f: f})
	e.raft.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (o *entityOwner) Apply(evs []event.Event) {
	o.tell(func(e *Entity) { e.applyCommitted(evs) })
}

func (o *entityOwner) Restore(logIndex uint64, state []byte) {
	o.tell(func(e *Entity) {
		if err := e.restoreMember(logIndex, state); err != nil {
			e.fail(fmt.Errorf("restore a snapshot: %w", err))
		}
	})
}

func (o *entityOwner) Lead(term, next uint64) {
	o.tell(func(e *Entity) {
		if next != e.st.LastIndex()+1 {
			e.fail(fmt.Errorf("leads from log index %d with its state at %d", next, e.st.LastIndex()))
			return
		}
		e.raft.leading = true
		e.active.since.Store(e.b.clock.Now().UnixNano())
		e.b.logger.Info("entity leads", "entity", e.name, "term", term)
		if cfg := e.raft.cfg; cfg != nil && !e.st.Created() {
			evs, err := e.decide(projection.Configure{Name: e.name, Config: *cfg})
			if err == nil {
				err = e.commit(evs, nil)
			}
			if err != nil {
				e.b.logger.Warn("entity: recording its creation failed", "entity", e.name, "err", err)
			}
		}
	})
}

func (o *entityOwner) StepDown(committed uint64) {
	o.tell(func(e *Entity) {
		e.raft.leading = false
		// What was applied past the commit may be gone: the state is
		// taken again from the log, as after a failed write.
		e.fail(fmt.Errorf("%w (the term ended; committed up to %d)", ErrNotLeader, committed))
	})
}

// applyCommitted applies events the group committed that this node did
// not append.
func (e *Entity) applyCommitted(evs []event.Event) {
	if err := e.applyAppended(evs, nil); err != nil {
		return // applyAppended failed the entity
	}
	e.durable = e.log.DurableIndex()
}
