package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// TestClusterLargeMessage: a 10 MiB message, bigger than a peer frame,
// sent with the Go SDK to a cluster's leader is acknowledged once a
// quorum holds it (its entry went to the followers in chunks), and after
// the leader is killed the new leader hands it out byte for byte, with a
// small message sent after it.
func TestClusterLargeMessage(t *testing.T) {
	ctx := context.Background()
	nodes := startThree(t, "large", ordersConfig(t, `{"MaxMessageSizeInKilobytes": 16384}`), "--raft-tick", "50ms",
		"--max-message-size", "16MiB")
	leader := leaderNode(t, nodes, 0)
	body := make([]byte, 10<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range body {
		body[i] = byte(rng.UintN(256))
	}
	client := nodes[leader].sdkClient()
	sender, err := client.NewSender("orders", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.SendMessage(ctx, &azservicebus.Message{MessageID: toPtr("large"), Body: body}, nil); err != nil {
		t.Fatalf("send 10 MiB: %v", err)
	}
	if err := sender.SendMessage(ctx, &azservicebus.Message{MessageID: toPtr("small"), Body: []byte("after")}, nil); err != nil {
		t.Fatal(err)
	}
	client.Close(ctx)

	got := receiveAfterFailover(t, ctx, nodes, leader, 2)
	if got[0].MessageID != "large" || !bytes.Equal(got[0].Body, body) || got[1].MessageID != "small" {
		t.Fatalf("the new leader hands out %s (%d bytes) and %s", got[0].MessageID, len(got[0].Body), got[1].MessageID)
	}
}
