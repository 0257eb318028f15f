package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// openUnder counts the files process pid holds open under dir.
func openUnder(t testing.TB, pid int, dir string) int {
	t.Helper()
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		t.Skipf("no %s: %v", fdDir, err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && strings.HasPrefix(target, dir+string(filepath.Separator)) {
			n++
		}
	}
	return n
}

// TestIdleQueuesHoldNoFiles: a queue whose log has been quiet for a couple
// of seconds, or not used since a start, holds no file open, so a
// namespace of many idle queues does not need a descriptor for each. The queues go on working when woken, and
// a kill -9 after that loses nothing acknowledged, whether it was sent
// before the logs slept or after.
func TestIdleQueuesHoldNoFiles(t *testing.T) {
	const queues = 120
	var names []string
	for i := range queues {
		names = append(names, fmt.Sprintf(`{"Name": "idle-%d", "Properties": {}}`, i))
	}
	cfg := filepath.Join(t.TempDir(), "Config.json")
	body := `{"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [` + strings.Join(names, ",") + `]}]}}`
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	data, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := startWalbus(t, data, "--config", cfg)
	ctx := context.Background()

	most := 0
	asleep := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			n := openUnder(t, p.cmd.Process.Pid, data)
			most = max(most, n)
			if n < 10 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d files open under the data directory, with %d queues", what, n, queues)
			}
		}
	}
	send := func(round int) {
		t.Helper()
		client := p.sdkClient()
		defer client.Close(ctx)
		for i := range queues {
			s, err := client.NewSender(fmt.Sprintf("idle-%d", i), nil)
			if err != nil {
				t.Fatal(err)
			}
			msg := &azservicebus.Message{Body: []byte(fmt.Sprintf("queue %d round %d", i, round))}
			if err := s.SendMessage(ctx, msg, nil); err != nil {
				t.Fatal(err)
			}
			s.Close(ctx)
		}
		// Every queue's log woke up; on a busy machine the first may be
		// asleep again by the last send.
		if n := openUnder(t, p.cmd.Process.Pid, data); n < queues/2 {
			t.Fatalf("%d files open right after a send to each of %d queues: the test shows nothing", n, queues)
		}
	}
	asleep("after start")
	send(0)
	asleep("after a send to each queue")
	send(1)
	p.kill()
	p.start()
	// Logs open asleep: a restart holds no file of a queue's until it is
	// used, from its first moment.
	if n := openUnder(t, p.cmd.Process.Pid, data); n >= 10 {
		t.Fatalf("%d files open under the data directory as the restart is done, with %d queues", n, queues)
	}

	client := p.sdkClient()
	defer client.Close(ctx)
	for i := range queues {
		r, err := client.NewReceiverForQueue(fmt.Sprintf("idle-%d", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		for round := 0; round < 2; {
			msgs, err := r.ReceiveMessages(ctx, 2-round, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range msgs {
				if want := fmt.Sprintf("queue %d round %d", i, round); !bytes.Equal(m.Body, []byte(want)) {
					t.Fatalf("queue %d after the kill: %q, want %q", i, m.Body, want)
				}
				if err := r.CompleteMessage(ctx, m, nil); err != nil {
					t.Fatal(err)
				}
				round++
			}
		}
		r.Close(ctx)
	}
	asleep("after receiving")
	t.Logf("at most %d files open under the data directory", most)
}
