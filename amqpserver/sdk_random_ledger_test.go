package amqpserver

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"

	"github.com/walbus/walbus/broker"
)

// The ledger of TestSDKRandomWorkloadKeepsInvariants: where every message
// of the workload is, and the checks each receive, settlement and peek
// must pass.

// rstate is where the ledger knows a message to be. The test records a
// change before it asks for it (a settle, a defer), so that a receiver on
// another goroutine that gets the message right after never sees a stale
// state; what the broker does without being asked (an SDK release, the
// activation of a scheduled message) leaves it where it was.
type rstate uint8

const (
	rSending        rstate = iota // its send is in flight
	rScheduled                    // scheduled (its schedule call may be in flight)
	rAvailable                    // in the main queue, held by no test receiver
	rHeld                         // locked by a test receiver
	rDeferred                     // deferred
	rDeferredHeld                 // received by SequenceNumber, locked (or being received)
	rDeadLettered                 // in the dead-letter queue
	rDeadLetterHeld               // locked there by a test receiver
	rDone                         // gone for good
)

func (s rstate) String() string {
	return [...]string{"sending", "scheduled", "available", "held", "deferred", "deferred-held",
		"dead-lettered", "dead-letter-held", "done"}[s]
}

// record is one message (its MessageId is id), as the ledger knows it.
type record struct {
	id, queue, session string
	by                 string // the worker that sent or scheduled it
	order              int    // place in its session's send order; -1 outside FIFO checks
	body               []byte
	state              rstate
	holder             string // the worker holding its lock
	acked              bool   // its send or schedule returned
	pending            int    // settlements asked for and not answered yet
	abandons           int    // failed deliveries so far, none counted in the DLQ: DeliveryCount is this + 1
	props              map[string]int64
	reason             string  // expected DeadLetterReason
	description        *string // expected DeadLetterErrorDescription; nil: the broker's own
	seq                int64   // SequenceNumber last seen
	schedSeq           int64   // SequenceNumber the schedule call returned
	scheduledAt        time.Time
	viaSchedule        bool   // scheduled: no dedup duplicates of it
	cancelled, far     bool   // cancel asked; scheduled far beyond the test
	cancelledAt        uint64 // ledger clock when the cancel of a far one was answered
	completions        int    // times it left for good: completed, or received and deleted
	leftMainAt         uint64 // ledger clock when its leaving the main queue was answered
	leftDLQAt          uint64 // the same for its dead-letter queue
	history            []string
}

type sessionRec struct {
	holder string
	state  []byte
	recs   []*record // in send order
}

type ledger struct {
	t       *testing.T
	seed    uint64
	stop    context.CancelFunc
	cfgs    map[string]broker.Config
	mu      sync.Mutex
	clock   uint64
	next    int
	recs    map[string]*record
	order   []*record
	sess    map[string]*sessionRec
	lastSch time.Time
	tally   map[string]int // what the workload did, for the log
	// acceptMu orders session accepts and closes, so that the ledger
	// always knows which sessions are held.
	acceptMu sync.Mutex
}

func newLedger(t *testing.T, seed uint64, stop context.CancelFunc, cfgs map[string]broker.Config) *ledger {
	l := &ledger{t: t, seed: seed, stop: stop, cfgs: cfgs, recs: map[string]*record{}, sess: map[string]*sessionRec{},
		tally: map[string]int{}}
	for _, s := range randomSessions {
		l.sess[s] = &sessionRec{}
	}
	return l
}

// failf reports a broken invariant, with the history of the messages
// named, and stops the workload. l.mu is held.
func (l *ledger) failf(recs []*record, format string, args ...any) {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: "+format, append([]any{l.seed}, args...)...)
	for _, r := range recs {
		if r != nil {
			fmt.Fprintf(&b, "\n  %s (%s, session %q, state %s, seq %d): %s", r.id, r.queue, r.session, r.state, r.seq, strings.Join(r.history, "; "))
		}
	}
	l.t.Error(b.String())
	l.stop()
}

func (l *ledger) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failf(nil, format, args...)
}

// count tallies something the workload did.
func (l *ledger) count(what string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tally[what] += n
}

func (l *ledger) note(r *record, format string, args ...any) {
	l.clock++
	r.history = append(r.history, fmt.Sprintf("%d ", l.clock)+fmt.Sprintf(format, args...))
}

// register records a message about to be sent or scheduled.
func (l *ledger) register(rng *rand.Rand, by, queue, session string, ordered bool, state rstate) *record {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	id := fmt.Sprintf("%s-%d", queue, l.next)
	r := &record{id: id, by: by, queue: queue, session: session, order: -1, state: state,
		body: fmt.Appendf(nil, "%s:%s", id, strings.Repeat("x", rng.IntN(300))), props: map[string]int64{}}
	if ordered && session != "" {
		s := l.sess[session]
		r.order = len(s.recs)
		s.recs = append(s.recs, r)
	}
	l.recs[id] = r
	l.order = append(l.order, r)
	l.note(r, "registered %s", state)
	return r
}

// enlarge makes the body of a message not yet sent n bytes longer.
func (l *ledger) enlarge(r *record, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.body = append(r.body, bytes.Repeat([]byte{'L'}, n)...)
	l.tally["large messages"]++
}

func (l *ledger) body(r *record) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return r.body
}

func (r *record) message() *azservicebus.Message {
	m := &azservicebus.Message{MessageID: to.Ptr(r.id), Body: r.body}
	if r.session != "" {
		m.SessionID = to.Ptr(r.session)
	}
	return m
}

// sent records the acknowledgement of a send or schedule.
func (l *ledger) sent(r *record, seq int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r.acked = true
	r.schedSeq = seq
	if r.seq == 0 {
		r.seq = seq
	}
	if r.state == rSending {
		r.state = rAvailable
	}
	l.note(r, "acknowledged (seq %d)", seq)
}

func (l *ledger) scheduled(rs []*record, at time.Time, far bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range rs {
		r.scheduledAt, r.far, r.viaSchedule = at, far, true
	}
	if !far && at.After(l.lastSch) {
		l.lastSch = at
	}
}

func (l *ledger) lastScheduled() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastSch
}

// pickRecs returns the records that match, in ledger order.
func (l *ledger) pickRecs(match func(*record) bool) []*record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*record
	for _, r := range l.order {
		if match(r) {
			out = append(out, r)
		}
	}
	return out
}

// cancelling records that rs are about to be cancelled, and returns their
// scheduled SequenceNumbers by queue.
func (l *ledger) cancelling(rs []*record) map[string][]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	seqs := map[string][]int64{}
	for _, r := range rs {
		r.cancelled = true
		seqs[r.queue] = append(seqs[r.queue], r.schedSeq)
		l.note(r, "cancel")
	}
	return seqs
}

func (l *ledger) cancelled(rs []*record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range rs {
		l.note(r, "cancel acknowledged")
		if r.far {
			r.cancelledAt = l.clock
		}
	}
}

type receipt uint8

const (
	lockReceipt    receipt = iota // PeekLock receive
	deleteReceipt                 // ReceiveAndDelete receive
	deferredLock                  // receive by SequenceNumber, PeekLock
	deferredDelete                // receive by SequenceNumber, ReceiveAndDelete
)

// received checks a message a test receiver got from queue (its dead-letter
// queue if dlq) and records where it is now.
func (l *ledger) received(who, queue string, dlq bool, how receipt, m *azservicebus.ReceivedMessage) *record {
	l.mu.Lock()
	defer l.mu.Unlock()
	if m.MessageID == "" {
		l.failf(nil, "%s received a message without MessageId from %s: %q", who, queue, m.Body)
		return nil
	}
	r := l.recs[m.MessageID]
	if r == nil {
		l.failf(nil, "%s received unknown message %s from %s", who, m.MessageID, queue)
		return nil
	}
	where := queue
	if dlq {
		where += "/$DeadLetterQueue"
	}
	l.note(r, "%s received from %s (%d) seq %d count %d", who, where, how, *m.SequenceNumber, m.DeliveryCount)
	bad := func(format string, args ...any) *record {
		l.failf([]*record{r}, "%s: %s received %s: "+format, append([]any{where, who, r.id}, args...)...)
		return nil
	}
	switch {
	case r.queue != queue:
		return bad("it was sent to %s", r.queue)
	case !bytes.Equal(m.Body, r.body):
		// A duplicate on the dedup queue has another body.
		return bad("body %.40q, not the one sent (a duplicate?)", m.Body)
	case r.session != "" && (m.SessionID == nil || *m.SessionID != r.session):
		return bad("session %v, sent to %s", m.SessionID, r.session)
	case m.SequenceNumber == nil:
		return bad("no SequenceNumber")
	case m.DeliveryCount != uint32(r.abandons+1):
		return bad("DeliveryCount %d after %d failed deliveries", m.DeliveryCount, r.abandons)
	case *m.SequenceNumber < r.seq:
		// A message keeps its number when abandoned or dead-lettered; one
		// restored after a receive-and-delete link closed without it gets
		// a new, higher one.
		return bad("SequenceNumber %d, it was %d", *m.SequenceNumber, r.seq)
	}
	for k, v := range r.props {
		if got, ok := m.ApplicationProperties[k]; !ok || got != v {
			return bad("property %s is %v, set to %d", k, got, v)
		}
	}
	switch how {
	case deferredLock, deferredDelete:
		if r.state != rDeferredHeld || r.holder != who {
			return bad("by SequenceNumber, but it is %s (holder %q)", r.state, r.holder)
		}
		if m.State != azservicebus.MessageStateDeferred {
			return bad("by SequenceNumber in state %v, not deferred", m.State)
		}
	case lockReceipt, deleteReceipt:
		if dlq {
			if r.state != rDeadLettered {
				return bad("from the dead-letter queue, but it is %s", r.state)
			}
			if m.DeadLetterReason == nil || *m.DeadLetterReason != r.reason {
				return bad("dead-letter reason %v, want %q", m.DeadLetterReason, r.reason)
			}
			if r.description != nil && (m.DeadLetterErrorDescription == nil || *m.DeadLetterErrorDescription != *r.description) {
				return bad("dead-letter description %v, want %q", m.DeadLetterErrorDescription, *r.description)
			}
			break
		}
		switch r.state {
		case rSending, rAvailable:
		case rScheduled:
			if r.far {
				return bad("it is scheduled for %v", r.scheduledAt)
			}
			if now := time.Now(); now.Before(r.scheduledAt) || m.EnqueuedTime == nil || m.EnqueuedTime.Before(r.scheduledAt) {
				return bad("at %v, enqueued %v: scheduled for %v", now, m.EnqueuedTime, r.scheduledAt)
			}
		default:
			// Held elsewhere, deferred, dead-lettered or gone.
			return bad("but it is %s (holder %q, completions %d)", r.state, r.holder, r.completions)
		}
		if m.State != azservicebus.MessageStateActive {
			return bad("state %v, not active", m.State)
		}
		if r.order >= 0 && r.session != radSession {
			l.tally["FIFO checks"]++
			// FIFO within a session: everything sent to the session before
			// it is held, deferred, dead-lettered or gone.
			for _, earlier := range l.sess[r.session].recs[:r.order] {
				if earlier.state == rAvailable || earlier.state == rSending {
					l.failf([]*record{r, earlier}, "%s: %s received %s before %s, sent earlier and available", where, who, r.id, earlier.id)
					return nil
				}
			}
		}
	}
	l.tally[fmt.Sprintf("receipt %d dlq=%v", how, dlq)]++
	if r.state == rScheduled && r.cancelled {
		l.tally["cancel lost to activation"]++
	}
	if r.state != rScheduled && r.seq != 0 && *m.SequenceNumber > r.seq {
		l.tally["restored under a new number"]++
	}
	r.seq = *m.SequenceNumber
	r.holder = ""
	switch {
	case how == deleteReceipt || how == deferredDelete:
		r.state = rDone
		r.completions++
		if dlq {
			r.leftDLQAt = l.clock
		} else {
			r.leftMainAt = l.clock
		}
	case dlq:
		r.state, r.holder = rDeadLetterHeld, who
	case how == deferredLock:
		r.holder = who
	default:
		r.state, r.holder = rHeld, who
	}
	return r
}

// outcome is a settlement the test asks for.
type outcome struct {
	kind        string // complete, abandon, defer, deadletter
	props       map[string]any
	reason      string
	description string
}

// settling records the outcome of a held message before it is asked for,
// and returns whether the message leaves the queue it is in.
func (l *ledger) settling(r *record, who string, o outcome) (leaves bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.note(r, "%s %s %v", who, o.kind, o.props)
	l.tally[o.kind]++
	if r.holder != who {
		l.failf([]*record{r}, "%s settles %s held by %q", who, r.id, r.holder)
		return false
	}
	for k, v := range o.props {
		r.props[k] = v.(int64)
	}
	inDLQ := r.state == rDeadLetterHeld
	deferred := r.state == rDeferredHeld
	r.holder = ""
	r.pending++
	switch o.kind {
	case "complete":
		r.state = rDone
		r.completions++
	case "abandon":
		if !inDLQ {
			r.abandons++ // a dead-letter queue counts no deliveries
		}
		switch {
		case inDLQ:
			r.state = rDeadLettered
		case r.abandons >= l.cfgs[r.queue].MaxDeliveryCount:
			l.tally["dead-lettered by MaxDeliveryCount"]++
			r.state, r.reason, r.description = rDeadLettered, broker.ReasonMaxDeliveryCount, nil
		case deferred:
			r.state = rDeferred
		default:
			r.state = rAvailable
		}
	case "defer":
		r.state = rDeferred
	case "deadletter":
		r.state, r.reason, r.description = rDeadLettered, o.reason, to.Ptr(o.description)
	}
	return r.state == rDone || r.state == rDeadLettered && !inDLQ
}

func (l *ledger) abandonsOf(r *record) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return r.abandons
}

// settled records that a settlement was answered.
func (l *ledger) settled(r *record, fromDLQ, left bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.note(r, "settled")
	r.pending--
	switch {
	case left && fromDLQ:
		r.leftDLQAt = l.clock
	case left:
		r.leftMainAt = l.clock
	}
}

// releasing records that the locks of a closing session receiver end
// without counting a delivery.
func (l *ledger) releasing(rs []*record, who string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range rs {
		l.note(r, "%s closes its session", who)
		switch r.state {
		case rHeld:
			r.state = rAvailable
		case rDeferredHeld:
			r.state = rDeferred
		}
		r.holder = ""
	}
}

// claimDeferred picks a deferred message for who to receive by
// SequenceNumber.
func (l *ledger) claimDeferred(rng *rand.Rand, who string, match func(*record) bool) (*record, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var cands []*record
	for _, r := range l.order {
		if r.state == rDeferred && r.pending == 0 && match(r) {
			cands = append(cands, r)
		}
	}
	if len(cands) == 0 {
		return nil, 0
	}
	r := cands[rng.IntN(len(cands))]
	r.state, r.holder = rDeferredHeld, who
	l.note(r, "%s claims it by seq", who)
	return r, r.seq
}

func (l *ledger) holdSession(id, who string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sess[id]
	if s == nil {
		l.failf(nil, "%s accepted unknown session %q", who, id)
		return
	}
	if s.holder != "" {
		l.failf(nil, "%s accepted session %s, held by %s", who, id, s.holder)
		return
	}
	s.holder = who
}

func (l *ledger) unholdSession(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sess[id].holder = ""
}

// freeSessions returns the sessions nobody holds, and whether one of them
// has an acknowledged message available.
func (l *ledger) freeSessions() (free []string, withMessages bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range randomSessions {
		if l.sess[id].holder == "" {
			free = append(free, id)
			for _, r := range l.sess[id].recs {
				// A message of radSession may be on its way back.
				withMessages = withMessages || r.acked && r.state == rAvailable && id != radSession
			}
		}
	}
	return free, withMessages
}

// availableIn counts the acknowledged messages of a session the broker must
// have available (sent in order, not scheduled).
func (l *ledger) availableIn(session string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.sess[session].recs {
		if r.acked && r.state == rAvailable {
			n++
		}
	}
	return n
}

func (l *ledger) sessionState(id string) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sess[id].state
}

func (l *ledger) setSessionState(id string, state []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sess[id].state = state
}

func (l *ledger) now() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.clock
}

// peeked checks a page of a peek of queue (its dead-letter queue if dlq),
// begun at ledger time since; session, if set, is the session peeked.
func (l *ledger) peeked(who, queue string, dlq bool, session string, since uint64, msgs []*azservicebus.ReceivedMessage, last *int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range msgs {
		r := l.recs[m.MessageID]
		switch {
		case m.SequenceNumber == nil || *m.SequenceNumber <= *last:
			l.failf([]*record{r}, "%s peeked %s of %s (dlq %v) with SequenceNumber %v after %d", who, m.MessageID, queue, dlq, m.SequenceNumber, *last)
			return
		case r == nil || r.queue != queue:
			l.failf(nil, "%s peeked unknown message %s in %s", who, m.MessageID, queue)
			return
		case session != "" && r.session != session:
			l.failf([]*record{r}, "%s peeked %s of session %s in session %s", who, r.id, r.session, session)
			return
		case !dlq && r.leftMainAt != 0 && r.leftMainAt < since:
			l.failf([]*record{r}, "%s peeked %s in %s, which had left it before the peek (%d < %d)", who, r.id, queue, r.leftMainAt, since)
			return
		case dlq && (r.leftDLQAt != 0 && r.leftDLQAt < since || r.reason == ""):
			l.failf([]*record{r}, "%s peeked %s in the dead-letter queue of %s, where it is not", who, r.id, queue)
			return
		case !dlq && r.cancelledAt != 0 && r.cancelledAt < since:
			l.failf([]*record{r}, "%s peeked %s, whose schedule was cancelled before the peek", who, r.id)
			return
		case !dlq && r.far && m.State != azservicebus.MessageStateScheduled:
			l.failf([]*record{r}, "%s peeked %s in state %v; it is scheduled far ahead", who, r.id, m.State)
			return
		}
		*last = *m.SequenceNumber
	}
}

// expected returns, for a quiet broker, the messages queue (sub) must hold,
// by id, each with whether it is deferred; and those it may hold (cancelled
// scheduled messages whose activation won the race).
func (l *ledger) expected(queue string, sub uint32) (must map[string]bool, may map[string]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	must, may = map[string]bool{}, map[string]bool{}
	for _, r := range l.order {
		if r.queue != queue {
			continue
		}
		switch {
		case sub == broker.DeadLetterQueue && r.state == rDeadLettered:
			must[r.id] = false
		case sub == broker.MainQueue && r.state == rAvailable:
			must[r.id] = false
		case sub == broker.MainQueue && r.state == rDeferred:
			must[r.id] = true
		case sub == broker.MainQueue && r.state == rScheduled && !r.cancelled:
			must[r.id] = false
		case sub == broker.MainQueue && r.state == rScheduled && !r.far:
			may[r.id] = false
		}
	}
	return must, may
}

// checkFinal checks that every message left exactly once, except cancelled
// scheduled ones: those far ahead never, those near at most once.
func (l *ledger) checkFinal() {
	l.mu.Lock()
	defer l.mu.Unlock()
	counts := map[string]int{}
	for _, r := range l.order {
		switch {
		case r.far && (!r.cancelled || r.completions != 0 || r.state != rScheduled):
			l.failf([]*record{r}, "%s, scheduled far ahead, was not cancelled or arrived", r.id)
		case r.cancelled && !r.far && r.completions > 1:
			l.failf([]*record{r}, "%s, cancelled, arrived %d times", r.id, r.completions)
		case !r.cancelled && (r.state != rDone || r.completions != 1):
			l.failf([]*record{r}, "%s left its queue %d times and is %s", r.id, r.completions, r.state)
		}
		counts[r.queue] += r.completions
	}
	l.t.Logf("seed %d: %d messages; completed per queue %v; %v", l.seed, len(l.order), counts, l.tally)
}
