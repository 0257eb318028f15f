package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/go-amqp"
)

// A real full disk: walbus serve on a small tmpfs. Sends get
// amqp:resource-limit-exceeded, nothing acknowledged is lost, and the broker
// takes sends again once space is freed. Mounting needs root; where it is
// refused, the broker's fault-injection test (TestDiskFullThenSpaceReturns)
// covers the same logic.
func TestDiskFullOnTmpfs(t *testing.T) {
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); the fault-injection test covers disk full", err, strings.TrimSpace(string(out)))
	}
	defer exec.Command("umount", "-l", mnt).Run()
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, "q", `"LockDuration": "PT1M"`)
	p := startWalbus(t, filepath.Join(mnt, "data"), "--config", cfg)
	client, err := azservicebus.NewClientFromConnectionString(p.connString(), &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	s, _ := client.NewSender("q", nil)
	body := make([]byte, 16<<10)
	var acked []string
	var fullErr error
	for i := 0; i < 2000 && fullErr == nil; i++ {
		id := fmt.Sprint("m", i)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := s.SendMessage(ctx, &azservicebus.Message{MessageID: to.Ptr(id), Body: body}, nil)
		cancel()
		if err == nil {
			acked = append(acked, id)
		} else {
			fullErr = err
		}
	}
	var amqpErr *amqp.Error
	if !errors.As(fullErr, &amqpErr) || amqpErr.Condition != "amqp:resource-limit-exceeded" {
		t.Fatalf("send on a full disk: %v", fullErr)
	}
	t.Logf("disk full after %d acknowledged sends: %v", len(acked), fullErr)

	// Space returns: walbus takes sends again without a restart.
	os.Remove(filler)
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.Close(context.Background())
		s, _ = client.NewSender("q", nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.SendMessage(ctx, &azservicebus.Message{MessageID: to.Ptr("after"), Body: []byte("after")}, nil)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("walbus did not take sends again after space returned: %v\n%s", err, p.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	// Everything acknowledged is there.
	r, _ := client.NewReceiverForQueue("q", &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	got := map[string]bool{}
	for len(got) < len(acked)+1 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		msgs, err := r.ReceiveMessages(ctx, 100, nil)
		cancel()
		if err != nil {
			t.Fatalf("receive after recovery: %v (got %d of %d)", err, len(got), len(acked)+1)
		}
		for _, m := range msgs {
			got[m.MessageID] = true
		}
	}
	for _, id := range append(acked, "after") {
		if !got[id] {
			t.Fatalf("acknowledged message %s lost", id)
		}
	}
}
