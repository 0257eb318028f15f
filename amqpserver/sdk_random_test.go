package amqpserver

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walbus/walbus/broker"
)

var (
	sdkRandomSeed  = flag.Uint64("sdkrandom.seed", 0, "TestSDKRandomWorkloadKeepsInvariants: run this seed only (0: the default seeds)")
	sdkRandomSteps = flag.Int("sdkrandom.steps", 0, "TestSDKRandomWorkloadKeepsInvariants: operations per worker (0: the default)")
)

// The queues of the random workload.
const (
	qPlain    = "plain"
	qSessions = "sessions"
	qDedup    = "dedup"
)

var randomSessions = []string{"s0", "s1", "s2", "s3"}

// radSession is also received by receive-and-delete session receivers,
// which close with credit left: a message taken for one that closed first
// comes back at the end of the session, so its order is not checked.
const radSession = "s3"

// A seeded random workload through the Go SDK: two senders, two receivers
// of the plain queues and their dead-letter queues, and two session
// receivers work concurrently; a ledger of every message checks each
// delivery as it happens, and at the end every queue is drained and every
// message must have left exactly once (completed, received and deleted, or
// completed from its dead-letter queue), except scheduled messages that
// were cancelled, and the broker's counts must be zero. Every lock is
// settled by the test or released by the SDK well within the default
// one-minute lock, so delivery counts are exact.
func TestSDKRandomWorkloadKeepsInvariants(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if *sdkRandomSeed != 0 {
		seeds = []uint64{*sdkRandomSeed}
	}
	steps := 100
	if *sdkRandomSteps > 0 {
		steps = *sdkRandomSteps
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runSDKRandom(t, seed, steps)
			if t.Failed() {
				t.Logf("reproduce with: go test -race -run 'TestSDKRandomWorkloadKeepsInvariants' ./amqpserver/ -sdkrandom.seed=%d -sdkrandom.steps=%d", seed, steps)
			}
		})
	}
}

func runSDKRandom(t *testing.T, seed uint64, steps int) {
	plain := broker.DefaultConfig()
	plain.MaxDeliveryCount = 5
	dedup := broker.DefaultConfig()
	dedup.RequiresDuplicateDetection = true
	dedup.MaxDeliveryCount = 3
	cfgs := map[string]broker.Config{qPlain: plain, qSessions: sessionQueue(), qDedup: dedup}
	tb := startBroker(t, cfgs)
	ctx, stop := context.WithTimeout(context.Background(), 90*time.Second)
	defer stop()
	l := newLedger(t, seed, stop, cfgs)

	var workers []*worker
	for i, role := range []string{"sender", "sender", "receiver", "receiver", "sessions", "sessions"} {
		workers = append(workers, &worker{
			name: fmt.Sprintf("%s%d", role, i), role: role, index: i % 2,
			rng: rand.New(rand.NewPCG(seed, uint64(i))), ctx: ctx, l: l, c: tb.client(t),
			senders: map[string]*azservicebus.Sender{}, receivers: map[subqueue]*plainReceiver{},
		})
	}
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range steps {
				if ctx.Err() != nil {
					return
				}
				w.step()
			}
			w.finish()
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	d := &worker{name: "drain", role: "drain", rng: rand.New(rand.NewPCG(seed, 99)), ctx: ctx, l: l, c: tb.client(t),
		senders: map[string]*azservicebus.Sender{}, receivers: map[subqueue]*plainReceiver{}}
	// Scheduled messages activate on the broker's timer: wait for their
	// time, then for the broker to show what the ledger expects.
	time.Sleep(time.Until(l.lastScheduled()))
	for _, q := range []string{qPlain, qSessions, qDedup} {
		for _, sub := range []uint32{broker.MainQueue, broker.DeadLetterQueue} {
			d.checkQuiescent(tb.b, q, sub)
		}
	}
	if t.Failed() {
		return
	}
	for _, q := range []string{qPlain, qDedup} {
		d.drainPlain(tb.b, subqueue{q, false})
	}
	d.drainSessions(tb.b)
	for _, q := range []string{qPlain, qSessions, qDedup} {
		d.drainPlain(tb.b, subqueue{q, true})
	}
	if t.Failed() {
		return
	}
	l.checkFinal()
	for _, q := range []string{qPlain, qSessions, qDedup} {
		e, err := tb.b.Entity(q)
		if err != nil {
			t.Fatal(err)
		}
		for _, sub := range []uint32{broker.MainQueue, broker.DeadLetterQueue, broker.TransferDeadLetterQueue} {
			if c, err := e.Counts(sub); err != nil || c.Total != 0 {
				t.Errorf("seed %d: %s queue %d holds %+v after the drain (%v)", seed, q, sub, c, err)
			}
		}
	}
	for _, w := range append(workers, d) {
		for _, r := range w.receivers {
			r.r.Close(context.Background())
		}
	}
}

// subqueue names a queue or its dead-letter queue.
type subqueue struct {
	queue string
	dlq   bool
}

// plainReceiver is a long-lived PeekLock receiver and what is known of its
// credit: zero while every receive has returned as many messages as it
// asked for. Only then may it close: messages that reach a closing link
// keep their locks until they expire.
type plainReceiver struct {
	r        *azservicebus.Receiver
	zeroCred bool
}

// settler is what Receiver and SessionReceiver share for settling.
type settler interface {
	CompleteMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.CompleteMessageOptions) error
	AbandonMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.AbandonMessageOptions) error
	DeferMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.DeferMessageOptions) error
	DeadLetterMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.DeadLetterOptions) error
}

type held struct {
	rec  *record
	msg  *azservicebus.ReceivedMessage
	from subqueue
	hold *sessionHold // the session receiver it came from, if any
}

type sessionHold struct {
	r  *azservicebus.SessionReceiver
	id string
}

type worker struct {
	name  string
	role  string
	index int // which half of the sessions a sender sends to
	rng   *rand.Rand
	ctx   context.Context
	l     *ledger
	c     *azservicebus.Client

	senders   map[string]*azservicebus.Sender
	receivers map[subqueue]*plainReceiver
	held      []held
	holds     []*sessionHold
}

func (w *worker) check(err error, format string, args ...any) bool {
	if err == nil {
		return true
	}
	if w.ctx.Err() == nil {
		w.l.fail("%s: %s: %v", w.name, fmt.Sprintf(format, args...), err)
	}
	return false
}

// opCtx bounds one SDK call; the run's context stops them all on failure.
func (w *worker) opCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(w.ctx, d)
}

// pick returns an index drawn with the given weights.
func pick(rng *rand.Rand, weights ...int) int {
	total := 0
	for _, wt := range weights {
		total += wt
	}
	n := rng.IntN(total)
	for i, wt := range weights {
		if n < wt {
			return i
		}
		n -= wt
	}
	return len(weights) - 1
}

func (w *worker) step() {
	switch w.role {
	case "sender":
		switch pick(w.rng, 30, 20, 10, 10, 8, 5) {
		case 0:
			w.sendOne()
		case 1:
			w.sendBatch()
		case 2:
			w.sendDuplicate()
		case 3:
			w.scheduleNear()
		case 4:
			w.scheduleFar()
		case 5:
			w.cancelSome()
		}
	case "receiver":
		switch pick(w.rng, 25, 30, 8, 8, 8, 6, 3, 5) {
		case 0:
			w.receive()
		case 1:
			w.settleOne()
		case 2:
			w.receiveDeferred()
		case 3:
			w.receiveAndDelete()
		case 4:
			w.receiveDeadLetters()
		case 5:
			w.peek()
		case 6:
			w.recycle()
		case 7:
			w.settleConcurrently()
		}
	case "sessions":
		switch pick(w.rng, 12, 25, 25, 8, 10, 4, 6, 4, 5) {
		case 0:
			w.acceptSession()
		case 1:
			w.receiveSession()
		case 2:
			w.settleOne()
		case 3:
			w.receiveDeferred()
		case 4:
			w.sessionState()
		case 5:
			w.renewSession()
		case 6:
			w.closeSession()
		case 7:
			w.peekSession()
		case 8:
			w.receiveAndDeleteSession()
		}
	}
}

// finish settles everything the worker holds and closes its sessions;
// its plain receivers stay open until the queues are drained.
func (w *worker) finish() {
	for len(w.held) > 0 {
		w.settle(0, outcome{kind: "complete"})
	}
	for len(w.holds) > 0 {
		w.closeHold(0)
	}
	if w.role == "sender" {
		if far := w.l.pickRecs(func(r *record) bool { return w.ownsScheduled(r) && r.far && !r.cancelled }); len(far) > 0 {
			w.cancel(far)
		}
	}
}

func (w *worker) sender(queue string) *azservicebus.Sender {
	if s := w.senders[queue]; s != nil {
		return s
	}
	s, err := w.c.NewSender(queue, nil)
	w.check(err, "new sender")
	w.senders[queue] = s
	return s
}

// target picks a queue and, for the session queue, one of this sender's
// sessions: each session has one sender, so its send order is its
// SequenceNumber order.
func (w *worker) target(queues ...string) (string, string) {
	q := queues[w.rng.IntN(len(queues))]
	if q != qSessions {
		return q, ""
	}
	return q, randomSessions[2*w.rng.IntN(len(randomSessions)/2)+w.index]
}

func (w *worker) sendOne() {
	q, session := w.target(qPlain, qSessions, qDedup)
	if q != qSessions && w.rng.IntN(8) == 0 {
		// Scheduled through the message's ScheduledEnqueueTime.
		at := time.Now().Add(time.Duration(200+w.rng.IntN(400)) * time.Millisecond).Truncate(time.Millisecond)
		r := w.l.register(w.rng, w.name, q, session, false, rScheduled)
		w.l.scheduled([]*record{r}, at, false)
		m := r.message()
		m.ScheduledEnqueueTime = &at
		ctx, cancel := w.opCtx(10 * time.Second)
		defer cancel()
		if w.check(w.sender(q).SendMessage(ctx, m, nil), "send %s scheduled", r.id) {
			w.l.sent(r, 0)
		}
		return
	}
	r := w.l.register(w.rng, w.name, q, session, true, rSending)
	m := r.message()
	if w.rng.IntN(15) == 0 {
		// Many frames each way.
		w.l.enlarge(r, 64<<10+w.rng.IntN(400<<10))
		m.Body = w.l.body(r)
	}
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	if w.check(w.sender(q).SendMessage(ctx, m, nil), "send %s", r.id) {
		w.l.sent(r, 0)
	}
}

func (w *worker) sendBatch() {
	q, _ := w.target(qPlain, qSessions, qDedup)
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	batch, err := w.sender(q).NewMessageBatch(ctx, nil)
	if !w.check(err, "new batch") {
		return
	}
	var recs []*record
	for range 2 + w.rng.IntN(4) {
		_, session := w.target(q)
		r := w.l.register(w.rng, w.name, q, session, true, rSending)
		recs = append(recs, r)
		if !w.check(batch.AddMessage(r.message(), nil), "add to batch") {
			return
		}
		if q == qDedup && w.rng.IntN(4) == 0 {
			// The same MessageId twice in one batch: the second is a
			// duplicate of the first.
			dup := r.message()
			dup.Body = []byte("duplicate in batch of " + r.id)
			if !w.check(batch.AddMessage(dup, nil), "add to batch") {
				return
			}
		}
	}
	if w.check(w.sender(q).SendMessageBatch(ctx, batch, nil), "send batch of %d", len(recs)) {
		for _, r := range recs {
			w.l.sent(r, 0)
		}
	}
}

// sendDuplicate sends again the MessageId of an acknowledged message of the
// dedup queue, with another body: it must be dropped.
func (w *worker) sendDuplicate() {
	orig := w.l.pickRecs(func(r *record) bool { return r.queue == qDedup && r.acked && !r.viaSchedule })
	if len(orig) == 0 {
		w.sendOne()
		return
	}
	r := orig[w.rng.IntN(len(orig))]
	dup := &azservicebus.Message{MessageID: to.Ptr(r.id), Body: []byte("duplicate of " + r.id)}
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	w.l.count("duplicates sent", 1)
	if w.rng.IntN(2) == 0 {
		w.check(w.sender(qDedup).SendMessage(ctx, dup, nil), "send duplicate of %s", r.id)
		return
	}
	batch, err := w.sender(qDedup).NewMessageBatch(ctx, nil)
	if !w.check(err, "new batch") {
		return
	}
	fresh := w.l.register(w.rng, w.name, qDedup, "", false, rSending)
	w.check(batch.AddMessage(dup, nil), "add")
	w.check(batch.AddMessage(fresh.message(), nil), "add")
	if w.check(w.sender(qDedup).SendMessageBatch(ctx, batch, nil), "send duplicate of %s in a batch", r.id) {
		w.l.sent(fresh, 0)
	}
}

func (w *worker) schedule(q, session string, n int, at time.Time, far bool) []*record {
	var recs []*record
	var msgs []*azservicebus.Message
	for range n {
		r := w.l.register(w.rng, w.name, q, session, false, rScheduled)
		recs = append(recs, r)
		msgs = append(msgs, r.message())
	}
	w.l.scheduled(recs, at, far)
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	seqs, err := w.sender(q).ScheduleMessages(ctx, msgs, at, nil)
	if !w.check(err, "schedule %d", n) {
		return nil
	}
	if len(seqs) != n {
		w.l.fail("%s: scheduling %d messages gave %d SequenceNumbers", w.name, n, len(seqs))
		return nil
	}
	for i, r := range recs {
		w.l.sent(r, seqs[i])
	}
	return recs
}

// scheduleNear schedules messages a few hundred ms ahead, and now and then
// cancels one at once: the cancel races the activation, so that message
// arrives at most once.
func (w *worker) scheduleNear() {
	q, session := w.target(qPlain, qSessions, qDedup)
	at := time.Now().Add(time.Duration(200+w.rng.IntN(400)) * time.Millisecond).Truncate(time.Millisecond)
	recs := w.schedule(q, session, 1+w.rng.IntN(3), at, false)
	if len(recs) > 0 && w.rng.IntN(4) == 0 {
		w.cancel(recs[:1])
	}
}

// scheduleFar schedules messages beyond the end of the test; they are all
// cancelled, now or later, and must never arrive.
func (w *worker) scheduleFar() {
	q, session := w.target(qPlain, qSessions, qDedup)
	recs := w.schedule(q, session, 1+w.rng.IntN(3), time.Now().Add(10*time.Minute).Truncate(time.Millisecond), true)
	if len(recs) > 0 && w.rng.IntN(2) == 0 {
		w.cancel(recs)
	}
}

// ownsScheduled: a sender cancels only what it scheduled itself.
func (w *worker) ownsScheduled(r *record) bool {
	return r.by == w.name && r.viaSchedule && r.acked && r.schedSeq != 0
}

// cancelSome cancels some of what this sender scheduled: far ahead, or
// near, racing the activation.
func (w *worker) cancelSome() {
	recs := w.l.pickRecs(func(r *record) bool { return w.ownsScheduled(r) && r.state == rScheduled && !r.cancelled })
	if len(recs) == 0 {
		w.scheduleFar()
		return
	}
	w.rng.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	w.cancel(recs[:1+w.rng.IntN(len(recs))])
}

func (w *worker) cancel(recs []*record) {
	byQueue := w.l.cancelling(recs)
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	for q, seqs := range byQueue {
		if !w.check(w.sender(q).CancelScheduledMessages(ctx, seqs, nil), "cancel %v in %s", seqs, q) {
			return
		}
	}
	w.l.cancelled(recs)
}

func (w *worker) receiver(sq subqueue) *plainReceiver {
	if pr := w.receivers[sq]; pr != nil {
		return pr
	}
	opts := &azservicebus.ReceiverOptions{}
	if sq.dlq {
		opts.SubQueue = azservicebus.SubQueueDeadLetter
	}
	r, err := w.c.NewReceiverForQueue(sq.queue, opts)
	w.check(err, "new receiver")
	pr := &plainReceiver{r: r, zeroCred: true}
	w.receivers[sq] = pr
	return pr
}

// receiveWithin receives up to n messages, giving up after d with none.
func (w *worker) receiveWithin(r interface {
	ReceiveMessages(context.Context, int, *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}, n int, d time.Duration, opts *azservicebus.ReceiveMessagesOptions) []*azservicebus.ReceivedMessage {
	ctx, cancel := w.opCtx(d)
	defer cancel()
	msgs, err := r.ReceiveMessages(ctx, n, opts)
	if errors.Is(err, context.DeadlineExceeded) && w.ctx.Err() == nil {
		return msgs
	}
	w.check(err, "receive %d", n)
	if len(msgs) > n {
		w.l.fail("%s: asked for %d messages and got %d", w.name, n, len(msgs))
	}
	return msgs
}

func (w *worker) receive() {
	sq := subqueue{[]string{qPlain, qDedup}[w.rng.IntN(2)], false}
	w.receiveInto(sq, 1+w.rng.IntN(5))
}

func (w *worker) receiveDeadLetters() {
	sq := subqueue{[]string{qPlain, qSessions, qDedup}[w.rng.IntN(3)], true}
	w.receiveInto(sq, 1+w.rng.IntN(3))
}

func (w *worker) receiveInto(sq subqueue, n int) {
	pr := w.receiver(sq)
	msgs := w.receiveWithin(pr.r, n, 100*time.Millisecond, nil)
	pr.zeroCred = pr.zeroCred && len(msgs) == n
	for _, m := range msgs {
		if r := w.l.received(w.name, sq.queue, sq.dlq, lockReceipt, m); r != nil {
			w.held = append(w.held, held{rec: r, msg: m, from: sq})
		}
	}
}

// settleOne settles a held message with a random outcome, or renews its
// lock.
func (w *worker) settleOne() {
	if len(w.held) == 0 {
		return
	}
	i := w.rng.IntN(len(w.held))
	h := w.held[i]
	var o outcome
	abandon := 25
	if w.l.abandonsOf(h.rec) > 0 {
		abandon = 120 // on to MaxDeliveryCount, now and then
	}
	switch k := pick(w.rng, 40, abandon, 15, 15, 5); {
	case k == 4 && h.hold == nil:
		old := *h.msg.LockedUntil
		ctx, cancel := w.opCtx(10 * time.Second)
		defer cancel()
		if w.check(w.receiver(h.from).r.RenewMessageLock(ctx, h.msg, nil), "renew lock of %s", h.rec.id) && h.msg.LockedUntil.Before(old) {
			w.l.fail("%s: renewing the lock of %s moved it back from %v to %v", w.name, h.rec.id, old, *h.msg.LockedUntil)
		}
		return
	case k == 0 || k == 4:
		o.kind = "complete"
	case k == 1 || h.from.dlq:
		o.kind = "abandon"
	case k == 2:
		o.kind = "defer"
	default:
		o.kind = "deadletter"
		o.reason = fmt.Sprintf("reason-%d", w.rng.IntN(100))
		o.description = fmt.Sprintf("description %d", w.rng.IntN(100))
	}
	if o.kind != "complete" && w.rng.IntN(2) == 0 {
		o.props = map[string]any{fmt.Sprintf("p%d", w.rng.IntN(4)): int64(w.rng.IntN(1000))}
	}
	w.settle(i, o)
}

// settleConcurrently settles everything the worker holds at once, each
// message on its own goroutine: dispositions and $management requests
// pipelined on the same links.
func (w *worker) settleConcurrently() {
	hs := w.held
	w.held = nil
	w.l.count("settled concurrently", len(hs))
	var wg sync.WaitGroup
	for _, h := range hs {
		o := outcome{kind: []string{"complete", "abandon", "defer", "deadletter"}[w.rng.IntN(4)],
			reason: "concurrent", description: h.rec.id}
		if w.l.abandonsOf(h.rec) > 0 && w.rng.IntN(4) > 0 {
			o.kind = "abandon"
		}
		if h.from.dlq && o.kind != "complete" {
			o.kind = "abandon"
		}
		s := w.settlerFor(h)
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.settleWith(s, h, o)
		}()
	}
	wg.Wait()
}

func (w *worker) settlerFor(h held) settler {
	if h.hold != nil {
		return h.hold.r
	}
	// The receiver may be a newer one than the message's: the SDK then
	// settles through $management.
	return w.receiver(h.from).r
}

func (w *worker) settle(i int, o outcome) {
	h := w.held[i]
	w.held = slices.Delete(w.held, i, i+1)
	w.settleWith(w.settlerFor(h), h, o)
}

func (w *worker) settleWith(s settler, h held, o outcome) {
	leaves := w.l.settling(h.rec, w.name, o)
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	var err error
	switch o.kind {
	case "complete":
		err = s.CompleteMessage(ctx, h.msg, nil)
	case "abandon":
		err = s.AbandonMessage(ctx, h.msg, &azservicebus.AbandonMessageOptions{PropertiesToModify: o.props})
	case "defer":
		err = s.DeferMessage(ctx, h.msg, &azservicebus.DeferMessageOptions{PropertiesToModify: o.props})
	case "deadletter":
		err = s.DeadLetterMessage(ctx, h.msg, &azservicebus.DeadLetterOptions{
			Reason: to.Ptr(o.reason), ErrorDescription: to.Ptr(o.description), PropertiesToModify: o.props})
	}
	if w.check(err, "%s %s", o.kind, h.rec.id) {
		w.l.settled(h.rec, h.from.dlq, leaves)
	}
}

// receiveDeferred receives a deferred message by its SequenceNumber (and
// checks that a message that is gone cannot be).
func (w *worker) receiveDeferred() {
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	if w.role == "receiver" && w.rng.IntN(3) == 0 {
		type goneMsg struct {
			id, queue string
			seq       int64
		}
		var gone []goneMsg
		w.l.pickRecs(func(r *record) bool {
			if (r.queue == qPlain || r.queue == qDedup) && r.state == rDone && r.pending == 0 && r.seq != 0 {
				gone = append(gone, goneMsg{r.id, r.queue, r.seq})
			}
			return false
		})
		if len(gone) > 0 {
			g := gone[w.rng.IntN(len(gone))]
			msgs, err := w.receiver(subqueue{g.queue, false}).r.ReceiveDeferredMessages(ctx, []int64{g.seq}, nil)
			w.l.count("gone by SequenceNumber", 1)
			if sbCode(err) != azservicebus.CodeNotFound {
				w.l.fail("%s: receiving %s (gone) by SequenceNumber %d: %v %v", w.name, g.id, g.seq, len(msgs), err)
			}
			return
		}
	}
	var r *record
	var seq int64
	var hold *sessionHold
	if w.role == "sessions" {
		if len(w.holds) == 0 {
			return
		}
		hold = w.holds[w.rng.IntN(len(w.holds))]
		r, seq = w.l.claimDeferred(w.rng, w.name, func(r *record) bool { return r.queue == qSessions && r.session == hold.id })
	} else {
		r, seq = w.l.claimDeferred(w.rng, w.name, func(r *record) bool { return r.queue == qPlain || r.queue == qDedup })
	}
	if r == nil {
		return
	}
	sq := subqueue{r.queue, false}
	if hold == nil && w.rng.IntN(4) == 0 {
		rad, err := w.c.NewReceiverForQueue(r.queue, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
		if !w.check(err, "new receiver") {
			return
		}
		defer rad.Close(context.Background())
		msgs, err := rad.ReceiveDeferredMessages(ctx, []int64{seq}, nil)
		if w.check(err, "receive-and-delete deferred %s", r.id) {
			w.oneDeferred(r, seq, msgs, deferredDelete, sq, nil)
		}
		return
	}
	var msgs []*azservicebus.ReceivedMessage
	var err error
	if hold != nil {
		msgs, err = hold.r.ReceiveDeferredMessages(ctx, []int64{seq}, nil)
	} else {
		msgs, err = w.receiver(sq).r.ReceiveDeferredMessages(ctx, []int64{seq}, nil)
	}
	if w.check(err, "receive deferred %s (seq %d)", r.id, seq) {
		w.oneDeferred(r, seq, msgs, deferredLock, sq, hold)
	}
}

func (w *worker) oneDeferred(r *record, seq int64, msgs []*azservicebus.ReceivedMessage, how receipt, sq subqueue, hold *sessionHold) {
	if len(msgs) != 1 || msgs[0].MessageID != r.id {
		w.l.fail("%s: asked for deferred %s by %d, got %d messages", w.name, r.id, seq, len(msgs))
		return
	}
	if got := w.l.received(w.name, r.queue, false, how, msgs[0]); got != nil && how == deferredLock {
		w.held = append(w.held, held{rec: got, msg: msgs[0], from: sq, hold: hold})
	}
}

// receiveAndDelete opens a receive-and-delete receiver and receives with
// it until it closes.
func (w *worker) receiveAndDelete() {
	sq := subqueue{[]string{qPlain, qDedup}[w.rng.IntN(2)], false}
	if w.rng.IntN(3) == 0 {
		sq = subqueue{[]string{qPlain, qSessions, qDedup}[w.rng.IntN(3)], true}
	}
	opts := &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete}
	if sq.dlq {
		opts.SubQueue = azservicebus.SubQueueDeadLetter
	}
	r, err := w.c.NewReceiverForQueue(sq.queue, opts)
	if w.check(err, "new receive-and-delete receiver") {
		w.receiveAndClose(r, sq, "")
	}
}

// receiveAndClose receives a few times with a receive-and-delete receiver
// (a short wait leaves credit outstanding), sometimes while a burst of
// messages arrives, closes it, and reads what the SDK had received when it
// closed. A message leaves its queue once only: one the broker took for
// the link after it closed comes back.
func (w *worker) receiveAndClose(r interface {
	ReceiveMessages(context.Context, int, *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
	Close(context.Context) error
}, sq subqueue, session string) {
	record := func(msgs []*azservicebus.ReceivedMessage) {
		for _, m := range msgs {
			w.l.received(w.name, sq.queue, sq.dlq, deleteReceipt, m)
		}
	}
	var burst sync.WaitGroup
	defer burst.Wait()
	credit := false
	for i := range 1 + w.rng.IntN(3) {
		if i == 1 && !sq.dlq && w.rng.IntN(2) == 0 {
			burst.Add(1)
			go w.burst(&burst, rand.New(rand.NewPCG(w.rng.Uint64(), 0)), sq.queue, session, 5+w.rng.IntN(10))
		}
		wait := time.Duration(20+w.rng.IntN(150)) * time.Millisecond
		n := 1 + w.rng.IntN(6)
		msgs := w.receiveWithin(r, n, wait, &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: 20 * time.Millisecond})
		credit = len(msgs) < n
		record(msgs)
	}
	if credit {
		w.l.count("receive-and-delete closed with credit", 1)
	}
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	if !w.check(r.Close(ctx), "close receive-and-delete receiver") {
		return
	}
	for {
		msgs, err := r.ReceiveMessages(ctx, 10, nil)
		if sbCode(err) == azservicebus.CodeClosed {
			return
		}
		if !w.check(err, "receive after close") {
			return
		}
		w.l.count("received after close", len(msgs))
		record(msgs)
	}
}

// burst sends n messages in one batch on a sender of its own.
func (w *worker) burst(done *sync.WaitGroup, rng *rand.Rand, queue, session string, n int) {
	defer done.Done()
	s, err := w.c.NewSender(queue, nil)
	if !w.check(err, "new sender") {
		return
	}
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	defer s.Close(ctx)
	batch, err := s.NewMessageBatch(ctx, nil)
	if !w.check(err, "new batch") {
		return
	}
	var recs []*record
	for range n {
		r := w.l.register(rng, w.name+"-burst", queue, session, true, rSending)
		recs = append(recs, r)
		if !w.check(batch.AddMessage(r.message(), nil), "add to batch") {
			return
		}
	}
	w.l.count("burst messages", n)
	if w.check(s.SendMessageBatch(ctx, batch, nil), "send a burst of %d", n) {
		for _, r := range recs {
			w.l.sent(r, 0)
		}
	}
}

// peek pages through a queue and checks what it shows.
func (w *worker) peek() {
	sq := subqueue{[]string{qPlain, qDedup}[w.rng.IntN(2)], false}
	if w.rng.IntN(3) == 0 {
		sq = subqueue{[]string{qPlain, qSessions, qDedup}[w.rng.IntN(3)], true}
	}
	w.peekPages(w.receiver(sq).r, sq, "")
}

func (w *worker) peekPages(r interface {
	PeekMessages(context.Context, int, *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}, sq subqueue, session string) {
	since := w.l.now()
	page := 1 + w.rng.IntN(6)
	last := int64(0)
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	for range 20 {
		from := last + 1
		msgs, err := r.PeekMessages(ctx, page, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
		if !w.check(err, "peek %v from %d", sq, from) {
			return
		}
		if len(msgs) > page {
			w.l.fail("%s: peek of %d gave %d", w.name, page, len(msgs))
			return
		}
		w.l.count("peeked", len(msgs))
		w.l.peeked(w.name, sq.queue, sq.dlq, session, since, msgs, &last)
		if len(msgs) < page {
			return
		}
	}
}

// recycle closes a receiver whose credit is known to be zero and opens a
// new one; what it held is then settled through $management.
func (w *worker) recycle() {
	for sq, pr := range w.receivers {
		if !pr.zeroCred {
			continue
		}
		ctx, cancel := w.opCtx(10 * time.Second)
		err := pr.r.Close(ctx)
		cancel()
		if w.check(err, "close receiver of %v", sq) {
			delete(w.receivers, sq)
			w.l.count("receivers recycled", 1)
		}
		return
	}
}

// acceptSession accepts a named session or the next free one.
func (w *worker) acceptSession() {
	if len(w.holds) >= 2 {
		w.receiveSession()
		return
	}
	w.l.acceptMu.Lock()
	defer w.l.acceptMu.Unlock()
	free, withMessages := w.l.freeSessions()
	if len(free) == 0 {
		return
	}
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	var sr *azservicebus.SessionReceiver
	var err error
	if withMessages && w.rng.IntN(2) == 0 {
		// A free session has messages: accept-next must find one at once.
		w.l.count("accept next", 1)
		sr, err = w.c.AcceptNextSessionForQueue(ctx, qSessions, nil)
		if !w.check(err, "accept next session") {
			return
		}
	} else {
		id := free[w.rng.IntN(len(free))]
		sr, err = w.c.AcceptSessionForQueue(ctx, qSessions, id, nil)
		if !w.check(err, "accept session %s", id) {
			return
		}
	}
	w.l.holdSession(sr.SessionID(), w.name)
	w.holds = append(w.holds, &sessionHold{r: sr, id: sr.SessionID()})
	state, err := sr.GetSessionState(ctx, nil)
	if w.check(err, "get state of %s", sr.SessionID()) && !bytes.Equal(state, w.l.sessionState(sr.SessionID())) {
		w.l.fail("%s: session %s has state %q, set to %q", w.name, sr.SessionID(), state, w.l.sessionState(sr.SessionID()))
	}
}

// receiveSession receives from a held session. With messages available
// it asks for no more than there are and waits for all of them, so no
// credit is left over; with none it asks for one. So a session receiver
// never has more than one message in flight outside a receive, and the
// SDK cannot hand out a prefetched message after releasing an earlier
// one: FIFO order is the broker's.
func (w *worker) receiveSession() {
	if len(w.holds) == 0 {
		w.acceptSession()
		return
	}
	hold := w.holds[w.rng.IntN(len(w.holds))]
	avail := w.l.availableIn(hold.id)
	if hold.id == radSession && w.role != "drain" {
		avail = 0 // some may be on their way back
	}
	n, wait := 1, 50*time.Millisecond
	opts := (*azservicebus.ReceiveMessagesOptions)(nil)
	if avail > 0 {
		n, wait = 1+w.rng.IntN(min(avail, 4)), 10*time.Second
		opts = &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: 10 * time.Second}
	}
	msgs := w.receiveWithin(hold.r, n, wait, opts)
	if avail > 0 && len(msgs) < n && w.ctx.Err() == nil {
		w.l.fail("%s: session %s has %d messages available; a receive of %d gave %d", w.name, hold.id, avail, n, len(msgs))
		return
	}
	for _, m := range msgs {
		if r := w.l.received(w.name, qSessions, false, lockReceipt, m); r != nil {
			w.held = append(w.held, held{rec: r, msg: m, from: subqueue{qSessions, false}, hold: hold})
		}
	}
}

func (w *worker) sessionState() {
	if len(w.holds) == 0 {
		return
	}
	hold := w.holds[w.rng.IntN(len(w.holds))]
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	if w.rng.IntN(3) > 0 {
		var state []byte
		if n := w.rng.IntN(20); n > 0 {
			state = fmt.Appendf(nil, "%s@%d:%s", hold.id, w.rng.IntN(1000), strings.Repeat("s", n))
		}
		w.l.count("state set", 1)
		w.l.setSessionState(hold.id, state)
		w.check(hold.r.SetSessionState(ctx, state, nil), "set state of %s", hold.id)
		return
	}
	state, err := hold.r.GetSessionState(ctx, nil)
	if w.check(err, "get state of %s", hold.id) && !bytes.Equal(state, w.l.sessionState(hold.id)) {
		w.l.fail("%s: session %s has state %q, set to %q", w.name, hold.id, state, w.l.sessionState(hold.id))
	}
}

func (w *worker) renewSession() {
	if len(w.holds) == 0 {
		return
	}
	hold := w.holds[w.rng.IntN(len(w.holds))]
	before := hold.r.LockedUntil()
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	if w.check(hold.r.RenewSessionLock(ctx, nil), "renew session %s", hold.id) && hold.r.LockedUntil().Before(before) {
		w.l.fail("%s: renewing session %s moved its lock back from %v to %v", w.name, hold.id, before, hold.r.LockedUntil())
	}
}

func (w *worker) closeSession() {
	if len(w.holds) > 0 {
		w.closeHold(w.rng.IntN(len(w.holds)))
	}
}

// closeHold closes a session receiver: the broker releases the session and
// the locks of its messages, without counting a delivery.
func (w *worker) closeHold(i int) {
	hold := w.holds[i]
	w.l.acceptMu.Lock()
	defer w.l.acceptMu.Unlock()
	var released []*record
	w.held = slices.DeleteFunc(w.held, func(h held) bool {
		if h.hold == hold {
			released = append(released, h.rec)
			return true
		}
		return false
	})
	w.l.releasing(released, w.name)
	w.l.count("released by a session close", len(released))
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	w.holds = slices.Delete(w.holds, i, i+1)
	if w.check(hold.r.Close(ctx), "close session %s", hold.id) {
		w.l.unholdSession(hold.id)
	}
}

// receiveAndDeleteSession accepts radSession for a receive-and-delete
// receiver, receives a few times, closes it (a short wait can leave credit
// outstanding) and reads what the SDK had received when it closed.
func (w *worker) receiveAndDeleteSession() {
	w.l.acceptMu.Lock()
	defer w.l.acceptMu.Unlock()
	if free, _ := w.l.freeSessions(); !slices.Contains(free, radSession) {
		return
	}
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	sr, err := w.c.AcceptSessionForQueue(ctx, qSessions, radSession,
		&azservicebus.SessionReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete})
	if !w.check(err, "accept %s to receive and delete", radSession) {
		return
	}
	w.l.holdSession(radSession, w.name)
	w.l.count("receive-and-delete sessions", 1)
	w.receiveAndClose(sr, subqueue{qSessions, false}, radSession)
	w.l.unholdSession(radSession)
}

func (w *worker) peekSession() {
	if len(w.holds) == 0 {
		return
	}
	hold := w.holds[w.rng.IntN(len(w.holds))]
	w.peekPages(hold.r, subqueue{qSessions, false}, hold.id)
}

// checkQuiescent compares, once nothing moves, what the broker holds with
// what the ledger expects, and pages through it with the SDK's peek.
func (w *worker) checkQuiescent(b *broker.Broker, queue string, sub uint32) {
	e, err := b.Entity(queue)
	if err != nil {
		w.l.fail("entity %s: %v", queue, err)
		return
	}
	var diff []string
	held := map[string]bool{}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		must, may := w.l.expected(queue, sub)
		peek, err := e.Peek(sub, 1, 1<<20, "")
		if err != nil {
			w.l.fail("broker peek %s: %v", queue, err)
			return
		}
		diff = diff[:0]
		clear(held)
		for _, d := range peek {
			deferred, ok := must[d.MessageID]
			_, maybe := may[d.MessageID]
			switch {
			case !ok && !maybe:
				diff = append(diff, fmt.Sprintf("unexpected %s (seq %d, %v)", d.MessageID, d.Seq, d.State))
			case ok && deferred != d.Deferred:
				diff = append(diff, fmt.Sprintf("%s deferred=%v", d.MessageID, d.Deferred))
			case d.State != broker.Available && d.State != broker.Deferred:
				diff = append(diff, fmt.Sprintf("%s %v", d.MessageID, d.State))
			}
			held[d.MessageID] = true
		}
		for id := range must {
			if !held[id] {
				diff = append(diff, "missing "+id)
			}
		}
		if len(diff) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(diff) > 0 {
		w.l.mu.Lock()
		var recs []*record
		for _, d := range diff {
			for _, f := range strings.Fields(d) {
				if r := w.l.recs[f]; r != nil {
					recs = append(recs, r)
				}
			}
		}
		w.l.failf(recs, "%s queue %d, once quiet, differs from the ledger: %v", queue, sub, diff)
		w.l.mu.Unlock()
		return
	}
	if queue == qSessions && sub == broker.MainQueue {
		return // peeked per session while drained
	}
	sq := subqueue{queue, sub == broker.DeadLetterQueue}
	var all []*azservicebus.ReceivedMessage
	r := w.receiver(sq).r
	page := 1 + w.rng.IntN(6)
	ctx, cancel := w.opCtx(10 * time.Second)
	defer cancel()
	for from := int64(1); ; {
		msgs, err := r.PeekMessages(ctx, page, &azservicebus.PeekMessagesOptions{FromSequenceNumber: &from})
		if !w.check(err, "peek") {
			return
		}
		all = append(all, msgs...)
		if len(msgs) < page {
			break
		}
		from = *msgs[len(msgs)-1].SequenceNumber + 1
	}
	last := int64(0)
	w.l.peeked(w.name, queue, sq.dlq, "", w.l.now(), all, &last)
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	peeked := map[string]bool{}
	for _, m := range all {
		rec := w.l.recs[m.MessageID]
		want := azservicebus.MessageStateActive
		if rec.state == rDeferred {
			want = azservicebus.MessageStateDeferred
		}
		switch {
		case peeked[m.MessageID]:
			w.l.failf([]*record{rec}, "peek of %v shows %s twice", sq, m.MessageID)
		case m.State != want:
			w.l.failf([]*record{rec}, "peek of %v shows %s %v", sq, m.MessageID, m.State)
		case m.DeliveryCount != uint32(rec.abandons+1):
			w.l.failf([]*record{rec}, "peek of %v shows %s with DeliveryCount %d after %d failed deliveries", sq, m.MessageID, m.DeliveryCount, rec.abandons)
		case sq.dlq && (m.DeadLetterReason == nil || *m.DeadLetterReason != rec.reason):
			w.l.failf([]*record{rec}, "peek of %v shows %s with reason %v", sq, m.MessageID, m.DeadLetterReason)
		}
		for k, v := range rec.props {
			if got := m.ApplicationProperties[k]; got != v {
				w.l.failf([]*record{rec}, "peek of %v shows %s with %s=%v, set to %d", sq, m.MessageID, k, got, v)
			}
		}
		peeked[m.MessageID] = true
	}
	if len(peeked) != len(held) {
		w.l.failf(nil, "peek of %v shows %d messages; the broker holds %d", sq, len(peeked), len(held))
	}
}

// drainPlain receives and completes everything left in a queue that has no
// sessions (deferred messages by number), or in a dead-letter queue.
func (w *worker) drainPlain(b *broker.Broker, sq subqueue) {
	sub := broker.MainQueue
	if sq.dlq {
		sub = broker.DeadLetterQueue
	}
	e, _ := b.Entity(sq.queue)
	r := w.receiver(sq)
	for deadline := time.Now().Add(15 * time.Second); w.ctx.Err() == nil; {
		var deferred []int64
		for {
			rec, seq := w.l.claimDeferred(w.rng, w.name, func(r *record) bool { return r.queue == sq.queue && !sq.dlq })
			if rec == nil {
				break
			}
			deferred = append(deferred, seq)
		}
		if len(deferred) > 0 {
			ctx, cancel := w.opCtx(10 * time.Second)
			msgs, err := r.r.ReceiveDeferredMessages(ctx, deferred, nil)
			cancel()
			if !w.check(err, "receive deferred %v", deferred) {
				return
			}
			if len(msgs) != len(deferred) {
				w.l.fail("drain: %d deferred messages asked for, %d received", len(deferred), len(msgs))
				return
			}
			for _, m := range msgs {
				if rec := w.l.received(w.name, sq.queue, false, deferredLock, m); rec != nil {
					w.held = append(w.held, held{rec: rec, msg: m, from: sq})
				}
			}
		}
		must, _ := w.l.expected(sq.queue, sub)
		c, err := e.Counts(sub)
		if err != nil {
			w.l.fail("counts: %v", err)
			return
		}
		if len(must) == 0 && c.Total == 0 && len(w.held) == 0 {
			return
		}
		if time.Now().After(deadline) {
			w.l.fail("drain of %v: the ledger expects %d more, the broker has %+v", sq, len(must), c)
			return
		}
		if len(must) > 0 || c.Available > 0 {
			w.receiveInto(sq, 10)
		}
		for len(w.held) > 0 {
			w.settle(0, outcome{kind: "complete"})
		}
	}
}

// drainSessions accepts every session with messages left, checks its state,
// receives and completes them in order, and closes it.
func (w *worker) drainSessions(b *broker.Broker) {
	e, _ := b.Entity(qSessions)
	for deadline := time.Now().Add(15 * time.Second); w.ctx.Err() == nil; {
		left := map[string]bool{}
		for _, r := range w.l.pickRecs(func(r *record) bool {
			return r.queue == qSessions && (r.state == rAvailable || r.state == rDeferred || r.state == rScheduled && !r.cancelled)
		}) {
			left[r.session] = true
		}
		peek, err := e.Peek(broker.MainQueue, 1, 1<<20, "")
		if err != nil {
			w.l.fail("peek: %v", err)
			return
		}
		for _, d := range peek {
			left[d.SessionID] = true
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var what []string
			for _, d := range peek {
				what = append(what, fmt.Sprintf("%s seq %d %v in %s", d.MessageID, d.Seq, d.State, d.SessionID))
			}
			w.l.mu.Lock()
			var recs []*record
			for _, r := range w.l.order {
				if r.queue == qSessions && left[r.session] && r.state != rDone {
					recs = append(recs, r)
				}
			}
			w.l.failf(recs, "drain of sessions: %v still have messages; the broker has %v", left, what)
			w.l.mu.Unlock()
			return
		}
		for id := range left {
			ctx, cancel := w.opCtx(10 * time.Second)
			sr, err := w.c.AcceptSessionForQueue(ctx, qSessions, id, nil)
			cancel()
			if !w.check(err, "accept %s", id) {
				return
			}
			w.l.holdSession(id, w.name)
			w.holds = []*sessionHold{{r: sr, id: id}}
			w.peekSession()
			for w.l.availableIn(id) > 0 && w.ctx.Err() == nil {
				w.receiveSession()
			}
			for {
				r, seq := w.l.claimDeferred(w.rng, w.name, func(r *record) bool { return r.queue == qSessions && r.session == id })
				if r == nil {
					break
				}
				ctx, cancel := w.opCtx(10 * time.Second)
				msgs, err := sr.ReceiveDeferredMessages(ctx, []int64{seq}, nil)
				cancel()
				if !w.check(err, "receive deferred") {
					return
				}
				w.oneDeferred(r, seq, msgs, deferredLock, subqueue{qSessions, false}, w.holds[0])
			}
			// What the ledger could not count: activated scheduled messages.
			for _, m := range w.receiveWithin(sr, 10, 200*time.Millisecond, nil) {
				if r := w.l.received(w.name, qSessions, false, lockReceipt, m); r != nil {
					w.held = append(w.held, held{rec: r, msg: m, from: subqueue{qSessions, false}, hold: w.holds[0]})
				}
			}
			for len(w.held) > 0 {
				w.settle(0, outcome{kind: "complete"})
			}
			w.closeHold(0)
		}
	}
}
