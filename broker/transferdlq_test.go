package broker

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// A dead-lettered message that the ForwardDeadLetteredMessagesTo target
// refuses for good (larger than it allows; without the SessionId it
// requires) moves to the source's transfer dead-letter queue, saying why,
// and the messages dead-lettered after it reach the target. Before, the
// forwarder retried the refused one for ever and everything behind it
// waited. The transfer dead-letter queue keeps it across restarts, from
// the log alone and from a snapshot.
func TestRefusedDeadLetterForwardGoesToTransferDeadLetterQueue(t *testing.T) {
	small := projection.DefaultConfig()
	small.MaxMessageSize = 100
	for _, c := range []struct {
		name         string
		target       projection.Config
		poison, good projection.Message
		reason       string
	}{
		{"too large", small, projection.Message{Body: make([]byte, 1000), MessageID: "poison"},
			projection.Message{Body: []byte("fits"), MessageID: "good"}, "MessageSizeExceeded"},
		{"no session id", sessionConfig(), projection.Message{Body: []byte("no session"), MessageID: "poison"},
			projection.Message{Body: []byte("in s1"), MessageID: "good", SessionID: "s1"}, "Session ID is null"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			opts := Options{Dir: dir, IdleCheckpoint: -1, FinalSnapshotMin: 1}
			b := openBroker(t, opts)
			dst, err := b.CreateQueue("dst", c.target)
			if err != nil {
				t.Fatal(err)
			}
			src, err := b.CreateQueue("src", deadLettersTo("dst"))
			if err != nil {
				t.Fatal(err)
			}
			deadLetterMessage(t, src, c.poison)
			deadLetterMessage(t, src, c.good)
			waitCounts(t, dst, event.MainQueue, func(c projection.Counts) bool { return c.Total == 1 })
			waitCounts(t, src, event.DeadLetterQueue, func(c projection.Counts) bool { return c.Total == 0 })
			if ids := peekIDs(t, dst, event.MainQueue); fmt.Sprint(ids) != "[good]" {
				t.Fatalf("the target holds %v", ids)
			}
			check := func(when string, src *Entity) {
				t.Helper()
				ds, err := src.Peek(event.TransferDeadLetterQueue, 0, 10, "")
				if err != nil || len(ds) != 1 {
					t.Fatalf("%s: the transfer dead-letter queue holds %d messages (%v)", when, len(ds), err)
				}
				d := ds[0]
				if d.MessageID != "poison" || !bytes.Equal(d.Message, c.poison.Body) || len(d.Overlays) != 2 {
					t.Fatalf("%s: transfer dead-letter %q, overlays %+v", when, d.MessageID, d.Overlays)
				}
				ov := d.Overlays[1]
				if ov.Type != event.TransferDeadLettered || ov.Reason != c.reason || !strings.Contains(ov.Description, "dst") {
					t.Fatalf("%s: transfer dead-lettered with %q: %q", when, ov.Reason, ov.Description)
				}
			}
			check("at first", src)

			reopen := func(graceful bool) EntityRecovery {
				t.Helper()
				if err := b.shutdown(graceful); err != nil {
					t.Fatal(err)
				}
				var rec Recovery
				if b, rec, err = Open(opts); err != nil {
					t.Fatal(err)
				}
				for _, er := range rec.Entities {
					if er.Name == "src" {
						return er
					}
				}
				t.Fatal("src not recovered")
				return EntityRecovery{}
			}
			if rec := reopen(false); rec.Snapshot != 0 {
				t.Fatalf("restarted from snapshot %d, want the log alone", rec.Snapshot)
			}
			src, _ = b.Entity("src")
			check("after a replay of the log", src)
			if rec := reopen(true); rec.Snapshot == 0 || rec.Replayed != 0 {
				t.Fatalf("restarted from snapshot %d and %d events, want the snapshot alone", rec.Snapshot, rec.Replayed)
			}
			src, _ = b.Entity("src")
			check("after a restart from a snapshot", src)
			b.Close()
		})
	}
}

// A message received and deleted from the transfer dead-letter queue on a
// link that closed before it left is restored there with the reason it was
// moved for, not the reason it was dead-lettered for first.
func TestRestoredTransferDeadLetterKeepsItsReason(t *testing.T) {
	b := openBroker(t, Options{Dir: t.TempDir()})
	defer b.Close()
	small := projection.DefaultConfig()
	small.MaxMessageSize = 10
	if _, err := b.CreateQueue("dst", small); err != nil {
		t.Fatal(err)
	}
	src, err := b.CreateQueue("src", deadLettersTo("dst"))
	if err != nil {
		t.Fatal(err)
	}
	deadLetterOne(t, src, "longer than ten bytes")
	waitCounts(t, src, event.TransferDeadLetterQueue, func(c projection.Counts) bool { return c.Total == 1 })
	d := takeOne(t, src, event.TransferDeadLetterQueue)
	restoreSync(t, src, d)
	ds, err := src.Peek(event.TransferDeadLetterQueue, 1, 10, "")
	if err != nil || len(ds) != 1 || ds[0].Seq == d.Seq {
		t.Fatalf("the transfer dead-letter queue holds %d messages (%v)", len(ds), err)
	}
	if ov := ds[0].Overlays; len(ov) != 1 || ov[0].Reason != projection.ReasonMessageSizeExceeded || !strings.Contains(ov[0].Description, "dst") {
		t.Fatalf("restored with overlays %+v", ov)
	}
}
