package broker

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// Mode is how a receiver takes messages.
type Mode uint8

const (
	// PeekLock locks each message for the receiver until it settles it or
	// the lock expires.
	PeekLock Mode = iota
	// ReceiveAndDelete removes each message as it is handed out; a delivery
	// goes out only once its removal is durable (at most once).
	ReceiveAndDelete
)

// Delivery is a message handed to a receiver, peeked, or received by
// SequenceNumber, with everything the wire needs.
type Delivery struct {
	Queue       uint32
	Seq         uint64
	Token       event.LockToken // zero unless locked
	LockedUntil int64           // unix ns; 0 unless locked
	Deliveries  uint16          // earlier failed delivery attempts (the header's delivery-count)
	State       index.State     // for peek: available, locked, deferred or scheduled
	Deferred    bool            // deferred, even while locked after a receive by SequenceNumber
	EnqueuedAt  int64           // unix ns
	ExpiresAt   int64           // unix ns; 0 = never
	ScheduledAt int64           // unix ns, for scheduled messages
	MessageID   string
	SessionID   string
	Hops        uint32 // auto-forwards that brought the message here
	Message     []byte // the bare message as the client sent it; read-only
	Overlays    []Overlay
}

// Overlay is a change to a message's application properties recorded by an
// abandon, defer or dead-letter, oldest first.
type Overlay struct {
	Type        event.Type
	Reason      string // dead-letter reason
	Description string // dead-letter error description
	Props       []byte // encoded AMQP maps of properties to set, one after another
	Source      string // the entity whose dead-letter queue the message was forwarded from, if it was
	// A topic's copy made by a rule action (Type Copied): the rule's name,
	// which the copy carries as its RuleName property, and the action's
	// changes, in order. A copy dead-lettered on arrival has Reason and
	// Description instead.
	Rule    string
	Changes []RuleChange
}

// ReceiverOptions configure a receiver.
type ReceiverOptions struct {
	Queue uint32
	Name  string // the link name, for logs and the audit trail
	Mode  Mode
	// Sessions makes a session receiver: it receives nothing until it has
	// accepted a session (AcceptSession), and then only that session's
	// messages. A session-enabled queue takes only session receivers.
	Sessions bool
	Session  string // the accepted session; set by AcceptSession
	// Deliver is called for every message handed to the receiver, from the
	// broker's goroutines (the entity actor, or the log writer for
	// receive-and-delete), in order. It must not block.
	Deliver func(Delivery)
	// Lost, if set, is called once if the receiver can no longer receive
	// (the entity failed or was deleted).
	Lost func(error)
}

// Receiver is a consumer attached to a queue with link credit.
type Receiver struct {
	e    *Entity
	id   string // unique per entity: recorded as the lock owner
	opts ReceiverOptions

	// Owned by the actor.
	limit    uint64 // deliveries allowed so far (absolute)
	assigned uint64 // deliveries handed out so far
	closed   bool

	// Receive-and-delete deliveries handed out and not yet passed to
	// Deliver: they wait for their removal to be durable.
	undelivered atomic.Int64

	session  atomic.Pointer[string] // the accepted session, readable from any goroutine
	lostOnce sync.Once
}

// creditQueue holds outstanding credit in the order it was granted: credit
// from all receivers of an entity is served first come, first served.
type creditQueue struct {
	entries []creditEntry
	head    int
}

type creditEntry struct {
	r     *Receiver
	units uint64
}

func (q *creditQueue) push(r *Receiver, units uint64) {
	q.entries = append(q.entries, creditEntry{r, units})
}

func (q *creditQueue) live() []creditEntry { return q.entries[q.head:] }

// drop removes r's credit.
func (q *creditQueue) drop(r *Receiver) {
	kept := q.entries[:q.head]
	for _, c := range q.entries[q.head:] {
		if c.r != r {
			kept = append(kept, c)
		}
	}
	clear(q.entries[len(kept):])
	q.entries = kept
}

// compact forgets spent entries.
func (q *creditQueue) compact() {
	kept := q.entries[:0]
	for _, c := range q.entries[q.head:] {
		if c.units > 0 && !c.r.closed {
			kept = append(kept, c)
		}
	}
	clear(q.entries[len(kept):])
	q.entries, q.head = kept, 0
}

// Attach adds a receiver to queue opts.Queue.
func (e *Entity) Attach(opts ReceiverOptions) (*Receiver, error) {
	if opts.Deliver == nil {
		return nil, fmt.Errorf("%w: a receiver needs a Deliver function", projection.ErrInvalid)
	}
	e.touch(opts.Queue)
	return call(e, func(e *Entity) (*Receiver, error) {
		if err := e.check(); err != nil {
			return nil, err
		}
		q := e.st.Queue(opts.Queue)
		if q == nil {
			return nil, fmt.Errorf("%w: no queue %d", projection.ErrInvalid, opts.Queue)
		}
		if err := e.receivable(opts.Queue); err != nil {
			return nil, err
		}
		switch {
		case q.Sessions() != nil && !opts.Sessions:
			// Service Bus's own words, which the Go SDK's tests look for.
			//lint:ignore ST1005 Service Bus's own words, punctuation included
			return nil, fmt.Errorf("%w: It is not possible for an entity that requires sessions to create a non-sessionful message receiver.", projection.ErrNotAllowed)
		case q.Sessions() == nil && opts.Sessions:
			//lint:ignore ST1005 Service Bus's own words, punctuation included
			return nil, fmt.Errorf("%w: A sessionful message receiver cannot be created on an entity that does not require sessions. Ensure RequiresSession is set to true when creating a Queue or Subscription to enable sessionful behavior.", projection.ErrNotAllowed)
		}
		opts.Session = ""
		e.nextID++
		r := &Receiver{e: e, id: fmt.Sprintf("%s#%d", opts.Name, e.nextID), opts: opts}
		e.receivers[r] = struct{}{}
		return r, nil
	})
}

// ID is the receiver's unique name inside its entity (the lock owner).
func (r *Receiver) ID() string { return r.id }

// SetLimit sets the total number of deliveries the receiver allows so far:
// its AMQP delivery-count plus link-credit, counted without wrapping. Credit
// it adds joins the back of the entity's credit queue; a lower limit takes
// back credit not used yet.
func (r *Receiver) SetLimit(limit uint64) {
	r.e.post(func(e *Entity) {
		if r.closed {
			return
		}
		switch {
		case limit > r.limit:
			e.credit.push(r, limit-r.limit)
		case limit < r.limit:
			e.takeBack(r, max(limit, r.assigned))
		}
		r.limit = max(limit, r.assigned)
	})
}

// takeBack reduces r's outstanding credit so that its limit becomes limit,
// removing units from its newest grants first.
func (e *Entity) takeBack(r *Receiver, limit uint64) {
	excess := r.limit - limit
	live := e.credit.live()
	for i := len(live) - 1; i >= 0 && excess > 0; i-- {
		if live[i].r == r {
			n := min(live[i].units, excess)
			live[i].units -= n
			excess -= n
		}
	}
}

// Drain hands the receiver whatever is available for its credit now, then
// gives up the rest of the credit, and calls done with the total number of
// deliveries handed out; every one of them has been passed to Deliver
// before done runs (on the entity's goroutine when none of them waits for
// the log).
func (r *Receiver) Drain(done func(assigned uint64)) {
	err := r.e.post(func(e *Entity) {
		if !r.closed {
			e.dispatch()
			e.takeBack(r, r.assigned)
			r.limit = r.assigned
		}
		assigned := r.assigned
		// Peek-lock deliveries were passed to Deliver as they were locked,
		// so done need not wait for the log (a JS client closes a link
		// whose drain takes 200 ms, and a busy disk's fsync can take
		// longer). Receive-and-delete deliveries go out from the log
		// writer once durable: while some of this receiver's wait, a
		// barrier puts done behind them.
		if r.undelivered.Load() == 0 {
			done(assigned)
			return
		}
		if _, err := e.log.Append(nil, func(error) { done(assigned) }); err != nil {
			done(assigned)
		}
	})
	if err != nil {
		done(0)
	}
}

// Detach removes the receiver. Locked messages stay locked until they are
// settled (a lock outlives its link) or expire, except those in unsent: they
// never reached the client, so they are released without counting a
// delivery. A session receiver's session is released too.
func (r *Receiver) Detach(unsent []event.LockToken) {
	r.e.post(func(e *Entity) {
		if r.closed {
			return
		}
		r.closed = true
		e.credit.drop(r)
		e.cancelWait(r)
		delete(e.receivers, r)
		e.releaseUnsent(r, unsent)
		if r.opts.Session != "" {
			if evs, err := e.decide(projection.ReleaseSession{Queue: r.opts.Queue, SessionID: r.opts.Session, Receiver: r.id}); err == nil {
				e.commit(evs, nil)
			}
		}
	})
}

// Unsent releases the locks of deliveries that never reached the client,
// without counting a delivery: ones the receiver's link was handed after
// it closed, before its Detach reached the entity. It does not wait.
func (r *Receiver) Unsent(tokens []event.LockToken) {
	r.e.post(func(e *Entity) { e.releaseUnsent(r, tokens) })
}

func (e *Entity) releaseUnsent(r *Receiver, tokens []event.LockToken) {
	for _, token := range tokens {
		if evs, err := e.decide(projection.Settle{Queue: r.opts.Queue, Token: token, Outcome: projection.Release}); err == nil {
			e.commit(evs, nil)
		}
	}
}

func (r *Receiver) fail(err error) {
	r.closed = true
	if r.opts.Lost != nil {
		r.lostOnce.Do(func() { r.opts.Lost(err) })
	}
}

// dispatch serves outstanding credit in the order it was granted with the
// messages the state allows: durable, available, and for session receivers
// in their session.
func (e *Entity) dispatch() {
	if e.failed != nil || len(e.credit.live()) == 0 {
		return
	}
	var exhausted map[uint32]bool // queues with nothing left to hand out
	live := e.credit.live()
	for i := range live {
		c := &live[i]
		q := c.r.opts.Queue
		sq := e.st.Queue(q)
		if sq == nil {
			continue // its subscription was deleted; the receiver is told
		}
		// Receivers of a plain queue compete for the same messages; a
		// session receiver has its own supply, its session.
		shared := sq.Sessions() == nil
		if c.units == 0 || c.r.closed || shared && exhausted[q] {
			continue
		}
		n := e.deliverTo(c.r, c.units)
		c.units -= n
		if c.units > 0 && shared {
			if exhausted == nil {
				exhausted = make(map[uint32]bool)
			}
			exhausted[q] = true
		}
	}
	for e.credit.head < len(e.credit.entries) && e.credit.entries[e.credit.head].units == 0 {
		e.credit.head++
	}
	if e.credit.head > 64 && e.credit.head*2 > len(e.credit.entries) {
		e.credit.compact()
	}
}

// deliverTo hands up to max messages to r and returns how many it took.
func (e *Entity) deliverTo(r *Receiver, max uint64) uint64 {
	if r.opts.Sessions && r.opts.Session == "" {
		return 0 // has not accepted a session yet
	}
	var cmd projection.Command
	n := int(min(max, 1<<16))
	if r.opts.Mode == PeekLock {
		cmd = projection.Lock{Queue: r.opts.Queue, Receiver: r.id, Session: r.opts.Session, Max: n,
			Limit: e.durable, Nonce: e.rng.Uint64()}
	} else {
		cmd = projection.ReceiveAndDelete{Queue: r.opts.Queue, Receiver: r.id, Session: r.opts.Session, Max: n,
			Limit: e.durable}
	}
	evs, err := e.decide(cmd)
	if err != nil {
		if err == projection.ErrSessionLockLost {
			r.fail(err)
		}
		return 0
	}
	var out []Delivery
	for i := range evs {
		ev := &evs[i]
		if ev.Type != event.Locked && ev.Type != event.ReceivedAndDeleted {
			continue
		}
		d, err := e.delivery(r.opts.Queue, ev.Seq)
		if err != nil {
			e.fail(fmt.Errorf("read message %d for delivery: %w", ev.Seq, err))
			return 0
		}
		d.Token, d.LockedUntil = ev.Token, ev.Until
		if ev.Type == event.Locked {
			d.State = index.Locked
		}
		if hook := e.b.opts.OnFirstDelivery; hook != nil && d.Deliveries == 0 && event.KindOf(d.Queue) == event.KindMessages {
			since := d.EnqueuedAt
			if d.ScheduledAt > since {
				since = d.ScheduledAt
			}
			hook(e.name, time.Duration(ev.Time-since))
		}
		out = append(out, d)
	}
	if r.opts.Mode == PeekLock {
		if e.commitLazy(evs) != nil {
			return 0
		}
		for _, d := range out {
			r.opts.Deliver(d)
		}
	} else {
		r.undelivered.Add(int64(len(out)))
		if e.commit(evs, func(err error) {
			if err == nil {
				for _, d := range out {
					r.opts.Deliver(d)
				}
			}
			r.undelivered.Add(-int64(len(out)))
		}) != nil {
			return 0 // the entity fails; undelivered stays up, so a drain waits for the log
		}
	}
	r.assigned += uint64(len(out))
	return uint64(len(out))
}

// delivery reads message seq of queue q and its overlays into a Delivery.
func (e *Entity) delivery(q uint32, seq uint64) (Delivery, error) {
	queue := e.st.Queue(q)
	meta, ok := queue.Message(seq)
	if !ok {
		return Delivery{}, fmt.Errorf("no message %d in queue %d", seq, q)
	}
	rec, err := e.record(seq, meta.Pos)
	if err != nil {
		return Delivery{}, err
	}
	overlays := queue.Overlays(seq)
	if rec.Type == event.Copied {
		// A topic's copy: its body is the Published record its first
		// overlay points at, and its own record the first change.
		if len(overlays) < 2 || overlays[0].Index != seq-rec.Seq {
			return Delivery{}, fmt.Errorf("copy %d lacks its published record", seq)
		}
		copied := rec
		if rec, err = e.record(overlays[0].Index, overlays[0].Pos); err != nil {
			return Delivery{}, fmt.Errorf("read the published record of copy %d: %w", seq, err)
		}
		rec.SessionID, rec.Until = copied.SessionID, copied.Until
		if rec.Type != event.Forwarded {
			// A Forwarded record (a dead-lettered message forwarded to a
			// topic) is an overlay too: how it was dead-lettered.
			overlays = overlays[1:]
		}
	}
	d := Delivery{
		Queue:      q,
		Seq:        seq,
		Deliveries: meta.Deliveries,
		State:      meta.State,
		Deferred:   meta.State == index.Deferred || meta.Flags&index.FlagDeferred != 0,
		EnqueuedAt: rec.Time,
		MessageID:  rec.MessageID,
		SessionID:  rec.SessionID,
		Hops:       rec.Hops,
		Message:    rec.Message,
	}
	switch rec.Type {
	case event.Scheduled, event.ScheduledHeld:
		d.ScheduledAt = rec.Until
	default:
		if event.KindOf(q) == event.KindMessages {
			d.ExpiresAt = e.st.Expiry(q, rec.Until, rec.Time)
		}
	}
	if lk, ok := queue.Lock(seq); ok {
		d.Token, d.LockedUntil = lk.Token, lk.Until
	}
	for _, ref := range overlays {
		ov, err := e.record(ref.Index, ref.Pos)
		if err != nil {
			return Delivery{}, fmt.Errorf("read overlay %d of message %d: %w", ref.Index, seq, err)
		}
		o := Overlay{Type: ov.Type, Reason: ov.Reason, Description: ov.Description, Props: ov.Props}
		switch ov.Type {
		case event.Copied:
			o.Rule, o.Props = ov.Name, nil
			if o.Changes, err = projection.DecodeOverlay(ov.Props); err != nil {
				return Delivery{}, fmt.Errorf("overlay %d of message %d: %w", ref.Index, seq, err)
			}
		case event.Forwarded:
			o.Source = ov.Name
		case event.Restored, event.RestoredCopy:
			// A restored message's record folds its earlier overlays: in a
			// dead-letter queue it stands for the dead-lettering, and
			// elsewhere, for a message forwarded from another entity's
			// dead-letter queue, for that arrival (reason and source).
			// A restored copy's comes after what made it a copy.
			o.Source = ov.Name
			switch {
			case projection.IsDeadLetterQueue(ov.Queue):
				o.Type = event.DeadLettered
			case ov.Name != "":
				o.Type = event.Forwarded
			default:
				o.Type = event.Restored
			}
			if ov.Type == event.RestoredCopy {
				rule, changes, err := projection.DecodeCopy(ov.State)
				if err != nil {
					return Delivery{}, fmt.Errorf("overlay %d of message %d: %w", ref.Index, seq, err)
				}
				d.Overlays = append(d.Overlays, Overlay{Type: event.Copied, Rule: rule, Changes: changes})
			}
		}
		d.Overlays = append(d.Overlays, o)
	}
	return d, nil
}
