package tools

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
)

// A test clock's advances replay from the namespace log and verify clean.
func TestClockAdvancesInReplay(t *testing.T) {
	dir := t.TempDir()
	b, _, err := broker.Open(broker.Options{Dir: dir, Clock: broker.NewOffsetClock()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateQueue("orders", broker.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	if err := b.AdvanceClock(36 * time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Replay(&out, dir, ReplayOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "clock-advanced") || !strings.Contains(out.String(), "by=36h0m0s") {
		t.Fatalf("no advance in the replay:\n%s", out.String())
	}
	if findings, err := Verify(dir); err != nil || len(findings) != 0 {
		t.Fatalf("verify: %v %v", findings, err)
	}
}
