package tools

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// A committed transaction replays as its events and a committed event
// naming it, all in one atomic group; the log verifies clean.
func TestTransactionsInReplay(t *testing.T) {
	dir := t.TempDir()
	s := newSceneWith(t, broker.Options{Dir: dir})
	e := s.queue("orders", projection.DefaultConfig())
	s.send(e, msg("request", "work"))
	rc := s.receiver(e, event.MainQueue, "r", broker.PeekLock)
	d := rc.take()
	done := make(chan error, 1)
	e.Commit(broker.Transaction{ID: []byte{0xab, 0xcd},
		Sends:   []broker.TxSend{{Messages: []projection.Message{msg("reply", "done")}}},
		Settles: []broker.TxSettle{{Settlement: broker.Settlement{Token: d.Token, Outcome: projection.Complete}}}},
		func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.close()

	var out bytes.Buffer
	if err := Replay(&out, dir, ReplayOptions{Entity: "orders"}); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] != "#" && f[0] != "INDEX" {
			types = append(types, f[2])
		}
	}
	if got := strings.Join(types, " "); !strings.HasSuffix(got, "locked enqueued completed committed") {
		t.Fatalf("event types %q in\n%s", got, out.String())
	}
	if !strings.Contains(out.String(), "transaction=abcd events=2") {
		t.Fatalf("no transaction id in\n%s", out.String())
	}
	if findings, err := Verify(dir); err != nil || len(findings) != 0 {
		t.Fatalf("verify: %v %v", findings, err)
	}
}

// Send-via and a held schedule replay as what they are: transfers in the
// via's transfer queue and their arrival at the destination; a schedule
// held, then confirmed by the commit. The audit tells a held schedule's
// story, and the logs verify clean.
func TestSendViaAndHeldSchedulesInReplay(t *testing.T) {
	dir := t.TempDir()
	s := newSceneWith(t, broker.Options{Dir: dir})
	via := s.queue("requests", projection.DefaultConfig())
	out := s.queue("replies", projection.DefaultConfig())
	held := make(chan []broker.HeldMessage, 1)
	via.ScheduleHeld(event.MainQueue, []projection.Message{msg("later", "tick")}, func(h []broker.HeldMessage, err error) {
		if err != nil {
			t.Error(err)
		}
		held <- h
	})
	h := <-held
	done := make(chan error, 1)
	via.Commit(broker.Transaction{ID: []byte{0x01},
		Transfers: []broker.TxTransfer{{To: "replies", Messages: []projection.Message{msg("reply", "done")}}},
		Schedules: []broker.TxSchedule{{Messages: h}}},
		func(err error) { done <- err })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, _ := out.Counts(event.MainQueue); c.Total == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the transfer never reached replies")
		}
		time.Sleep(time.Millisecond)
	}
	if err := via.Sync(); err != nil {
		t.Fatal(err)
	}
	s.close()

	var b bytes.Buffer
	if err := Replay(&b, dir, ReplayOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"scheduled-held", "transfer", "to=replies", "confirmed", "arrived", "committed"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in the replay:\n%s", want, b.String())
		}
	}
	lives, err := Audit(dir, "requests", AuditOptions{Seq: h[0].Seq})
	if err != nil {
		t.Fatal(err)
	}
	var a bytes.Buffer
	if err := WriteLives(&a, lives); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(a.String(), "held until it commits") || !strings.Contains(a.String(), "scheduled for good") {
		t.Errorf("the audit of the held schedule:\n%s", a.String())
	}
	if findings, err := Verify(dir); err != nil || len(findings) != 0 {
		t.Fatalf("verify: %v %v", findings, err)
	}
}
