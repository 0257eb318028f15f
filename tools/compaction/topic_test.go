package compaction_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/projection/filter"
	"github.com/walbus/walbus/tools/compaction"
)

// A topic whose "slow" subscription takes one message in a hundred and is
// never read, while "fast" takes and completes them all: the log holds
// everything sent since the slow one's oldest message, and compaction cuts
// the disk to what the slow one still holds. Every message it holds comes
// back afterwards with its body.
func TestCompactTopicWithASlowSubscription(t *testing.T) {
	const total, batch = 1_000_000 / raceScale, 1000
	h := newHistory(t, projection.DefaultTopicConfig(), (8<<20)/raceScale, 1)
	h.do(projection.CreateSubscription{Name: "fast", Config: projection.DefaultSubscriptionConfig()})
	h.do(projection.CreateSubscription{Name: "slow", Config: projection.DefaultSubscriptionConfig(), Rules: []projection.RuleSpec{
		{Name: "one-in-100", Filter: projection.FilterSpec{Kind: projection.FilterSQL, SQL: "n % 100 = 0"}}}})
	fast, slow := h.st.Subscription("fast").Queue(), h.st.Subscription("slow").Queue()
	for sent := 0; sent < total; sent += batch {
		msgs := make([]projection.Message, batch)
		for i := range msgs {
			n := uint64(sent + i)
			msgs[i] = message(n, 100)
			msgs[i].Filter = &filter.Message{Properties: []filter.Property{{Name: "n", Value: filter.IntValue(int64(n))}}}
		}
		h.do(projection.Send{Messages: msgs})
		locked := h.do(projection.Lock{Queue: fast, Receiver: "r", Max: batch, Limit: ^uint64(0), Nonce: uint64(sent)})
		if len(locked) != batch {
			t.Fatalf("locked %d of %d", len(locked), batch)
		}
		for _, ev := range locked {
			h.do(projection.Settle{Queue: fast, Token: ev.Token, Outcome: projection.Complete})
		}
		h.advance(time.Millisecond)
	}
	held := h.st.Queue(slow).Counts().Total
	if held != total/100 {
		t.Fatalf("slow holds %d, want %d", held, total/100)
	}
	h.close()
	before := dirBytes(t, h.dir)
	if _, err := compaction.Compact(h.data, compaction.Options{}); err != nil {
		t.Fatal(err)
	}
	after := dirBytes(t, h.dir)
	t.Logf("%d messages sent, the slow subscription holds %d: %d bytes before compaction, %d after (%.1f%%)",
		total, held, before, after, 100*float64(after)/float64(before))
	if after*10 > before {
		t.Fatalf("compaction kept %d of %d bytes: more than 10%%", after, before)
	}

	b, _, err := broker.Open(broker.Options{Dir: h.data, Clock: broker.NewFakeClock(time.Unix(0, h.now))})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	e, err := b.Entity("q")
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for from := uint64(1); ; {
		ds, err := e.Peek(slow, from, 500, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			n := uint64(got) * 100
			if want := message(n, 100); !bytes.Equal(d.Message, want.Body) || d.MessageID != want.MessageID {
				t.Fatalf("message %d of the slow subscription came back as %q", got, d.MessageID)
			}
			got++
			from = d.Seq + 1
		}
	}
	if got != int(held) {
		t.Fatalf("read %d of the %d messages the slow subscription holds", got, held)
	}
	if c, _ := e.Counts(fast); c.Total != 0 {
		t.Fatalf("fast holds %+v", c)
	}
}
