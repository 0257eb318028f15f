package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walbus/walbus/admin"
)

// TestClusterSnapshotProcesses: three processes, with a snapshot every 50
// events and 16 KiB log segments. A follower is killed; the leader takes
// 20 messages that the Go SDK defers, then 400 more that a
// receive-and-delete receiver takes, so its log is cut in front of its
// snapshots (but for the deferred messages' records). The follower comes
// back behind the leader's log: it catches up from a snapshot sent over
// the peer transport with the records it reads. Made the leader, it
// hands the deferred messages to the Go SDK by their SequenceNumbers,
// bodies and all.
func TestClusterSnapshotProcesses(t *testing.T) {
	nodes := startThree(t, "snap", ordersConfig(t, ""), snapshotArgs...)
	leader := leaderNode(t, nodes, 0)
	behind := leader%3 + 1
	nodes[behind].kill()

	bodies := deferBacklog(t, nodes[leader], 20, 10)
	var st admin.ClusterStatus
	getJSON(t, "http://"+nodes[leader].http+"/cluster", &st)
	if gs := entityGroups(st.Groups); len(gs) != 1 || gs[0].Snapshot == 0 {
		t.Fatalf("the leader took no snapshot: %+v", st.Groups)
	}

	nodes[behind].start()
	waitSnapshotReceived(t, nodes[behind])
	leadOn(t, nodes, behind)
	takeDeferred(t, nodes[behind], bodies)
}

// snapshotArgs make a cluster's nodes snapshot and cut their logs often.
var snapshotArgs = []string{"--raft-tick", "50ms", "--snapshot-every", "50", "--segment-size", "16KiB"}

// deferBacklog sends n messages to the queue orders on p, which leads
// it, and defers them; then rounds of 40 messages that a
// receive-and-delete receiver takes, so that the log moves on past the
// deferred ones. It returns the deferred messages' bodies by
// SequenceNumber.
func deferBacklog(t *testing.T, p *proc, n, rounds int) map[int64]string {
	t.Helper()
	ctx := context.Background()
	client := p.sdkClient()
	defer client.Close(ctx)
	sender, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := sender.SendMessage(ctx, &azservicebus.Message{MessageID: toPtr(fmt.Sprintf("keep-%d", i)),
			Body: fmt.Appendf(nil, "kept body %d", i)}, nil); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	receiver, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[int64]string{}
	for len(bodies) < n {
		msgs, err := receiver.ReceiveMessages(ctx, n-len(bodies), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := receiver.DeferMessage(ctx, m, nil); err != nil {
				t.Fatal(err)
			}
			bodies[*m.SequenceNumber] = string(m.Body)
		}
	}
	receiver.Close(ctx)
	taker, err := client.NewReceiverForQueue("orders", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if err != nil {
		t.Fatal(err)
	}
	filler := make([]byte, 1024)
	for round := range rounds {
		for i := range 40 {
			if err := sender.SendMessage(ctx, &azservicebus.Message{MessageID: toPtr(fmt.Sprintf("fill-%d-%d", round, i)),
				Body: filler}, nil); err != nil {
				t.Fatalf("send filler: %v", err)
			}
		}
		for n := 0; n < 40; {
			msgs, err := taker.ReceiveMessages(ctx, 40-n, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if !strings.HasPrefix(m.MessageID, "fill-") {
					t.Fatalf("deferred message %s taken", m.MessageID)
				}
			}
			n += len(msgs)
		}
	}
	return bodies
}

// waitSnapshotReceived waits until p has restored a leader's snapshot.
func waitSnapshotReceived(t *testing.T, p *proc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		text := getText(t, "http://"+p.http+"/metrics")
		if metricValue(t, text, "walbus_raft_snapshots_received_total") >= 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot restored:\n%s", p.logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leadOn makes node id lead the queue: the node that leads is killed and
// started again, in turn, until id wins an election.
func leadOn(t *testing.T, nodes map[int]*proc, id int) {
	t.Helper()
	for range 20 {
		l := leaderNode(t, nodes, 0)
		if l == id {
			return
		}
		nodes[l].kill()
		leaderNode(t, nodes, l)
		nodes[l].start()
	}
	if l := leaderNode(t, nodes, 0); l != id {
		t.Fatalf("node %d never led in 20 elections", id)
	}
}

// takeDeferred receives the deferred messages bodies names from p by
// their SequenceNumbers, checks their bodies, and completes them.
func takeDeferred(t *testing.T, p *proc, bodies map[int64]string) {
	t.Helper()
	ctx := context.Background()
	client := p.sdkClient()
	defer client.Close(ctx)
	receiver, err := client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	seqs := slices.Sorted(maps.Keys(bodies))
	var got []*azservicebus.ReceivedMessage
	for range 20 {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		got, err = receiver.ReceiveDeferredMessages(rctx, seqs, nil)
		cancel()
		if err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // server-busy until the actor serves
	}
	if err != nil || len(got) != len(seqs) {
		t.Fatalf("%d of %d deferred messages handed out: %v", len(got), len(seqs), err)
	}
	for _, m := range got {
		if want := bodies[*m.SequenceNumber]; string(m.Body) != want {
			t.Fatalf("deferred message #%d: %q, want %q", *m.SequenceNumber, m.Body, want)
		}
		if err := receiver.CompleteMessage(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
	}
}
