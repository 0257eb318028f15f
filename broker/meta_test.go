package broker

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/walbus/walbus/projection"
)

// metaLeader waits for the node that leads the metadata group.
func (c *testCluster) metaLeader() uint64 {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for id := uint64(1); id <= 3; id++ {
			if b := c.broker(id); b != nil && b.ClusterStatus()[0].Serving {
				return id
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatal("no node leads the metadata group")
	return 0
}

// waitEntity waits until node id holds the entity called name, or, if
// gone, until it holds it no more.
func (c *testCluster) waitEntity(id uint64, name string, gone bool) *Entity {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		e, err := c.broker(id).Entity(name)
		if (err == nil) != gone {
			return e
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node %d: entity %s: %v (gone wanted: %v)", id, name, err, gone)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The namespace is the metadata group's: an entity created on the node
// that leads it is opened on every node under the same id, with its group
// founded by the group's voters, and serves; a follower refuses to create
// one, naming the leader; a deletion removes the entity and its files on
// every node; a node that was down meanwhile learns both when it comes
// back, and a restarted node holds its entities as soon as it is open.
func TestClusterMetadataGroup(t *testing.T) {
	c := newCluster(t)
	leader := c.metaLeader()
	follower := leader%3 + 1
	_, err := c.broker(follower).CreateQueue("nope", projection.DefaultConfig())
	if at, ok := LeaderOf(err); !errors.Is(err, ErrNotLeader) || !ok || at != leader {
		t.Fatalf("create on a follower of the metadata group: %v (leader %d, %v), want node %d named", err, at, ok, leader)
	}
	if _, err := c.broker(leader).CreateTopic("news", DefaultTopicConfig()); err != nil {
		t.Fatal(err)
	}
	var id uint64
	for n := uint64(1); n <= 3; n++ {
		e := c.waitEntity(n, "news", false)
		if id == 0 {
			id = e.id
		}
		if e.id != id {
			t.Fatalf("node %d holds news as entity %d, want %d", n, e.id, id)
		}
		if _, err := c.broker(n).Entity("nope"); err == nil {
			t.Fatalf("node %d holds the entity a follower refused", n)
		}
	}
	sendUntilCreated(t, c.entityOn(c.leaderOfEntity("news", 0), "news"), []projection.Message{{Body: []byte("hi")}})

	// A node down while an entity is created and another deleted.
	down := follower
	if down == leader {
		down = leader%3 + 1
	}
	c.down(down)
	ordersDir := c.entityOn(leader, "orders").dir
	if _, err := c.broker(leader).CreateQueue("late", projection.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	if err := c.broker(leader).DeleteEntity("orders"); err != nil {
		t.Fatal(err)
	}
	for n := uint64(1); n <= 3; n++ {
		if n != down {
			c.waitEntity(n, "orders", true)
		}
	}
	if _, err := os.Stat(ordersDir); !errors.Is(err, os.ErrNotExist) {
		var left []string
		filepath.WalkDir(ordersDir, func(p string, _ fs.DirEntry, _ error) error { left = append(left, p); return nil })
		t.Fatalf("the deleted entity's files are still there: %v %v", err, left)
	}
	c.open(down)
	c.waitEntity(down, "late", false)
	c.waitEntity(down, "orders", true)
	sendUntilCreated(t, c.entityOn(c.leaderOfEntity("late", 0), "late"), []projection.Message{{Body: []byte("late")}})

	// A restart opens what the node knew at once.
	restart := leader%3 + 1
	c.down(restart)
	b := c.open(restart)
	for _, name := range []string{"news", "late"} {
		if _, err := b.Entity(name); err != nil {
			t.Fatalf("node %d, just restarted: %v", restart, err)
		}
	}
}

// A peer address recorded on the node that leads the metadata group
// reaches every node (Cluster.OnPeer), one down at the time when it is
// back, and at every start; a follower refuses to record one, naming
// the leader; a record that a node left reaches them too.
func TestClusterRecordsPeers(t *testing.T) {
	var mu sync.Mutex
	told := map[uint64]map[uint64]string{} // node -> what it was told
	c := newCluster(t, func(id uint64, o *Options) {
		mu.Lock()
		told[id] = map[uint64]string{}
		mu.Unlock()
		o.Cluster.OnPeer = func(node uint64, addr string) {
			mu.Lock()
			told[id][node] = addr
			mu.Unlock()
		}
	})
	waitTold := func(id, node uint64, addr string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			got, ok := told[id][node]
			mu.Unlock()
			if ok && got == addr {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d was told %q for node %d, want %q", id, got, node, addr)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	leader := c.metaLeader()
	follower := leader%3 + 1
	if err := c.broker(follower).RecordPeer(4, "127.0.0.1:7004"); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("record a peer on a follower: %v", err)
	}
	down := follower%3 + 1
	if down == leader {
		down = follower
	}
	c.down(down)
	if err := c.broker(leader).RecordPeer(4, "127.0.0.1:7004"); err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 3; id++ {
		if id != down {
			waitTold(id, 4, "127.0.0.1:7004")
		}
	}
	c.open(down) // told at its start, from what its log holds, or once it catches up
	waitTold(down, 4, "127.0.0.1:7004")
	if err := c.broker(leader).RecordPeer(4, ""); err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 3; id++ {
		waitTold(id, 4, "")
	}
}

// In a cluster an entity's idleness is counted where it is led, from when
// that node began to lead it: the metadata group's leader, which does not
// lead the entity, leaves it however old its own view of the entity's
// use; once it leads the entity too, it waits a whole AutoDeleteOnIdle
// from then, and deletes it, on every node, only after that.
func TestClusterIdleCountsFromLeading(t *testing.T) {
	c := newCluster(t, func(_ uint64, o *Options) { o.AutoDeleteScan = time.Hour }) // scans called here
	cfg := projection.DefaultConfig()
	cfg.AutoDeleteOnIdle = projection.MinAutoDeleteOnIdle
	c.create("idle", func(b *Broker) error {
		_, err := b.CreateQueue("idle", cfg)
		return err
	})
	meta := c.metaLeader()
	old := time.Now().Add(-time.Hour).UnixNano()
	age := func(id uint64, since bool) {
		e := c.entityOn(id, "idle")
		e.active.last.Store(old)
		if since {
			e.active.since.Store(old)
		}
	}
	// The entity led by another node than the metadata group's leader.
	lead := c.leaderOfEntity("idle", 0)
	if lead == meta {
		(*c.entityOn(meta, "idle").logRef.Load()).(memberLog).TransferLeader(meta%3 + 1)
		lead = c.leaderOfEntity("idle", meta)
	}
	sendUntilCreated(t, c.entityOn(lead, "idle"), []projection.Message{{Body: []byte("x")}})
	age(meta, true)
	c.broker(meta).autoDelete()
	if _, err := c.broker(meta).Entity("idle"); err != nil {
		t.Fatalf("deleted by a node that does not lead it: %v", err)
	}

	// The metadata group's leader leads the entity now: its use counts
	// from then.
	for !c.entityOn(meta, "idle").Leading() {
		if l := c.leaderOfEntity("idle", 0); l != meta {
			(*c.entityOn(l, "idle").logRef.Load()).(memberLog).TransferLeader(meta)
		}
		time.Sleep(20 * time.Millisecond)
	}
	age(meta, false)
	c.broker(meta).autoDelete()
	if _, err := c.broker(meta).Entity("idle"); err != nil {
		t.Fatalf("deleted as soon as the node began to lead it: %v", err)
	}
	age(meta, true)
	c.broker(meta).autoDelete()
	for id := uint64(1); id <= 3; id++ {
		c.waitEntity(id, "idle", true)
	}
}
