package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// The queues of the random crash workload.
const (
	crashPlain    = "plain"    // peek-lock: complete, abandon, defer, dead-letter; scheduled messages
	crashSessions = "sessions" // sessions: FIFO and session state
	crashDedup    = "dedup"    // duplicate detection
	crashRAD      = "rad"      // receive-and-delete only
)

var crashSessionIDs = []string{"s0", "s1", "s2", "s3"}

// crashBacklog bounds what each queue holds (senders wait above it), so
// that the final drain stays short.
var crashBacklog = map[string]int{crashPlain: 150, crashSessions: 80, crashDedup: 60, crashRAD: 80}

// crashRADCredit is the most a receive-and-delete receive asks for.
const crashRADCredit = 5

// TestCrashRandomWorkload kills walbus -9 at random moments under a seeded
// random workload through the Go SDK and checks, from the clients' own
// records, that every acknowledged state change survived:
//   - an acknowledged send (single or batch; plain, session, dedup and
//     receive-and-delete queues) is received later, or is still there at
//     the end (the end drains every queue, dead-letter queue and deferred
//     message, until /metrics counts nothing);
//   - after an acknowledged Complete, or a receive-and-delete delivery, no
//     further delivery of that message;
//   - after an acknowledged DeadLetter, no delivery from the main queue,
//     and the message is in the dead-letter queue with the reason and
//     description given; after an acknowledged Defer, no ordinary
//     delivery, and ReceiveDeferredMessages finds it by its SequenceNumber;
//   - an acknowledged ScheduleMessages arrives, and not before its time;
//     one whose CancelScheduledMessages was acknowledged before its time
//     never arrives;
//   - GetSessionState returns the state last set (acknowledged), also
//     after restarts; within a session, messages first delivered with
//     DeliveryCount 1 (never abandoned or redelivered) come in
//     SequenceNumber order;
//   - on the duplicate detection queue, a message sent again with an
//     acknowledged MessageId (often from before the last restart) is
//     dropped, and no send makes two copies;
//   - a message's DeliveryCount never goes backwards, and SequenceNumbers
//     are unique.
//
// An operation whose call spans a kill has an unknown outcome; a send that
// spans one may be stored twice (the SDK retries it after the restart):
// copies are told apart by SequenceNumber. Locks held at a kill run out
// after the restart (LockDuration is lockDuration) and the message comes
// back with a higher DeliveryCount. A receive-and-delete delivery on its
// way to the client when walbus dies is gone with it; those are counted,
// at most crashRADCredit per kill.
//
// The kills come right after the client got an acknowledgement of a kind
// drawn at random: a change acknowledged before it was written is lost
// then, if ever. WALBUS_CRASH_SEED draws the same choices again (the
// timing is the machine's); WALBUS_CRASH_ROUNDS and WALBUS_CRASH_SECONDS
// make the run longer (`make crash`).
func TestCrashRandomWorkload(t *testing.T) {
	rounds, perRound := crashRounds(4)
	seed := crashSeed(t)
	props := fmt.Sprintf(`"LockDuration": "PT%dS", "MaxDeliveryCount": 1000`, int(lockDuration.Seconds()))
	cfg := writeConfigQueues(t,
		queueDef{crashPlain, props},
		queueDef{crashSessions, props + `, "RequiresSession": true`},
		queueDef{crashDedup, props + `, "RequiresDuplicateDetection": true, "DuplicateDetectionHistoryTimeWindow": "PT10M"`},
		queueDef{crashRAD, props})
	p := startWalbus(t, t.TempDir(), "--config", cfg)
	l := newCrashLedger()

	roles := []string{"sender", "sender", "scheduler", "receiver", "receiver", "deadletters", "rad", "sessions", "sessions"}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var workers []*crashWorker
	for i, role := range roles {
		w := newCrashWorker(t, p, l, fmt.Sprintf("%s%d", role, i), rand.New(rand.NewPCG(seed, uint64(i+1))), stop)
		workers = append(workers, w)
		wg.Go(func() {
			switch role {
			case "sender":
				w.runSender()
			case "scheduler":
				w.runScheduler()
			case "receiver":
				w.runReceiver()
			case "deadletters":
				w.runDeadLetters()
			case "rad":
				w.runReceiveAndDelete()
			case "sessions":
				w.runSessions([]string{crashSessionIDs[i%2], crashSessionIDs[i%2+2]})
			}
		})
	}
	defer func() {
		for _, w := range workers {
			w.c.Close(context.Background())
		}
	}()

	// Each kill comes after a random wait, right after the next
	// acknowledgement of a kind drawn at random (if one comes in time): a
	// change acknowledged before it was written would be lost then. For
	// the other workers it is a random moment.
	rng := rand.New(rand.NewPCG(seed, 0))
	kinds := []string{"*", "send", "complete", "defer", "deadletter", "schedule", "cancel", "state", "receive-and-delete"}
	for round := range rounds {
		wait := perRound/2 + time.Duration(rng.Int64N(int64(perRound)))
		kind := kinds[rng.IntN(len(kinds))]
		time.Sleep(wait / 2)
		how := "at a random time (no " + kind + " was acknowledged)"
		select {
		case got := <-l.armKill(kind):
			how = "right after a " + got + " was acknowledged"
		case <-time.After(wait / 2):
		}
		l.disarmKill()
		before := time.Now()
		p.kill()
		l.kills.add(before, time.Now())
		l.killed()
		t.Logf("round %d: killed %s at %.3fs", round, how, time.Since(l.start).Seconds())
		p.start()
		l.restarted()
		t.Logf("round %d: restarted at %.3fs", round, time.Since(l.start).Seconds())
	}
	time.Sleep(perRound)
	close(stop)
	stopping := time.Now()
	wg.Wait()
	l.stopped()
	t.Logf("the workers stopped in %.1fs", time.Since(stopping).Seconds())

	d := newCrashWorker(t, p, l, "drain", rand.New(rand.NewPCG(seed, 99)), nil)
	defer d.c.Close(context.Background())
	// What the receive-and-delete worker's receiver had prefetched when the
	// workload stopped is taken out of the queue already: read it too.
	d.rad = workers[slices.Index(roles, "rad")].rad
	drainStart := time.Now()
	d.drain(p)
	t.Logf("drained in %.1fs", time.Since(drainStart).Seconds())
	l.checkEnd()
	for _, v := range l.violations {
		t.Error(v)
	}
	if len(l.violations) > 0 {
		t.Logf("reproduce the workload's choices with WALBUS_CRASH_SEED=%d WALBUS_CRASH_ROUNDS=%d WALBUS_CRASH_SECONDS=%d",
			seed, rounds, int(perRound.Seconds()))
	}
	tally := l.tallies()
	t.Logf("%d rounds, seed %d: %v", rounds, seed, tally)
	for _, kind := range []string{"send", "complete", "abandon", "defer", "deadletter", "schedule", "cancel", "state",
		"receive-and-delete", "duplicate", "by SequenceNumber", "session delivery", "dead-letter delivery"} {
		if tally[kind] == 0 {
			t.Errorf("the workload did no %s", kind)
		}
	}
}

// crashWorker is one goroutine of the workload, with a client of its own.
type crashWorker struct {
	t         *testing.T
	name      string
	l         *crashLedger
	c         *azservicebus.Client
	rng       *rand.Rand
	stop      chan struct{} // nil for the drain
	senders   map[string]*azservicebus.Sender
	receivers map[string]*azservicebus.Receiver // by queue, and queue+"/dlq"
	rad       *azservicebus.Receiver
}

// newCrashWorker makes a worker, its client, senders and receivers (the SDK
// attaches their links when they are first used).
func newCrashWorker(t *testing.T, p *proc, l *crashLedger, name string, rng *rand.Rand, stop chan struct{}) *crashWorker {
	w := &crashWorker{t: t, name: name, l: l, c: crashClient(t, p), rng: rng, stop: stop,
		senders: map[string]*azservicebus.Sender{}, receivers: map[string]*azservicebus.Receiver{}}
	var err error
	for _, q := range []string{crashPlain, crashSessions, crashDedup, crashRAD} {
		if w.senders[q], err = w.c.NewSender(q, nil); err != nil {
			t.Fatal(err)
		}
		if q == crashSessions {
			continue // session receivers are accepted
		}
		if w.receivers[q], err = w.c.NewReceiverForQueue(q, nil); err != nil {
			t.Fatal(err)
		}
		if w.receivers[q+"/dlq"], err = w.c.NewReceiverForQueue(q, &azservicebus.ReceiverOptions{SubQueue: azservicebus.SubQueueDeadLetter}); err != nil {
			t.Fatal(err)
		}
	}
	if w.rad, err = w.c.NewReceiverForQueue(crashRAD, &azservicebus.ReceiverOptions{ReceiveMode: azservicebus.ReceiveModeReceiveAndDelete}); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *crashWorker) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

// opCtx bounds one SDK call. The workload's stop does not cut calls short:
// a settlement interrupted would have an unknown outcome for no reason.
func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 3*time.Second)
}

// settleCtx bounds a settlement, which the kill that closes killed ends:
// the Go SDK retries a settlement after a lost connection with its default
// retry options, seconds apart (past the lock), and its outcome is unknown
// anyway.
func settleCtx(killed <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := opCtx()
	go func() {
		select {
		case <-killed:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

var errSessionGone = errors.New("the session receiver died with walbus")

// pause follows an error: walbus may be restarting.
func pause() { time.Sleep(20 * time.Millisecond) }

// weighted returns an index drawn with the given weights.
func weighted(rng *rand.Rand, weights ...int) int {
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

func (w *crashWorker) senderFor(queue string) *azservicebus.Sender { return w.senders[queue] }

// receiverFor is the worker's peek-lock receiver of queue or of its
// dead-letter queue.
func (w *crashWorker) receiverFor(queue string, dlq bool) *azservicebus.Receiver {
	if dlq {
		return w.receivers[queue+"/dlq"]
	}
	return w.receivers[queue]
}

type crashReceiver interface {
	ReceiveMessages(context.Context, int, *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}

// receiveUpTo receives up to n messages, waiting up to wait for the first;
// a wait that runs out is no error.
func receiveUpTo(r crashReceiver, n int, wait time.Duration) ([]*azservicebus.ReceivedMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	msgs, err := r.ReceiveMessages(ctx, n, &azservicebus.ReceiveMessagesOptions{TimeAfterFirstMessage: 20 * time.Millisecond})
	if errors.Is(err, context.DeadlineExceeded) {
		err = nil
	}
	return msgs, err
}

func (w *crashWorker) runSender() {
	for !w.stopped() {
		switch weighted(w.rng, 25, 12, 15, 10, 10, 10, 12) {
		case 0:
			w.send(crashPlain, 1)
		case 1:
			w.send(crashPlain, 2+w.rng.IntN(4))
		case 2:
			w.send(crashSessions, 1)
		case 3:
			w.send(crashSessions, 2+w.rng.IntN(4))
		case 4:
			w.send(crashDedup, 1+w.rng.IntN(3))
		case 5:
			w.sendDuplicate()
		case 6:
			w.send(crashRAD, 1+w.rng.IntN(4))
		}
	}
}

// send sends n new messages to queue, one alone or a batch.
func (w *crashWorker) send(queue string, n int) {
	if w.l.full(queue) {
		time.Sleep(10 * time.Millisecond)
		return
	}
	s := w.senderFor(queue)
	msgs := make([]*crashMsg, n)
	for i := range msgs {
		msgs[i] = w.l.register(w.rng, queue, time.Time{})
	}
	ctx, cancel := opCtx()
	defer cancel()
	var err error
	if n == 1 {
		w.l.sending(msgs)
		err = s.SendMessage(ctx, msgs[0].message(), nil)
	} else {
		batch, berr := s.NewMessageBatch(ctx, nil)
		for _, m := range msgs {
			if berr == nil {
				berr = batch.AddMessage(m.message(), nil)
			}
		}
		if berr != nil {
			w.l.notSent(msgs, berr)
			pause()
			return
		}
		w.l.sending(msgs)
		err = s.SendMessageBatch(ctx, batch, nil)
	}
	w.l.sent(msgs, nil, err)
	if err != nil {
		pause()
	}
}

// sendDuplicate sends an acknowledged MessageId of the dedup queue again,
// with another body: it must be dropped.
func (w *crashWorker) sendDuplicate() {
	m := w.l.duplicateOf(w.rng)
	if m == nil {
		w.send(crashDedup, 1)
		return
	}
	ctx, cancel := opCtx()
	defer cancel()
	err := w.senderFor(crashDedup).SendMessage(ctx, &azservicebus.Message{MessageID: to.Ptr(m.id), Body: []byte("duplicate of " + m.id)}, nil)
	w.l.duplicateSent(m, err)
	if err != nil {
		pause()
	}
}

func (w *crashWorker) runScheduler() {
	for !w.stopped() {
		if w.rng.IntN(3) > 0 {
			w.schedule()
		} else {
			w.cancelScheduled()
		}
		time.Sleep(time.Duration(20+w.rng.IntN(60)) * time.Millisecond)
	}
}

// schedule schedules a few messages of the plain queue 1 to 3 s ahead.
func (w *crashWorker) schedule() {
	if w.l.full(crashPlain) {
		return
	}
	at := time.Now().Add(time.Second + time.Duration(w.rng.Int64N(int64(2*time.Second)))).Truncate(time.Millisecond)
	msgs := make([]*crashMsg, 1+w.rng.IntN(3))
	sdkMsgs := make([]*azservicebus.Message, len(msgs))
	for i := range msgs {
		msgs[i] = w.l.register(w.rng, crashPlain, at)
		sdkMsgs[i] = msgs[i].message()
	}
	ctx, cancel := opCtx()
	defer cancel()
	w.l.sending(msgs)
	seqs, err := w.senderFor(crashPlain).ScheduleMessages(ctx, sdkMsgs, at, nil)
	if err == nil && len(seqs) != len(msgs) {
		w.l.failNow("%s: scheduling %d messages gave %d SequenceNumbers", w.name, len(msgs), len(seqs))
	}
	w.l.sent(msgs, seqs, err)
	if err != nil {
		pause()
	}
}

// cancelScheduled cancels scheduled messages whose time is far enough
// ahead for the cancel to come first.
func (w *crashWorker) cancelScheduled() {
	msgs := w.l.cancellable(w.rng)
	if len(msgs) == 0 {
		return
	}
	seqs := w.l.cancelling(msgs, w.name)
	ctx, cancel := opCtx()
	defer cancel()
	err := w.senderFor(crashPlain).CancelScheduledMessages(ctx, seqs, nil)
	w.l.cancelled(msgs, err)
	if err != nil {
		pause()
	}
}

func (w *crashWorker) runReceiver() {
	for !w.stopped() {
		switch weighted(w.rng, 60, 20, 20) {
		case 0:
			w.receiveAndSettle(crashPlain, false, "")
		case 1:
			w.receiveAndSettle(crashDedup, false, "")
		case 2:
			if c := w.l.claimDeferred(w.rng, w.name); c != nil {
				w.lookUp(c, true, "")
			}
		}
	}
}

func (w *crashWorker) runDeadLetters() {
	for !w.stopped() {
		w.receiveAndSettle(crashPlain, true, "")
	}
}

// outcome draws how to settle a message received so.
func (w *crashWorker) outcome(queue string, how crashHow) string {
	switch {
	case how == howDLQ:
		return []string{"complete", "abandon"}[weighted(w.rng, 80, 20)]
	case how == howBySeq:
		return []string{"complete", "abandon"}[weighted(w.rng, 60, 40)]
	case how == howSession:
		return []string{"complete", "abandon"}[weighted(w.rng, 80, 20)]
	case queue == crashDedup:
		return []string{"complete", "abandon", "leave"}[weighted(w.rng, 70, 25, 5)]
	default:
		return []string{"complete", "abandon", "defer", "deadletter", "leave"}[weighted(w.rng, 40, 15, 20, 20, 5)]
	}
}

// receiveAndSettle receives a few messages of a queue without sessions
// (or its dead-letter queue) and settles each as kind ("": at random). It
// returns how many it received.
func (w *crashWorker) receiveAndSettle(queue string, dlq bool, kind string) int {
	r := w.receiverFor(queue, dlq)
	how := howLock
	if dlq {
		how = howDLQ
	}
	n, wait := 1+w.rng.IntN(5), 200*time.Millisecond
	if w.stop == nil {
		n, wait = 20, 300*time.Millisecond
	}
	asked := time.Now()
	msgs, err := receiveUpTo(r, n, wait)
	w.settleAll(r, msgs, queue, how, asked, kind)
	if err != nil {
		pause()
	}
	return len(msgs)
}

// crashSettler is what Receiver and SessionReceiver share for settling.
type crashSettler interface {
	CompleteMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.CompleteMessageOptions) error
	AbandonMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.AbandonMessageOptions) error
	DeferMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.DeferMessageOptions) error
	DeadLetterMessage(context.Context, *azservicebus.ReceivedMessage, *azservicebus.DeadLetterOptions) error
	PeekMessages(context.Context, int, *azservicebus.PeekMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}

// discard completes a message that broke a promise (already reported),
// so that it does not come back.
// settleAll records each received message in the ledger and settles it
// as kind ("": at random), or discards one the ledger does not take, and
// reports whether every settlement worked.
func (w *crashWorker) settleAll(s crashSettler, msgs []*azservicebus.ReceivedMessage, queue string, how crashHow, asked time.Time, kind string) bool {
	ok := true
	for _, rm := range msgs {
		c := w.l.received(w.name, queue, how, rm)
		if c == nil {
			w.discard(s, rm)
			continue
		}
		k := kind
		if k == "" {
			k = w.outcome(queue, how)
		}
		if w.settle(s, c, rm, asked, how, k) != nil {
			ok = false
		}
	}
	return ok
}

func (w *crashWorker) discard(s crashSettler, rm *azservicebus.ReceivedMessage) {
	ctx, cancel := opCtx()
	defer cancel()
	s.CompleteMessage(ctx, rm, nil)
}

// settle settles a message of copy c, received so by a call made at asked,
// as kind ("leave" lets its lock run out).
func (w *crashWorker) settle(s crashSettler, c *crashCopy, rm *azservicebus.ReceivedMessage, asked time.Time, how crashHow, kind string) error {
	if kind == "leave" {
		w.l.left(c, w.name)
		return nil
	}
	op := &crashOp{who: w.name, kind: kind, of: how}
	if kind == "deadletter" {
		op.reason = fmt.Sprintf("reason-%d", w.rng.IntN(1000))
		op.desc = fmt.Sprintf("%s dead-lettered by %s", c.m.id, w.name)
	}
	// Taken first, so that no kill from here on leaves the settlement
	// waiting on a dead connection.
	killed := w.l.nextKill()
	if w.l.kills.spanned(asked, time.Now()) > 0 {
		// The link the message came on may have died with walbus (the SDK
		// hands out after a kill what it had received before), and the Go
		// SDK settles on a dead link until its call gives up (it goes to
		// $management after a link error, not after a lost connection).
		if how == howSession {
			// The session's lock went with the link.
			w.l.left(c, w.name)
			return errSessionGone
		}
		// Recover the receiver's links (a peek retries with the client's
		// options, a settlement with the SDK's defaults, seconds apart)
		// and settle by lock token alone, as a client that knows can.
		ctx, cancel := opCtx()
		for _, err := s.PeekMessages(ctx, 1, nil); err != nil && ctx.Err() == nil; _, err = s.PeekMessages(ctx, 1, nil) {
			pause()
		}
		cancel()
		killed = w.l.nextKill()
		rm = &azservicebus.ReceivedMessage{LockToken: rm.LockToken, MessageID: rm.MessageID, SequenceNumber: rm.SequenceNumber}
		op.byToken = true
	}
	w.l.opStart(c, op)
	ctx, cancel := settleCtx(killed)
	defer cancel()
	var err error
	switch kind {
	case "complete":
		err = s.CompleteMessage(ctx, rm, nil)
	case "abandon":
		err = s.AbandonMessage(ctx, rm, nil)
	case "defer":
		err = s.DeferMessage(ctx, rm, nil)
	case "deadletter":
		err = s.DeadLetterMessage(ctx, rm, &azservicebus.DeadLetterOptions{Reason: to.Ptr(op.reason), ErrorDescription: to.Ptr(op.desc)})
	}
	w.l.opEnd(c, op, err)
	return err
}

// lookUp receives deferred copy c by its SequenceNumber and settles it as
// kind ("": at random). certain says c is deferred for certain: then it
// must be found.
func (w *crashWorker) lookUp(c *crashCopy, certain bool, kind string) {
	r := w.receiverFor(crashPlain, false)
	ctx, cancel := opCtx()
	defer cancel()
	span := crashSpan{start: time.Now()}
	msgs, err := r.ReceiveDeferredMessages(ctx, []int64{c.seq}, nil)
	w.l.lookedUp(c, certain, span, msgs, err)
	if err != nil {
		pause()
		return
	}
	w.settleAll(r, msgs, crashPlain, howBySeq, span.start, kind)
}

func (w *crashWorker) runReceiveAndDelete() {
	for !w.stopped() {
		w.receiveDeleting(w.rad)
	}
}

// receiveDeleting receives with a receive-and-delete receiver and returns
// how many messages it got.
func (w *crashWorker) receiveDeleting(r *azservicebus.Receiver) int {
	msgs, err := receiveUpTo(r, 1+w.rng.IntN(crashRADCredit), 200*time.Millisecond)
	for _, rm := range msgs {
		w.l.received(w.name, crashRAD, howRAD, rm)
	}
	if err != nil {
		pause()
	}
	return len(msgs)
}

// runSessions works on its own sessions, one at a time: nothing else
// receives from them while the workload runs, so deliveries in client
// order are in the broker's order.
func (w *crashWorker) runSessions(ids []string) {
	for !w.stopped() {
		id := ids[w.rng.IntN(len(ids))]
		sr := w.accept(id)
		if sr == nil {
			pause()
			continue
		}
		w.useSession(sr, id, 3+w.rng.IntN(10))
		ctx, cancel := opCtx()
		sr.Close(ctx)
		cancel()
	}
}

// accept accepts session id, or returns nil: after a kill, a session whose
// lock was held is locked until that lock runs out.
func (w *crashWorker) accept(id string) *azservicebus.SessionReceiver {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sr, err := w.c.AcceptSessionForQueue(ctx, crashSessions, id, nil)
	if err != nil {
		return nil
	}
	return sr
}

// useSession checks the session's state and then receives, sets and gets
// its state for some steps, until an operation fails (with a kill).
func (w *crashWorker) useSession(sr *azservicebus.SessionReceiver, id string, steps int) {
	if !w.getState(sr, id) {
		return
	}
	for range steps {
		if w.stopped() {
			return
		}
		ok := true
		switch weighted(w.rng, 60, 20, 20) {
		case 0:
			_, ok = w.receiveSession(sr, "")
		case 1:
			ok = w.setState(sr, id)
		case 2:
			ok = w.getState(sr, id)
		}
		if !ok {
			return
		}
	}
}

// receiveSession receives one message of the session (the SDK then holds
// no other: FIFO order is the broker's) and settles it as kind ("": at
// random).
func (w *crashWorker) receiveSession(sr *azservicebus.SessionReceiver, kind string) (int, bool) {
	asked := time.Now()
	msgs, err := receiveUpTo(sr, 1, 150*time.Millisecond)
	if !w.settleAll(sr, msgs, crashSessions, howSession, asked, kind) {
		return len(msgs), false
	}
	return len(msgs), err == nil
}

func (w *crashWorker) setState(sr *azservicebus.SessionReceiver, id string) bool {
	state := w.l.nextState(id)
	ctx, cancel := opCtx()
	defer cancel()
	span := crashSpan{start: time.Now()}
	err := sr.SetSessionState(ctx, state, nil)
	w.l.stateSet(id, state, span, err)
	return err == nil
}

func (w *crashWorker) getState(sr *azservicebus.SessionReceiver, id string) bool {
	ctx, cancel := opCtx()
	defer cancel()
	state, err := sr.GetSessionState(ctx, nil)
	if err == nil {
		w.l.stateGot(w.name, id, state)
	}
	return err == nil
}

// drain receives and completes everything left, once locks held at the
// last kill or when the workload stopped have run out and every scheduled
// message is due: every queue and dead-letter queue, deferred messages by
// SequenceNumber, and every session, until /metrics counts nothing.
func (w *crashWorker) drain(p *proc) {
	time.Sleep(time.Until(w.l.quietAt()))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		for w.receiveAndSettle(crashPlain, false, "complete") > 0 {
		}
		for _, c := range w.l.possiblyDeferred() {
			w.lookUp(c, w.l.inPool(c), "complete")
		}
		for w.receiveAndSettle(crashPlain, true, "complete") > 0 {
		}
		for w.receiveAndSettle(crashDedup, false, "complete") > 0 {
		}
		for w.receiveDeleting(w.rad) > 0 {
		}
		for _, id := range crashSessionIDs {
			if sr := w.accept(id); sr != nil {
				w.getState(sr, id)
				for n, ok := 1, true; n > 0 && ok; {
					n, ok = w.receiveSession(sr, "complete")
				}
				ctx, cancel := opCtx()
				sr.Close(ctx)
				cancel()
			}
		}
		left := queueMessages(w.t, p)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			w.t.Errorf("the drain could not empty the queues: /metrics counts %v", left)
			w.describeLeft()
			return
		}
	}
}

// describeLeft reports what the queues without sessions still hold, with
// the histories of those messages.
func (w *crashWorker) describeLeft() {
	for _, q := range []string{crashPlain, crashDedup, crashRAD} {
		for _, dlq := range []bool{false, true} {
			ctx, cancel := opCtx()
			msgs, err := w.receiverFor(q, dlq).PeekMessages(ctx, 50, &azservicebus.PeekMessagesOptions{FromSequenceNumber: to.Ptr(int64(1))})
			cancel()
			if err != nil {
				w.t.Errorf("peek %s (dead-letter queue: %v): %v", q, dlq, err)
				continue
			}
			w.l.mu.Lock()
			for _, rm := range msgs {
				w.l.fail([]*crashMsg{w.l.msgs[rm.MessageID]}, "left in %s (dead-letter queue: %v): %s seq %d, %v", q, dlq, rm.MessageID, *rm.SequenceNumber, rm.State)
			}
			w.l.mu.Unlock()
		}
	}
}

// queueMessagesLine is a walbus_queue_messages sample of /metrics.
var queueMessagesLine = regexp.MustCompile(`(?m)^walbus_queue_messages\{entity="([^"]+)",state="([^"]+)",subqueue="([^"]+)"\} (\d+)$`)

// queueMessages reads what each queue holds from /metrics, keyed
// "entity/subqueue/state", zeros left out.
func queueMessages(t *testing.T, p *proc) map[string]int {
	t.Helper()
	out := map[string]int{}
	samples := queueMessagesLine.FindAllStringSubmatch(getText(t, "http://"+p.http+"/metrics"), -1)
	if len(samples) == 0 {
		t.Fatal("/metrics has no walbus_queue_messages samples")
	}
	for _, m := range samples {
		if n, _ := strconv.Atoi(m[4]); n > 0 {
			out[m[1]+"/"+m[3]+"/"+m[2]] = n
		}
	}
	return out
}
