package main

import (
	"bufio"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// walbus bench floor serves the control broker until told to stop, and
// walbus bench runs against it.
func TestBenchFloorCommand(t *testing.T) {
	floor := exec.Command(walbusBin, "bench", "floor", "--amqp", "127.0.0.1:0")
	stderr, err := floor.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := floor.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { floor.Process.Kill(); floor.Wait() })
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	_, addr, ok := strings.Cut(strings.TrimSpace(line), "listening on ")
	if !ok {
		t.Fatalf("no address in %q", line)
	}
	run := exec.Command(walbusBin, "bench", "--client", "amqp", "--url", "amqp://"+addr, "--queue", "q",
		"--warmup", "100ms", "--duration", "500ms", "--json")
	out, err := run.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"received"`) {
		t.Fatalf("bench against the floor: %v\n%s", err, out)
	}
	floor.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- floor.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("floor exited with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("floor did not stop on SIGTERM")
	}
}
