package broker

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// Auto-forwarding (Service Bus's ForwardTo and ForwardDeadLetteredMessagesTo).
//
// ForwardTo is resolved when a message is sent: a send to an entity that
// forwards goes to the end of its forwarding chain instead, as one atomic
// append there, so nothing is ever in flight between two logs. Schedule and
// cancel follow the same chain, so the SequenceNumbers a schedule returns
// can be cancelled through the entity the client named. The entities on
// the way apply their size limits and their duplicate detection: they
// store nothing, so what each has accepted is remembered where it went,
// in the same atomic append (event.Remembered), and checked there. An entity
// that stops forwarding, or forwards elsewhere, starts with no memory of
// MessageIds in its new place; a changed window applies to what is
// accepted from then on. Forwards from dead-letter queues pass the
// duplicate detection of no entity on the way.
//
// ForwardDeadLetteredMessagesTo moves messages that land in the dead-letter
// queue. They are dead-lettered in their own log first (the reason is
// recorded there), then a forwarder moves them one at a time: it locks the
// oldest available one for the receiver "$forward" (so no client takes it
// meanwhile), sends it to the target as a Forward, and completes it once
// the target's append is durable. A crash or failure between those two
// appends makes the forwarder send the same message again; the target
// remembers the source's SequenceNumber of the last arrival and drops the
// repeat, so each message arrives exactly once. A failure of the target
// (its log, or its absence) is retried with backoff; a message the target
// refuses for good (too large for it, no SessionId where it requires one)
// moves to the source's transfer dead-letter queue instead, as in Service
// Bus, saying why, so the messages behind it are not held up for ever.
//
// A topic's subscriptions forward the same way, each from its own queues: a
// subscription's ForwardTo cannot be resolved at send time (the topic
// decides per subscription, in its own log), so its forwarder moves what
// its rules gave it, as it was, one message at a time; its
// ForwardDeadLetteredMessagesTo moves its dead-lettered messages. The
// target remembers each source queue apart (forwardKey): subscriptions of
// one topic forward messages under the same SequenceNumbers.
//
// Every auto-forward is a hop: each ForwardTo link a send follows, and each
// dead-letter forward with the links it follows at its target. Messages
// record their count (event.Event.Hops), and a dead-letter forward that would
// take one past MaxForwardHops is refused as MaxTransferHopCountExceeded,
// so two entities whose dead-letter queues forward to each other pass a
// message back and forth a few times, not for ever.

// MaxForwardHops is how many ForwardTo links a chain may have, as in
// Service Bus: as many as a message's auto-forwards in all.
const MaxForwardHops = projection.MaxHops

// ForwardReceiver is the lock owner the dead-letter forwarder uses.
const ForwardReceiver = "$forward"

// ErrForwarding is returned for forwarding settings that cannot work.
var ErrForwarding = errors.New("invalid forwarding")

// forwardTarget is where a send to e's queue is stored: e itself, or the
// entity at the end of its ForwardTo chain, at most MaxForwardHops away;
// hops counts the links followed. A chain that names an entity that no
// longer exists stops before it, so messages are kept, not lost. Each
// entity a message passes through accepts it first, so its size limit
// applies too: the error is for msgs that one of them refuses. via lists
// those of them whose duplicate detection applies, for the target to run.
func (e *Entity) forwardTarget(queue uint32, msgs []projection.Message) (t *Entity, hops uint32, via []projection.Via, err error) {
	cur := e
	if queue != event.MainQueue {
		return cur, 0, nil, nil
	}
	for range MaxForwardHops {
		cfg := cur.cfg.Load()
		if cfg == nil || cfg.ForwardTo == "" || ignoredForwarding(*cfg) {
			break
		}
		next, err := e.b.Entity(cfg.ForwardTo)
		if err != nil || next == cur {
			e.logger().Warn("forwarding target missing; keeping the message", "forward_to", cfg.ForwardTo, "at", cur.name)
			break
		}
		for _, m := range msgs {
			if len(m.Body) > cfg.MaxMessageSize {
				return nil, 0, nil, fmt.Errorf("%w: %d bytes, limit %d (%s)", projection.ErrMessageTooLarge, len(m.Body), cfg.MaxMessageSize, cur.name)
			}
		}
		if cfg.RequiresDuplicateDetection {
			via = append(via, projection.Via{Name: cur.name, Window: cfg.DuplicateWindow})
		}
		cur = next
		hops++
	}
	return cur, hops, via, nil
}

// ignoredForwarding says whether cfg, found on disk, names a ForwardTo that
// is not followed: on a queue that requires sessions, which checkForwarding
// refuses today but a data directory may hold from before that check (or
// from a hand-edited log). Refusing to start over it would hold the queue's
// messages hostage; the queue keeps what is sent to it instead.
func ignoredForwarding(cfg projection.Config) bool {
	return cfg.RequiresSession && cfg.ForwardTo != ""
}

// checkForwarding validates the forwarding settings of cfg for entity name
// against the entities that exist (called with b.mu held): a queue that
// requires sessions does not forward (Service Bus does not support
// ForwardTo on one), targets exist, are not name itself, and every
// ForwardTo chain through name, from wherever it starts, stays within
// MaxForwardHops without coming back.
func (b *Broker) checkForwarding(name string, cfg projection.Config) error {
	if cfg.RequiresSession && cfg.ForwardTo != "" {
		return fmt.Errorf("%w: %s requires sessions; ForwardTo is not supported for session-enabled queues", ErrForwarding, name)
	}
	for _, target := range []string{cfg.ForwardTo, cfg.ForwardDeadLetteredMessagesTo} {
		if target == "" {
			continue
		}
		if strings.EqualFold(target, name) {
			return fmt.Errorf("%w: %s cannot forward to itself", ErrForwarding, name)
		}
		if _, ok := b.entities[strings.ToLower(target)]; !ok {
			return fmt.Errorf("%w: %s forwards to %s, which does not exist", ErrForwarding, name, target)
		}
	}
	if cfg.ForwardTo == "" {
		return nil
	}
	self := strings.ToLower(name)
	forwardOf := func(key string) string {
		if key == self {
			return strings.ToLower(cfg.ForwardTo)
		}
		if e, ok := b.entities[key]; ok {
			if c := e.cfg.Load(); c != nil {
				return strings.ToLower(c.ForwardTo)
			}
		}
		return ""
	}
	starts := []string{self}
	for key := range b.entities {
		if key != self {
			starts = append(starts, key)
		}
	}
	for _, start := range starts {
		seen := map[string]bool{start: true}
		through := start == self
		hops := 0
		for next := forwardOf(start); next != ""; next = forwardOf(next) {
			if seen[next] {
				return fmt.Errorf("%w: forwarding from %s comes back to %s", ErrForwarding, name, next)
			}
			seen[next] = true
			through = through || next == self
			if hops++; hops > MaxForwardHops && through {
				return fmt.Errorf("%w: forwarding from %s through %s takes more than %d hops", ErrForwarding, start, name, MaxForwardHops)
			}
		}
	}
	return nil
}

// forwarders are the entity's forwarders, owned by the actor: one per
// queue whose messages it moves (forwardSources).
type forwarders struct {
	by map[uint32]*forwardState
	// gen numbers the sends, across recoveries (which reset the rest): an
	// answer for an earlier send, say one a recovery repeated, must not
	// complete the message on its way now.
	gen uint64
}

// forwardState is one forwarder's state.
type forwardState struct {
	busy    bool            // a message is on its way to the target
	resumed bool            // looked for a message held from before a restart
	seq     uint64          // the message being forwarded
	token   event.LockToken // and its lock
	target  string          // and where to
	retryAt int64           // unix ns: after a failure, not before this
	delay   time.Duration   // the backoff after the last failure
	gen     uint64          // the send on its way
	// A transfer queue's forwarder sends runs of messages, and after a
	// refused run, one message at a time until it finds the refused one.
	seqs   []uint64
	single bool
}

// forwardSource is a queue whose messages the entity moves to another
// entity: a dead-letter queue (ForwardDeadLetteredMessagesTo; the arrival
// says how it was dead-lettered), or a subscription's own queue (its
// ForwardTo; the arrival is the message as it was).
type forwardSource struct {
	queue       uint32
	target      string
	deadLetters bool
	transfer    bool // the transfer queue: each message names its own target
}

// forwardSources lists the queues the entity forwards from: a queue's
// dead-letter queue, each subscription's queue and dead-letter queue. A
// subscription that requires sessions does not forward its messages
// (Service Bus does not support it either).
func (e *Entity) forwardSources() []forwardSource {
	if !e.st.IsTopic() {
		var out []forwardSource
		if to := e.st.Config().ForwardDeadLetteredMessagesTo; to != "" {
			out = append(out, forwardSource{queue: event.DeadLetterQueue, target: to, deadLetters: true})
		}
		if e.st.TransferQueue() != nil {
			out = append(out, forwardSource{queue: event.TransferQueue, transfer: true})
		}
		return out
	}
	var out []forwardSource
	for _, s := range e.st.Subscriptions() {
		cfg := s.Config()
		if cfg.ForwardTo != "" && !cfg.RequiresSession {
			out = append(out, forwardSource{queue: s.Queue(), target: cfg.ForwardTo})
		}
		if cfg.ForwardDeadLetteredMessagesTo != "" {
			out = append(out, forwardSource{queue: event.SubqueueOf(s.Queue(), event.KindDeadLetter),
				target: cfg.ForwardDeadLetteredMessagesTo, deadLetters: true})
		}
	}
	return out
}

// forwardKey is what a target remembers a source by (projection.Forward's
// Source): the entity's id, and for a subscription its queue too, as the
// subscriptions of a topic forward messages under the same numbers.
func (e *Entity) forwardKey(queue uint32) uint64 {
	if queue < event.QueueGroup {
		return e.id
	}
	return e.id | uint64(queue)<<40
}

// forward moves the next message of each forwarding queue to its target,
// one at a time per queue. It runs on the actor after every batch.
func (e *Entity) forward() {
	if e.failed != nil {
		return
	}
	for _, src := range e.forwardSources() {
		if e.fwd.by == nil {
			e.fwd.by = map[uint32]*forwardState{}
		}
		f := e.fwd.by[src.queue]
		if f == nil {
			f = &forwardState{}
			e.fwd.by[src.queue] = f
		}
		if src.transfer {
			e.transferOne(f)
			continue
		}
		e.forwardOne(src, f)
	}
}

func (e *Entity) forwardOne(src forwardSource, f *forwardState) {
	if f.busy || e.now() < f.retryAt {
		return
	}
	what := "dead-lettered message"
	if !src.deadLetters {
		what = "message"
	}
	target, err := e.b.Entity(src.target)
	if err != nil {
		e.forwardFailed(f, fmt.Errorf("forward %ss to %s: %w", what, src.target, err))
		return
	}
	seq, token, ok := e.heldForward(src.queue, f)
	if !ok {
		evs, err := e.decide(projection.Lock{Queue: src.queue, Receiver: ForwardReceiver, Max: 1,
			Limit: e.durable, Nonce: e.rng.Uint64()})
		if err != nil || len(evs) == 0 {
			return
		}
		if err := e.commitLazy(evs); err != nil {
			return
		}
		for _, ev := range evs {
			if ev.Type == event.Locked {
				seq, token, ok = ev.Seq, ev.Token, true
			}
		}
		if !ok {
			return
		}
	}
	d, err := e.delivery(src.queue, seq)
	if err != nil {
		e.forwardFailed(f, fmt.Errorf("forward %s %d: %w", what, seq, err))
		return
	}
	ovs := foldOverlays(d.Overlays)
	// Its dead-letter source is this queue, or this subscription.
	source := queuePath(e.st, e.name, event.SubqueueOf(src.queue, event.KindMessages))
	fw := &projection.Forward{Source: e.forwardKey(src.queue), SourceName: source, Seq: seq, Hops: d.Hops + 1,
		Reason: ovs.reason, Description: ovs.description, Props: ovs.props}
	if !src.deadLetters {
		// Moved as it is: no dead-letter source, reason or description.
		fw.SourceName, fw.Reason, fw.Description = "", "", ""
	}
	msg := projection.Message{Body: d.Message, MessageID: d.MessageID, SessionID: d.SessionID}
	e.fwd.gen++
	f.busy, f.seq, f.token, f.target, f.gen = true, seq, token, src.target, e.fwd.gen
	gen, queue := f.gen, src.queue
	target.sendForwarded(msg, fw, func(err error) {
		// done runs on the target's log writer, which must not block, and
		// post blocks while this actor's queue is full: hand it over
		// (docs/architecture.md#threading-contract).
		go e.post(func(e *Entity) { e.forwarded(queue, gen, err) })
	})
}

// forwarded finishes forward number gen from queue: the message is
// completed here once the target has it, or left for another try.
func (e *Entity) forwarded(queue uint32, gen uint64, err error) {
	f := e.fwd.by[queue]
	if f == nil || !f.busy || f.gen != gen {
		return // an earlier send's answer: its message is not the one on its way
	}
	f.busy = false
	reason, refused := forwardRefusal(err)
	if err != nil && !refused {
		e.forwardFailed(f, fmt.Errorf("forward message %d of queue %s: %w", f.seq, queuePath(e.st, e.name, queue), err))
		return
	}
	f.delay, f.retryAt = 0, 0
	var cmd projection.Command = projection.Settle{Queue: queue, Token: f.token, Outcome: projection.Complete}
	if refused {
		e.logger().Warn("message refused by its forwarding target; moved to the transfer dead-letter queue",
			"queue", queuePath(e.st, e.name, queue), "seq", f.seq, "forward_to", f.target, "reason", reason, "err", err)
		cmd = projection.TransferDeadLetter{Queue: queue, Token: f.token, Reason: reason,
			Description: fmt.Sprintf("The message could not be forwarded to %s: %v", f.target, err)}
	}
	evs, err := e.decide(cmd)
	if err != nil {
		// The lock ran out meanwhile: the message is available again and
		// the next round sends it again, which the target drops (or
		// refuses again).
		return
	}
	e.commit(evs, nil)
}

// forwardRefusal tells a target's refusal of a message for good (the
// message can never be stored there as it is) from a failure worth
// retrying (the target's log failing, the target gone), and names the
// dead-letter reason for the former.
func forwardRefusal(err error) (reason string, refused bool) {
	switch {
	case err == nil:
		return "", false
	case errors.Is(err, projection.ErrMessageTooLarge):
		return projection.ReasonMessageSizeExceeded, true
	case errors.Is(err, projection.ErrSessionIDRequired):
		return projection.ReasonSessionIDIsNull, true
	case errors.Is(err, projection.ErrTooManyHops):
		return projection.ReasonMaxTransferHops, true
	case errors.Is(err, projection.ErrNotAllowed), errors.Is(err, projection.ErrInvalid):
		return projection.ReasonForwardingRefused, true
	}
	return "", false
}

// heldForward finds a message of queue the forwarder locked before (its
// lock outlived a restart or a failed attempt).
func (e *Entity) heldForward(queue uint32, f *forwardState) (uint64, event.LockToken, bool) {
	q := e.st.Queue(queue)
	if q == nil {
		return 0, event.LockToken{}, false
	}
	if f.resumed {
		if lk, ok := q.Lock(f.seq); ok && lk.Token == f.token && lk.Receiver == ForwardReceiver {
			return f.seq, f.token, true
		}
		return 0, event.LockToken{}, false
	}
	f.resumed = true
	for _, seq := range q.Peek(0, 1<<30, ^uint64(0)) {
		if lk, ok := q.Lock(seq); ok && lk.Receiver == ForwardReceiver {
			return seq, lk.Token, true
		}
	}
	return 0, event.LockToken{}, false
}

// forwardFailed logs a failed forward and backs off before the next.
func (e *Entity) forwardFailed(f *forwardState, err error) {
	f.delay = min(max(2*f.delay, firstRetry), maxRetry)
	f.retryAt = e.now() + int64(f.delay)
	e.logger().Warn("auto-forwarding failed; will retry", "err", err, "retry_in", f.delay)
	e.b.clock.AfterFunc(f.delay, func() { e.post(func(*Entity) {}) })
}

// sendForwarded appends a message forwarded from another entity's
// dead-letter queue (see projection.Forward) to the main queue, following
// this entity's own ForwardTo chain; done runs once it is durable. As
// with the arrival's own duplicate detection (see Send.Forward), that of
// the entities on the chain does not apply to it.
func (e *Entity) sendForwarded(msg projection.Message, fw *projection.Forward, done func(error)) {
	if err := e.b.refuseNew(); err != nil {
		done(err) // the forwarder tries again later
		return
	}
	msgs := []projection.Message{msg}
	t, hops, _, err := e.forwardTarget(event.MainQueue, msgs)
	if err != nil {
		done(err)
		return
	}
	t.readFilters(msgs)
	t.do(done, func(t *Entity) ([]event.Event, error) {
		return t.decide(projection.Send{Queue: event.MainQueue, Messages: msgs, Hops: hops, Forward: fw, Nonce: t.topicNonce()})
	})
}
