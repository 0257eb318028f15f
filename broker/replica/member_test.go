package replica

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
)

// TestMembersFailOver runs three members in real time, on entity logs on
// disk, connected in memory. The leader's owner appends sends; each is
// acknowledged once committed. The leader is killed (its member closed
// without a word to the others); a new one is elected and serves; what
// the old one had acknowledged is there, in the same log indexes, on
// every member; appends to the dead one fail. The killed member starts
// again from its directory and catches up. Throughout, every owner sees
// log indexes only go up, and a follower's owner holds exactly what the
// log holds.
func TestMembersFailOver(t *testing.T) {
	c := newTestCluster(t, 3)
	defer c.close()

	leader := c.waitLeader(0)
	acked := c.sends(t, leader, 60)
	c.kill(leader)
	next := c.waitLeader(leader)
	if next == leader {
		t.Fatalf("member %d still leads after it was killed", leader)
	}
	acked = append(acked, c.sends(t, next, 60)...)
	c.restart(leader)
	c.waitCaughtUp(next)

	// Every member holds every acknowledged send, at the index its
	// acknowledgement gave, and all agree on everything committed.
	c.agree(t, next, acked, logBegins)
	if _, err := c.members[leader-1].Append([]event.Event{{Type: event.Enqueued, MessageID: "late"}}, nil); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("an append to a member that follows: %v", err)
	}
}

// TestMembersPartitionedLeader cuts the leader off while its owner has
// appends in flight. It steps down once it misses a quorum (CheckQuorum):
// what it had not seen committed fails with ErrNotLeader, and its owner
// drops what it applied past the commit. The others elect a leader that
// serves. Once the network heals, the old leader's uncommitted entries
// are overruled (its log cut back), its owner holds what the group
// committed, and every acknowledged append is there on every member.
func TestMembersPartitionedLeader(t *testing.T) {
	c := newTestCluster(t, 3)
	defer c.close()
	old := c.waitLeader(0)
	acked := c.sends(t, old, 10)

	// Appends in flight, then the cut.
	m, o := c.members[old-1], c.owner(old)
	results := make(chan error, 200)
	var sent []ackedSend
	for i := range 200 {
		if i == 50 {
			// The first 50 are committed before the cut.
			for range 50 {
				if err := <-results; err != nil {
					t.Fatalf("append before the cut: %v", err)
				}
			}
			acked = append(acked, sent...)
			sent = nil
			c.isolate(old, true)
		}
		msgID := fmt.Sprintf("p%d", i)
		evs := []event.Event{{Type: event.Enqueued, MessageID: msgID}}
		o.mu.Lock()
		first, err := m.Append(evs, func(err error) { results <- err })
		if err == nil {
			o.add(evs)
		}
		o.mu.Unlock()
		if err != nil {
			if !errors.Is(err, ErrNotLeader) {
				t.Fatal(err)
			}
			break // stepped down
		}
		sent = append(sent, ackedSend{first, msgID})
	}
	failed := 0
	for i := range sent {
		select {
		case err := <-results:
			if err == nil {
				acked = append(acked, sent[i]) // acknowledged in order
			} else if errors.Is(err, ErrNotLeader) {
				failed++
			} else {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("append %d of %d has no answer", i, len(sent))
		}
	}
	if failed == 0 {
		t.Fatalf("all %d appends after the cut were acknowledged by a leader cut off", len(sent))
	}
	next := c.waitLeader(old)
	acked = append(acked, c.sends(t, next, 20)...)
	c.isolate(old, false)
	c.waitCaughtUp(next)

	c.agree(t, next, acked, logEquals)
	t.Logf("%d acknowledged, %d failed when the leader was cut off", len(acked), failed)
}

// TestMembersSnapshot: the leader snapshots its owner's state and drops
// its log in front of it, so a follower that was down catches up from
// the snapshot (its owner restores it, its log is reset to go on after
// it); a member restarted after that starts from its snapshot. Every
// owner ends with the same state.
func TestMembersSnapshot(t *testing.T) {
	c := newTestCluster(t, 3)
	defer c.close()
	leader := c.waitLeader(0)
	follower := leader%3 + 1
	c.kill(follower)
	acked := c.sends(t, leader, 100)
	at := acked[len(acked)-1].index
	if err := c.members[leader-1].Compact(at, encodeRecs(c.owner(leader).snapshot(), at), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.members[leader-1].Compact(at-1, nil, 0); err == nil {
		t.Fatal("a snapshot inside an entry, or behind the last, was taken")
	}
	acked = append(acked, c.sends(t, leader, 10)...)
	c.restart(follower)
	c.waitCaughtUp(leader)
	if n := c.owner(follower).restored(); n != 1 {
		t.Fatalf("the follower restored %d snapshots, want 1", n)
	}
	if first := c.fromLog(t, follower)[0].index; first != at+1 {
		t.Fatalf("the follower's log begins at %d, want %d: after the snapshot", first, at+1)
	}
	// The leader restarts on its snapshot and the log after it.
	c.kill(leader)
	next := c.waitLeader(leader)
	acked = append(acked, c.sends(t, next, 10)...)
	c.restart(leader)
	c.waitCaughtUp(next)
	if n := c.owner(leader).restored(); n != 1 {
		t.Fatalf("the restarted leader restored %d snapshots, want 1", n)
	}
	c.agree(t, next, acked, logCut)
}

// How agree compares a member's log with its owner's state.
type logCheck int

const (
	logEquals logCheck = iota // the log holds the state, no more
	logBegins                 // the log begins with the state
	logCut                    // the log was cut in front: not compared
)

// agree checks the end of a test: every member's owner holds what the
// leader's does, every member's log holds it (as logs says), and every
// acknowledged append is at the log index its acknowledgement gave.
func (c *testCluster) agree(t *testing.T, leader uint64, acked []ackedSend, logs logCheck) {
	t.Helper()
	want := c.owner(leader).snapshot()
	for id := range uint64(len(c.members)) {
		if c.down[id+1] {
			continue
		}
		if got := c.owner(id + 1).snapshot(); !slices.Equal(got, want) {
			t.Fatalf("member %d holds %d records, the leader %d; first difference at %d", id+1, len(got), len(want),
				firstDiff(got, want))
		}
		if logs == logCut {
			continue
		}
		onDisk := c.fromLog(t, id+1)
		if logs == logBegins && len(onDisk) > len(want) {
			onDisk = onDisk[:len(want)]
		}
		if !slices.Equal(onDisk, want) {
			t.Fatalf("member %d's log (%d records) differs from the leader's state (%d) at %d", id+1, len(onDisk), len(want),
				firstDiff(onDisk, want))
		}
	}
	byIndex := map[uint64]string{}
	for _, r := range want {
		byIndex[r.index] = r.id
	}
	for _, a := range acked {
		if byIndex[a.index] != a.id {
			t.Fatalf("acknowledged append %s at log index %d: the state has %q there", a.id, a.index, byIndex[a.index])
		}
	}
}

// The test clusters' Raft tick and log segment size: small segments, so
// that logs roll, and are cut and reset, often.
var (
	testTick    = 10 * time.Millisecond
	testSegment = 4096
)

type rec struct {
	index uint64
	typ   event.Type
	id    string
}

type ackedSend struct {
	index uint64
	id    string
}

func firstDiff(a, b []rec) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// testOwner stands for an entity's actor: it keeps the records it applied
// or appended, in log order.
type testOwner struct {
	t        *testing.T
	mu       sync.Mutex
	recs     []rec
	lead     chan uint64
	restores int
}

func (o *testOwner) add(evs []event.Event) {
	for _, ev := range evs {
		if n := len(o.recs); n > 0 && ev.Index <= o.recs[n-1].index {
			o.t.Errorf("index %d after %d", ev.Index, o.recs[n-1].index)
		}
		o.recs = append(o.recs, rec{ev.Index, ev.Type, ev.MessageID})
	}
}

func (o *testOwner) Apply(evs []event.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.add(evs)
}

// Restore takes the state encodeRecs made.
func (o *testOwner) Restore(logIndex uint64, state []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.recs = nil
	for _, line := range strings.Split(string(state), "\n") {
		var r rec
		var typ int
		if line == "" {
			continue
		}
		if _, err := fmt.Sscanf(line, "%d %d %s", &r.index, &typ, &r.id); err != nil {
			o.t.Errorf("snapshot line %q: %v", line, err)
		}
		r.typ, r.id = event.Type(typ), strings.TrimPrefix(r.id, "=")
		o.recs = append(o.recs, r)
	}
	if n := len(o.recs); n > 0 && o.recs[n-1].index != logIndex {
		o.t.Errorf("a snapshot at %d ends at %d", logIndex, o.recs[n-1].index)
	}
	o.restores++
}

func (o *testOwner) restored() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.restores
}

// encodeRecs is an owner's state as of log index upTo, for a snapshot.
func encodeRecs(recs []rec, upTo uint64) []byte {
	var b []byte
	for _, r := range recs {
		if r.index <= upTo {
			b = fmt.Appendf(b, "%d %d =%s\n", r.index, r.typ, r.id)
		}
	}
	return b
}

func (o *testOwner) Lead(term, next uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if n := len(o.recs); n > 0 && next != o.recs[n-1].index+1 {
		o.t.Errorf("leads from %d after %d", next, o.recs[n-1].index)
	}
	select {
	case o.lead <- term:
	default:
	}
}

// StepDown: what was applied past committed may be gone.
func (o *testOwner) StepDown(committed uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.recs) > 0 && o.recs[len(o.recs)-1].index > committed {
		o.recs = o.recs[:len(o.recs)-1]
	}
}

func (o *testOwner) snapshot() []rec {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.recs)
}

type testCluster struct {
	joining map[uint64]bool // members that start outside the group
	t       *testing.T
	dirs    []string
	mu      sync.Mutex
	members []*Member
	owners  []*testOwner
	down    map[uint64]bool
	cut     map[uint64]bool
}

func newTestCluster(t *testing.T, n int) *testCluster {
	c := &testCluster{t: t, down: map[uint64]bool{}, cut: map[uint64]bool{}}
	for i := range n {
		c.dirs = append(c.dirs, filepath.Join(t.TempDir(), fmt.Sprint(i+1)))
		c.members = append(c.members, nil)
		c.owners = append(c.owners, nil)
	}
	for id := range uint64(n) {
		c.start(id + 1)
	}
	return c
}

func (c *testCluster) peers() []uint64 {
	var out []uint64
	for i := range c.dirs {
		out = append(out, uint64(i+1))
	}
	return out
}

func (c *testCluster) start(id uint64) {
	o := &testOwner{t: c.t, lead: make(chan uint64, 1)}
	peers := c.peers()
	if c.joining[id] {
		peers = nil // it learns the group from its leader
	}
	m, err := OpenMember(MemberConfig{Config: Config{ID: id, Peers: peers, ElectionTicks: 10, HeartbeatTicks: 1},
		Dir: c.dirs[id-1], Log: log.Options{Sync: log.SyncAlways, SegmentSize: testSegment}, Tick: testTick,
		Send: c.send, Owner: o})
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.members[id-1], c.owners[id-1] = m, o
	delete(c.down, id)
	c.mu.Unlock()
}

// isolate cuts member id off from the others, or heals it.
func (c *testCluster) isolate(id uint64, cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut[id] = cut
}

// send delivers a copy of msg to its member, unless that one is down or
// either end is cut off.
func (c *testCluster) send(msg *pb.Message) {
	c.mu.Lock()
	m := c.members[msg.GetTo()-1]
	down := c.down[msg.GetTo()] || c.down[msg.GetFrom()] || c.cut[msg.GetTo()] || c.cut[msg.GetFrom()]
	c.mu.Unlock()
	if m != nil && !down {
		m.Step(proto.Clone(msg).(*pb.Message))
	}
}

func (c *testCluster) owner(id uint64) *testOwner {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owners[id-1]
}

// waitLeader waits for a member other than not to serve as leader.
func (c *testCluster) waitLeader(not uint64) uint64 {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for i, m := range c.members {
			id := uint64(i + 1)
			if id == not || c.down[id] {
				continue
			}
			if ok, _ := m.Leading(); ok {
				return id
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatal("no member leads")
	return 0
}

// sends appends n sends on the leader, as its owner does (the events
// applied at once), and waits for each acknowledgement.
func (c *testCluster) sends(t *testing.T, id uint64, n int) []ackedSend {
	m, o := c.members[id-1], c.owner(id)
	var out []ackedSend
	for i := range n {
		msgID := fmt.Sprintf("m%d-%d", id, i)
		evs := []event.Event{{Type: event.Enqueued, MessageID: msgID, Message: []byte("body")}}
		done := make(chan error, 1)
		o.mu.Lock()
		first, err := m.Append(evs, func(err error) { done <- err })
		if err == nil {
			o.add(evs)
		}
		o.mu.Unlock()
		if err != nil {
			t.Fatalf("append %s on the leader %d: %v", msgID, id, err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("send %s: %v", msgID, err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("send %s was never acknowledged", msgID)
		}
		if m.DurableIndex() < first {
			t.Fatalf("send %s at %d acknowledged with the durable index at %d", msgID, first, m.DurableIndex())
		}
		out = append(out, ackedSend{first, msgID})
	}
	return out
}

// kill closes member id's member as kill -9 would leave it: the others
// hear nothing more from it.
func (c *testCluster) kill(id uint64) {
	c.mu.Lock()
	c.down[id] = true
	m := c.members[id-1]
	c.mu.Unlock()
	if err := m.Close(); err != nil {
		c.t.Fatal(err)
	}
}

func (c *testCluster) restart(id uint64) { c.start(id) }

// waitCaughtUp waits until every member applied what the leader did.
func (c *testCluster) waitCaughtUp(leader uint64) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		want := c.members[leader-1].DurableIndex()
		ok := true
		for i, m := range c.members {
			ok = ok && (c.down[uint64(i+1)] || m.DurableIndex() == want)
		}
		if ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatal("the members did not catch up")
}

// fromLog reads member id's entity log as its owner would after a
// restart: every record, markers included, Raft's fields dropped.
func (c *testCluster) fromLog(t *testing.T, id uint64) []rec {
	var out []rec
	err := c.members[id-1].Log().Scan(0, func(ev *event.Event) error {
		out = append(out, rec{ev.Index, ev.Type, ev.MessageID})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (c *testCluster) close() {
	for i, m := range c.members {
		if !c.down[uint64(i+1)] {
			m.Close()
		}
	}
}

// TestMembersReplace replaces a dead member as an operator would: a new
// one joins the group as a learner (it starts knowing no group) and
// catches up, is promoted to voter, and the dead one is removed, each
// step an entry the leader's owner appends and counts a log index for,
// with sends before, between and after. Steps that do not fit the
// group (a promotion of a voter, the removal of a node not in it) are
// refused at commit, and an empty entry takes their log index. The
// group then commits without the dead member, and the new one holds
// what every other does.
func TestMembersReplace(t *testing.T) {
	c := newTestCluster(t, 3)
	defer c.close()
	leader := c.waitLeader(0)
	acked := c.sends(t, leader, 30)
	dead := leader%3 + 1
	c.kill(dead)

	c.mu.Lock()
	c.dirs = append(c.dirs, filepath.Join(t.TempDir(), "4"))
	c.members, c.owners = append(c.members, nil), append(c.owners, nil)
	c.joining = map[uint64]bool{4: true}
	c.mu.Unlock()
	c.start(4)

	step := func(what string, node uint64) error {
		m, o := c.members[leader-1], c.owner(leader)
		done := make(chan error, 1)
		o.mu.Lock()
		index, err := m.AppendChange(what, node, func(err error) { done <- err })
		if err == nil {
			o.add([]event.Event{{Index: index, Type: event.Marker}})
		}
		o.mu.Unlock()
		if err != nil {
			t.Fatalf("%s %d: %v", what, node, err)
		}
		select {
		case err := <-done:
			return err
		case <-time.After(20 * time.Second):
			t.Fatalf("%s %d: never committed", what, node)
			return nil
		}
	}
	members := func() Status { return c.members[leader-1].Status() }

	if err := step(AddLearner, 4); err != nil {
		t.Fatal(err)
	}
	if st := members(); !slices.Contains(st.Learners, 4) || slices.Contains(st.Voters, 4) {
		t.Fatalf("after adding learner 4: voters %v, learners %v", st.Voters, st.Learners)
	}
	acked = append(acked, c.sends(t, leader, 10)...)
	c.waitCaughtUp(leader)
	if err := step(Promote, 4); err != nil {
		t.Fatal(err)
	}
	if err := step(Promote, 4); err == nil {
		t.Fatal("a voter promoted again")
	}
	if err := step(Remove, 99); err == nil {
		t.Fatal("node 99, not in the group, removed")
	}
	if err := step(Remove, dead); err != nil {
		t.Fatal(err)
	}
	st := members()
	want := []uint64{1, 2, 3, 4}
	want = slices.DeleteFunc(want, func(id uint64) bool { return id == dead })
	if !slices.Equal(st.Voters, want) || len(st.Learners) > 0 {
		t.Fatalf("after the replacement: voters %v, learners %v; want voters %v", st.Voters, st.Learners, want)
	}
	// The group commits with the new member and without the dead one:
	// the leader's peer among the old ones is cut off, so the new one's
	// vote is needed.
	other := want[0]
	if other == leader {
		other = want[1]
	}
	c.isolate(other, true)
	acked = append(acked, c.sends(t, leader, 10)...)
	c.isolate(other, false)
	c.waitCaughtUp(leader)
	c.agree(t, leader, acked, logBegins)
	if c.members[3].Status().Voters == nil {
		t.Fatal("the new member knows no group")
	}
}

// TestMembersLastVoter: removing a group's last voter is refused (Raft
// would panic applying it), and the group goes on.
func TestMembersLastVoter(t *testing.T) {
	c := newTestCluster(t, 1)
	defer c.close()
	c.waitLeader(0)
	m, o := c.members[0], c.owner(1)
	done := make(chan error, 1)
	o.mu.Lock()
	index, err := m.AppendChange(Remove, 1, func(err error) { done <- err })
	if err == nil {
		o.add([]event.Event{{Index: index, Type: event.Marker}})
	}
	o.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("the last voter removed")
	}
	acked := c.sends(t, 1, 5)
	c.agree(t, 1, acked, logBegins)
}
