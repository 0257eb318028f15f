package main

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// The ledger of TestCrashRandomWorkload: every message, copy, delivery and
// settlement the clients saw or asked for, the checks each delivery must
// pass as it comes, and those that wait for the end.

// crashResult is what the test knows of an operation's outcome.
type crashResult uint8

const (
	crashPending crashResult = iota
	crashOK                  // acknowledged
	crashFailed              // refused (lock lost, not found) in a call that spanned no kill: it did nothing
	crashUnknown             // an error otherwise: it may have been done
)

func (r crashResult) String() string {
	return [...]string{"pending", "acknowledged", "refused", "unknown"}[r]
}

type crashSpan struct{ start, end time.Time }

// crashHow is how a message was received.
type crashHow uint8

const (
	howLock    crashHow = iota // peek-lock, from a queue without sessions
	howBySeq                   // by SequenceNumber, peek-lock
	howDLQ                     // peek-lock, from the dead-letter queue
	howSession                 // peek-lock, in a session
	howRAD                     // receive-and-delete
)

func (h crashHow) String() string {
	return [...]string{"lock", "by-seq", "dead-letter queue", "session", "receive-and-delete"}[h]
}

// crashMsg is one message of the workload (one MessageId): what was asked
// for it, and every copy of it received.
type crashMsg struct {
	id, queue, session string
	body               []byte
	send               crashSpan // the send or schedule call
	sent               crashResult
	scheduledAt        time.Time // zero unless scheduled
	schedSeqs          []int64   // what ScheduleMessages returned
	cancel             *crashOp
	copies             map[int64]*crashCopy
	history            []string
}

// crashCopy is one stored copy of a message, told apart by its
// SequenceNumber (a send retried across a kill may be stored twice).
type crashCopy struct {
	m          *crashMsg
	seq        int64
	obs        []crashObs
	ops        []*crashOp
	deferredAt time.Time // when it was last acknowledged deferred
}

// crashObs is one delivery of a copy.
type crashObs struct {
	how crashHow
	// at is when the broker made the delivery: its locked-until less the
	// lock duration, on a queue without sessions (where receivers compete
	// and one may see a message late). A session's messages are locked
	// until the session's lock ends, and a receive-and-delete delivery has
	// no lock; both are received by one goroutine, one message at a time,
	// so for them it is when the client got the message.
	at    time.Time
	got   time.Time // when the client got it
	count uint32
}

// crashOp is a settlement of a copy.
type crashOp struct {
	who          string
	kind         string // complete, abandon, defer, deadletter, cancel
	of           crashHow
	byToken      bool   // through $management by lock token (the link it came on died)
	reason, desc string // dead-letter
	span         crashSpan
	result       crashResult
}

type crashSession struct {
	// possible is what GetSessionState may return: the last acknowledged
	// state, then those whose set had an unknown outcome.
	possible [][]byte
	// firstSeq is the highest SequenceNumber of the copies first delivered
	// with DeliveryCount 1, firstID its message.
	firstSeq int64
	firstID  string
	setAt    time.Time // when the last acknowledged set was answered
}

// crashLedger is the clients' record of the workload.
type crashLedger struct {
	start time.Time
	kills killLog

	mu          sync.Mutex
	next        int
	msgs        map[string]*crashMsg
	order       []*crashMsg
	seqs        map[string]map[int64]string // per queue: which message each SequenceNumber belongs to
	sess        map[string]*crashSession
	pool        []*crashCopy // deferred for certain (acknowledged) and claimed by nobody
	backlog     map[string]int
	lastSched   time.Time
	lastRestart time.Time
	lastStop    time.Time
	stateNo     int
	violations  []string
	tally       map[string]int
	armed       string // the acknowledgement that fires the next kill ("*": any); "" none
	fire        chan string
	killCh      chan struct{} // closed at the next kill
}

func newCrashLedger() *crashLedger {
	l := &crashLedger{start: time.Now(), msgs: map[string]*crashMsg{}, seqs: map[string]map[int64]string{},
		sess: map[string]*crashSession{}, backlog: map[string]int{}, tally: map[string]int{}, fire: make(chan string, 1),
		killCh: make(chan struct{})}
	for _, id := range crashSessionIDs {
		l.sess[id] = &crashSession{possible: [][]byte{nil}}
	}
	return l
}

func (l *crashLedger) clock(t time.Time) string {
	return fmt.Sprintf("%.3fs", t.Sub(l.start).Seconds())
}

// note adds to a message's history. l.mu is held.
func (l *crashLedger) note(m *crashMsg, format string, args ...any) {
	m.history = append(m.history, fmt.Sprintf("%8.3fs ", time.Since(l.start).Seconds())+fmt.Sprintf(format, args...))
}

// fail records a broken promise with the histories of the messages named.
// l.mu is held.
func (l *crashLedger) fail(msgs []*crashMsg, format string, args ...any) {
	var b strings.Builder
	fmt.Fprintf(&b, format, args...)
	for _, m := range msgs {
		if m != nil {
			fmt.Fprintf(&b, "\n  history of %s (%s, session %q):\n    %s", m.id, m.queue, m.session, strings.Join(m.history, "\n    "))
		}
	}
	l.violations = append(l.violations, b.String())
}

// failNow is fail for a caller without l.mu.
func (l *crashLedger) failNow(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fail(nil, format, args...)
}

func (l *crashLedger) tallies() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.tally)
}

// armKill makes the next acknowledgement of kind (any: "*") fire the
// channel returned.
func (l *crashLedger) armKill(kind string) <-chan string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = kind
	return l.fire
}

func (l *crashLedger) disarmKill() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.armed = ""
	select {
	case <-l.fire:
	default:
	}
}

// acked counts an acknowledgement, and fires an armed kill. l.mu is held.
func (l *crashLedger) acked(kind string) {
	l.tally[kind]++
	if l.armed != "" && (l.armed == "*" || l.armed == kind) {
		l.armed = ""
		select {
		case l.fire <- kind:
		default:
		}
	}
}

// nextKill returns a channel closed at the next kill.
func (l *crashLedger) nextKill() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.killCh
}

func (l *crashLedger) killed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.killCh)
	l.killCh = make(chan struct{})
}

func (l *crashLedger) restarted() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastRestart = time.Now()
}

func (l *crashLedger) stopped() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastStop = time.Now()
}

// quietAt is when every lock taken before the workload stopped has run
// out and every scheduled message is due.
func (l *crashLedger) quietAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	at := l.lastStop
	if l.lastRestart.After(at) {
		at = l.lastRestart
	}
	at = at.Add(lockDuration + 300*time.Millisecond)
	if l.lastSched.After(at) {
		at = l.lastSched.Add(300 * time.Millisecond)
	}
	return at
}

// result classifies the outcome of a call over span that returned err.
// l.mu is held.
func (l *crashLedger) result(span crashSpan, err error) crashResult {
	var sbErr *azservicebus.Error
	switch {
	case err == nil:
		return crashOK
	case l.kills.spanned(span.start, span.end) > 0:
		return crashUnknown
	case errors.As(err, &sbErr) && (sbErr.Code == azservicebus.CodeLockLost || sbErr.Code == azservicebus.CodeNotFound):
		return crashFailed
	default:
		return crashUnknown
	}
}

// full says whether queue holds as much as the workload lets it.
func (l *crashLedger) full(queue string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.backlog[queue] >= crashBacklog[queue]
}

// register records a message about to be sent (or scheduled, at is set).
func (l *crashLedger) register(rng *rand.Rand, queue string, at time.Time) *crashMsg {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	id := fmt.Sprintf("%s-%d", queue, l.next)
	m := &crashMsg{id: id, queue: queue, scheduledAt: at, copies: map[int64]*crashCopy{},
		body: fmt.Appendf(nil, "%s:%s", id, strings.Repeat("x", rng.IntN(200)))}
	if queue == crashSessions {
		m.session = crashSessionIDs[rng.IntN(len(crashSessionIDs))]
	}
	l.msgs[id] = m
	l.order = append(l.order, m)
	return m
}

func (m *crashMsg) message() *azservicebus.Message {
	msg := &azservicebus.Message{MessageID: to.Ptr(m.id), Body: m.body}
	if m.session != "" {
		msg.SessionID = to.Ptr(m.session)
	}
	return msg
}

func (l *crashLedger) sending(msgs []*crashMsg) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	for _, m := range msgs {
		m.send.start = now
		l.note(m, "send")
	}
}

// notSent records messages whose send never started (the batch could not
// be made): nothing of them may arrive.
func (l *crashLedger) notSent(msgs []*crashMsg, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range msgs {
		m.sent = crashFailed
		l.note(m, "not sent: %v", err)
	}
}

// sent records the answer to a send, or to a schedule (seqs).
func (l *crashLedger) sent(msgs []*crashMsg, seqs []int64, err error) {
	end := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, m := range msgs {
		m.send.end = end
		m.sent = l.result(m.send, err)
		if m.sent == crashFailed {
			m.sent = crashUnknown // a send refused is no promise it was not stored
		}
		l.note(m, "send %s (%v)", m.sent, err)
		if m.sent != crashOK {
			continue
		}
		l.backlog[m.queue]++
		if i < len(seqs) {
			m.schedSeqs = append(m.schedSeqs, seqs[i])
			l.ownSeq(m, seqs[i])
			l.note(m, "scheduled for %s as seq %d", l.clock(m.scheduledAt), seqs[i])
		}
		if !m.scheduledAt.IsZero() && m.scheduledAt.After(l.lastSched) {
			l.lastSched = m.scheduledAt
		}
	}
	if err == nil {
		if len(msgs) > 0 && !msgs[0].scheduledAt.IsZero() {
			l.acked("schedule")
		} else {
			l.acked("send")
		}
	}
}

// ownSeq records that seq of m's queue is m's, and says whether it was
// free. l.mu is held.
func (l *crashLedger) ownSeq(m *crashMsg, seq int64) bool {
	q := l.seqs[m.queue]
	if q == nil {
		q = map[int64]string{}
		l.seqs[m.queue] = q
	}
	if owner, taken := q[seq]; taken && owner != m.id {
		l.fail([]*crashMsg{m, l.msgs[owner]}, "%s: SequenceNumber %d belongs to %s and %s", m.queue, seq, owner, m.id)
		return false
	}
	q[seq] = m.id
	return true
}

// duplicateOf picks an acknowledged message of the dedup queue to send
// again, one acknowledged before the last kill if there is one.
func (l *crashLedger) duplicateOf(rng *rand.Rand) *crashMsg {
	l.mu.Lock()
	defer l.mu.Unlock()
	var before, any []*crashMsg
	for _, m := range l.order {
		if m.queue == crashDedup && m.sent == crashOK {
			any = append(any, m)
			if m.send.end.Before(l.lastRestart) {
				before = append(before, m)
			}
		}
	}
	if len(before) > 0 && rng.IntN(4) > 0 {
		return before[rng.IntN(len(before))]
	}
	if len(any) > 0 {
		return any[rng.IntN(len(any))]
	}
	return nil
}

func (l *crashLedger) duplicateSent(m *crashMsg, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.note(m, "sent again with another body: %v", err)
	if err == nil {
		l.acked("duplicate")
		if l.kills.spanned(m.send.end, time.Now()) > 0 {
			l.tally["duplicate of a message sent before a restart"]++
		}
	}
}

// cancellable picks scheduled messages whose schedule was acknowledged
// and whose time is far enough ahead for a cancel to win.
func (l *crashLedger) cancellable(rng *rand.Rand) []*crashMsg {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*crashMsg
	soon := time.Now().Add(400 * time.Millisecond)
	for _, m := range l.order {
		if !m.scheduledAt.IsZero() && m.sent == crashOK && m.cancel == nil && m.scheduledAt.After(soon) {
			out = append(out, m)
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out[:min(len(out), 1+rng.IntN(2))]
}

func (l *crashLedger) cancelling(msgs []*crashMsg, who string) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var seqs []int64
	for _, m := range msgs {
		m.cancel = &crashOp{who: who, kind: "cancel", span: crashSpan{start: time.Now()}}
		seqs = append(seqs, m.schedSeqs...)
		l.note(m, "%s cancels seqs %v", who, m.schedSeqs)
	}
	return seqs
}

func (l *crashLedger) cancelled(msgs []*crashMsg, err error) {
	end := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range msgs {
		m.cancel.span.end = end
		m.cancel.result = l.result(m.cancel.span, err)
		l.note(m, "cancel %s (%v)", m.cancel.result, err)
		if l.cancelWon(m) {
			l.backlog[m.queue]--
			l.tally["cancel before its time"]++
		}
	}
	if err == nil {
		l.acked("cancel")
	}
}

// cancelWon says whether m must never arrive: its cancel was acknowledged
// before its time, and it was scheduled once (a schedule that spanned a
// kill may have stored a copy the cancel did not name). l.mu is held.
func (l *crashLedger) cancelWon(m *crashMsg) bool {
	return m.cancel != nil && m.cancel.result == crashOK && m.cancel.span.end.Before(m.scheduledAt) &&
		l.kills.spanned(m.send.start, m.send.end) == 0
}

// received checks a delivery and records it; it returns the copy, or nil
// if the delivery broke a promise (recorded as a violation).
func (l *crashLedger) received(who, queue string, how crashHow, rm *azservicebus.ReceivedMessage) *crashCopy {
	got := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	where := queue
	if how == howDLQ {
		where += "/$DeadLetterQueue"
	}
	m := l.msgs[rm.MessageID]
	if m == nil || rm.SequenceNumber == nil {
		l.fail(nil, "%s received a message it does not know from %s: MessageId %q, SequenceNumber %v, body %.60q",
			who, where, rm.MessageID, rm.SequenceNumber, rm.Body)
		return nil
	}
	seq := *rm.SequenceNumber
	at := got
	if (how == howLock || how == howBySeq || how == howDLQ) && rm.LockedUntil != nil {
		at = rm.LockedUntil.Add(-lockDuration)
	}
	l.note(m, "%s received from %s (%s) seq %d count %d, made at %s", who, where, how, seq, rm.DeliveryCount, l.clock(at))
	bad := func(format string, args ...any) *crashCopy {
		l.fail([]*crashMsg{m}, "%s received %s (seq %d) from %s: "+format, append([]any{who, m.id, seq, where}, args...)...)
		return nil
	}
	if !l.ownSeq(m, seq) {
		return nil
	}
	switch {
	case m.queue != queue:
		return bad("it was sent to %s", m.queue)
	case m.sent == crashFailed:
		return bad("its send never started")
	case !bytes.Equal(rm.Body, m.body):
		return bad("its body is %.60q, not the one first sent (a duplicate that should have been dropped?)", rm.Body)
	case m.session != "" && (rm.SessionID == nil || *rm.SessionID != m.session):
		return bad("in session %v; it was sent to %s", rm.SessionID, m.session)
	}
	c := m.copies[seq]
	if c == nil {
		c = &crashCopy{m: m, seq: seq}
		m.copies[seq] = c
	}
	if !m.scheduledAt.IsZero() {
		if at.Before(m.scheduledAt.Add(-clockMargin)) || rm.EnqueuedTime == nil || rm.EnqueuedTime.Before(m.scheduledAt.Add(-time.Millisecond)) {
			return bad("delivered at %s, enqueued at %v: it was scheduled for %s", l.clock(at), rm.EnqueuedTime, l.clock(m.scheduledAt))
		}
	}
	switch how {
	case howDLQ:
		if !c.deadLetterAsked(rm, got) {
			return bad("dead-letter reason %q and description %q: no dead-lettering with them was asked for", deref(rm.DeadLetterReason), deref(rm.DeadLetterErrorDescription))
		}
	case howBySeq:
		if !c.asked("defer", got) {
			return bad("by SequenceNumber, but it was never deferred")
		}
		if rm.State != azservicebus.MessageStateDeferred {
			return bad("by SequenceNumber, in state %v", rm.State)
		}
	case howRAD:
		if len(c.obs) > 0 {
			return bad("received and deleted, and received before (%d times)", len(c.obs))
		}
	}
	if (how == howLock || how == howSession) && rm.State != azservicebus.MessageStateActive {
		return bad("in state %v", rm.State)
	}
	if how == howSession && rm.DeliveryCount == 1 && len(c.obs) == 0 {
		// FIFO: a message delivered for the first time without a failed
		// delivery before it comes after every message of its session
		// with a lower SequenceNumber that was delivered so.
		s := l.sess[m.session]
		if seq < s.firstSeq {
			l.fail([]*crashMsg{m, l.msgs[s.firstID]}, "session %s: %s (seq %d) was first delivered after %s (seq %d), both with DeliveryCount 1",
				m.session, m.id, seq, s.firstID, s.firstSeq)
		} else {
			s.firstSeq, s.firstID = seq, m.id
			l.tally["FIFO checks"]++
		}
	}
	c.obs = append(c.obs, crashObs{how: how, at: at, got: got, count: rm.DeliveryCount})
	l.tally[map[crashHow]string{howLock: "delivery", howBySeq: "by SequenceNumber", howDLQ: "dead-letter delivery",
		howSession: "session delivery", howRAD: "receive-and-delete"}[how]]++
	if how == howRAD {
		l.backlog[queue]--
		l.acked("receive-and-delete")
	}
	return c
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// deadLetterAsked says whether a dead-lettering of c with the delivered
// reason and description was asked for before (and not refused).
func (c *crashCopy) deadLetterAsked(rm *azservicebus.ReceivedMessage, before time.Time) bool {
	for _, op := range c.ops {
		if op.kind == "deadletter" && op.result != crashFailed && op.span.start.Before(before) &&
			deref(rm.DeadLetterReason) == op.reason && deref(rm.DeadLetterErrorDescription) == op.desc {
			return true
		}
	}
	return false
}

// asked says whether an operation of kind on c was asked for before (and
// not refused).
func (c *crashCopy) asked(kind string, before time.Time) bool {
	for _, op := range c.ops {
		if op.kind == kind && op.result != crashFailed && op.span.start.Before(before) {
			return true
		}
	}
	return false
}

// opStart records a settlement about to be asked for.
func (l *crashLedger) opStart(c *crashCopy, op *crashOp) {
	l.mu.Lock()
	defer l.mu.Unlock()
	op.span.start = time.Now()
	c.ops = append(c.ops, op)
	if op.kind == "deadletter" {
		l.note(c.m, "%s dead-letters seq %d (%s): %q %q", op.who, c.seq, op.of, op.reason, op.desc)
	} else {
		l.note(c.m, "%s %s seq %d (%s, by token %v)", op.who, op.kind, c.seq, op.of, op.byToken)
	}
}

// opEnd records the answer to a settlement.
func (l *crashLedger) opEnd(c *crashCopy, op *crashOp, err error) {
	end := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	op.span.end = end
	op.result = l.result(op.span, err)
	l.note(c.m, "%s %s seq %d: %s (%v)", op.who, op.kind, c.seq, op.result, err)
	if op.result != crashOK {
		return
	}
	if op.byToken {
		l.tally["settled by lock token after a restart"]++
	}
	switch {
	case op.kind == "defer", op.kind == "abandon" && op.of == howBySeq:
		l.pool = append(l.pool, c)
		c.deferredAt = end
	case op.kind == "complete":
		l.backlog[c.m.queue]--
	}
	l.acked(op.kind)
}

// left records a message its receiver lets its lock run out on.
func (l *crashLedger) left(c *crashCopy, who string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.note(c.m, "%s lets its lock of seq %d run out", who, c.seq)
	l.tally["lock left to run out"]++
}

// claimDeferred takes a copy that is deferred for certain from the pool.
func (l *crashLedger) claimDeferred(rng *rand.Rand, who string) *crashCopy {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pool) == 0 {
		return nil
	}
	i := rng.IntN(len(l.pool))
	c := l.pool[i]
	l.pool = slices.Delete(l.pool, i, i+1)
	l.note(c.m, "%s receives seq %d by its SequenceNumber", who, c.seq)
	return c
}

// inPool says whether c is deferred for certain and unclaimed.
func (l *crashLedger) inPool(c *crashCopy) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.pool, c)
}

// lookedUp checks the answer to a receive of c by SequenceNumber when c
// was deferred for certain (certain is false in the final drain for
// copies whose deferral had an unknown outcome).
func (l *crashLedger) lookedUp(c *crashCopy, certain bool, span crashSpan, msgs []*azservicebus.ReceivedMessage, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	span.end = time.Now()
	switch {
	case err == nil && (len(msgs) != 1 || msgs[0].MessageID != c.m.id):
		l.fail([]*crashMsg{c.m}, "received %s by its SequenceNumber %d: got %d messages", c.m.id, c.seq, len(msgs))
	case err == nil:
	case certain && l.result(span, err) == crashFailed:
		l.fail([]*crashMsg{c.m}, "%s (seq %d), deferred (acknowledged), is not found by its SequenceNumber: %v", c.m.id, c.seq, err)
	default:
		l.note(c.m, "receive by SequenceNumber %d: %v", c.seq, err)
	}
	if certain && err == nil {
		l.pool = slices.DeleteFunc(l.pool, func(p *crashCopy) bool { return p == c })
		if l.kills.spanned(c.deferredAt, span.end) > 0 {
			l.tally["deferred found after a restart"]++
		}
	}
}

// possiblyDeferred returns the copies that may be deferred: a defer of
// them was asked for, and they are not gone for certain.
func (l *crashLedger) possiblyDeferred() []*crashCopy {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*crashCopy
	for _, m := range l.order {
		for _, c := range m.copies {
			if c.asked("defer", time.Now()) && !c.gone() {
				out = append(out, c)
			}
		}
	}
	slices.SortFunc(out, func(a, b *crashCopy) int { return int(a.seq - b.seq) })
	return out
}

// sessionStateSet records the answer to a set of session id's state.
func (l *crashLedger) nextState(id string) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stateNo++
	return fmt.Appendf(nil, "%s@%d", id, l.stateNo)
}

func (l *crashLedger) stateSet(id string, state []byte, span crashSpan, err error) {
	span.end = time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sess[id]
	switch l.result(span, err) {
	case crashOK:
		s.possible = [][]byte{state}
		s.setAt = span.end
		l.acked("state")
	case crashUnknown:
		s.possible = append(s.possible, state)
	}
}

// stateGot checks what GetSessionState returned.
func (l *crashLedger) stateGot(who, id string, state []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sess[id]
	l.tally["state read"]++
	if len(s.possible) == 1 && !s.setAt.IsZero() && l.kills.spanned(s.setAt, time.Now()) > 0 {
		l.tally["state read after a restart"]++
	}
	if !slices.ContainsFunc(s.possible, func(p []byte) bool { return bytes.Equal(p, state) }) {
		var want []string
		for _, p := range s.possible {
			want = append(want, fmt.Sprintf("%q", p))
		}
		l.fail(nil, "%s: session %s has state %q; the last set acknowledged (then those of unknown outcome): %s",
			who, id, state, strings.Join(want, ", "))
	}
}

// accounted says whether c may be gone for good: its last delivery was a
// receive-and-delete, or a Complete (acknowledged or of unknown outcome)
// was asked for after its last delivery.
func (c *crashCopy) accounted() bool { return c.left(crashUnknown) }

// gone says whether c is gone for certain: its last delivery was a
// receive-and-delete, or an acknowledged Complete followed it.
func (c *crashCopy) gone() bool { return c.left(crashOK) }

// left says whether c left its queue after its last delivery by a
// receive-and-delete or by a Complete whose result is ok, or also unknown
// if enough is crashUnknown.
func (c *crashCopy) left(enough crashResult) bool {
	// The broker's last delivery: a client may get a message late (one
	// prefetched before a kill, say), after another has had it since.
	var last crashObs
	for _, o := range c.obs {
		if o.at.After(last.at) {
			last = o
		}
	}
	if last.how == howRAD && !last.at.IsZero() {
		return true
	}
	for _, op := range c.ops {
		if op.kind == "complete" && (op.result == crashOK || op.result == enough) && !op.span.start.Before(last.at) {
			return true
		}
	}
	return false
}

// checkEnd checks, once everything is drained, every message and copy.
func (l *crashLedger) checkEnd() {
	l.mu.Lock()
	defer l.mu.Unlock()
	vanished := 0
	for _, m := range l.order {
		var seqs []int64
		for seq := range m.copies {
			seqs = append(seqs, seq)
		}
		slices.Sort(seqs)
		spanned := l.kills.spanned(m.send.start, m.send.end)
		allowed := 1 + spanned
		if m.queue == crashDedup {
			allowed = 1 // a send repeated after a kill is a duplicate too
		}
		if len(seqs) > 1 {
			l.tally["sends stored twice across a kill"]++
		}
		switch {
		case len(seqs) > allowed:
			l.fail([]*crashMsg{m}, "%s was stored %d times (SequenceNumbers %v); its send spanned %d kills", m.id, len(seqs), seqs, spanned)
		case l.cancelWon(m) && len(seqs) > 0:
			l.fail([]*crashMsg{m}, "%s arrived; its schedule was cancelled (acknowledged at %s, before its time %s)",
				m.id, l.clock(m.cancel.span.end), l.clock(m.scheduledAt))
		case m.sent != crashOK || len(seqs) > 0 || m.cancel != nil && m.cancel.result != crashFailed:
			// Not acknowledged, received, or maybe cancelled (whether a
			// cancel that spans the time wins is not known).
		case m.queue == crashRAD:
			vanished++
			l.note(m, "never received: a receive-and-delete delivery lost with a kill?")
		default:
			l.fail([]*crashMsg{m}, "%s: acknowledged send lost (never received)", m.id)
		}
		for _, seq := range seqs {
			l.checkCopy(m.copies[seq])
		}
	}
	if limit := crashRADCredit * l.kills.count(); vanished > limit {
		l.fail(nil, "%d acknowledged receive-and-delete messages were never received; %d kills account for at most %d", vanished, l.kills.count(), limit)
	}
	l.tally["receive-and-delete lost with a kill"] = vanished
}

// checkCopy checks the deliveries of one copy, in the broker's order,
// against the settlements acknowledged.
func (l *crashLedger) checkCopy(c *crashCopy) {
	var all, main, ordinary, dlq []brokerDelivery
	for _, o := range c.obs {
		d := brokerDelivery{at: o.at, count: o.count}
		all = append(all, d)
		if o.how == howDLQ {
			dlq = append(dlq, d)
			continue
		}
		main = append(main, d)
		if o.how == howLock || o.how == howSession {
			ordinary = append(ordinary, d)
		}
	}
	for _, ds := range [][]brokerDelivery{all, main, ordinary, dlq} {
		sortDeliveries(ds)
	}
	for _, ds := range [][]brokerDelivery{main, dlq} {
		if i, back := countWentBack(ds); back {
			l.fail([]*crashMsg{c.m}, "%s (seq %d): DeliveryCount went back from %d to %d (deliveries at %s and %s)",
				c.m.id, c.seq, ds[i-1].count, ds[i].count, l.clock(ds[i-1].at), l.clock(ds[i].at))
		}
	}
	for _, op := range c.ops {
		if op.result != crashOK {
			continue
		}
		var after []brokerDelivery
		switch {
		case op.kind == "complete" && op.of == howDLQ:
			after = dlq
		case op.kind == "complete":
			after = all
		case op.kind == "deadletter":
			after = main
		case op.kind == "defer":
			after = ordinary
		default:
			continue
		}
		if d, again := deliveredAfter(after, op.span.end); again {
			l.fail([]*crashMsg{c.m}, "%s (seq %d) delivered at %s, after its %s (from %s) was acknowledged at %s",
				c.m.id, c.seq, l.clock(d.at), op.kind, op.of, l.clock(op.span.end))
		}
	}
	if c.accounted() {
		return
	}
	var last *crashOp
	for _, op := range c.ops {
		if op.result == crashOK && (last == nil || op.span.start.After(last.span.start)) {
			last = op
		}
	}
	switch {
	case last != nil && last.kind == "defer":
		l.fail([]*crashMsg{c.m}, "%s (seq %d), deferred (acknowledged at %s), was not received by its SequenceNumber by the end",
			c.m.id, c.seq, l.clock(last.span.end))
	case last != nil && last.kind == "deadletter":
		l.fail([]*crashMsg{c.m}, "%s (seq %d), dead-lettered (acknowledged at %s), was not received from the dead-letter queue by the end",
			c.m.id, c.seq, l.clock(last.span.end))
	default:
		l.fail([]*crashMsg{c.m}, "%s (seq %d) was lost after its last delivery", c.m.id, c.seq)
	}
}
