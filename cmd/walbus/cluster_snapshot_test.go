package main

import (
	"context"
	"fmt"
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
	ctx := context.Background()
	nodes := startThree(t, "snap", ordersConfig(t, ""), "--raft-tick", "50ms", "--snapshot-every", "50",
		"--segment-size", "16KiB")
	leader := leaderNode(t, nodes, 0)
	behind := leader%3 + 1
	nodes[behind].kill()

	client := nodes[leader].sdkClient()
	sender, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
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
	for len(bodies) < 20 {
		msgs, err := receiver.ReceiveMessages(ctx, 20-len(bodies), nil)
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
	for round := range 10 {
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
	client.Close(ctx)
	var st admin.ClusterStatus
	getJSON(t, "http://"+nodes[leader].http+"/cluster", &st)
	if len(st.Groups) != 1 || st.Groups[0].Snapshot == 0 {
		t.Fatalf("the leader took no snapshot: %+v", st.Groups)
	}

	nodes[behind].start()
	deadline := time.Now().Add(30 * time.Second)
	for {
		text := getText(t, "http://"+nodes[behind].http+"/metrics")
		if metricValue(t, text, "walbus_raft_snapshots_received_total") >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d did not catch up from a snapshot:\n%s", behind, nodes[behind].logs())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// The node that caught up leads: the others are killed and started
	// again in turn until it wins an election.
	for range 20 {
		l := leaderNode(t, nodes, 0)
		if l == behind {
			break
		}
		nodes[l].kill()
		leaderNode(t, nodes, l)
		nodes[l].start()
	}
	if l := leaderNode(t, nodes, 0); l != behind {
		t.Fatalf("node %d never led in 20 elections", behind)
	}
	client = nodes[behind].sdkClient()
	defer client.Close(ctx)
	receiver, err = client.NewReceiverForQueue("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for seq := range bodies {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
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
		t.Fatalf("node %d hands out %d of %d deferred messages: %v", behind, len(got), len(seqs), err)
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
