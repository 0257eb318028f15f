package main

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// The crash harness: a real walbus serve, several senders and peek-lock
// receivers through the Go SDK, SIGKILL at random moments and restarts on
// the same data. From the clients' own records it checks that
//   - every send that was acknowledged is completed or still present,
//   - no message whose Complete was acknowledged is delivered again,
//   - a message's delivery count never goes backwards,
//   - sequence numbers stay unique, and increase in each sender's order.
//
// A send whose call spans a kill may have been enqueued before the kill and
// again by the SDK's retry after it (at least once: the first copy's
// acknowledgement died with the process). Its copies, told apart by their
// sequence numbers, are then checked as separate messages.
//
// `make test` runs a few short rounds; `make crash` sets
// WALBUS_CRASH_ROUNDS and WALBUS_CRASH_SECONDS for a long run.
func TestCrashHarness(t *testing.T) {
	rounds, perRound := crashRounds(3)
	seed := crashSeed(t)
	cfg := writeConfig(t, "work", fmt.Sprintf(`"LockDuration": "PT%dS", "MaxDeliveryCount": 1000`, int(lockDuration.Seconds())))
	p := startWalbus(t, t.TempDir(), "--config", cfg)
	h := &harness{t: t, seen: map[string]delivery{}, acked: map[string]bool{}, completed: map[string]bool{},
		completeUnknown: map[string]bool{}, history: map[string][]string{}, start: time.Now(),
		byBroker: map[msgCopy][]brokerDelivery{}, completedAt: map[msgCopy]time.Time{},
		seqOwner: map[int64]string{}, sendSpan: map[string][2]time.Time{}}
	client := crashClient(t, p)
	defer client.Close(context.Background())

	ctx, stopClients := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for s := range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); h.sender(ctx, client, s) }()
	}
	for range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); h.receiver(ctx, client) }()
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	for round := range rounds {
		time.Sleep(perRound/2 + time.Duration(rng.Int64N(int64(perRound))))
		before := time.Now()
		p.kill()
		h.kills.add(before, time.Now())
		h.note(fmt.Sprintf("round %d: killed at %.3fs", round, time.Since(h.start).Seconds()))
		p.start()
		h.note(fmt.Sprintf("round %d: restarted at %.3fs", round, time.Since(h.start).Seconds()))
	}
	time.Sleep(perRound)
	h.mu.Lock()
	h.sending = false // senders stop; receivers drain
	h.mu.Unlock()
	h.drain()
	stopClients()
	wg.Wait()

	// What is left in the queue counts as present.
	present := map[string]bool{}
	r, err := client.NewReceiverForQueue("work", nil)
	if err != nil {
		t.Fatal(err)
	}
	var from int64 = 1
	for {
		pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		msgs, err := r.PeekMessages(pctx, 100, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(from)})
		cancel()
		if err != nil {
			t.Fatalf("final peek: %v", err)
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			present[m.MessageID] = true
		}
		from = *msgs[len(msgs)-1].SequenceNumber + 1
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	lost := 0
	for id := range h.acked {
		if !h.completed[id] && !h.completeUnknown[id] && !present[id] {
			lost++
			_, delivered := h.seen[id]
			t.Errorf("acknowledged send %s lost (delivered before: %v)", id, delivered)
		}
	}
	// Each sender waits for one send before the next, so its messages'
	// numbers follow its own order.
	bySender := map[int][][2]int64{}
	for id, d := range h.seen {
		var s, n int
		if _, err := fmt.Sscanf(id, "s%d-%d", &s, &n); err == nil {
			bySender[s] = append(bySender[s], [2]int64{int64(n), d.seq})
		}
	}
	for s, list := range bySender {
		slices.SortFunc(list, func(a, b [2]int64) int { return cmp.Compare(a[0], b[0]) })
		for i := 1; i < len(list); i++ {
			if list[i][1] <= list[i-1][1] {
				h.fail("sender %d: message %d has sequence number %d, not above message %d's %d",
					s, list[i][0], list[i][1], list[i-1][0], list[i-1][1])
			}
		}
	}
	h.checkDeliveries()
	for _, v := range h.violations {
		t.Error(v)
	}
	t.Logf("%d rounds: sent %d, acknowledged %d, delivered %d, completed %d, redelivered %d (second copies of sends retried across a kill: %d), present %d, lost %d",
		rounds, h.attempted, len(h.acked), h.deliveries, len(h.completed), h.redeliveries, h.twice, len(present), lost)
	if len(h.acked) == 0 || len(h.completed) == 0 {
		t.Fatal("the harness did no work")
	}
}

type delivery struct {
	seq   int64
	count uint32
}

type harness struct {
	t  *testing.T
	mu sync.Mutex

	sending         bool
	attempted       int
	acked           map[string]bool     // sends the broker acknowledged
	completed       map[string]bool     // completes the broker acknowledged
	completeUnknown map[string]bool     // completes whose reply never came
	seen            map[string]delivery // last delivery of each message
	seqOwner        map[int64]string    // which message each sequence number belonged to
	deliveries      int
	redeliveries    int
	twice           int // deliveries of a second copy of a send retried across a kill
	lastDelivery    time.Time
	violations      []string
	history         map[string][]string // per message: what happened, for diagnosing violations
	byBroker        map[msgCopy][]brokerDelivery
	completedAt     map[msgCopy]time.Time   // completes acknowledged, per copy
	sendSpan        map[string][2]time.Time // when each send call started and returned
	kills           killLog
	start           time.Time
}

func (h *harness) event(id, format string, args ...any) {
	h.history[id] = append(h.history[id], fmt.Sprintf("%8.3fs ", time.Since(h.start).Seconds())+fmt.Sprintf(format, args...))
}

func (h *harness) note(s string) { h.t.Log(s) }

func (h *harness) fail(format string, args ...any) {
	h.violations = append(h.violations, fmt.Sprintf(format, args...))
	if id, ok := args[0].(string); ok {
		h.violations = append(h.violations, "  history of "+id+":\n    "+strings.Join(h.history[id], "\n    "))
	}
}

func (h *harness) sender(ctx context.Context, c *azservicebus.Client, n int) {
	h.mu.Lock()
	h.sending = true
	h.mu.Unlock()
	s, err := c.NewSender("work", nil)
	if err != nil {
		h.t.Error(err)
		return
	}
	for i := 0; ctx.Err() == nil; i++ {
		h.mu.Lock()
		stop := !h.sending
		h.attempted++
		h.mu.Unlock()
		if stop {
			return
		}
		id := fmt.Sprintf("s%d-%06d", n, i)
		h.mu.Lock()
		h.sendSpan[id] = [2]time.Time{time.Now()}
		h.mu.Unlock()
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := s.SendMessage(sctx, &azservicebus.Message{MessageID: to.Ptr(id), Body: []byte(id),
			ApplicationProperties: map[string]any{"sender": int64(n), "n": int64(i)}}, nil)
		cancel()
		h.mu.Lock()
		h.event(id, "send: %v", err)
		h.sendSpan[id] = [2]time.Time{h.sendSpan[id][0], time.Now()}
		h.mu.Unlock()
		if err == nil {
			h.mu.Lock()
			h.acked[id] = true
			h.mu.Unlock()
		} else {
			time.Sleep(20 * time.Millisecond) // the broker is restarting
		}
	}
}

func (h *harness) receiver(ctx context.Context, c *azservicebus.Client) {
	r, err := c.NewReceiverForQueue("work", nil)
	if err != nil {
		h.t.Error(err)
		return
	}
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		msgs, err := r.ReceiveMessages(rctx, 20, nil)
		cancel()
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		for _, m := range msgs {
			h.record(m)
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := r.CompleteMessage(cctx, m, nil)
			cancel()
			h.mu.Lock()
			h.event(m.MessageID, "complete seq %d: %v", *m.SequenceNumber, err)
			if err == nil {
				h.completed[m.MessageID] = true
				h.completedAt[msgCopy{m.MessageID, *m.SequenceNumber}] = time.Now()
			} else {
				// The broker may have completed it durably and lost only
				// the reply to a crash: the message may rightly be gone.
				h.completeUnknown[m.MessageID] = true
			}
			h.mu.Unlock()
		}
	}
}

// record keeps one delivery. Checks run at the end, ordered by when the
// broker made each delivery (its locked-until less the lock duration), not
// by when a client got round to it: a client can hold a message past its
// lock while the broker rightly gives it to another receiver.
func (h *harness) record(m *azservicebus.ReceivedMessage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	id, seq := m.MessageID, *m.SequenceNumber
	h.event(id, "delivered seq %d count %d locked until %s", seq, m.DeliveryCount, m.LockedUntil.Format("15:04:05.000"))
	h.deliveries++
	h.lastDelivery = time.Now()
	if owner, ok := h.seqOwner[seq]; ok && owner != id {
		h.fail("sequence number %d belongs to %s and %s", seq, owner, id)
	}
	h.seqOwner[seq] = id
	if prev, ok := h.seen[id]; ok {
		h.redeliveries++
		if prev.seq != seq {
			if !h.sentTwiceMaybe(id) {
				h.fail("%s came back with sequence number %d, was %d", id, seq, prev.seq)
			} else {
				h.twice++
			}
		}
	}
	h.seen[id] = delivery{seq: seq, count: m.DeliveryCount}
	c := msgCopy{id, seq}
	h.byBroker[c] = append(h.byBroker[c], brokerDelivery{at: m.LockedUntil.Add(-lockDuration), count: m.DeliveryCount})
}

// msgCopy is one enqueued copy of a message.
type msgCopy struct {
	id  string
	seq int64
}

// sentTwiceMaybe reports whether id's send call spanned a kill (one still
// in progress spans up to now), so that the SDK may have sent it again.
// Called with mu held.
func (h *harness) sentTwiceMaybe(id string) bool {
	span, ok := h.sendSpan[id]
	if !ok {
		return false
	}
	return h.kills.spanned(span[0], span[1]) > 0
}

// checkDeliveries verifies, per message in the broker's order, that
// delivery counts never go backwards and that nothing is delivered after
// its Complete was acknowledged.
func (h *harness) checkDeliveries() {
	for c, ds := range h.byBroker {
		id := c.id
		sortDeliveries(ds)
		if i, back := countWentBack(ds); back {
			h.fail("%s delivery count went back from %d to %d", id, ds[i-1].count, ds[i].count)
		}
		if done, ok := h.completedAt[c]; ok {
			if last, again := deliveredAfter(ds, done); again {
				h.fail("%s delivered again at %s, after its Complete was acknowledged at %s",
					id, last.at.Format("15:04:05.000"), done.Format("15:04:05.000"))
			}
		}
	}
}

// drain waits until receivers have had nothing for a while (locks held at
// the last crash expire after the lock duration).
func (h *harness) drain() {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		h.mu.Lock()
		idle := time.Since(h.lastDelivery)
		done := len(h.completed) >= len(h.acked)
		h.mu.Unlock()
		if idle > 4*time.Second || done && idle > time.Second {
			return
		}
	}
}
