package peer

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// Messages too big for a frame: a MsgApp with one large entry travels in
// chunks, as a MsgSnap does, and Raft's other messages pass it.

// sameMessage fails the test unless got is want, its entries byte for
// byte.
func sameMessage(t *testing.T, what string, got, want *pb.Message) {
	t.Helper()
	if !proto.Equal(got, want) {
		t.Fatalf("%s: delivered index %d, sent index %d", what, got.GetIndex(), want.GetIndex())
	}
	for i, e := range want.GetEntries() {
		if !bytes.Equal(got.GetEntries()[i].GetData(), e.GetData()) {
			t.Fatalf("%s: entry %d differs", what, i)
		}
	}
}

// transferWriting reports whether tr's peer id is writing a transfer.
func transferWriting(tr *Transport, id uint64) bool {
	tr.mu.RLock()
	p := tr.peers[id]
	tr.mu.RUnlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writing != nil
}

// TestLargeMessages: MsgApps of 10 MiB and 40 MiB, each one entry, are
// delivered whole while 1,000 heartbeats of another group sent around
// them all arrive, in order, some of those sent after each big one before
// it.
func TestLargeMessages(t *testing.T) {
	checkGoroutines(t)
	var got inbox
	a := start(t, Config{ID: 1, Deliver: func(uint64, *pb.Message) {}})
	b := start(t, Config{ID: 2, Deliver: got.deliver, Peers: map[uint64]string{1: a.Addr()}})
	// At 64 KiB a millisecond the big ones take long enough for
	// heartbeats to pass them.
	proxy := newSlowProxy(t, b.Addr())
	a.SetPeer(2, proxy.ln.Addr().String())

	big := []*pb.Message{appendMsg(1, 2, 10, 10<<20), appendMsg(1, 2, 11, 40<<20)}
	for _, m := range big {
		if n := proto.Size(m); n <= maxMessage {
			t.Fatalf("a message of %d bytes fits a frame", n)
		}
	}
	sentAfter := []uint64{100, 400} // the heartbeat each big one follows
	const beats = 1000
	for commit := uint64(1); commit <= beats; commit++ {
		a.Send(2, []*pb.Message{heartbeat(1, 2, commit)})
		for i, after := range sentAfter {
			if commit == after {
				a.Send(1, big[i:i+1])
			}
		}
		time.Sleep(time.Millisecond)
	}
	waitFor(t, "the heartbeats and both big messages", func() bool { return got.len() == beats+len(big) })

	var lastBeat uint64
	var bigs int
	for _, d := range got.all() {
		if d.group == 2 {
			if d.m.GetCommit() != lastBeat+1 {
				t.Fatalf("heartbeat %d after %d", d.m.GetCommit(), lastBeat)
			}
			lastBeat = d.m.GetCommit()
			continue
		}
		if bigs == len(big) {
			t.Fatal("a big message delivered twice")
		}
		sameMessage(t, fmt.Sprintf("big message %d", bigs), d.m, big[bigs])
		// Heartbeats numbered above sentAfter were sent after it.
		passed := lastBeat - sentAfter[bigs]
		if lastBeat <= sentAfter[bigs] {
			t.Fatalf("big message %d: no heartbeat sent after it arrived before it", bigs)
		}
		t.Logf("%d heartbeats passed the big message of %d MiB", passed, len(big[bigs].Entries[0].Data)>>20)
		bigs++
	}
	sa, sb := a.Stats(), b.Stats()
	if sa.Dropped != 0 || sa.LargeSent != 2 || sa.MessagesSent != beats || sb.LargeReceived != 2 || sb.MessagesReceived != beats {
		t.Fatalf("sender %+v\nreceiver %+v", sa, sb)
	}
}

// TestLargeInARow: big messages one after another, of two groups to one
// peer and of one group to two peers at once, all arrive whole, in order
// per group.
func TestLargeInARow(t *testing.T) {
	checkGoroutines(t)
	var gotB, gotC inbox
	a := start(t, Config{ID: 1, Deliver: func(uint64, *pb.Message) {}})
	b := start(t, Config{ID: 2, Deliver: gotB.deliver, Peers: map[uint64]string{1: a.Addr()}})
	c := start(t, Config{ID: 3, Deliver: gotC.deliver, Peers: map[uint64]string{1: a.Addr()}})
	a.SetPeer(2, b.Addr())
	a.SetPeer(3, c.Addr())

	type stream struct{ to, group uint64 }
	sent := map[stream][]*pb.Message{}
	send := func(group uint64, msgs ...*pb.Message) {
		a.Send(group, msgs)
		for _, m := range msgs {
			s := stream{m.GetTo(), group}
			sent[s] = append(sent[s], m)
		}
	}
	sizes := []int{5 << 20, 7 << 20, 5 << 20}
	for i, n := range sizes {
		seq := uint64(i + 1)
		send(1, appendMsg(1, 2, seq, n), appendMsg(1, 3, seq, n))
		send(3, appendMsg(1, 2, seq, 9<<19))
		send(5, heartbeat(1, 2, seq), heartbeat(1, 3, seq))
	}
	waitFor(t, "every message", func() bool { return gotB.len() == 3*len(sizes) && gotC.len() == 2*len(sizes) })
	for to, box := range map[uint64]*inbox{2: &gotB, 3: &gotC} {
		got := map[stream][]*pb.Message{}
		for _, d := range box.all() {
			s := stream{to, d.group}
			got[s] = append(got[s], d.m)
		}
		for s, msgs := range sent {
			if s.to != to {
				continue
			}
			if len(got[s]) != len(msgs) {
				t.Fatalf("%+v: %d delivered, %d sent", s, len(got[s]), len(msgs))
			}
			for i := range msgs {
				sameMessage(t, fmt.Sprintf("%+v message %d", s, i), got[s][i], msgs[i])
			}
		}
	}
	if st := a.Stats(); st.Dropped != 0 || st.LargeSent != 3*uint64(len(sizes)) {
		t.Fatalf("sender: %+v", st)
	}
}

// TestLargeBurst: big messages sent at once, nothing after them, all
// arrive: the end of one transfer starts the next, with no Send to wake
// the sender.
func TestLargeBurst(t *testing.T) {
	checkGoroutines(t)
	var got inbox
	a := start(t, Config{ID: 1, Deliver: func(uint64, *pb.Message) {}})
	b := start(t, Config{ID: 2, Deliver: got.deliver, Peers: map[uint64]string{1: a.Addr()}})
	proxy := newSlowProxy(t, b.Addr())
	a.SetPeer(2, proxy.ln.Addr().String())
	var msgs []*pb.Message
	for seq := range uint64(4) {
		msgs = append(msgs, appendMsg(1, 2, seq, 5<<20))
	}
	a.Send(1, msgs)
	waitFor(t, "every message", func() bool { return got.len() == len(msgs) })
	for i, d := range got.all() {
		sameMessage(t, fmt.Sprintf("message %d", i), d.m, msgs[i])
	}
}

// TestLargeCopies: a MsgApp whose entries wait or are being written to
// the peer already is dropped; another is not. The peer reads nothing, so
// the first stays in its write.
func TestLargeCopies(t *testing.T) {
	checkGoroutines(t)
	a := start(t, Config{ID: 1, Deliver: func(uint64, *pb.Message) {}, Peers: map[uint64]string{2: silentPeer(t, 2)}})
	first, second := appendMsg(1, 2, 1, 32<<20), appendMsg(1, 2, 2, 32<<20)
	a.Send(1, []*pb.Message{first})
	waitFor(t, "the first transfer to begin", func() bool { return transferWriting(a, 2) })
	a.Send(1, []*pb.Message{second})
	// The same entries, a later commit index: a probe's MsgApp again.
	again := proto.CloneOf(first)
	again.Commit = proto.Uint64(again.GetCommit() + 5)
	a.Send(1, []*pb.Message{again, proto.CloneOf(second)})
	if st := a.Stats(); st.LargeDropped != 2 || st.Dropped != 2 {
		t.Fatalf("%+v", st)
	}
	// The same index in another group, or another term, is another MsgApp.
	other := proto.CloneOf(first)
	other.Term = proto.Uint64(first.GetTerm() + 1)
	a.Send(2, []*pb.Message{first})
	a.Send(1, []*pb.Message{other})
	if st := a.Stats(); st.LargeDropped != 2 {
		t.Fatalf("%+v", st)
	}
}

// TestLargeBudget: a message over MaxTransfer is dropped and counted, not
// sent; one that does not fit beside those waiting is dropped too; a
// receiver whose MaxTransfer is smaller than the message closes the
// connection and delivers nothing.
func TestLargeBudget(t *testing.T) {
	checkGoroutines(t)
	var got inbox
	a := start(t, Config{ID: 1, Deliver: func(uint64, *pb.Message) {}, MaxTransfer: 8 << 20})
	b := start(t, Config{ID: 2, Deliver: got.deliver, Peers: map[uint64]string{1: a.Addr()}})
	a.SetPeer(2, b.Addr())

	a.Send(1, []*pb.Message{appendMsg(1, 2, 1, 10<<20)})
	if st := a.Stats(); st.Dropped != 1 || st.LargeDropped != 1 || st.BytesSent != 0 {
		t.Fatalf("over the budget: %+v", st)
	}
	fits := appendMsg(1, 2, 2, 6<<20)
	a.Send(1, []*pb.Message{fits})
	waitFor(t, "the message within the budget", func() bool { return got.len() == 1 })
	sameMessage(t, "within the budget", got.all()[0].m, fits)
	if st := a.Stats(); st.LargeSent != 1 || st.LargeDropped != 1 || st.BytesSent > 7<<20 {
		t.Fatalf("sender: %+v", st)
	}

	// Waiting: 24 MiB is being written to a peer that reads nothing (more
	// than the sockets' buffers hold), 24 MiB waits, and 24 MiB more
	// would make 48 waiting.
	silent := start(t, Config{ID: 1, Deliver: func(uint64, *pb.Message) {}, MaxTransfer: 40 << 20,
		Peers: map[uint64]string{2: silentPeer(t, 2)}})
	silent.Send(1, []*pb.Message{appendMsg(1, 2, 1, 24<<20)})
	waitFor(t, "the first transfer to begin", func() bool { return transferWriting(silent, 2) })
	silent.Send(1, []*pb.Message{appendMsg(1, 2, 2, 24<<20), appendMsg(1, 2, 3, 24<<20)})
	if st := silent.Stats(); st.LargeDropped != 1 {
		t.Fatalf("beside those waiting: %+v", st)
	}

	// A receiver that takes 5 MiB at most.
	var gotSmall inbox
	small := start(t, Config{ID: 3, Deliver: gotSmall.deliver, MaxTransfer: 5 << 20,
		Peers: map[uint64]string{1: a.Addr()}})
	a.SetPeer(3, small.Addr())
	a.Send(1, []*pb.Message{appendMsg(1, 3, 1, 6<<20)})
	waitFor(t, "the transfer refused", func() bool { return small.Stats().Malformed == 1 })
	// Until the sender sees the connection closed, a heartbeat may go
	// down with it.
	waitFor(t, "a heartbeat on a new connection", func() bool {
		a.Send(1, []*pb.Message{heartbeat(1, 3, 1)})
		return gotSmall.len() > 0
	})
	for _, d := range gotSmall.all() {
		if d.m.GetType() != pb.MessageType_MsgHeartbeat {
			t.Fatalf("delivered a %s", d.m.GetType())
		}
	}
}

// TestLargeCut: a big message's connection ends midway, once cut between
// the two nodes and once by the receiver's close. Nothing is delivered of
// it, the sender counts it dropped, and the same message sent again, on a
// new connection, arrives whole, once.
func TestLargeCut(t *testing.T) {
	checkGoroutines(t)
	var got inbox
	a := start(t, Config{ID: 1, Deliver: func(uint64, *pb.Message) {}})
	b := start(t, Config{ID: 2, Deliver: got.deliver, Peers: map[uint64]string{1: a.Addr()}})
	proxy := newSlowProxy(t, b.Addr())
	a.SetPeer(2, proxy.ln.Addr().String())
	connected := func(tr *Transport, from uint64) bool {
		tr.mu.RLock()
		defer tr.mu.RUnlock()
		return tr.incoming[from] != nil
	}

	// The connection is cut; the receiver stays up. When 4 MiB have come
	// through, the sender has written at most what the sockets' buffers
	// hold besides (its own, up to tcp_wmem's most, 4 MiB by default on
	// Linux, and the proxy's), so 48 MiB are cut midway.
	const size = 48 << 20
	big := appendMsg(1, 2, 7, size)
	a.Send(1, []*pb.Message{big})
	waitFor(t, "4 MiB of the transfer", func() bool { return proxy.forwarded.Load() > 4<<20 })
	proxy.cut()
	waitFor(t, "the sender to drop the transfer", func() bool { return a.Stats().LargeDropped == 1 })
	waitFor(t, "the receiver to end the connection", func() bool { return !connected(b, 1) })
	if n := got.len(); n != 0 {
		t.Fatalf("%d messages delivered of a cut transfer", n)
	}
	a.Send(1, []*pb.Message{big})
	waitFor(t, "the message sent again", func() bool { return got.len() == 1 })
	sameMessage(t, "sent again", got.all()[0].m, big)

	// The receiver closes midway and starts again on another port.
	forwarded := proxy.forwarded.Load()
	big2 := appendMsg(1, 2, 8, size)
	a.Send(1, []*pb.Message{big2})
	waitFor(t, "4 MiB of the second transfer", func() bool { return proxy.forwarded.Load() > forwarded+4<<20 })
	b.Close()
	waitFor(t, "the sender to drop the second transfer", func() bool { return a.Stats().LargeDropped == 2 })
	if n := got.len(); n != 1 {
		t.Fatalf("%d messages delivered, want the first alone", n)
	}
	var got2 inbox
	b2 := start(t, Config{ID: 2, Deliver: got2.deliver, Peers: map[uint64]string{1: a.Addr()}})
	a.SetPeer(2, b2.Addr())
	a.Send(1, []*pb.Message{big2, heartbeat(1, 2, 9)})
	waitFor(t, "the second message sent again", func() bool { return got2.len() == 2 })
	for _, d := range got2.all() {
		if d.m.GetType() == pb.MessageType_MsgApp {
			sameMessage(t, "the second sent again", d.m, big2)
		}
	}
	if st := b2.Stats(); st.LargeReceived != 1 || st.MessagesReceived != 1 {
		t.Fatalf("new receiver: %+v", st)
	}
	if st := a.Stats(); st.LargeSent != 2 || st.LargeDropped != 2 {
		t.Fatalf("sender: %+v", st)
	}
}

// BenchmarkSendLarge: 8 MiB MsgApps, one at a time, from one node to
// another over loopback.
func BenchmarkSendLarge(b *testing.B) {
	var received atomic.Int64
	a := start(b, Config{ID: 1, Deliver: func(uint64, *pb.Message) {}})
	c := start(b, Config{ID: 2, Deliver: func(uint64, *pb.Message) { received.Add(1) },
		Peers: map[uint64]string{1: a.Addr()}})
	a.SetPeer(2, c.Addr())
	m := appendMsg(1, 2, 1, 8<<20)
	b.SetBytes(int64(proto.Size(m)))
	sent := int64(0)
	for b.Loop() {
		sent++
		m.Index = proto.Uint64(uint64(sent)) // not a copy of the last
		a.Send(1, []*pb.Message{m})
		for received.Load() < sent {
			time.Sleep(100 * time.Microsecond)
		}
	}
	if st := a.Stats(); st.Dropped != 0 {
		b.Fatalf("%d dropped", st.Dropped)
	}
}
