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

// A real full disk: walbus serve on a small tmpfs, with a 512 KiB reserve.
// Sends fill it until they get amqp:resource-limit-exceeded; then every
// lock held since before completes, /health says the broker is degraded,
// and consumers drain the queue while the disk is still full. Once space
// is freed, sends are taken again without a restart. The ledger: every
// acknowledged message is received, and none that was completed comes
// back. Mounting needs root; where it is refused, the broker's tests with
// injected faults (TestDiskLowLetsConsumersDrain,
// TestWriteFailingForSpaceMakesTheDiskLow) cover the same logic.
func TestDiskFullOnTmpfs(t *testing.T) {
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); the fault-injection tests cover disk full", err, strings.TrimSpace(string(out)))
	}
	defer exec.Command("umount", "-l", mnt).Run()
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 2<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, "q", `"LockDuration": "PT5M", "MaxDeliveryCount": 100`)
	p := startWalbus(t, filepath.Join(mnt, "data"), "--config", cfg, "--disk-reserve", "512KiB")
	client, err := azservicebus.NewClientFromConnectionString(p.connString(), &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.Background())
	ctx := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		return c
	}
	s, _ := client.NewSender("q", nil)
	body := make([]byte, 16<<10)
	acked := map[string]bool{}
	send := func(id string) error {
		err := s.SendMessage(ctx(), &azservicebus.Message{MessageID: to.Ptr(id), Body: body}, nil)
		if err == nil {
			acked[id] = true
		}
		return err
	}
	for i := range 10 {
		if err := send(fmt.Sprint("held", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Consumers use the SDK's default retries, as applications do; the
	// sender none, to see each refusal.
	consumer := p.sdkClient()
	defer consumer.Close(context.Background())
	r, _ := consumer.NewReceiverForQueue("q", nil)
	var held []*azservicebus.ReceivedMessage
	for len(held) < 10 {
		msgs, err := r.ReceiveMessages(ctx(), 10-len(held), nil)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, msgs...)
	}
	var fullErr error
	for i := 0; i < 2000 && fullErr == nil; i++ {
		fullErr = send(fmt.Sprint("m", i))
	}
	var amqpErr *amqp.Error
	if !errors.As(fullErr, &amqpErr) || amqpErr.Condition != "amqp:resource-limit-exceeded" {
		t.Fatalf("send on a full disk: %v", fullErr)
	}
	t.Logf("disk full after %d acknowledged sends: %v", len(acked), fullErr)
	if h := getText(t, "http://"+p.http+"/health"); !strings.Contains(h, `"status":"degraded"`) {
		t.Fatalf("/health on a full disk: %s", h)
	}

	// Every lock held since before completes, at once.
	completed := map[string]bool{}
	for _, m := range held {
		if err := r.CompleteMessage(ctx(), m, nil); err != nil {
			t.Fatalf("complete a held lock on a full disk: %v\n%s", err, p.logs())
		}
		completed[m.MessageID] = true
	}
	// Consumers drain the queue while the disk is still full.
	for len(completed) < len(acked) {
		msgs, err := r.ReceiveMessages(ctx(), 50, nil)
		if err != nil {
			t.Fatalf("receive on a full disk: %v (%d of %d completed)\n%s", err, len(completed), len(acked), p.logs())
		}
		for _, m := range msgs {
			if completed[m.MessageID] {
				t.Fatalf("%s came back after it was completed", m.MessageID)
			}
			if err := r.CompleteMessage(ctx(), m, nil); err != nil {
				t.Fatalf("complete on a full disk: %v", err)
			}
			completed[m.MessageID] = true
		}
	}
	if err := send("still-full"); err == nil {
		t.Fatal("a send was taken before space was freed")
	}

	// Space returns: walbus takes sends again by itself.
	os.Remove(filler)
	deadline := time.Now().Add(30 * time.Second)
	for {
		s.Close(context.Background())
		s, _ = client.NewSender("q", nil)
		if err := send("after"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("walbus did not take sends again after space returned: %v\n%s", err, p.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	msgs, err := r.ReceiveMessages(ctx(), 10, nil)
	if err != nil || len(msgs) != 1 || msgs[0].MessageID != "after" {
		t.Fatalf("after space returned the queue gives %v, %v", msgs, err)
	}
	for id := range acked {
		if !completed[id] && id != "after" {
			t.Fatalf("acknowledged message %s lost", id)
		}
	}
	if h := getText(t, "http://"+p.http+"/health"); !strings.Contains(h, `"status":"ok"`) {
		t.Fatalf("/health once space returned: %s", h)
	}
}
