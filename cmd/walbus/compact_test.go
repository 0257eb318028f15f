package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/walbus/walbus/tools/compaction"
)

// walbus compact end to end: a real server, the Go SDK, a deferred message
// pinning thousands of completed ones. Compaction refuses to run beside the
// server, reports the bytes it saved, and after a restart the deferred
// message is received by its SequenceNumber with its body and properties.
func TestCompactCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := writeConfig(t, "q", `"LockDuration": "PT1M"`)
	p := startWalbus(t, dir, "--config", cfg, "--segment-size", "64KiB")
	client := p.sdkClient()
	sender, _ := client.NewSender("q", nil)
	receiver, _ := client.NewReceiverForQueue("q", nil)
	keep := &azservicebus.Message{MessageID: to.Ptr("keep"), Body: []byte("the deferred one"),
		ApplicationProperties: map[string]any{"order": int64(7)}}
	if err := sender.SendMessage(ctx, keep, nil); err != nil {
		t.Fatal(err)
	}
	got, err := receiver.ReceiveMessages(ctx, 1, nil)
	if err != nil || len(got) != 1 {
		t.Fatalf("receive: %v", err)
	}
	seq := *got[0].SequenceNumber
	if err := receiver.DeferMessage(ctx, got[0], nil); err != nil {
		t.Fatal(err)
	}

	const total = 2000
	body := bytes.Repeat([]byte("x"), 1000)
	for sent := 0; sent < total; {
		batch, err := sender.NewMessageBatch(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for ; sent < total; sent++ {
			if err := batch.AddMessage(&azservicebus.Message{Body: body}, nil); err != nil {
				break
			}
		}
		if err := sender.SendMessageBatch(ctx, batch, nil); err != nil {
			t.Fatal(err)
		}
	}
	completeAll(t, receiver, total)
	client.Close(ctx)

	code, _, stderr := runWalbus(t, nil, "compact", "--data", dir)
	if code != 1 || !strings.Contains(stderr, "locked by process") {
		t.Fatalf("compact beside a running server: exit %d, %s", code, stderr)
	}
	if code := p.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.logs())
	}

	code, stdout, stderr := runWalbus(t, nil, "compact", "--data", dir, "--format", "json", "--retain", filepath.Join(dir, "..", "retained"))
	if code != 0 {
		t.Fatalf("compact: exit %d: %s", code, stderr)
	}
	var reports []compaction.Report
	if err := json.Unmarshal([]byte(stdout), &reports); err != nil || len(reports) != 1 {
		t.Fatalf("report %q: %v", stdout, err)
	}
	rep := reports[0]
	t.Logf("%+v", rep)
	if rep.Entity != "q" || rep.BytesAfter*4 > rep.BytesBefore || rep.Archived < 1 || rep.Retained == "" {
		t.Fatalf("report: %+v", rep)
	}
	code, stdout, _ = runWalbus(t, nil, "compact", "--data", dir)
	if code != 0 || !strings.Contains(stdout, "bytes before") || !strings.Contains(stdout, "q ") {
		t.Fatalf("second compaction: exit %d:\n%s", code, stdout)
	}

	p.start()
	client = p.sdkClient()
	defer client.Close(ctx)
	receiver, _ = client.NewReceiverForQueue("q", nil)
	msgs, err := receiver.ReceiveDeferredMessages(ctx, []int64{seq}, nil)
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive deferred %d after compaction: %d messages, %v", seq, len(msgs), err)
	}
	m := msgs[0]
	if *m.SequenceNumber != seq || string(m.Body) != "the deferred one" || m.MessageID != "keep" ||
		fmt.Sprint(m.ApplicationProperties["order"]) != "7" {
		t.Fatalf("after compaction: seq %d body %q id %q props %v", *m.SequenceNumber, m.Body, m.MessageID, m.ApplicationProperties)
	}
	if err := receiver.CompleteMessage(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
}
