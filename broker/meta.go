package broker

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/broker/replica"
	"github.com/walbus/walbus/log/event"
)

// The metadata group (docs/cluster.md, "The metadata group"): a cluster
// node's namespace log is its member of one more Raft group, on every
// node, so that the nodes agree on the entities and their ids, which
// number the entities' own groups. Its leader records a creation or a
// deletion and answers once the group committed it; every other node
// applies what commits and opens or removes the entity's files and
// member (reconcile). The entities' settings are in their own logs.

// MetaGroup is the metadata group's number among a cluster's Raft groups:
// an entity's group is its namespace id, which starts at 1.
const MetaGroup uint64 = 0

// MetaEntity names the metadata group where entities' names go: in
// ClusterStatus and in a membership change.
const MetaEntity = "$namespace"

// metaWait bounds the wait for the metadata group to commit a record:
// the broker is locked meanwhile.
const metaWait = 10 * time.Second

// metaGroup is the node's member of the metadata group and the namespace
// as the group committed it.
type metaGroup struct {
	b       *Broker
	member  *replica.Member
	mu      sync.Mutex
	ns      *namespace        // as committed and applied here (mu)
	failed  error             // a committed record that could not be applied (mu)
	changed chan struct{}     // a token: ns changed, reconcile
	told    map[uint64]string // the peer addresses Cluster.OnPeer was told (b.mu)
}

// openMeta opens the node's member of the metadata group and returns the
// namespace as far as the member knows it committed.
func (b *Broker) openMeta() (*namespace, error) {
	c := b.opts.Cluster
	dir := layout.MetadataDir(b.opts.Dir)
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(layout.NamespaceDir(b.opts.Dir)); err == nil {
			return nil, fmt.Errorf("%s holds a namespace log outside a metadata group (a single node's, or a cluster node's of "+
				"walbus before the metadata group): start the cluster's node on an empty directory", b.opts.Dir)
		}
	}
	g := &metaGroup{b: b, ns: newNamespace(), changed: make(chan struct{}, 1), told: map[uint64]string{}}
	peers := c.Peers
	if c.Join {
		peers = nil // added by the group's leader (walbus cluster add)
	}
	m, err := replica.OpenMember(replica.MemberConfig{
		Config: replica.Config{ID: c.ID, Peers: peers},
		Dir:    dir, Log: b.logOptions("", nil, nil, nil), Tick: c.Tick,
		Send:     func(msg *pb.Message) { c.Send(MetaGroup, msg) },
		Owner:    metaOwner{g},
		Counters: c.Counters,
		// A restart opens at once the entities the node knew of.
		SyncCommit: true,
	})
	if err != nil {
		return nil, fmt.Errorf("open the metadata group's member: %w", err)
	}
	g.member = m
	b.meta = g
	// What the member knows committed is applied at once, from its own
	// log: wait for it, so that the entities it names open now.
	deadline := time.Now().Add(time.Minute)
	for {
		st := m.Status()
		if st.Applied >= st.Commit {
			break
		}
		if time.Now().After(deadline) {
			m.Close()
			return nil, fmt.Errorf("the metadata group's member has applied %d of its %d committed entries after a minute",
				st.Applied, st.Commit)
		}
		time.Sleep(time.Millisecond)
	}
	g.mu.Lock()
	ns, failed := g.ns.clone(), g.failed
	g.mu.Unlock()
	if failed != nil {
		m.Close()
		return nil, failed
	}
	g.tellPeers(ns)
	return ns, nil
}

// tellPeers tells Cluster.OnPeer the peer addresses ns records that it
// was not told yet.
func (g *metaGroup) tellPeers(ns *namespace) {
	on := g.b.opts.Cluster.OnPeer
	for _, id := range slices.Sorted(maps.Keys(ns.peers)) {
		addr := ns.peers[id]
		if old, ok := g.told[id]; ok && old == addr {
			continue
		}
		g.told[id] = addr
		if on != nil {
			on(id, addr)
		}
	}
}

// RecordPeer records in the metadata group that node id listens for its
// peers at addr, or, with addr "", that it left the cluster: every node
// is told (Cluster.OnPeer), now or when it next applies the group's log.
// Only the node that leads the group records (a *NotLeaderError
// otherwise).
func (b *Broker) RecordPeer(id uint64, addr string) error {
	if b.meta == nil {
		return errors.New("not a cluster's node")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	b.meta.mu.Lock()
	old, ok := b.meta.ns.peers[id]
	b.meta.mu.Unlock()
	if ok && old == addr {
		return nil
	}
	if err := b.appendNamespace([]event.Event{{Type: event.NodeAddress, Source: id, Name: addr}}); err != nil {
		return err
	}
	b.meta.mu.Lock()
	ns := b.meta.ns.clone()
	b.meta.mu.Unlock()
	b.meta.tellPeers(ns)
	return nil
}

func (g *metaGroup) close() error { return g.member.Close() }

// apply takes records the group committed into the namespace.
func (g *metaGroup) apply(evs []event.Event) {
	g.mu.Lock()
	for i := range evs {
		if err := g.ns.apply(&evs[i]); err != nil && g.failed == nil {
			g.failed = err
			g.b.logger.Error("the metadata group committed a record this node cannot read", "err", err)
		}
	}
	g.mu.Unlock()
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// append records evs, if this node leads the group, and waits until the
// group committed them; they are in the namespace then. Callers hold b.mu:
// appends come one at a time.
func (g *metaGroup) append(evs []event.Event) error {
	done := make(chan error, 1)
	_, err := g.member.Append(evs, func(err error) {
		if err == nil {
			g.apply(evs) // committed, whether anyone still waits or not
		}
		done <- err
	})
	if errors.Is(err, replica.ErrNotLeader) {
		return &NotLeaderError{Leader: g.member.Leader()}
	}
	if err != nil {
		return err
	}
	select {
	case err := <-done:
		if errors.Is(err, replica.ErrNotLeader) {
			// Its fate is unknown: the next leader may commit it.
			return &NotLeaderError{Leader: g.member.Leader()}
		}
		return err
	case <-time.After(metaWait):
		return fmt.Errorf("the metadata group has not committed the namespace's change after %v (its fate is unknown)", metaWait)
	}
}

// voters is the group's voters as this node last applied them: those that
// found the group of an entity created now.
func (g *metaGroup) voters() []uint64 { return g.member.Status().Voters }

// runMeta keeps the node's entities as the metadata group says, until the
// broker closes.
func (b *Broker) runMeta() {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	for {
		select {
		case <-b.quit:
			return
		case <-b.meta.changed:
		case <-retry.C:
		}
		if !b.reconcile() {
			retry.Reset(time.Second)
		}
	}
}

// reconcile opens the entities the namespace has and the node does not,
// and closes and removes those it no longer has. It reports whether all
// went well.
func (b *Broker) reconcile() bool {
	g := b.meta
	b.mu.Lock()
	defer b.mu.Unlock()
	// Read under b.mu: what a creation or deletion on this node applied
	// before it let go of b.mu is in it.
	g.mu.Lock()
	ns, failed := g.ns.clone(), g.failed
	g.mu.Unlock()
	if b.closed || failed != nil {
		return true // a namespace this node could not follow changes nothing
	}
	if c, ok := b.clock.(*OffsetClock); ok {
		c.mu.Lock()
		c.setOffset(ns.advanced)
		c.mu.Unlock()
	}
	g.tellPeers(ns)
	for key, e := range b.entities {
		if _, live := ns.names[e.id]; live {
			continue
		}
		delete(b.entities, key)
		b.byGroup.Delete(e.id)
		e.close(false)
		if err := os.RemoveAll(e.dir); err != nil {
			b.logger.Warn("cannot remove a deleted entity's files; they go at the next start", "entity", e.name, "err", err)
		}
		b.logger.Info("entity deleted", "entity", e.name)
	}
	var evs []event.Event
	for _, id := range ns.ids() {
		if _, ok := b.byGroup.Load(id); !ok {
			evs = append(evs, event.Event{Index: id, Name: ns.names[id]})
		}
	}
	if len(evs) == 0 {
		return true
	}
	errs := make([]error, len(evs))
	if made := b.makeDirs(evs, errs); made != nil {
		errs = made
	}
	opened := make([]*Entity, len(evs))
	sideBySide(len(evs), createWorkers, func(k int) {
		if errs[k] == nil {
			spec := ns.specs[evs[k].Index]
			opened[k], _, errs[k] = b.openEntity(evs[k].Name, evs[k].Index, spec.Config, spec.Voters)
		}
	})
	ok := true
	for k, e := range opened {
		if errs[k] != nil {
			b.logger.Error("cannot open an entity the metadata group created; trying again", "entity", evs[k].Name, "err", errs[k])
			ok = false
			continue
		}
		t := ns.times[e.id]
		e.created.Store(t[0])
		e.updated.Store(t[1])
		b.entities[strings.ToLower(e.name)] = e
		b.byGroup.Store(e.id, e)
		b.logger.Info("entity created", "entity", e.name, "kind", ns.specs[e.id].Kind)
	}
	return ok
}

// founders is who founds the group of entity e on this node: the
// metadata group's voters when it was created (or the flags' nodes, for
// an entity recorded without them), none when this node is not one of
// them (it waits to be added) or when it joins a cluster that runs.
func (e *Entity) founders() []uint64 {
	c := e.b.opts.Cluster
	peers := c.Peers
	if e.raft.founders != nil {
		peers = e.raft.founders
	}
	if c.Join || !slices.Contains(peers, c.ID) {
		return nil
	}
	return peers
}

// metaChange takes one step of a membership change of the metadata group,
// as Entity.ChangeMembership does for an entity's group.
func (b *Broker) metaChange(step string, node uint64) error {
	done := make(chan error, 1)
	b.mu.Lock() // appends to the group come one at a time
	_, err := b.meta.member.AppendChange(step, node, func(err error) { done <- err })
	b.mu.Unlock()
	if errors.Is(err, replica.ErrNotLeader) {
		return &NotLeaderError{Leader: b.meta.member.Leader()}
	}
	if err != nil {
		return err
	}
	select {
	case err := <-done:
		if errors.Is(err, replica.ErrNotLeader) {
			err = &NotLeaderError{Leader: b.meta.member.Leader()}
		}
		return err
	case <-time.After(membershipWait):
		return fmt.Errorf("the metadata group has not committed %s %d after %v", step, node, membershipWait)
	}
}

// ChangeMembership takes one step of a membership change for node in the
// group of the entity called name, or of the metadata group (MetaEntity),
// if this node leads it (a *NotLeaderError otherwise).
func (b *Broker) ChangeMembership(name, step string, node uint64) error {
	if name == MetaEntity && b.meta != nil {
		return b.metaChange(step, node)
	}
	e, err := b.Entity(name)
	if err != nil {
		return err
	}
	return e.ChangeMembership(step, node)
}

// metaOwner is the metadata group's member's Owner: it never blocks.
type metaOwner struct{ g *metaGroup }

func (o metaOwner) Apply(evs []event.Event) { o.g.apply(evs) }

// Restore would take a snapshot of the namespace from the leader; the
// metadata group takes none (its log is never cut), so none comes.
func (o metaOwner) Restore(logIndex uint64, _ []byte) {
	o.g.mu.Lock()
	defer o.g.mu.Unlock()
	o.g.failed = fmt.Errorf("the metadata group's member was given a snapshot (log index %d), which it cannot take", logIndex)
	o.g.b.logger.Error("metadata group", "err", o.g.failed)
}

func (o metaOwner) Lead(term, _ uint64) {
	o.g.b.logger.Info("this node leads the metadata group", "term", term)
}

// StepDown changes nothing: the leader takes a record into its namespace
// only once the group committed it.
func (o metaOwner) StepDown(uint64) {}
