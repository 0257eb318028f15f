package tools

import (
	"bytes"
	"strings"
	"testing"

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
