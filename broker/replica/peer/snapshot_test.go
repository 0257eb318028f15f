package peer

import (
	"crypto/rand"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// slowProxy forwards connections to target, the dialler's side at 64 KiB
// a millisecond at most, so that a 20 MB snapshot takes long enough for
// heartbeats to pass it. forwarded counts the bytes it carried that way.
type slowProxy struct {
	ln        net.Listener
	target    string
	forwarded atomic.Int64
	wg        sync.WaitGroup
	mu        sync.Mutex
	conns     []net.Conn
}

func newSlowProxy(t *testing.T, target string) *slowProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *slowProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		// A fixed buffer turns Linux's autotuning off, which could
		// otherwise let the dialler write tens of megabytes ahead.
		in.(*net.TCPConn).SetReadBuffer(256 << 10)
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, in, out)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.copy(out, in, true)
		go p.copy(in, out, false)
	}
}

func (p *slowProxy) copy(dst, src net.Conn, slow bool) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
			if slow {
				p.forwarded.Add(int64(n))
				time.Sleep(time.Millisecond)
			}
		}
		if err != nil {
			return
		}
	}
}

// cut closes the connections it carries, and goes on taking new ones.
func (p *slowProxy) cut() {
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
}

func (p *slowProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func snapMsg(from, to uint64, size int) *pb.Message {
	data := make([]byte, size)
	rand.Read(data)
	return &pb.Message{Type: pb.MessageType_MsgSnap.Enum(), From: proto.Uint64(from), To: proto.Uint64(to),
		Term: proto.Uint64(4), Snapshot: &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{
			Index: proto.Uint64(1000), Term: proto.Uint64(3),
			ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}}}}
}

type report struct {
	group, to uint64
	ok        bool
}

// TestSnapshot: a 20 MB snapshot arrives whole while another group's
// heartbeats keep arriving, and its sender hears it did; a transfer cut
// by the receiver's end is reported failed.
func TestSnapshot(t *testing.T) {
	checkGoroutines(t)
	reports := make(chan report, 10)
	var got inbox
	a := start(t, Config{ID: 1, Deliver: func(uint64, *pb.Message) {},
		SnapshotDone: func(group, to uint64, ok bool) { reports <- report{group, to, ok} }})
	b := start(t, Config{ID: 2, Deliver: got.deliver, Peers: map[uint64]string{1: a.Addr()}})
	proxy := newSlowProxy(t, b.Addr())
	a.SetPeer(2, proxy.ln.Addr().String())

	// Heartbeats of group 2 every millisecond, numbered by commit, until
	// the snapshot has arrived.
	stop := make(chan struct{})
	var beats atomic.Uint64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			a.Send(2, []*pb.Message{heartbeat(1, 2, beats.Add(1))})
		}
	}()
	waitFor(t, "heartbeats", func() bool { return got.len() > 10 })

	snap := snapMsg(1, 2, 20<<20)
	a.Send(1, []*pb.Message{snap})
	sentAt := beats.Load() // heartbeats after this one were sent after the snapshot
	var r report
	select {
	case r = <-reports:
	case <-time.After(60 * time.Second):
		t.Fatal("no report of the snapshot")
	}
	close(stop)
	wg.Wait()
	if r != (report{1, 2, true}) {
		t.Fatalf("reported %+v", r)
	}
	passed, found := 0, false
	for _, d := range got.all() {
		if d.group == 1 {
			if !proto.Equal(d.m, snap) {
				t.Fatal("the snapshot delivered is not the one sent")
			}
			found = true
			break
		}
		if d.m.GetCommit() > sentAt {
			passed++
		}
	}
	if !found {
		t.Fatal("the snapshot was reported done but not delivered")
	}
	if passed == 0 {
		t.Fatal("no heartbeat sent after the snapshot arrived before it")
	}
	t.Logf("%d heartbeats passed the snapshot", passed)
	if st := b.Stats(); st.SnapshotsReceived != 1 {
		t.Fatalf("receiver: %+v", st)
	}

	// Another transfer, cut halfway by the receiver's end.
	forwarded := proxy.forwarded.Load()
	a.Send(3, []*pb.Message{snapMsg(1, 2, 20<<20)})
	waitFor(t, "the second transfer to begin", func() bool { return proxy.forwarded.Load() > forwarded+4<<20 })
	b.Close()
	select {
	case r = <-reports:
	case <-time.After(30 * time.Second):
		t.Fatal("no report of the cut transfer")
	}
	if r != (report{3, 2, false}) {
		t.Fatalf("reported %+v", r)
	}
	if st := a.Stats(); st.SnapshotsSent != 1 || st.SnapshotsFailed != 1 {
		t.Fatalf("sender: %+v", st)
	}
}

// TestSnapshotDropped: a MsgSnap to a peer that cannot be reached is
// reported failed, from the transport's goroutine.
func TestSnapshotDropped(t *testing.T) {
	checkGoroutines(t)
	reports := make(chan report, 10)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	a := start(t, Config{ID: 1, Deliver: func(uint64, *pb.Message) {}, Peers: map[uint64]string{2: dead},
		SnapshotDone: func(group, to uint64, ok bool) { reports <- report{group, to, ok} }})
	a.Send(7, []*pb.Message{snapMsg(1, 2, 1000)})
	select {
	case r := <-reports:
		if r != (report{7, 2, false}) {
			t.Fatalf("reported %+v", r)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no report")
	}
}
