package tools

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// A message dead-lettered in "src" and forwarded to "dst": verify accepts
// the directory, replay shows where the message came from, and audit of it
// in "dst" starts with its arrival.
func TestToolsOnForwardedMessages(t *testing.T) {
	data := deadLetterForwarded(t, projection.DefaultConfig(), "body", event.DeadLetterQueue, 0)

	if f := verifyUnchanged(t, data); len(f) != 0 {
		t.Fatalf("findings on a directory with a forwarded message:\n%s", sprintLines(f))
	}
	out := replayText(t, data, "dst")
	if !strings.Contains(out, "forwarded") || !strings.Contains(out, "from=src/") || !strings.Contains(out, "hops=1") ||
		!strings.Contains(out, "reason=poison") {
		t.Fatalf("replay of dst:\n%s", out)
	}
	lives, err := Audit(data, "dst", AuditOptions{MessageID: "m"})
	if err != nil || len(lives) != 1 {
		t.Fatalf("audit: %v %v", lives, err)
	}
	if steps := stepTypes(lives[0]); len(steps) == 0 || steps[0] != "forwarded" {
		t.Fatalf("audit steps %v", steps)
	}
	var audit bytes.Buffer
	WriteLives(&audit, lives)
	if !strings.Contains(audit.String(), "from the dead-letter queue of src") {
		t.Fatalf("audit:\n%s", audit.String())
	}
}

// A receive-and-delete delivery handed back (its link closed first) goes on
// under a new SequenceNumber: verify accepts the directory, replay shows
// the restore, and the audit of the message follows it from its first
// number through the restore to its completion.
func TestToolsOnRestoredMessages(t *testing.T) {
	data := t.TempDir()
	s := newSceneWith(t, broker.Options{Dir: data})
	q := s.queue("q", projection.DefaultConfig())
	s.send(q, msg("m", "body"))
	d := s.receiver(q, event.MainQueue, "rd", broker.ReceiveAndDelete).take()
	done := make(chan error, 1)
	q.Restore([]broker.Delivery{d}, func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r := s.receiver(q, event.MainQueue, "r", broker.PeekLock)
	again := r.take()
	if again.MessageID != "m" || again.Seq == d.Seq {
		t.Fatalf("after the restore: message %q seq %d (was %d)", again.MessageID, again.Seq, d.Seq)
	}
	r.settle(again, projection.Complete, "")
	s.close()

	if f := verifyUnchanged(t, data); len(f) != 0 {
		t.Fatalf("findings on a directory with a restored message:\n%s", sprintLines(f))
	}
	out := replayText(t, data, "q")
	if !strings.Contains(out, "restored") || !strings.Contains(out, fmt.Sprintf("from=%d ", d.Seq)) {
		t.Fatalf("replay of q:\n%s", out)
	}
	lives, err := Audit(data, "q", AuditOptions{Seq: d.Seq})
	if err != nil || len(lives) != 1 {
		t.Fatalf("audit: %v %v", lives, err)
	}
	if got, want := strings.Join(stepTypes(lives[0]), " "), "enqueued received-and-deleted restored locked completed"; got != want {
		t.Fatalf("audit steps %q, want %q", got, want)
	}
	if lives[0].Outcome != "completed" {
		t.Fatalf("audit outcome %q", lives[0].Outcome)
	}
}

// A dead-lettered message that "src" cannot forward to "dst" (too large
// for it) moves to src's transfer dead-letter queue: verify accepts the
// directory, replay and audit say why it moved, and state shows the queue.
func TestToolsOnTransferDeadLetteredMessages(t *testing.T) {
	small := projection.DefaultConfig()
	small.MaxMessageSize = 10
	data := deadLetterForwarded(t, small, "a body longer than ten bytes", event.TransferDeadLetterQueue, 1)

	if f := verifyUnchanged(t, data); len(f) != 0 {
		t.Fatalf("findings on a directory with a transfer dead-lettered message:\n%s", sprintLines(f))
	}
	out := replayText(t, data, "src")
	if !strings.Contains(out, "transfer-dead-lettered") || !strings.Contains(out, "reason=MessageSizeExceeded") {
		t.Fatalf("replay of src:\n%s", out)
	}
	lives, err := Audit(data, "src", AuditOptions{MessageID: "m"})
	if err != nil || len(lives) != 1 {
		t.Fatalf("audit: %v %v", lives, err)
	}
	var audit bytes.Buffer
	WriteLives(&audit, lives)
	if l := lives[0]; l.Outcome != "dead-lettered" || !strings.Contains(audit.String(), "transfer dead-lettered from dlq to tdlq: reason MessageSizeExceeded") ||
		!strings.Contains(l.State, "available in tdlq") {
		t.Fatalf("audit (outcome %s, state %s):\n%s", l.Outcome, l.State, audit.String())
	}
	rep, err := State(data, "src", StateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var state bytes.Buffer
	rep.WriteText(&state)
	if !strings.Contains(state.String(), "\ntdlq ") {
		t.Fatalf("state:\n%s", state.String())
	}
}

// deadLetterForwarded makes a data directory in which message "m" (with
// body) was dead-lettered in "src", whose ForwardDeadLetteredMessagesTo is
// "dst" (made with dstCfg), and waits until src's queue then holds want
// messages: the forward done (its dead-letter queue empty) or refused (its
// transfer dead-letter queue holding m).
func deadLetterForwarded(t *testing.T, dstCfg projection.Config, body string, queue uint32, want uint64) string {
	t.Helper()
	data := t.TempDir()
	s := newSceneWith(t, broker.Options{Dir: data})
	dst := s.queue("dst", dstCfg)
	cfg := projection.DefaultConfig()
	cfg.ForwardDeadLetteredMessagesTo = "dst"
	src := s.queue("src", cfg)
	s.send(src, msg("m", body))
	r := s.receiver(src, event.MainQueue, "r", broker.PeekLock)
	r.settle(r.take(), projection.DeadLetter, "poison")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, _ := src.Counts(queue); c.Total == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %d of src never held %d messages", queue, want)
		}
	}
	if err := dst.Sync(); err != nil {
		t.Fatal(err)
	}
	s.close()
	return data
}

// Messages removed by a batch delete: verify accepts the directory, replay
// shows the deletion, and the audit ends the deleted message's life there
// while the other one is still pending.
func TestToolsOnDeletedMessages(t *testing.T) {
	data := t.TempDir()
	s := newSceneWith(t, broker.Options{Dir: data})
	q := s.queue("q", projection.DefaultConfig())
	s.send(q, msg("gone", "body"), msg("kept", "body"))
	done := make(chan error, 1)
	q.Delete(event.MainQueue, 1, math.MaxInt64, "", func(n int, err error) {
		if err == nil && n != 1 {
			err = fmt.Errorf("deleted %d, want 1", n)
		}
		done <- err
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.close()

	if f := verifyUnchanged(t, data); len(f) != 0 {
		t.Fatalf("findings on a directory with a deleted message:\n%s", sprintLines(f))
	}
	out := replayText(t, data, "q")
	if !strings.Contains(out, "deleted") {
		t.Fatalf("replay of q:\n%s", out)
	}
	for id, want := range map[string]string{"gone": "deleted", "kept": "pending"} {
		lives, err := Audit(data, "q", AuditOptions{MessageID: id})
		if err != nil || len(lives) != 1 {
			t.Fatalf("audit of %s: %v %v", id, lives, err)
		}
		if lives[0].Outcome != want {
			t.Fatalf("audit of %s: outcome %q, want %q (steps %v)", id, lives[0].Outcome, want, stepTypes(lives[0]))
		}
	}
}

// A queue with duplicate detection that forwards: what it accepted is
// remembered in its target's log. verify accepts the directory, replay
// shows the record, and the audit of the MessageId finds the one message
// that went through, not the duplicate src dropped.
func TestToolsOnRememberedMessageIDs(t *testing.T) {
	data := t.TempDir()
	s := newSceneWith(t, broker.Options{Dir: data})
	s.queue("dst", projection.DefaultConfig())
	cfg := projection.DefaultConfig()
	cfg.ForwardTo = "dst"
	cfg.RequiresDuplicateDetection = true
	src := s.queue("src", cfg)
	s.send(src, msg("m", "first"))
	s.send(src, msg("m", "again"))
	s.close()

	if f := verifyUnchanged(t, data); len(f) != 0 {
		t.Fatalf("findings on a directory with remembered MessageIds:\n%s", sprintLines(f))
	}
	out := replayText(t, data, "dst")
	if strings.Count(out, "remembered") != 1 || !strings.Contains(out, "via=src id=m until=+10m") {
		t.Fatalf("replay of dst:\n%s", out)
	}
	recs, _ := replayJSON(t, data, ReplayOptions{Entity: "dst", Types: []event.Type{event.Remembered}})
	if len(recs) != 1 || recs[0].Name != "src" || recs[0].MessageID != "m" ||
		recs[0].RememberedUntil != sceneEpoch.Add(10*time.Minute).Format(time.RFC3339Nano) || recs[0].Queue != "" {
		t.Fatalf("replay --json of the remembered event: %+v", recs)
	}
	lives, err := Audit(data, "dst", AuditOptions{MessageID: "m"})
	if err != nil || len(lives) != 1 {
		t.Fatalf("audit: %v %v", lives, err)
	}
	if steps := stepTypes(lives[0]); len(steps) != 1 || steps[0] != "enqueued" {
		t.Fatalf("audit steps %v", steps)
	}
}

// replayText is walbus replay's text output for one entity of data.
func replayText(t *testing.T, data, entity string) string {
	t.Helper()
	var out bytes.Buffer
	if err := Replay(&out, data, ReplayOptions{Entity: entity}); err != nil {
		t.Fatal(err)
	}
	return out.String()
}
