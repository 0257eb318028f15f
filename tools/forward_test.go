package tools

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/projection"
)

// A message dead-lettered in "src" and forwarded to "dst": verify accepts
// the directory, replay shows where the message came from, and audit of it
// in "dst" starts with its arrival.
func TestToolsOnForwardedMessages(t *testing.T) {
	data := t.TempDir()
	s := newSceneWith(t, broker.Options{Dir: data})
	dst := s.queue("dst", projection.DefaultConfig())
	cfg := projection.DefaultConfig()
	cfg.ForwardDeadLetteredMessagesTo = "dst"
	src := s.queue("src", cfg)
	s.send(src, msg("m", "body"))
	r := s.receiver(src, log.MainQueue, "r", broker.PeekLock)
	r.settle(r.take(), projection.DeadLetter, "poison")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, _ := src.Counts(log.DeadLetterQueue)
		if c.Total == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("not forwarded")
		}
	}
	if err := dst.Sync(); err != nil {
		t.Fatal(err)
	}
	s.close()

	if f := verifyUnchanged(t, data); len(f) != 0 {
		t.Fatalf("findings on a directory with a forwarded message:\n%s", sprintLines(f))
	}
	var out bytes.Buffer
	if err := Replay(&out, data, ReplayOptions{Entity: "dst"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "forwarded") || !strings.Contains(out.String(), "from=src/") ||
		!strings.Contains(out.String(), "reason=poison") {
		t.Fatalf("replay of dst:\n%s", out.String())
	}
	lives, err := Audit(data, "dst", AuditOptions{MessageID: "m"})
	if err != nil || len(lives) != 1 {
		t.Fatalf("audit: %v %v", lives, err)
	}
	if steps := stepTypes(lives[0]); len(steps) == 0 || steps[0] != "forwarded" {
		t.Fatalf("audit steps %v", steps)
	}
	out.Reset()
	WriteLives(&out, lives)
	if !strings.Contains(out.String(), "from the dead-letter queue of src") {
		t.Fatalf("audit:\n%s", out.String())
	}
}
