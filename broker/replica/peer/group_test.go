package peer

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"

	"github.com/walbus/walbus/broker/replica"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
)

// The integration test: three replica.Groups of one Raft group, each on a
// LogStorage of its own, each driven by its own goroutine as the broker
// will drive them, connected by three Transports.

const raftGroup = 42

// recordMachine keeps what each index applied: an entry's data, or nil for
// an entry without events.
type recordMachine struct {
	entries map[uint64][]byte
}

func (m *recordMachine) Apply(index uint64, data []byte) error {
	m.entries[index] = bytes.Clone(data)
	return nil
}

func (m *recordMachine) Restore(snap *pb.Snapshot) error {
	_, state, err := replica.DecodeSnapshot(snap.GetData())
	if err != nil {
		return err
	}
	entries := map[uint64][]byte{}
	for len(state) > 0 {
		index, w := binary.Uvarint(state)
		if w <= 0 || len(state) < w+1 {
			return errors.New("bad snapshot state")
		}
		state = state[w:]
		present := state[0]
		state = state[1:]
		n, w := binary.Uvarint(state)
		if w <= 0 || uint64(len(state)-w) < n {
			return errors.New("bad snapshot state")
		}
		if present == 1 {
			entries[index] = bytes.Clone(state[w : w+int(n)])
		} else {
			entries[index] = nil
		}
		state = state[w+int(n):]
	}
	m.entries = entries
	return nil
}

func (m *recordMachine) state() []byte {
	var b []byte
	for _, i := range slices.Sorted(maps.Keys(m.entries)) {
		b = binary.AppendUvarint(b, i)
		if m.entries[i] == nil {
			b = append(b, 0)
		} else {
			b = append(b, 1)
		}
		b = binary.AppendUvarint(b, uint64(len(m.entries[i])))
		b = append(b, m.entries[i]...)
	}
	return b
}

// member is one node: its group, storage, state machine and transport,
// and the goroutine that alone touches the first three.
type member struct {
	id            uint64
	dir           string
	addr          string
	electionTicks int // of 10 ms
	storage       *replica.LogStorage
	group         *replica.Group
	sm            *recordMachine
	tr            *Transport

	inbox   chan *pb.Message
	reports chan report
	calls   chan func()
	quit    chan struct{}
	done    chan struct{}

	mu  sync.Mutex
	err error
}

// open opens the member's storage and group, and its transport on addr.
func (n *member) open(t *testing.T, peers map[uint64]string) {
	t.Helper()
	var err error
	if n.storage, err = replica.OpenLogStorage(n.dir, log.Options{}); err != nil {
		t.Fatal(err)
	}
	n.sm = &recordMachine{entries: map[uint64][]byte{}}
	n.group, err = replica.New(replica.Config{ID: n.id, Peers: []uint64{1, 2, 3}, ElectionTicks: n.electionTicks, HeartbeatTicks: 2},
		n.storage, n.sm, 0)
	if err != nil {
		t.Fatal(err)
	}
	n.inbox = make(chan *pb.Message, 4096)
	n.reports = make(chan report, 64)
	n.calls = make(chan func())
	n.quit = make(chan struct{})
	n.done = make(chan struct{})
	n.tr, err = New(Config{Cluster: "itest", ID: n.id, Listen: n.addr, Peers: peers, Logger: testLogger(t),
		Deliver: func(group uint64, m *pb.Message) {
			if group != raftGroup {
				return
			}
			select {
			case n.inbox <- m:
			default: // the member is behind: dropped, as a network would
			}
		},
		SnapshotDone: func(group, to uint64, ok bool) { n.reports <- report{group, to, ok} },
	})
	if err != nil {
		t.Fatal(err)
	}
	n.addr = n.tr.Addr()
}

func (n *member) fail(err error) {
	n.mu.Lock()
	if n.err == nil {
		n.err = err
	}
	n.mu.Unlock()
}

func (n *member) failure() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}

// run drives the group: ticks, messages, snapshot reports and calls, and
// after each, Process until Raft has nothing ready.
func (n *member) run() {
	defer close(n.done)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var out []*pb.Message
	send := func(m *pb.Message) { out = append(out, m) }
	for {
		select {
		case <-n.quit:
			return
		case <-tick.C:
			n.group.Tick()
		case m := <-n.inbox:
			if err := n.group.Step(m); err != nil {
				n.fail(fmt.Errorf("step %s: %w", m.GetType(), err))
			}
		case r := <-n.reports:
			n.group.ReportSnapshot(r.to, r.ok)
		case f := <-n.calls:
			f()
		}
		for {
			did, err := n.group.Process(send)
			if err != nil {
				n.fail(err)
				return
			}
			n.tr.Send(raftGroup, out)
			clear(out)
			out = out[:0]
			if !did {
				break
			}
		}
	}
}

// do runs f on the member's goroutine; false if it has stopped.
func (n *member) do(f func()) bool {
	done := make(chan struct{})
	select {
	case n.calls <- func() { f(); close(done) }:
	case <-n.done:
		return false
	}
	<-done
	return true
}

func (n *member) stop(t *testing.T) {
	close(n.quit)
	<-n.done
	if err := n.tr.Close(); err != nil {
		t.Error(err)
	}
	if err := n.storage.Close(); err != nil {
		t.Error(err)
	}
}

// tags are the proposals a member has applied, by their tags.
func (n *member) tags() (map[uint64]bool, bool) {
	tags := map[uint64]bool{}
	ok := n.do(func() {
		for _, data := range n.sm.entries {
			if data != nil {
				if tag, _, err := replica.DecodeEntry(data); err == nil {
					tags[tag] = true
				}
			}
		}
	})
	return tags, ok
}

func proposal(tag uint64) []byte {
	return replica.EncodeEntry(tag, []event.Event{{Type: event.Enqueued, Time: int64(tag),
		MessageID: fmt.Sprintf("m%d", tag), Message: fmt.Appendf(nil, "message %d", tag)}})
}

// trio is three members of raftGroup connected by their transports, and
// the ones of them live.
type trio struct {
	t     *testing.T
	peers map[uint64]string
	live  []*member
}

// startTrio starts three members whose election timeout is
// electionTicks of 10 ms.
func startTrio(t *testing.T, electionTicks int) *trio {
	c := &trio{t: t, peers: map[uint64]string{}}
	for i := range 3 {
		c.live = append(c.live, &member{id: uint64(i + 1), dir: t.TempDir(), addr: "127.0.0.1:0",
			electionTicks: electionTicks})
	}
	for _, n := range c.live {
		n.open(t, nil)
		c.peers[n.id] = n.addr
	}
	for _, n := range c.live {
		for id, addr := range c.peers {
			n.tr.SetPeer(id, addr)
		}
		go n.run()
	}
	t.Cleanup(func() {
		for _, n := range c.live {
			n.stop(t)
		}
	})
	return c
}

func (c *trio) leader() *member {
	var found *member
	waitFor(c.t, "a leader", func() bool {
		for _, n := range c.live {
			is := false
			n.do(func() { is = n.group.IsLeader() })
			if is {
				found = n
				return true
			}
		}
		return false
	})
	return found
}

// propose has tags first..last, made into entries by data, applied by
// every live member, proposing again on the leader of the moment what a
// leader change dropped (or, after 5 s, what was lost otherwise).
func (c *trio) propose(first, last uint64, data func(tag uint64) []byte) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var proposed time.Time
	var by *member
	var term uint64
	for {
		missing := map[uint64]bool{}
		for _, n := range c.live {
			tags, _ := n.tags()
			for tag := first; tag <= last; tag++ {
				if !tags[tag] {
					missing[tag] = true
				}
			}
			if err := n.failure(); err != nil {
				c.t.Fatalf("member %d: %v", n.id, err)
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%d proposals not applied everywhere", len(missing))
		}
		l := c.leader()
		var lterm uint64
		l.do(func() { lterm = l.group.Term() })
		if l != by || lterm != term || time.Since(proposed) > 5*time.Second {
			l.do(func() {
				for _, tag := range slices.Sorted(maps.Keys(missing)) {
					l.group.Propose(data(tag))
				}
			})
			proposed, by, term = time.Now(), l, lterm
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// agree checks that the members applied the same entries, index by index,
// with no gaps.
func (c *trio) agree() {
	c.t.Helper()
	var ref map[uint64][]byte
	var refID uint64
	for _, n := range c.live {
		var entries map[uint64][]byte
		var applied uint64
		n.do(func() { entries, applied = maps.Clone(n.sm.entries), n.group.Applied() })
		for i := uint64(1); i <= applied; i++ {
			if _, ok := entries[i]; !ok {
				c.t.Fatalf("member %d applied %d without %d", n.id, applied, i)
			}
		}
		if ref == nil {
			ref, refID = entries, n.id
			continue
		}
		for i, data := range entries {
			if other, ok := ref[i]; ok && !bytes.Equal(data, other) {
				c.t.Fatalf("members %d and %d differ at index %d", n.id, refID, i)
			}
		}
	}
}

// TestGroupsOverTransport: a leader is elected, 200 proposals are applied
// by all three members in the same order, and a follower that was down
// while 100 more were committed and both others compacted their logs
// catches up by snapshot.
func TestGroupsOverTransport(t *testing.T) {
	checkGoroutines(t)
	c := startTrio(t, 20)
	c.propose(1, 200, proposal)
	c.agree()

	l := c.leader()
	var f *member
	for _, n := range c.live {
		if n != l {
			f = n
			break
		}
	}
	f.stop(t)
	c.live = slices.DeleteFunc(c.live, func(n *member) bool { return n == f })
	c.propose(201, 300, proposal)
	for _, n := range c.live {
		var err error
		n.do(func() {
			index := n.group.Applied()
			var last uint64
			if _, last, err = n.storage.LogIndex(index); err == nil {
				data := replica.EncodeSnapshot(last, n.sm.state())
				err = n.storage.CreateSnapshot(index, n.group.ConfState(), data)
			}
		})
		if err != nil {
			t.Fatalf("member %d: snapshot: %v", n.id, err)
		}
	}

	// It comes back on a new port: the old one may have gone to another
	// socket meanwhile.
	delete(c.peers, f.id)
	f.addr = "127.0.0.1:0"
	f.open(t, c.peers)
	for _, n := range c.live {
		n.tr.SetPeer(f.id, f.addr)
	}
	go f.run()
	c.live = append(c.live, f)
	c.propose(1, 300, proposal)
	c.agree()
	if st := f.tr.Stats(); st.SnapshotsReceived == 0 {
		t.Fatalf("member %d caught up without a snapshot: %+v", f.id, st)
	}
}

// TestGroupsLargeEntry: an entry of 12 MiB, three times what a frame
// holds, is applied by all three members, and the small ones proposed
// after it are too.
func TestGroupsLargeEntry(t *testing.T) {
	checkGoroutines(t)
	// A member persists 12 MiB for longer than the usual 200 ms election
	// timeout on a slow disk, and sends no heartbeat meanwhile.
	c := startTrio(t, 100)
	c.propose(1, 20, proposal)
	body := make([]byte, 12<<20)
	rand.Read(body)
	large := func(tag uint64) []byte {
		return replica.EncodeEntry(tag, []event.Event{{Type: event.Enqueued, Time: int64(tag),
			MessageID: fmt.Sprintf("m%d", tag), Message: body}})
	}
	c.propose(21, 21, large)
	c.propose(22, 60, proposal)
	c.agree()

	var sent, received uint64
	for _, n := range c.live {
		found := 0
		n.do(func() {
			for _, data := range n.sm.entries {
				if tag, events, err := replica.DecodeEntry(data); err == nil && tag == 21 {
					if len(events) != 1 || !bytes.Equal(events[0].Message, body) {
						t.Errorf("member %d applied another large message", n.id)
					}
					found++
				}
			}
		})
		if found == 0 {
			t.Fatalf("member %d applied no entry of the large message", n.id)
		}
		st := n.tr.Stats()
		sent += st.LargeSent
		received += st.LargeReceived
		// More than once if a leader change had it proposed again.
		t.Logf("member %d applied the large message %d times; large messages sent %d, received %d, dropped %d",
			n.id, found, st.LargeSent, st.LargeReceived, st.LargeDropped)
	}
	if sent < 2 || received < 2 {
		t.Fatalf("%d large messages sent, %d received", sent, received)
	}
}
