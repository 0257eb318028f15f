//go:build unix

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The floor runs are the standard set's fixed-rate loads against walbus
// bench floor, each with a result and the floor's CPU, and the table
// labels them.
func TestFloorSet(t *testing.T) {
	walbus := filepath.Join(t.TempDir(), "walbus")
	build := exec.Command("go", "build", "-o", walbus, "../../../cmd/walbus")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rows, failed, err := floorSet(ctx, walbus, 200*time.Millisecond, 500*time.Millisecond)
	if err != nil || len(failed) > 0 {
		t.Fatal(err, failed)
	}
	if len(rows) != 3 {
		t.Fatalf("%d floor rows, want the 3 fixed-rate loads", len(rows))
	}
	for _, r := range rows {
		if !strings.HasSuffix(r.name, ", floor") || r.res == nil || r.res.Received == 0 || r.res.Latency.Count == 0 {
			t.Fatalf("row %q: %+v", r.name, r.res)
		}
		if b := r.res.Broker; b == nil || b.CPUSeconds <= 0 || b.SameProcess {
			t.Fatalf("row %q: the floor's CPU is not measured: %+v (%s)", r.name, b, r.res.BrokerNote)
		}
	}
	var table bytes.Buffer
	printTable(&table, rows, 200*time.Millisecond, 500*time.Millisecond)
	if !strings.Contains(table.String(), "amqp 4+4 at 5000/s, floor") {
		t.Fatalf("table:\n%s", table.String())
	}
}
