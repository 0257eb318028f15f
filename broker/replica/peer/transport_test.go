package peer

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// waitFor polls cond until it holds; the deadline only bounds a failure,
// and is long because the race detector makes moving megabytes slow.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// checkGoroutines fails the test if it ends with more goroutines than it
// began with: every transport's goroutines end with Close.
func checkGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Fatalf("%d goroutines at the end, %d at the start:\n%s", runtime.NumGoroutine(), before,
					buf[:runtime.Stack(buf, true)])
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// inbox records what a transport delivers, in order.
type inbox struct {
	mu  sync.Mutex
	got []delivery
}

type delivery struct {
	group uint64
	m     *pb.Message
}

func (r *inbox) deliver(group uint64, m *pb.Message) {
	r.mu.Lock()
	r.got = append(r.got, delivery{group, m})
	r.mu.Unlock()
}

func (r *inbox) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func (r *inbox) all() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

func start(t testing.TB, cfg Config) *Transport {
	t.Helper()
	if cfg.Cluster == "" {
		cfg.Cluster = "test"
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// appendMsg is a MsgApp with one entry of n bytes, its place in its
// (sender, group) stream in Index.
func appendMsg(from, to, seq uint64, n int) *pb.Message {
	data := make([]byte, n)
	rand.Read(data)
	return &pb.Message{Type: pb.MessageType_MsgApp.Enum(), From: proto.Uint64(from), To: proto.Uint64(to),
		Term: proto.Uint64(2), Index: proto.Uint64(seq), LogTerm: proto.Uint64(2), Commit: proto.Uint64(seq),
		Entries: []*pb.Entry{{Term: proto.Uint64(2), Index: proto.Uint64(seq + 1), Data: data}}}
}

// TestManyGroups: three nodes send each other the messages of many groups
// at once; each receiver gets every one, equal, in its sender's order per
// group.
func TestManyGroups(t *testing.T) {
	checkGoroutines(t)
	const nodes, groups, perGroup = 3, 20, 40
	var trs [nodes + 1]*Transport
	var inboxes [nodes + 1]inbox
	for id := uint64(1); id <= nodes; id++ {
		trs[id] = start(t, Config{ID: id, Deliver: inboxes[id].deliver, QueueLength: 1 << 20, QueueBytes: 1 << 30})
	}
	for id := uint64(1); id <= nodes; id++ {
		for other := uint64(1); other <= nodes; other++ {
			trs[id].SetPeer(other, trs[other].Addr()) // itself is ignored
		}
	}
	type stream struct{ from, to, group uint64 }
	sent := map[stream][]*pb.Message{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for from := uint64(1); from <= nodes; from++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := uint64(1); seq <= perGroup; seq++ {
				for g := uint64(1); g <= groups; g++ {
					var batch []*pb.Message
					for to := uint64(1); to <= nodes; to++ {
						if to != from {
							batch = append(batch, appendMsg(from, to, seq, int(seq*g%300)))
						}
					}
					trs[from].Send(g, batch)
					mu.Lock()
					for _, m := range batch {
						s := stream{from, m.GetTo(), g}
						sent[s] = append(sent[s], m)
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	want := (nodes - 1) * groups * perGroup
	for id := uint64(1); id <= nodes; id++ {
		waitFor(t, fmt.Sprintf("node %d's messages", id), func() bool { return inboxes[id].len() >= want })
	}
	for to := uint64(1); to <= nodes; to++ {
		got := map[stream][]*pb.Message{}
		for _, d := range inboxes[to].all() {
			s := stream{d.m.GetFrom(), to, d.group}
			got[s] = append(got[s], d.m)
		}
		for from := uint64(1); from <= nodes; from++ {
			for g := uint64(1); g <= groups && from != to; g++ {
				s := stream{from, to, g}
				if len(got[s]) != len(sent[s]) {
					t.Fatalf("%v: %d messages, sent %d", s, len(got[s]), len(sent[s]))
				}
				for i := range sent[s] {
					if !proto.Equal(got[s][i], sent[s][i]) {
						t.Fatalf("%v: message %d is index %d, sent index %d", s, i, got[s][i].GetIndex(), sent[s][i].GetIndex())
					}
				}
			}
		}
	}
	for id := uint64(1); id <= nodes; id++ {
		st := trs[id].Stats()
		if st.Dropped != 0 || st.MessagesSent != uint64(want) || st.MessagesReceived != uint64(want) || st.Connects != nodes-1 {
			t.Errorf("node %d: %+v", id, st)
		}
	}
}

// TestReconnect: a peer's transport closes and a new one starts on its
// address; the sender notices, dials again, and messages flow.
func TestReconnect(t *testing.T) {
	checkGoroutines(t)
	var unreachable atomic.Int64
	var got1, got2 inbox
	a := start(t, Config{ID: 1, Deliver: func(uint64, *pb.Message) {},
		Unreachable: func(to uint64) {
			if to == 2 {
				unreachable.Add(1)
			}
		}})
	b := start(t, Config{ID: 2, Deliver: got1.deliver, Peers: map[uint64]string{1: a.Addr()}})
	addr := b.Addr()
	a.SetPeer(2, addr)

	a.Send(1, []*pb.Message{heartbeat(1, 2, 1)})
	waitFor(t, "the first heartbeat", func() bool { return got1.len() == 1 })
	b.Close()
	commit := uint64(1)
	waitFor(t, "Unreachable", func() bool {
		commit++
		a.Send(1, []*pb.Message{heartbeat(1, 2, commit)})
		return unreachable.Load() > 0
	})

	b2 := start(t, Config{ID: 2, Listen: addr, Deliver: got2.deliver, Peers: map[uint64]string{1: a.Addr()}})
	waitFor(t, "a heartbeat to the new transport", func() bool {
		commit++
		a.Send(1, []*pb.Message{heartbeat(1, 2, commit)})
		return got2.len() > 0
	})
	first := got2.len()
	for range 100 {
		commit++
		a.Send(1, []*pb.Message{heartbeat(1, 2, commit)})
	}
	waitFor(t, "100 more heartbeats", func() bool { return got2.len() >= first+100 })
	last := uint64(0)
	for _, d := range got2.all() {
		if d.m.GetCommit() <= last {
			t.Fatalf("commit %d after %d", d.m.GetCommit(), last)
		}
		last = d.m.GetCommit()
	}
	if last != commit {
		t.Fatalf("last commit %d, sent %d", last, commit)
	}
	if st := a.Stats(); st.Connects < 2 {
		t.Fatalf("%d connections made", st.Connects)
	}
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAdvertised: each end of a connection learns what the other
// advertises from its hello, the dialler's and the acceptor's alike;
// a third node that has not connected, a node that advertises nothing,
// and a removed peer read as "".
func TestAdvertised(t *testing.T) {
	checkGoroutines(t)
	var got inbox
	a := start(t, Config{ID: 1, Deliver: func(uint64, *pb.Message) {}, Advertise: "https://10.0.0.1:5300"})
	b := start(t, Config{ID: 2, Deliver: got.deliver, Advertise: "https://10.0.0.2:5300",
		Peers: map[uint64]string{1: a.Addr(), 3: "127.0.0.1:1"}})
	c := start(t, Config{ID: 3, Deliver: got.deliver, Peers: map[uint64]string{1: a.Addr()}})
	a.SetPeer(2, b.Addr())
	a.SetPeer(3, c.Addr())
	if s := a.Advertised(2); s != "" {
		t.Fatalf("before any connection, node 1 has %q for node 2", s)
	}
	a.Send(1, []*pb.Message{heartbeat(1, 2, 1), heartbeat(1, 3, 1)})
	waitFor(t, "the heartbeats", func() bool { return got.len() == 2 })
	for _, w := range []struct {
		tr   *Transport
		id   uint64
		want string
	}{
		{a, 2, "https://10.0.0.2:5300"}, // from the acceptor's hello
		{b, 1, "https://10.0.0.1:5300"}, // from the dialler's
		{c, 1, "https://10.0.0.1:5300"},
		{a, 3, ""}, // node 3 advertises nothing
		{b, 3, ""}, // b and c have not connected
		{a, 1, ""}, // a node is not its own peer
	} {
		if s := w.tr.Advertised(w.id); s != w.want {
			t.Errorf("node %d has %q for node %d, want %q", w.tr.cfg.ID, s, w.id, w.want)
		}
	}
	b.RemovePeer(1)
	if s := b.Advertised(1); s != "" {
		t.Fatalf("node 2 has %q for node 1 after removing it", s)
	}
}

// silentPeer answers the handshake as node id and then reads nothing.
func silentPeer(t *testing.T, id uint64) (addr string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			h, err := readHello(c)
			if err != nil {
				continue
			}
			c.Write(appendHello(nil, hello{cluster: h.cluster, from: id, to: h.from}))
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// TestBackpressure: a peer that reads nothing. Send keeps returning, what
// does not fit is dropped and counted, and the queue stays in its bounds.
func TestBackpressure(t *testing.T) {
	checkGoroutines(t)
	const queueLength, queueBytes = 1000, 1 << 20
	a := start(t, Config{ID: 1, Deliver: func(uint64, *pb.Message) {}, QueueLength: queueLength, QueueBytes: queueBytes,
		Peers: map[uint64]string{2: silentPeer(t, 2)}})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	done := make(chan struct{})
	const n = 100_000
	go func() {
		defer close(done)
		m := appendMsg(1, 2, 1, 1024)
		for i := range uint64(n) {
			m.Index = proto.Uint64(i)
			a.Send(i%10, []*pb.Message{m})
			if i%1000 == 0 {
				if st := a.Stats(); st.Queued > queueLength || st.QueuedBytes > queueBytes {
					t.Errorf("queue holds %d messages, %d bytes", st.Queued, st.QueuedBytes)
				}
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Send blocked")
	}
	st := a.Stats()
	// The rest are in the frame whose write is stuck.
	if st.Dropped == 0 || st.Dropped+st.MessagesSent+st.Queued > n {
		t.Fatalf("dropped %d, sent %d, queued %d of %d", st.Dropped, st.MessagesSent, st.Queued, n)
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	// 100 MB went through Send; what stays is the queue and a frame.
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 32<<20 {
		t.Fatalf("the heap grew by %d bytes", grown)
	}
	t.Logf("sent %d, dropped %d, queued %d (%d bytes)", st.MessagesSent, st.Dropped, st.Queued, st.QueuedBytes)
}

// TestRefused: hellos that are wrong in each way are refused and counted,
// bad frames after a good hello close the connection, and the transport
// goes on serving its good peer.
func TestRefused(t *testing.T) {
	checkGoroutines(t)
	var got inbox
	a := start(t, Config{ID: 1, Deliver: func(uint64, *pb.Message) {}})
	// Node 3 is a peer of b that never listens: the raw connections below
	// speak as it.
	b := start(t, Config{ID: 2, Deliver: got.deliver, Peers: map[uint64]string{1: a.Addr(), 3: "127.0.0.1:1"}})
	a.SetPeer(2, b.Addr())

	refusedBy := func(what string, cfg Config) {
		cfg.Deliver = func(uint64, *pb.Message) {}
		cfg.Peers = map[uint64]string{2: b.Addr()}
		x := start(t, cfg)
		before := b.Stats().Refused
		x.Send(1, []*pb.Message{heartbeat(cfg.ID, 2, 1)})
		waitFor(t, what+" refused", func() bool { return b.Stats().Refused > before })
		waitFor(t, what+": a failed dial", func() bool { return x.Stats().DialFailures > 0 })
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
	}
	refusedBy("another cluster", Config{ID: 1, Cluster: "other"})
	refusedBy("an unknown node", Config{ID: 9})
	wrongTo := start(t, Config{ID: 1, Deliver: func(uint64, *pb.Message) {}, Peers: map[uint64]string{5: b.Addr()}})
	before := b.Stats().Refused
	wrongTo.Send(1, []*pb.Message{heartbeat(1, 5, 1)})
	waitFor(t, "a hello for node 5 refused", func() bool { return b.Stats().Refused > before })
	wrongTo.Close()

	// raw sends bytes to b and waits for b to close the connection.
	raw := func(what string, b2 []byte) {
		t.Helper()
		c, err := net.Dial("tcp", b.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(b2)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, c)
		if err != nil {
			t.Fatalf("%s: %v, want the connection closed", what, err)
		}
	}
	good := appendHello(nil, hello{cluster: "test", from: 3, to: 2})
	badVersion := appendHello(nil, hello{cluster: "test", from: 3, to: 2})
	badVersion[5] = 9
	before = b.Stats().Refused
	raw("an HTTP request", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	raw("a version from the future", badVersion)
	raw("random bytes", bytes.Repeat([]byte{0xfe, 0x01, 0x77}, 5000))
	if n := b.Stats().Refused - before; n != 3 {
		t.Fatalf("%d refused, want 3", n)
	}

	malformed := b.Stats().Malformed
	truncated := marshal(t, heartbeat(3, 2, 9))
	truncated = truncated[:len(truncated)-1]
	for what, f := range map[string][]byte{
		"an oversize frame":    appendHeader(nil, frameMessages, maxPayload+1),
		"an unknown type":      appendHeader(nil, 77, 1),
		"a truncated message":  frame(frameMessages, appendMessages(nil, []item{{1, truncated}})),
		"an ack from a sender": frame(frameAck, appendAck(nil, ack{1, 1})),
		"a chunk out of order": frame(frameSnapshotChunk, appendChunk(nil,
			chunk{group: 1, transfer: 1, total: 100, offset: 50, data: []byte("x")})),
		"a MsgApp in snapshot chunks": slices.Concat(chunkFrames(frameSnapshotChunk, 1, 1,
			marshal(t, appendMsg(3, 2, 1, 100)), 10)),
		"a MsgSnap in message chunks": slices.Concat(chunkFrames(frameMessageChunk, 1, 1,
			marshal(t, snapMsg(3, 2, 100)), 10)),
	} {
		raw(what, append(append([]byte(nil), good...), f...))
	}
	if n := b.Stats().Malformed - malformed; n != 7 {
		t.Fatalf("%d connections closed as malformed, want 7", n)
	}
	if n := got.len(); n != 0 {
		t.Fatalf("%d messages delivered from bad input", n)
	}

	commit := uint64(0)
	waitFor(t, "a's heartbeats", func() bool {
		commit++
		a.Send(1, []*pb.Message{heartbeat(1, 2, commit)})
		return got.len() > 0
	})
}

// TestTLS: the same transport over TLS, both ends with one certificate.
func TestTLS(t *testing.T) {
	checkGoroutines(t)
	cfg := selfSigned(t)
	var got inbox
	a := start(t, Config{ID: 1, TLS: cfg, Deliver: func(uint64, *pb.Message) {}})
	b := start(t, Config{ID: 2, TLS: cfg, Deliver: got.deliver, Peers: map[uint64]string{1: a.Addr()}})
	a.SetPeer(2, b.Addr())
	for i := range uint64(50) {
		a.Send(i%3, []*pb.Message{appendMsg(1, 2, i, 100)})
	}
	waitFor(t, "50 messages over TLS", func() bool { return got.len() == 50 })

	plain := start(t, Config{ID: 1, Deliver: func(uint64, *pb.Message) {}, Peers: map[uint64]string{2: b.Addr()}})
	plain.Send(1, []*pb.Message{heartbeat(1, 2, 1)})
	waitFor(t, "a plain connection refused", func() bool { return b.Stats().Refused > 0 })
}

func selfSigned(t *testing.T) *tls.Config {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "walbus peer"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		RootCAs:      pool, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS13,
	}
}

// BenchmarkSend: 1 KiB appends of 100 groups from one node to another
// over loopback, a few thousand in flight at a time.
func BenchmarkSend(b *testing.B) {
	var received atomic.Int64
	a := start(b, Config{ID: 1, Deliver: func(uint64, *pb.Message) {}})
	c := start(b, Config{ID: 2, Deliver: func(uint64, *pb.Message) { received.Add(1) },
		Peers: map[uint64]string{1: a.Addr()}})
	a.SetPeer(2, c.Addr())
	m := appendMsg(1, 2, 1, 1024)
	b.SetBytes(int64(proto.Size(m)))
	sent := int64(0)
	for b.Loop() {
		for sent-received.Load() > 2000 {
			runtime.Gosched()
		}
		a.Send(uint64(sent%100), []*pb.Message{m})
		sent++
	}
	for received.Load() < sent {
		runtime.Gosched()
	}
	if st := a.Stats(); st.Dropped != 0 {
		b.Fatalf("%d dropped", st.Dropped)
	}
}
