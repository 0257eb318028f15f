package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// walbus bench floor serves the control broker until told to stop, and
// walbus bench runs against it: the plain floor, and the durable ones,
// which leave what they were sent in their file.
func TestBenchFloorCommand(t *testing.T) {
	for _, mode := range []string{"plain", "append", "overwrite"} {
		t.Run(mode, func(t *testing.T) {
			args := []string{"bench", "floor", "--amqp", "127.0.0.1:0"}
			path := filepath.Join(t.TempDir(), "floor.log")
			switch mode {
			case "append":
				args = append(args, "--durable", path)
			case "overwrite":
				args = append(args, "--durable", path, "--overwrite")
			}
			benchFloor(t, args)
			if mode == "plain" {
				return
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// walbus bench stamps every message with its run.
			if !bytes.Contains(b, []byte("bench-run")) {
				t.Fatalf("the %d-byte file holds no message of the run", len(b))
			}
		})
	}
}

func TestBenchFloorOverwriteNeedsAFile(t *testing.T) {
	code, _, stderr := runWalbus(t, nil, "bench", "floor", "--overwrite")
	if code != 2 || !strings.Contains(stderr, "--overwrite needs --durable") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

func benchFloor(t *testing.T, args []string) {
	floor := exec.Command(walbusBin, args...)
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
