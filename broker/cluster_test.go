package broker

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

	"github.com/walbus/walbus/broker/replica"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// testNet connects the brokers of one process as a cluster's peer
// transport would.
type testNet struct {
	mu      sync.Mutex
	brokers map[uint64]*Broker
	cut     map[uint64]bool // nodes cut off from the others
}

func (n *testNet) sender(from uint64) func(group uint64, m *pb.Message) {
	return func(group uint64, m *pb.Message) {
		n.mu.Lock()
		b := n.brokers[m.GetTo()]
		up := n.brokers[from] != nil && !n.cut[from] && !n.cut[m.GetTo()]
		n.mu.Unlock()
		if b != nil && up {
			b.Step(group, proto.Clone(m).(*pb.Message))
		}
	}
}

// TestClusterQueueFailsOver: three brokers in one process hold a queue
// whose log is replicated. Its leader takes sends and locks; the others
// refuse work and follow, with the same messages under the same
// SequenceNumbers. The leader's node goes away; another node leads and
// serves what was acknowledged: a completed message stays gone, a lock
// committed before the failover still settles there (its token is a
// fencing token), a second settlement of the same delivery is refused.
// The node that went away comes back and catches up.
func TestClusterQueueFailsOver(t *testing.T) {
	c := newCluster(t)
	open, down, entity, leaderOf := c.open, c.down, c.entity, c.leaderOf
	leader := leaderOf(0)
	var msgs []projection.Message
	for i := range 20 {
		msgs = append(msgs, projection.Message{MessageID: fmt.Sprintf("m%d", i), Body: fmt.Appendf(nil, "body %d", i)})
	}
	sendUntilCreated(t, entity(leader), msgs[:1])
	sendSync(t, entity(leader), msgs[1:]...)
	follower := leader%3 + 1
	done := make(chan error, 1)
	entity(follower).Send(event.MainQueue, msgs[:1], func(err error) { done <- err })
	if err := <-done; !errors.Is(err, ErrNotLeader) {
		t.Fatalf("a send on a follower: %v, want ErrNotLeader", err)
	}
	want := peekAll(t, entity(leader))
	if len(want) != 20 {
		t.Fatalf("the leader holds %d messages, want 20", len(want))
	}
	for id := uint64(1); id <= 3; id++ {
		waitSame(t, entity(id), want)
	}

	// Five locked; two completed, one of them twice.
	got := make(chan Delivery, 5)
	r, err := entity(leader).Attach(ReceiverOptions{Name: "r", Queue: event.MainQueue, Mode: PeekLock,
		Deliver: func(d Delivery) { got <- d }})
	if err != nil {
		t.Fatal(err)
	}
	r.SetLimit(5)
	var locked []Delivery
	for range 5 {
		locked = append(locked, nextDelivery(t, got))
	}
	settleSync(t, entity(leader), locked[0], Settlement{Outcome: Complete})
	settleSync(t, entity(leader), locked[1], Settlement{Outcome: Complete})
	// The locks are committed by now: the completions came after them.

	down(leader)
	next := leaderOf(leader)
	e := entity(next)
	// A settlement with a committed lock's token works on the new leader.
	settleSync(t, e, locked[2], Settlement{Outcome: Complete})
	// A second settlement of a completed delivery is refused.
	ch := make(chan error, 1)
	e.Settle(event.MainQueue, Settlement{Token: locked[0].Token, Outcome: Complete}, func(err error) { ch <- err })
	if err := <-ch; !errors.Is(err, ErrLockLost) {
		t.Fatalf("completing a completed message again after the failover: %v, want lock lost", err)
	}
	after := peekAll(t, e)
	gone := map[uint64]bool{locked[0].Seq: true, locked[1].Seq: true, locked[2].Seq: true}
	var left []Delivery
	for _, d := range want {
		if !gone[d.Seq] {
			left = append(left, d)
		}
	}
	if !sameMessages(after, left) {
		t.Fatalf("after the failover the new leader holds %v, want %v", seqs(after), seqs(left))
	}
	sendSync(t, e, projection.Message{MessageID: "after", Body: []byte("after the failover")})
	final := peekAll(t, e)

	// The old leader's node comes back and catches up.
	open(leader)
	for id := uint64(1); id <= 3; id++ {
		waitSame(t, entity(id), final)
	}
}

// TestClusterLeaderCutOff cuts the queue's leader off from the others
// while sends are under way. Its sends stop being acknowledged: each
// gets an error or, if its entry was committed in time, an
// acknowledgement. The others elect a leader that serves. Once the
// network heals, the old leader has stepped down, dropped what it had
// applied past the commit, and holds what the group holds: every
// acknowledged send, none of the refused ones that the group never
// committed twice.
func TestClusterLeaderCutOff(t *testing.T) {
	c := newCluster(t)
	old := c.leaderOf(0)
	sendUntilCreated(t, c.entity(old), []projection.Message{{MessageID: "first", Body: []byte("1")}})

	// Twenty acknowledged, then eighty in flight when the cut comes.
	for i := range 20 {
		sendSync(t, c.entity(old), projection.Message{MessageID: fmt.Sprintf("s%d", i), Body: []byte("x")})
	}
	results := make(chan error, 80)
	for i := 20; i < 100; i++ {
		if i == 21 {
			c.isolate(old, true)
		}
		c.entity(old).Send(event.MainQueue, []projection.Message{{MessageID: fmt.Sprintf("s%d", i), Body: []byte("x")}},
			func(err error) { results <- err })
	}
	acked, refused := 20, 0
	for range 80 {
		select {
		case err := <-results:
			if err == nil {
				acked++
			} else {
				refused++
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("a send to the cut-off leader has no answer (%d acknowledged, %d refused so far)", acked, refused)
		}
	}
	if refused == 0 {
		t.Fatal("a leader cut off from its group acknowledged every send")
	}
	next := c.leaderOf(old)
	sendSync(t, c.entity(next), projection.Message{MessageID: "after", Body: []byte("2")})
	c.isolate(old, false)
	want := peekAll(t, c.entity(next))
	for id := uint64(1); id <= 3; id++ {
		waitSame(t, c.entity(id), want)
	}
	// Every acknowledged send is there; ids are unique.
	ids := map[string]int{}
	for _, d := range want {
		ids[d.MessageID]++
		if ids[d.MessageID] > 1 {
			t.Fatalf("message %s is there twice", d.MessageID)
		}
	}
	for _, id := range []string{"first", "after", "s0", "s19"} {
		if ids[id] != 1 {
			t.Fatalf("acknowledged send %s is not there", id)
		}
	}
	if len(want) < acked+2 {
		t.Fatalf("%d messages after %d sends were acknowledged (and two more)", len(want), acked)
	}
	t.Logf("%d acknowledged, %d refused; %d messages in the end", acked, refused, len(want))
}

// testCluster is three brokers of one process holding the queue
// "orders".
type testCluster struct {
	t    *testing.T
	net  *testNet
	dirs map[uint64]string
	tune func(id uint64, o *Options) // if set, changes each node's options
}

func newCluster(t *testing.T, tune ...func(id uint64, o *Options)) *testCluster {
	c := &testCluster{t: t, net: &testNet{brokers: map[uint64]*Broker{}, cut: map[uint64]bool{}}, dirs: map[uint64]string{}}
	if len(tune) > 0 {
		c.tune = tune[0]
	}
	for id := uint64(1); id <= 3; id++ {
		c.dirs[id] = filepath.Join(t.TempDir(), fmt.Sprint(id))
		c.open(id)
	}
	c.create("orders", func(b *Broker) error {
		_, err := b.CreateQueue("orders", projection.DefaultConfig())
		return err
	})
	t.Cleanup(func() {
		for id := uint64(1); id <= 3; id++ {
			c.net.mu.Lock()
			b := c.net.brokers[id]
			c.net.mu.Unlock()
			if b != nil {
				b.Close()
			}
		}
	})
	return c
}

// create makes the entity called name with mk on the node that leads
// the metadata group, and waits until every node that is up holds it.
func (c *testCluster) create(name string, mk func(*Broker) error) {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for made := false; !made; {
		for id := uint64(1); id <= 3 && !made; id++ {
			b := c.broker(id)
			if b == nil {
				continue
			}
			err := mk(b)
			if err != nil && !errors.Is(err, ErrNotLeader) {
				c.t.Fatalf("create %s on node %d: %v", name, id, err)
			}
			made = err == nil
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no node leads the metadata group to create %s", name)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for id := uint64(1); id <= 3; id++ {
		for b := c.broker(id); b != nil; time.Sleep(5 * time.Millisecond) {
			if _, err := b.Entity(name); err == nil {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("node %d never opened %s", id, name)
			}
		}
	}
}

// open starts node id on its directory.
func (c *testCluster) open(id uint64) *Broker {
	// A cache of one byte: every message body is read back from the
	// member's log, by the positions its storage recorded.
	o := Options{Dir: c.dirs[id], Seed: id, CacheBytes: 1,
		Cluster: &Cluster{ID: id, Peers: []uint64{1, 2, 3}, Send: c.net.sender(id), Tick: 10 * time.Millisecond,
			BalanceEvery: -1}} // tests move leaders themselves
	if c.tune != nil {
		c.tune(id, &o)
	}
	b := openBroker(c.t, o)
	c.net.mu.Lock()
	c.net.brokers[id] = b
	c.net.mu.Unlock()
	return b
}

// down stops node id.
func (c *testCluster) down(id uint64) {
	c.net.mu.Lock()
	b := c.net.brokers[id]
	delete(c.net.brokers, id)
	c.net.mu.Unlock()
	if err := b.Close(); err != nil {
		c.t.Fatalf("close node %d: %v", id, err)
	}
}

// isolate cuts node id off from the others, or heals it.
func (c *testCluster) isolate(id uint64, cut bool) {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	c.net.cut[id] = cut
}

func (c *testCluster) entity(id uint64) *Entity { return c.entityOn(id, "orders") }

// entityOn is the entity called name on node id.
func (c *testCluster) entityOn(id uint64, name string) *Entity {
	c.net.mu.Lock()
	b := c.net.brokers[id]
	c.net.mu.Unlock()
	e, err := b.Entity(name)
	if err != nil {
		c.t.Fatal(err)
	}
	return e
}

// leaderOf waits for a node other than not that leads the queue.
func (c *testCluster) leaderOf(not uint64) uint64 { return c.leaderOfEntity("orders", not) }

// leaderOfEntity waits for a node other than not that leads the entity
// called name.
func (c *testCluster) leaderOfEntity(name string, not uint64) uint64 {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for id := uint64(1); id <= 3; id++ {
			c.net.mu.Lock()
			up := c.net.brokers[id] != nil && !c.net.cut[id]
			c.net.mu.Unlock()
			if id != not && up && c.entityOn(id, name).Leading() {
				return id
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("no node leads %s", name)
	return 0
}

// sendUntilCreated sends msgs on e once its creation is committed (the
// leader records it when it begins to lead).
func sendUntilCreated(t *testing.T, e *Entity, msgs []projection.Message) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ch := make(chan error, 1)
		e.Send(event.MainQueue, msgs, func(err error) { ch <- err })
		err := <-ch
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("send: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func peekAll(t *testing.T, e *Entity) []Delivery {
	t.Helper()
	ds, err := e.Peek(event.MainQueue, 1, 1000, "")
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func seqs(ds []Delivery) []uint64 {
	var out []uint64
	for _, d := range ds {
		out = append(out, d.Seq)
	}
	return out
}

// sameMessages compares what a peek shows of two lists: numbers, ids,
// bodies.
func sameMessages(a, b []Delivery) bool {
	return slices.EqualFunc(a, b, func(x, y Delivery) bool {
		return x.Seq == y.Seq && x.MessageID == y.MessageID && string(x.Message) == string(y.Message)
	})
}

// waitSame waits until e holds the messages want.
func waitSame(t *testing.T, e *Entity, want []Delivery) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ds, err := e.Peek(event.MainQueue, 1, 1000, "")
		if err == nil && sameMessages(ds, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %v (%v), want %v", e.Name(), seqs(ds), err, seqs(want))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClusterSnapshotCatchUp: a node is down while its queue's leader
// takes a backlog of 30 messages, defers them, and then takes and
// removes enough others to be snapshotted several times. The leader's
// log is cut in front of its snapshots, but not before the backlog,
// whose bodies are records there. The node comes back behind the
// leader's log and catches up from a snapshot that carries those
// records; it holds the same messages, reads their bodies from its
// archive (its cache holds one byte), and keeps them across a restart.
// Once it leads, it hands the deferred messages out.
func TestClusterSnapshotCatchUp(t *testing.T) {
	counters := map[uint64]*replica.Counters{}
	for id := uint64(1); id <= 3; id++ {
		counters[id] = &replica.Counters{}
	}
	c := newCluster(t, func(id uint64, o *Options) {
		o.SegmentSize, o.SnapshotEvery = 16<<10, 100
		o.Cluster.Counters = counters[id]
	})
	leader := c.leaderOf(0)
	behind := leader%3 + 1
	c.down(behind)

	e := c.entity(leader)
	sendUntilCreated(t, e, []projection.Message{{MessageID: "fill-first", Body: []byte("x")}})
	got := make(chan Delivery, 64)
	rd, err := e.Attach(ReceiverOptions{Name: "rd", Queue: event.MainQueue, Mode: ReceiveAndDelete, Deliver: func(d Delivery) { got <- d }})
	if err != nil {
		t.Fatal(err)
	}
	// Filler, taken as it comes: the deferred backlog stays.
	var taken uint64
	body := make([]byte, 1024)
	fill := func(rounds int) {
		for range rounds {
			round := taken / 40
			var msgs []projection.Message
			for i := range 40 {
				msgs = append(msgs, projection.Message{MessageID: fmt.Sprintf("fill-%d-%d", round, i), Body: body})
			}
			if round == 0 {
				msgs = msgs[:39] // and the first one
			}
			sendSync(t, e, msgs...)
			taken += 40
			rd.SetLimit(taken)
			for range 40 {
				if d := nextDelivery(t, got); !strings.HasPrefix(d.MessageID, "fill-") {
					t.Fatalf("deferred message %s delivered", d.MessageID)
				}
			}
		}
	}
	fill(4)

	var backlog []projection.Message
	for i := range 30 {
		backlog = append(backlog, projection.Message{MessageID: fmt.Sprintf("keep-%d", i), Body: fmt.Appendf(nil, "kept body %d", i)})
	}
	sendSync(t, e, backlog...)
	r, err := e.Attach(ReceiverOptions{Name: "r", Queue: event.MainQueue, Mode: PeekLock, Deliver: func(d Delivery) { got <- d }})
	if err != nil {
		t.Fatal(err)
	}
	r.SetLimit(uint64(len(backlog)))
	var deferred []uint64
	for range backlog {
		d := nextDelivery(t, got)
		settleSync(t, e, d, Settlement{Outcome: Defer})
		deferred = append(deferred, d.Seq)
	}
	r.Detach(nil)
	fill(8)
	rd.Detach(nil)
	st := groupStatus(t, c.broker(leader))
	if st.Snapshot == 0 {
		t.Fatalf("the leader took no snapshot: %+v", st)
	}
	final := peekAll(t, e)
	if len(final) != len(backlog) {
		t.Fatalf("the leader holds %d messages, want the %d deferred", len(final), len(backlog))
	}
	if first := e.log.FirstIndex(); first <= 1 || first > final[0].Seq {
		t.Fatalf("the leader's log begins at %d; the backlog at %d (snapshot at entry %d)", first, final[0].Seq, st.Snapshot)
	}

	c.open(behind)
	waitSame(t, c.entity(behind), final)
	if n := counters[behind].SnapshotsReceived.Load(); n == 0 {
		t.Fatalf("node %d caught up without a snapshot", behind)
	}
	if n := counters[leader].SnapshotsSent.Load(); n == 0 {
		t.Fatal("the leader sent no snapshot")
	}
	c.down(behind)
	c.open(behind)
	waitSame(t, c.entity(behind), final)

	// The node that caught up leads: it hands out the deferred messages.
	for range 20 {
		l := c.leaderOf(0)
		if l == behind {
			break
		}
		c.down(l)
		c.leaderOf(l)
		c.open(l)
	}
	if l := c.leaderOf(0); l != behind {
		t.Fatalf("node %d never led in 20 elections", behind)
	}
	ch := make(chan []Delivery, 1)
	c.entity(behind).ReceiveDeferred(event.MainQueue, "r", "", deferred, PeekLock, func(ds []Delivery, err error) {
		if err != nil {
			t.Error(err)
		}
		ch <- ds
	})
	ds := <-ch
	if !sameMessages(ds, final) {
		t.Fatalf("node %d hands out %v, want %v", behind, seqs(ds), seqs(final))
	}
}

// broker is node id's broker.
func (c *testCluster) broker(id uint64) *Broker {
	c.net.mu.Lock()
	defer c.net.mu.Unlock()
	return c.net.brokers[id]
}

// groupStatus is the status of the queue's group on b.
func groupStatus(t *testing.T, b *Broker) GroupStatus {
	t.Helper()
	for _, g := range b.ClusterStatus() {
		if g.Entity == "orders" {
			return g
		}
	}
	t.Fatal("no group for the queue")
	return GroupStatus{}
}
