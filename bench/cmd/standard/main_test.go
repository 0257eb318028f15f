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
// bench floor, plain and durable, each with a result and the floor's CPU,
// and the table labels them; a durable floor writes to its file.
func TestFloorSet(t *testing.T) {
	walbus := filepath.Join(t.TempDir(), "walbus")
	build := exec.Command("go", "build", "-o", walbus, "../../../cmd/walbus")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	floorLog := filepath.Join(t.TempDir(), "floor.log")
	for _, f := range []struct {
		label string
		args  []string
	}{{"floor", nil}, {"durable floor", []string{"--durable", floorLog}}} {
		rows, failed, err := floorSet(ctx, walbus, f.label, f.args, 200*time.Millisecond, 500*time.Millisecond)
		if err != nil || len(failed) > 0 {
			t.Fatal(err, failed)
		}
		if len(rows) != 3 {
			t.Fatalf("%d %s rows, want the 3 fixed-rate loads", len(rows), f.label)
		}
		for _, r := range rows {
			// Messages went through. On a loaded machine (CI runs this
			// beside the race tests) a durable floor can spend the whole
			// half-second delivering what was sent during the warm-up,
			// which counts as stale, not in the latency.
			if !strings.HasSuffix(r.name, ", "+f.label) || r.res == nil || r.res.Received == 0 || r.res.Latency.Count == 0 && r.res.Stale == 0 {
				t.Fatalf("row %q: %+v", r.name, r.res)
			}
			if b := r.res.Broker; b == nil || b.CPUSeconds <= 0 || b.SameProcess {
				t.Fatalf("row %q: the floor's CPU is not measured: %+v (%s)", r.name, b, r.res.BrokerNote)
			}
		}
		var table bytes.Buffer
		printTable(&table, rows, 200*time.Millisecond, 500*time.Millisecond)
		if want := "amqp 4+4 at 5000/s, " + f.label; !strings.Contains(table.String(), want) {
			t.Fatalf("no %q in the table:\n%s", want, table.String())
		}
	}
	if st, err := os.Stat(floorLog); err != nil || st.Size() == 0 {
		t.Fatalf("the durable floor wrote nothing to its file: %v", err)
	}
}
