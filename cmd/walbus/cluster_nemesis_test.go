package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// TestClusterNemesis runs three walbus serve --cluster processes under
// load from the Go SDK (a sender and a receiver that completes, each
// following the queue's leader as /health names it) while a nemesis, in
// turn, kills a node with SIGKILL and starts it again, pauses one with
// SIGSTOP, and cuts the leader off from the others (every peer link runs
// through a proxy the test controls), healing after each. Then the
// network heals, the clients stop, and what is left is drained. A checker
// reads the clients' histories:
//
//   - every acknowledged send was delivered;
//   - no message was delivered after its completion was acknowledged;
//   - a SequenceNumber never names two messages, and sends acknowledged
//     one after the other have increasing SequenceNumbers;
//   - no delivery was completed twice;
//   - messages scheduled and deferred before the faults are still there
//     after them.
//
// WALBUS_NEMESIS_ROUNDS sets the number of faults (4 by default; make
// full-size runs more).
func TestClusterNemesis(t *testing.T) {
	rounds := 4
	if s := os.Getenv("WALBUS_NEMESIS_ROUNDS"); s != "" {
		fmt.Sscan(s, &rounds)
	}
	ctx := context.Background()
	config := ordersConfig(t, `{"LockDuration": "PT10S"}`)
	// Node i listens at listen[i]; its link to node j goes through the
	// proxy links[i][j], which the nemesis cuts.
	listen := map[int]string{}
	for id := 1; id <= 3; id++ {
		listen[id] = freeAddr(t)
	}
	links := map[int]map[int]*linkProxy{}
	for i := 1; i <= 3; i++ {
		links[i] = map[int]*linkProxy{}
		for j := 1; j <= 3; j++ {
			if i != j {
				links[i][j] = newLinkProxy(t, listen[j])
			}
		}
	}
	nodes := map[int]*proc{}
	for id := 1; id <= 3; id++ {
		var peers []string
		for j := 1; j <= 3; j++ {
			addr := listen[j]
			if j != id {
				addr = links[id][j].addr
			}
			peers = append(peers, fmt.Sprintf("%d=%s", j, addr))
		}
		nodes[id] = startWalbus(t, t.TempDir(), "--config", config, "--cluster", "nemesis", "--node-id", fmt.Sprint(id),
			"--peers", strings.Join(peers, ","), "--peer-listen", listen[id], "--raft-tick", "50ms")
	}
	isolate := func(id int, cut bool) {
		for i := 1; i <= 3; i++ {
			for j := 1; j <= 3; j++ {
				if i != j && (i == id || j == id) {
					links[i][j].setCut(cut)
				}
			}
		}
	}
	h := newHistory(nodes)

	// Before the faults: messages scheduled for after them, and deferred.
	leader := leaderNode(t, nodes, 0)
	scheduled, deferred := h.prepare(t, ctx, leader)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); h.sendLoop(ctx, stop) }()
	go func() { defer wg.Done(); h.receiveLoop(ctx, stop) }()

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	time.Sleep(2 * time.Second)
	for r := range rounds {
		leader := leaderNode(t, nodes, 0)
		switch kind := r % 3; kind {
		case 0:
			victim := []int{leader, leader%3 + 1}[rng.IntN(2)]
			t.Logf("round %d: kill -9 node %d (leader %d)", r, victim, leader)
			nodes[victim].kill()
			time.Sleep(2 * time.Second)
			nodes[victim].start()
		case 1:
			victim := []int{leader, leader%3 + 1}[rng.IntN(2)]
			t.Logf("round %d: SIGSTOP node %d for 3 s (leader %d)", r, victim, leader)
			nodes[victim].cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(3 * time.Second)
			nodes[victim].cmd.Process.Signal(syscall.SIGCONT)
		case 2:
			t.Logf("round %d: cut the leader %d off for 4 s", r, leader)
			isolate(leader, true)
			time.Sleep(4 * time.Second)
			isolate(leader, false)
		}
		time.Sleep(2 * time.Second)
	}
	close(stop)
	wg.Wait()

	// Drain on the leader: everything left, the scheduled messages (due
	// by now) and the deferred ones by SequenceNumber.
	leader = leaderNode(t, nodes, 0)
	h.drain(t, ctx, leader, deferred)
	h.check(t, scheduled)
}

// history is what the clients saw.
type history struct {
	// The nodes' HTTP addresses and connection strings, read once: the
	// clients' goroutines must not read a proc that a restart writes.
	http, conn map[int]string
	mu         sync.Mutex
	sends      []sendOp // in the order they were made, one at a time
	// deliveries by MessageId, with their SequenceNumbers and when
	deliveries map[string][]delivered
	completed  map[int64]int        // SequenceNumber -> acknowledged completions
	doneAt     map[string]time.Time // MessageId -> when its completion was acknowledged
	scheduled  []string
}

type sendOp struct {
	id  string
	ok  bool
	end time.Time
}

type delivered struct {
	seq int64
	at  time.Time
}

func newHistory(nodes map[int]*proc) *history {
	h := &history{http: map[int]string{}, conn: map[int]string{}}
	for id, p := range nodes {
		h.http[id], h.conn[id] = p.http, p.connString()
	}
	return h
}

// client is a Go SDK client of node id with short retries: the clients
// find the next leader themselves.
func (h *history) client(id int) *azservicebus.Client {
	c, err := azservicebus.NewClientFromConnectionString(h.conn[id], &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 1, RetryDelay: 200 * time.Millisecond, MaxRetryDelay: time.Second}})
	if err != nil {
		panic(err)
	}
	return c
}

// leader is a node that says it leads the queue now, or 0.
func (h *history) leader() int {
	for id, addr := range h.http {
		if hh, err := healthAt(addr); err == nil && hh.Cluster != nil && slices.Contains(hh.Cluster.Leading, "orders") {
			return id
		}
	}
	return 0
}

func (h *history) prepare(t *testing.T, ctx context.Context, leader int) (scheduled []string, deferred []int64) {
	c := h.client(leader)
	defer c.Close(ctx)
	s, err := c.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(20 * time.Second)
	for i := range 3 {
		id := fmt.Sprintf("sched%d", i)
		if _, err := s.ScheduleMessages(ctx, []*azservicebus.Message{{MessageID: &id, Body: []byte(id)}}, at, nil); err != nil {
			t.Fatalf("schedule: %v", err)
		}
		scheduled = append(scheduled, id)
	}
	for i := range 3 {
		id := fmt.Sprintf("defer%d", i)
		if err := s.SendMessage(ctx, &azservicebus.Message{MessageID: &id, Body: []byte(id)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for len(deferred) < 3 {
		msgs, err := r.ReceiveMessages(ctx, 3-len(deferred), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := r.DeferMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
			deferred = append(deferred, *m.SequenceNumber)
		}
	}
	h.scheduled = scheduled
	return scheduled, deferred
}

// follow keeps a client on the node that leads the queue, made again
// when the leader changes or after a failure (drop).
type follow struct {
	h  *history
	at int
	c  *azservicebus.Client
}

// client is a client of the node that leads now, and whether it is new;
// nil while no node says it leads.
func (f *follow) client(ctx context.Context) (*azservicebus.Client, bool) {
	if leader := f.h.leader(); leader != f.at || f.c == nil {
		f.drop(ctx)
		if f.at = leader; leader == 0 {
			return nil, false
		}
		f.c = f.h.client(leader)
		return f.c, true
	}
	return f.c, false
}

func (f *follow) drop(ctx context.Context) {
	if f.c != nil {
		f.c.Close(ctx)
		f.c = nil
	}
}

// sendLoop sends one message at a time to whichever node leads.
func (h *history) sendLoop(ctx context.Context, stop <-chan struct{}) {
	f := &follow{h: h}
	defer f.drop(ctx)
	var s *azservicebus.Sender
	for n := 0; ; {
		select {
		case <-stop:
			return
		default:
		}
		c, fresh := f.client(ctx)
		if c == nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if fresh || s == nil {
			var err error
			if s, err = c.NewSender("orders", nil); err != nil {
				f.drop(ctx)
				continue
			}
		}
		id := fmt.Sprintf("m%d", n)
		n++
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.SendMessage(sctx, &azservicebus.Message{MessageID: &id, Body: []byte(id)}, nil)
		cancel()
		h.mu.Lock()
		h.sends = append(h.sends, sendOp{id: id, ok: err == nil, end: time.Now()})
		h.mu.Unlock()
		if err != nil {
			f.drop(ctx) // find the leader again
		}
	}
}

// receiveLoop receives from whichever node leads and completes.
func (h *history) receiveLoop(ctx context.Context, stop <-chan struct{}) {
	f := &follow{h: h}
	defer f.drop(ctx)
	var r *azservicebus.Receiver
	for {
		select {
		case <-stop:
			return
		default:
		}
		c, fresh := f.client(ctx)
		if c == nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if fresh || r == nil {
			var err error
			if r, err = c.NewReceiverForQueue("orders", nil); err != nil {
				f.drop(ctx)
				continue
			}
		}
		if !h.receiveSome(ctx, r, time.Second) {
			f.drop(ctx)
		}
	}
}

// receiveSome receives what comes within wait and completes it. It
// reports whether the receiver still works.
func (h *history) receiveSome(ctx context.Context, r *azservicebus.Receiver, wait time.Duration) bool {
	rctx, cancel := context.WithTimeout(ctx, wait)
	msgs, err := r.ReceiveMessages(rctx, 50, nil)
	cancel()
	if err != nil && rctx.Err() == nil {
		return false
	}
	// Completed side by side: one after the other, each a quorum's
	// round, the receiver falls behind a sender that sends one at a time.
	var wg sync.WaitGroup
	for _, m := range msgs {
		h.delivered(m)
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := r.CompleteMessage(cctx, m, nil)
			cancel()
			if err == nil {
				h.mu.Lock()
				h.completed[*m.SequenceNumber]++
				h.doneAt[m.MessageID] = time.Now()
				h.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return true
}

func (h *history) delivered(m *azservicebus.ReceivedMessage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.deliveries == nil {
		h.deliveries, h.completed, h.doneAt = map[string][]delivered{}, map[int64]int{}, map[string]time.Time{}
	}
	h.deliveries[m.MessageID] = append(h.deliveries[m.MessageID], delivered{seq: *m.SequenceNumber, at: time.Now()})
}

// drain receives and completes everything left on leader, and the
// deferred messages by SequenceNumber.
func (h *history) drain(t *testing.T, ctx context.Context, leader int, deferred []int64) {
	c := h.client(leader)
	defer c.Close(ctx)
	r, err := c.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	// The scheduled messages come due 20 s after the start. The drain
	// ends once they came and a peek finds nothing but the deferred
	// messages: a message the clients' last receive locked, and never
	// returned when its link closed, is locked until its lock runs out,
	// and then comes again.
	isDeferred := map[int64]bool{}
	for _, seq := range deferred {
		isDeferred[seq] = true
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("the drain did not end in 3 minutes (%d deliveries so far)", h.count())
		}
		if !h.receiveSome(ctx, r, 2*time.Second) {
			t.Fatal("the receiver on the final leader fails")
		}
		h.mu.Lock()
		due := true
		for _, id := range h.scheduled {
			due = due && len(h.deliveries[id]) > 0
		}
		h.mu.Unlock()
		from := int64(0)
		left, err := r.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
		if err != nil {
			t.Fatalf("peek on the final leader: %v", err)
		}
		others := 0
		for _, m := range left {
			if !isDeferred[*m.SequenceNumber] {
				others++
			}
		}
		if due && others == 0 {
			break
		}
	}
	msgs, err := r.ReceiveDeferredMessages(ctx, deferred, nil)
	if err != nil {
		t.Fatalf("receive the deferred messages after the faults: %v", err)
	}
	if len(msgs) != len(deferred) {
		t.Fatalf("%d of %d deferred messages after the faults", len(msgs), len(deferred))
	}
	for _, m := range msgs {
		h.delivered(m)
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatalf("complete deferred %d: %v", *m.SequenceNumber, err)
		}
	}
}

func (h *history) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, ds := range h.deliveries {
		n += len(ds)
	}
	return n
}

// check is the checker over the histories.
func (h *history) check(t *testing.T, scheduled []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	acked, failed := 0, 0
	bySeq := map[int64]string{}
	for id, ds := range h.deliveries {
		for _, d := range ds {
			if other, ok := bySeq[d.seq]; ok && other != id {
				t.Errorf("SequenceNumber %d names %s and %s", d.seq, other, id)
			}
			bySeq[d.seq] = id
			if done, ok := h.doneAt[id]; ok && d.at.After(done.Add(time.Second)) {
				// A second's slack: the completion's acknowledgement and
				// the receiver's record of a delivery race on the client.
				t.Errorf("%s (#%d) delivered at %s, after its completion was acknowledged at %s", id, d.seq,
					d.at.Format(time.StampMilli), done.Format(time.StampMilli))
			}
		}
	}
	var lastMax int64
	for _, s := range h.sends {
		if !s.ok {
			failed++
			continue
		}
		acked++
		ds := h.deliveries[s.id]
		if len(ds) == 0 {
			t.Errorf("acknowledged send %s was never delivered", s.id)
			continue
		}
		lo, hi := ds[0].seq, ds[0].seq
		for _, d := range ds {
			lo, hi = min(lo, d.seq), max(hi, d.seq)
		}
		if lo <= lastMax {
			t.Errorf("send %s, acknowledged after an earlier one with SequenceNumber %d, has %d", s.id, lastMax, lo)
		}
		lastMax = max(lastMax, hi)
	}
	for seq, n := range h.completed {
		if n > 1 {
			t.Errorf("SequenceNumber %d completed %d times", seq, n)
		}
	}
	for _, id := range scheduled {
		if len(h.deliveries[id]) == 0 {
			t.Errorf("scheduled message %s never came", id)
		}
	}
	if acked == 0 {
		t.Error("no send was acknowledged")
	}
	t.Logf("%d sends acknowledged, %d failed; %d messages delivered", acked, failed, len(h.deliveries))
}

// linkProxy forwards TCP connections to a node's peer listener, until it
// is cut: then it closes what it carries and refuses new connections.
type linkProxy struct {
	addr, target string
	ln           net.Listener
	mu           sync.Mutex
	cut          bool
	conns        map[net.Conn]bool
}

func newLinkProxy(t *testing.T, target string) *linkProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{addr: ln.Addr().String(), target: target, ln: ln, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	go p.serve()
	return p
}

func (p *linkProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut := p.cut
		p.mu.Unlock()
		if cut {
			in.Close()
			continue
		}
		out, err := net.DialTimeout("tcp", p.target, time.Second)
		if err != nil {
			in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = true, true
		p.mu.Unlock()
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *linkProxy) pipe(dst, src net.Conn) {
	io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

func (p *linkProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
	}
}
