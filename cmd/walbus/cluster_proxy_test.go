package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
)

// TestClusterProxy: a Go SDK client connected to a node that does not
// lead the queue does everything a client of the leader does, its links
// and $management requests passed on to the leader: single sends and a
// batch, a schedule and a cancel, peeks; peek-lock receives with a lock
// renewed, a completion, an abandon, a dead-letter (received again from
// the dead-letter subqueue through the same node) and a deferral
// (received by SequenceNumber and completed); and a receive-and-delete
// receiver. The leader's counts afterwards show the queue empty, and
// nothing dead-lettered, deferred or scheduled left.
func TestClusterProxy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nodes := startThree(t, "proxy", ordersConfig(t, ""), "--raft-tick", "50ms", "--leader-balance", "0")
	leader := leaderNode(t, nodes, 0)
	front := leader%3 + 1
	client := nodes[front].sdkClient()
	defer client.Close(ctx)

	sender, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		msg := &azservicebus.Message{MessageID: toPtr(fmt.Sprintf("m%d", i)), Body: fmt.Appendf(nil, "body %d", i),
			ApplicationProperties: map[string]any{"n": int64(i), "kind": "single"}}
		if err := sender.SendMessage(ctx, msg, nil); err != nil {
			t.Fatalf("send m%d through node %d (node %d leads): %v", i, front, leader, err)
		}
	}
	batch, err := sender.NewMessageBatch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if err := batch.AddMessage(&azservicebus.Message{MessageID: toPtr(fmt.Sprintf("b%d", i)), Body: fmt.Appendf(nil, "batch %d", i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := sender.SendMessageBatch(ctx, batch, nil); err != nil {
		t.Fatalf("send a batch through node %d: %v", front, err)
	}
	later, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{{MessageID: toPtr("cancelled"), Body: []byte("never")}},
		time.Now().Add(time.Hour), nil)
	if err != nil {
		t.Fatalf("schedule through node %d: %v", front, err)
	}
	if err := sender.CancelScheduledMessages(ctx, later, nil); err != nil {
		t.Fatalf("cancel a scheduled message through node %d: %v", front, err)
	}
	due := time.Now().Add(2 * time.Second)
	if _, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{{MessageID: toPtr("scheduled"), Body: []byte("due")}}, due, nil); err != nil {
		t.Fatal(err)
	}

	receiver, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	peeked, err := receiver.PeekMessages(ctx, 20, nil)
	if err != nil {
		t.Fatalf("peek through node %d: %v", front, err)
	}
	want := []string{"m0", "m1", "m2", "m3", "b0", "b1", "b2", "b3"}
	if ids := messageIDs(peeked); !slices.Equal(ids[:min(len(ids), len(want))], want) {
		t.Fatalf("peeked %v, want %v first", ids, want)
	}
	if n, _ := peeked[0].ApplicationProperties["n"].(int64); n != 0 || peeked[0].ApplicationProperties["kind"] != "single" {
		t.Fatalf("peeked m0's properties: %v", peeked[0].ApplicationProperties)
	}

	got := receiveN(t, ctx, receiver, len(want))
	byID := map[string]*azservicebus.ReceivedMessage{}
	for _, m := range got {
		byID[m.MessageID] = m
	}
	if ids := messageIDs(got); !slices.Equal(ids, want) {
		t.Fatalf("received %v, want %v", ids, want)
	}
	if string(byID["b2"].Body) != "batch 2" {
		t.Fatalf("b2's body: %q", byID["b2"].Body)
	}
	before := *byID["m0"].LockedUntil
	time.Sleep(10 * time.Millisecond)
	if err := receiver.RenewMessageLock(ctx, byID["m0"], nil); err != nil {
		t.Fatalf("renew a lock through node %d: %v", front, err)
	}
	if !byID["m0"].LockedUntil.After(before) {
		t.Fatalf("the renewed lock ends at %v, before it %v", byID["m0"].LockedUntil, before)
	}
	if err := receiver.AbandonMessage(ctx, byID["m1"], nil); err != nil {
		t.Fatalf("abandon: %v", err)
	}
	if err := receiver.DeadLetterMessage(ctx, byID["m2"], &azservicebus.DeadLetterOptions{Reason: toPtr("bad"),
		ErrorDescription: toPtr("it was bad")}); err != nil {
		t.Fatalf("dead-letter: %v", err)
	}
	if err := receiver.DeferMessage(ctx, byID["m3"], nil); err != nil {
		t.Fatalf("defer: %v", err)
	}
	for _, id := range []string{"m0", "b0", "b1", "b2", "b3"} {
		if err := receiver.CompleteMessage(ctx, byID[id], nil); err != nil {
			t.Fatalf("complete %s: %v", id, err)
		}
	}

	// The abandoned message comes again, and the scheduled one once due.
	again := receiveN(t, ctx, receiver, 2)
	slices.SortFunc(again, func(a, b *azservicebus.ReceivedMessage) int { return strings.Compare(a.MessageID, b.MessageID) })
	if ids := messageIDs(again); !slices.Equal(ids, []string{"m1", "scheduled"}) || again[0].DeliveryCount != 2 {
		t.Fatalf("after the abandon and the schedule: %v, m1 delivered %d times", ids, again[0].DeliveryCount)
	}
	for _, m := range again {
		if err := receiver.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
	deferred, err := receiver.ReceiveDeferredMessages(ctx, []int64{*byID["m3"].SequenceNumber}, nil)
	if err != nil || len(deferred) != 1 || deferred[0].MessageID != "m3" {
		t.Fatalf("receive the deferred message by number through node %d: %v, %v", front, messageIDs(deferred), err)
	}
	if err := receiver.CompleteMessage(ctx, deferred[0], nil); err != nil {
		t.Fatalf("complete the deferred message: %v", err)
	}

	dlq, err := client.NewReceiverForQueue("orders", &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter})
	if err != nil {
		t.Fatal(err)
	}
	dead := receiveN(t, ctx, dlq, 1)
	if dead[0].MessageID != "m2" || dead[0].DeadLetterReason == nil || *dead[0].DeadLetterReason != "bad" ||
		*dead[0].DeadLetterErrorDescription != "it was bad" {
		t.Fatalf("from the dead-letter subqueue: %s, reason %v", dead[0].MessageID, dead[0].DeadLetterReason)
	}
	if err := dlq.CompleteMessage(ctx, dead[0], nil); err != nil {
		t.Fatal(err)
	}

	for i := range 3 {
		if err := sender.SendMessage(ctx, &azservicebus.Message{MessageID: toPtr(fmt.Sprintf("r%d", i))}, nil); err != nil {
			t.Fatal(err)
		}
	}
	deleting, err := client.NewReceiverForQueue("orders", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	if ids := messageIDs(receiveN(t, ctx, deleting, 3)); !slices.Equal(ids, []string{"r0", "r1", "r2"}) {
		t.Fatalf("received and deleted %v", ids)
	}
	if left, err := receiver.PeekMessages(ctx, 20, nil); err != nil || len(left) != 0 {
		t.Fatalf("peek at the end through node %d: %v, %v", front, messageIDs(left), err)
	}

	// A receive that times out empty: a message sent afterwards waits at
	// the leader, not locked for a receiver that asks for nothing.
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	if msgs, err := receiver.ReceiveMessages(short, 5, nil); len(msgs) != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a receive from the empty queue: %v, %v", messageIDs(msgs), err)
	}
	cancelShort()
	if err := sender.SendMessage(ctx, &azservicebus.Message{MessageID: toPtr("late")}, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if c := overviewCounts(t, nodes[leader], "orders"); c.Active != 1 || c.Locked != 0 {
		t.Fatalf("a message sent after the receive ended: the leader counts %+v", c)
	}
	if late := receiveAll(t, ctx, receiver, 1); late[0].MessageID != "late" || late[0].DeliveryCount != 1 {
		t.Fatalf("received %s, delivered %d times", late[0].MessageID, late[0].DeliveryCount)
	}

	drainThrough(t, ctx, nodes, front, leader)

	if now := leaderNode(t, nodes, 0); now != leader {
		t.Fatalf("node %d leads the queue now, not %d: the test proved less than it says", now, leader)
	}
	c := overviewCounts(t, nodes[leader], "orders")
	if c.Active != 0 || c.DeadLetter != 0 || c.Deferred != 0 || c.Scheduled != 0 {
		t.Fatalf("the leader's counts at the end: %+v", c)
	}
}

// drainThrough: a go-amqp receiver on node front's manual credit, as the
// JS SDK uses it, drains the credit it has left; a message sent afterwards
// waits at the leader, available and not locked, until the receiver gives
// credit again. The queue is empty before and after.
func drainThrough(t *testing.T, ctx context.Context, nodes map[int]*proc, front, leader int) {
	t.Helper()
	conn, err := amqp.Dial(ctx, "amqp://"+nodes[front].amqp, &amqp.ConnOptions{
		SASLType: amqp.SASLTypePlain("RootManageSharedAccessKey", "SAS_KEY_VALUE")})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	sender, err := sess.NewSender(ctx, "orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	receiver, err := sess.NewReceiver(ctx, "orders", &amqp.ReceiverOptions{Credit: -1, SettlementMode: amqp.ReceiverSettleModeSecond.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	receive := func(id string) {
		t.Helper()
		m, err := receiver.Receive(ctx, nil)
		if err != nil || m.Properties == nil || m.Properties.MessageID != id {
			t.Fatalf("receive %s through node %d: %+v, %v", id, front, m, err)
		}
		if err := receiver.AcceptMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := receiver.IssueCredit(5); err != nil {
		t.Fatal(err)
	}
	if err := sender.Send(ctx, &amqp.Message{Properties: &amqp.MessageProperties{MessageID: "d0"}, Data: [][]byte{nil}}, nil); err != nil {
		t.Fatal(err)
	}
	receive("d0")
	if err := receiver.DrainCredit(ctx, nil); err != nil {
		t.Fatalf("drain through node %d: %v", front, err)
	}
	if err := sender.Send(ctx, &amqp.Message{Properties: &amqp.MessageProperties{MessageID: "d1"}, Data: [][]byte{nil}}, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if c := overviewCounts(t, nodes[leader], "orders"); c.Active != 1 || c.Locked != 0 {
		t.Fatalf("a message sent after the drain: the leader counts %+v", c)
	}
	if err := receiver.IssueCredit(1); err != nil {
		t.Fatal(err)
	}
	receive("d1")
}

// TestClusterProxyTopic: a topic through a node that does not lead it.
// Sends to the topic; each subscription receives what its rules select at
// the leader (one of them a SQL filter), peeks and completes, all passed
// on.
func TestClusterProxyTopic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	config := filepath.Join(t.TempDir(), "Config.json")
	body := `{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns", "Queues": [], "Topics": [{"Name": "news",
		"Subscriptions": [{"Name": "all"}, {"Name": "red", "Rules": [{"Name": "red",
			"Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "color = 'red'"}}}]}]}]}],
		"Logging": {"Type": "File"}}}`
	if err := os.WriteFile(config, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	nodes := startThree(t, "proxy", config, "--raft-tick", "50ms", "--leader-balance", "0")
	leader := waitLeads(t, nodes, "news", 0)
	front := leader%3 + 1
	// The topic's leader creates the subscriptions; the node the client
	// uses resolves their addresses once it has applied that.
	waitAdmin(t, "node "+fmt.Sprint(front)+" holds the subscriptions", func() bool {
		return hasEntity(t, nodes[front], "news/Subscriptions/red")
	})
	client := nodes[front].sdkClient()
	defer client.Close(ctx)

	sender, err := client.NewSender("news", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, color := range []string{"red", "blue", "red"} {
		msg := &azservicebus.Message{MessageID: toPtr(fmt.Sprintf("n%d", i)), ApplicationProperties: map[string]any{"color": color}}
		if err := sender.SendMessage(ctx, msg, nil); err != nil {
			t.Fatalf("send to the topic through node %d (node %d leads): %v", front, leader, err)
		}
	}
	for _, sub := range []struct {
		name string
		want []string
	}{{"all", []string{"n0", "n1", "n2"}}, {"red", []string{"n0", "n2"}}} {
		r, err := client.NewReceiverForSubscription("news", sub.name, nil)
		if err != nil {
			t.Fatal(err)
		}
		peeked, err := r.PeekMessages(ctx, 10, nil)
		if ids := messageIDs(peeked); err != nil || !slices.Equal(ids, sub.want) {
			t.Fatalf("peek %s through node %d: %v, %v; want %v", sub.name, front, ids, err, sub.want)
		}
		if ids := messageIDs(receiveAll(t, ctx, r, len(sub.want))); !slices.Equal(ids, sub.want) {
			t.Fatalf("subscription %s gave %v, want %v", sub.name, ids, sub.want)
		}
	}
	if now := waitLeads(t, nodes, "news", 0); now != leader {
		t.Fatalf("node %d leads the topic now, not %d: the test proved less than it says", now, leader)
	}
	for _, path := range []string{"news/Subscriptions/all", "news/Subscriptions/red"} {
		if c := overviewCounts(t, nodes[leader], path); c.Active != 0 {
			t.Fatalf("the leader counts %+v in %s at the end", c, path)
		}
	}
}

// TestClusterProxyTLS: nodes with a certificate advertise amqps, and pass
// links on to each other over TLS, trusting each other's certificate as
// clients do.
func TestClusterProxyTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes, _ := startThreeTLS(t, "proxytls", "--raft-tick", "50ms", "--leader-balance", "0")
	leader := leaderNode(t, nodes, 0)
	front := leader%3 + 1
	if !strings.Contains(nodes[leader].logs(), `\"amqp\":\"amqps://`) {
		t.Fatalf("node %d does not advertise amqps:\n%s", leader, tail(nodes[leader].logs(), 20))
	}
	client := nodes[front].sdkClient()
	defer client.Close(ctx)
	sender, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.SendMessage(ctx, &azservicebus.Message{MessageID: toPtr("tls")}, nil); err != nil {
		t.Fatalf("send through node %d (node %d leads): %v", front, leader, err)
	}
	receiver, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := receiveAll(t, ctx, receiver, 1); got[0].MessageID != "tls" {
		t.Fatalf("received %s", got[0].MessageID)
	}
}

// TestClusterProxySessions: a session queue through a node that does not
// lead it. Sends with session ids; a receiver for the next session gets
// one, with its messages, and sets, reads and renews the session's state
// and lock, all passed on to the leader; a receiver of a named session
// gets that one.
func TestClusterProxySessions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nodes := startThree(t, "proxy", ordersConfig(t, `{"RequiresSession": true}`), "--raft-tick", "50ms", "--leader-balance", "0")
	leader := leaderNode(t, nodes, 0)
	front := leader%3 + 1
	client := nodes[front].sdkClient()
	defer client.Close(ctx)

	sender, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct{ id, session string }{{"a0", "a"}, {"a1", "a"}, {"b0", "b"}, {"a2", "a"}} {
		if err := sender.SendMessage(ctx, &azservicebus.Message{MessageID: &m.id, SessionID: &m.session}, nil); err != nil {
			t.Fatalf("send %s through node %d: %v", m.id, front, err)
		}
	}
	sr, err := client.AcceptNextSessionForQueue(ctx, "orders", nil)
	if err != nil {
		t.Fatalf("accept the next session through node %d: %v", front, err)
	}
	if sr.SessionID() != "a" {
		t.Fatalf("the next session is %q, want a", sr.SessionID())
	}
	got := receiveN(t, ctx, sr, 3)
	if ids := messageIDs(got); !slices.Equal(ids, []string{"a0", "a1", "a2"}) {
		t.Fatalf("session a holds %v", ids)
	}
	if err := sr.SetSessionState(ctx, []byte("halfway"), nil); err != nil {
		t.Fatalf("set the session's state: %v", err)
	}
	if state, err := sr.GetSessionState(ctx, nil); err != nil || string(state) != "halfway" {
		t.Fatalf("the session's state: %q, %v", state, err)
	}
	before := sr.LockedUntil()
	time.Sleep(10 * time.Millisecond)
	if err := sr.RenewSessionLock(ctx, nil); err != nil || !sr.LockedUntil().After(before) {
		t.Fatalf("renew the session's lock: %v, until %v (was %v)", err, sr.LockedUntil(), before)
	}
	for _, m := range got {
		if err := sr.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatalf("complete %s: %v", m.MessageID, err)
		}
	}
	if err := sr.Close(ctx); err != nil {
		t.Fatal(err)
	}

	named, err := client.AcceptSessionForQueue(ctx, "orders", "b", nil)
	if err != nil {
		t.Fatalf("accept session b through node %d: %v", front, err)
	}
	if state, err := named.GetSessionState(ctx, nil); err != nil || state != nil {
		t.Fatalf("session b's state: %q, %v", state, err)
	}
	b := receiveN(t, ctx, named, 1)
	if b[0].MessageID != "b0" || b[0].SessionID == nil || *b[0].SessionID != "b" {
		t.Fatalf("session b gave %s", b[0].MessageID)
	}
	if err := named.CompleteMessage(ctx, b[0], nil); err != nil {
		t.Fatal(err)
	}
	if now := leaderNode(t, nodes, 0); now != leader {
		t.Fatalf("node %d leads the queue now, not %d: the test proved less than it says", now, leader)
	}
	if c := overviewCounts(t, nodes[leader], "orders"); c.Active != 0 {
		t.Fatalf("the leader's counts at the end: %+v", c)
	}
}

// TestClusterProxyFailover: a Go SDK client connected to a node that does
// not lead the queue sends, one message at a time, and receives and
// completes, while the queue's leader, a third node, is killed with -9.
// The client's node is cut off from the others' peer links just before,
// while sends go on through it (its links to the leader are AMQP, not peer
// links), so that its log is behind and the third node wins the election:
// the client's links, detached by the kill, attach again and are passed on
// to that new leader. Sends are acknowledged again and messages come; by
// the end every acknowledged send has been received.
func TestClusterProxyFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nodes, isolate := startThreeCuttable(t, "proxy", ordersConfig(t, ""), "--raft-tick", "50ms", "--leader-balance", "0")
	leader := leaderNode(t, nodes, 0)
	front := leader%3 + 1
	third := 6 - leader - front
	client, err := azservicebus.NewClientFromConnectionString(nodes[front].connString(), &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: 5, RetryDelay: 200 * time.Millisecond, MaxRetryDelay: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(ctx)

	var mu sync.Mutex
	acked, received := map[string]bool{}, map[string]bool{}
	var receivedAfterKill int
	killed := make(chan struct{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		sendUntil(ctx, client, stop, func(id string) {
			mu.Lock()
			defer mu.Unlock()
			acked[id] = true
		})
	}()
	go func() {
		defer wg.Done()
		receiveUntil(ctx, client, stop, func(id string) {
			mu.Lock()
			defer mu.Unlock()
			received[id] = true
			if closed(killed) {
				receivedAfterKill++
			}
		})
	}()
	ackedSoFar := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	waitAcked := func(n int, what string) {
		t.Helper()
		deadline := time.Now().Add(90 * time.Second)
		for ackedSoFar() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%d sends acknowledged in 90 s, want %d %s\nnode %d:\n%s", ackedSoFar(), n, what,
					front, tail(nodes[front].logs(), 40))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	waitAcked(20, "before the faults")
	isolate(front, true)
	waitAcked(ackedSoFar()+20, "while the client's node is cut off from the peer links")
	nodes[leader].kill()
	close(killed)
	isolate(front, false)
	before := ackedSoFar()
	if next := leaderNode(t, nodes, leader); next != third {
		t.Fatalf("node %d leads after the kill, not node %d, whose log is ahead", next, third)
	}
	waitAcked(before+50, "after the kill")
	waitAdmin(t, "messages received after the kill", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return receivedAfterKill >= 20
	})
	close(stop)
	wg.Wait()

	// Whatever the receiver has not had yet comes now.
	r, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for {
		mu.Lock()
		var missing []string
		for id := range acked {
			if !received[id] {
				missing = append(missing, id)
			}
		}
		mu.Unlock()
		if len(missing) == 0 {
			break
		}
		wait, cancel := context.WithTimeout(ctx, 10*time.Second)
		msgs, err := r.ReceiveMessages(wait, 100, nil)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("receive the rest: %v", err)
		}
		if len(msgs) == 0 {
			slices.Sort(missing)
			t.Fatalf("%d acknowledged sends never received: %v", len(missing), missing)
		}
		mu.Lock()
		for _, m := range msgs {
			received[m.MessageID] = true
		}
		mu.Unlock()
		for _, m := range msgs {
			_ = r.CompleteMessage(ctx, m, nil)
		}
	}
	t.Logf("%d sends acknowledged through node %d, %d of them after node %d was killed and node %d led; all received, %d after the kill by the receiver that ran through it",
		len(acked), front, len(acked)-before, leader, third, receivedAfterKill)
}

// startThreeCuttable is startThree with every node's peer links through
// proxies (linkProxy); isolate cuts node id off from the others' peer
// links, or heals it.
func startThreeCuttable(t *testing.T, name, config string, args ...string) (nodes map[int]*proc, isolate func(id int, cut bool)) {
	t.Helper()
	listen := map[int]string{}
	for id := 1; id <= 3; id++ {
		listen[id] = freeAddr(t)
	}
	links := map[[2]int]*linkProxy{} // node i's link to node j
	for i := 1; i <= 3; i++ {
		for j := 1; j <= 3; j++ {
			if i != j {
				links[[2]int{i, j}] = newLinkProxy(t, listen[j])
			}
		}
	}
	nodes = map[int]*proc{}
	for id := 1; id <= 3; id++ {
		var peers []string
		for j := 1; j <= 3; j++ {
			addr := listen[j]
			if j != id {
				addr = links[[2]int{id, j}].addr
			}
			peers = append(peers, fmt.Sprintf("%d=%s", j, addr))
		}
		nodes[id] = startWalbus(t, t.TempDir(), append([]string{"--config", config, "--cluster", name,
			"--node-id", fmt.Sprint(id), "--peers", strings.Join(peers, ","), "--peer-listen", listen[id]}, args...)...)
	}
	return nodes, func(id int, cut bool) {
		for pair, p := range links {
			if pair[0] == id || pair[1] == id {
				p.setCut(cut)
			}
		}
	}
}

// sendUntil sends messages p0, p1, ... one at a time until stop, telling
// acked each one acknowledged. A send that fails is not counted (its
// outcome is unknown) and the next goes on.
func sendUntil(ctx context.Context, client *azservicebus.Client, stop <-chan struct{}, acked func(id string)) {
	var s *azservicebus.Sender
	for n := 0; !closed(stop); n++ {
		if s == nil {
			var err error
			if s, err = client.NewSender("orders", nil); err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
		}
		id := fmt.Sprintf("p%d", n)
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.SendMessage(sctx, &azservicebus.Message{MessageID: &id, Body: []byte(id)}, nil)
		cancel()
		if err != nil {
			s.Close(ctx)
			s = nil
			continue
		}
		acked(id)
	}
	if s != nil {
		s.Close(ctx)
	}
}

// receiveUntil receives and completes until stop, telling got each
// message received.
func receiveUntil(ctx context.Context, client *azservicebus.Client, stop <-chan struct{}, got func(id string)) {
	var r *azservicebus.Receiver
	for !closed(stop) {
		if r == nil {
			var err error
			if r, err = client.NewReceiverForQueue("orders", nil); err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		msgs, err := r.ReceiveMessages(rctx, 20, nil)
		cancel()
		for _, m := range msgs {
			got(m.MessageID)
			_ = r.CompleteMessage(ctx, m, nil)
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			r.Close(ctx)
			r = nil
		}
	}
	if r != nil {
		r.Close(ctx)
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func messageIDs(msgs []*azservicebus.ReceivedMessage) []string {
	ids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		ids = append(ids, m.MessageID)
	}
	return ids
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// queueCountsView is a queue's counts in the console's overview.
type queueCountsView struct {
	Active, Locked, DeadLetter, Deferred, Scheduled float64
}

// hasEntity reports whether p's console overview lists path.
func hasEntity(t *testing.T, p *proc, path string) bool {
	t.Helper()
	status, body := consoleCall(t, p, "GET", "/$walbus/overview", nil)
	list, _ := body["entities"].([]any)
	for _, v := range list {
		if e, _ := v.(map[string]any); status == 200 && e["path"] == path {
			return true
		}
	}
	return false
}

// overviewCounts is what p's console overview counts of queue name.
func overviewCounts(t *testing.T, p *proc, name string) queueCountsView {
	t.Helper()
	status, body := consoleCall(t, p, "GET", "/$walbus/overview", nil)
	if status != 200 {
		t.Fatalf("overview: %d %v", status, body)
	}
	list, _ := body["entities"].([]any)
	for _, v := range list {
		e, _ := v.(map[string]any)
		if e["path"] != name {
			continue
		}
		counts, _ := e["counts"].(map[string]any)
		var c queueCountsView
		c.Active, _ = counts["active"].(float64)
		c.Locked, _ = counts["locked"].(float64)
		c.DeadLetter, _ = counts["deadLetter"].(float64)
		c.Deferred, _ = counts["deferred"].(float64)
		c.Scheduled, _ = counts["scheduled"].(float64)
		return c
	}
	t.Fatalf("the overview has no %s", name)
	return queueCountsView{}
}

// TestAdvertisedAMQP: a node advertises its AMQP listener beside its HTTP
// one, made as the HTTP URL is (amqps with a certificate, the host of
// --amqp unless it names none, the port bound), in a JSON object the peer
// hello carries; a node that advertises only an HTTP URL, as nodes did
// before, is still read.
func TestAdvertisedAMQP(t *testing.T) {
	cfg := &clusterConfig{node: 1, nodes: map[uint64]string{1: "10.0.0.5:7000", 2: "10.0.0.6:7000"}}
	for _, c := range []struct {
		flag, bound string
		tls         bool
		want        string
	}{
		{"127.0.0.1:0", "127.0.0.1:41234", false, "amqp://127.0.0.1:41234"},
		{"0.0.0.0:5672", "0.0.0.0:5672", true, "amqps://10.0.0.5:5672"},
		{"node1.example:5672", "10.0.0.5:5672", false, "amqp://node1.example:5672"},
		{"", "", false, ""},
	} {
		if got := cfg.amqpURL(c.flag, c.bound, c.tls); got != c.want {
			t.Errorf("--amqp %q bound at %q, TLS %v: %q, want %q", c.flag, c.bound, c.tls, got, c.want)
		}
	}
	a := advertised{HTTP: "http://10.0.0.5:5300", AMQP: "amqp://10.0.0.5:5672"}
	s, err := a.encode()
	if err != nil || parseAdvertised(s) != a {
		t.Fatalf("%+v advertised as %q (%v) reads back as %+v", a, s, err, parseAdvertised(s))
	}
	if old := parseAdvertised("http://10.0.0.5:5300"); old != (advertised{HTTP: "http://10.0.0.5:5300"}) {
		t.Fatalf("an HTTP URL alone reads as %+v", old)
	}
	if _, err := (advertised{HTTP: "http://" + strings.Repeat("a", 1000) + ".example", AMQP: "amqp://10.0.0.5:5672"}).encode(); err == nil {
		t.Fatal("an advertisement over the peer hello's limit was taken")
	}
}
