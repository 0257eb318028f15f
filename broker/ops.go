package broker

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// Send enqueues messages (or schedules those with a future ScheduledAt) as
// one atomic group and calls done once they are durable: all of them or,
// with an error, none. Duplicates under duplicate detection count as sent.
// Send takes ownership of the messages' Body slices. done runs on a broker
// goroutine and must not block.
func (e *Entity) Send(queue uint32, msgs []projection.Message, done func(error)) {
	e.touch(queue)
	if err := cmp.Or(e.sendable(), e.b.refuseNew()); err != nil {
		done(err)
		return
	}
	t, hops, via, err := e.forwardTarget(queue, msgs)
	if err != nil {
		done(err)
		return
	}
	t.readFilters(msgs)
	// Even when every message is a duplicate (no events), done waits for
	// whatever came before: the original may not be durable yet.
	t.do(done, func(t *Entity) ([]event.Event, error) {
		return t.decide(projection.Send{Queue: queue, Messages: msgs, Hops: hops, Via: via, Nonce: t.topicNonce()})
	})
}

// sendable refuses sends to an entity whose Status is Disabled or
// SendDisabled.
func (e *Entity) sendable() error {
	if cfg := e.cfg.Load(); cfg != nil && (cfg.Status == projection.StatusDisabled || cfg.Status == projection.StatusSendDisabled) {
		return fmt.Errorf("%w: %s is %s; it takes no messages", projection.ErrEntityDisabled, e.name, cfg.Status)
	}
	return nil
}

// receivable refuses receivers of queue q (on the actor) when its entity
// or its subscription is Disabled or ReceiveDisabled.
func (e *Entity) receivable(q uint32) error {
	cfgs := []projection.Config{e.st.Config()}
	if s := e.st.SubscriptionOf(q); s != nil {
		cfgs = append(cfgs, s.Config())
	}
	for _, cfg := range cfgs {
		if cfg.Status == projection.StatusDisabled || cfg.Status == projection.StatusReceiveDisabled {
			return fmt.Errorf("%w: %s is %s; nothing can be received from it", projection.ErrEntityDisabled,
				queuePath(e.st, e.name, q), cfg.Status)
		}
	}
	return nil
}

// topicNonce is randomness for newid() in a topic's rule actions; a queue
// draws none, so its lock tokens stay what a seed makes them.
func (e *Entity) topicNonce() uint64 {
	if !e.st.IsTopic() {
		return 0
	}
	return e.rng.Uint64()
}

// readFilters fills in what a topic's rules see of each message, on the
// sender's goroutine rather than the actor's.
func (e *Entity) readFilters(msgs []projection.Message) {
	if !e.IsTopic() {
		return
	}
	for i := range msgs {
		if msgs[i].Filter == nil {
			msgs[i].Filter = e.filterMessage(msgs[i].Body)
		}
	}
}

// filterMessage reads what a topic's rules see of a bare message, or nil.
func (e *Entity) filterMessage(body []byte) *FilterMessage {
	parse := e.b.opts.FilterMessage
	if parse == nil {
		return nil
	}
	fm, err := parse(body)
	if err != nil {
		e.logger().Debug("rules see only the message's ids: its properties cannot be read", "err", err)
		return nil
	}
	return fm
}

// Schedule is Send that reports the SequenceNumber of each message it
// stored (scheduled or, if due already, enqueued), in order. Duplicates
// dropped by duplicate detection have none.
func (e *Entity) Schedule(queue uint32, msgs []projection.Message, done func([]uint64, error)) {
	e.schedule(queue, msgs, false, func(evs []event.Event, err error) {
		seqs := make([]uint64, 0, len(evs))
		for i := range evs {
			if evs[i].Type.CreatesMessage() {
				seqs = append(seqs, evs[i].Index)
			}
		}
		done(seqs, err)
	})
}

// ScheduleHeld is Schedule inside a transaction: the messages are written
// now and their numbers reported, but they are held (they neither
// activate nor count for duplicate detection) until the transaction's
// commit confirms them (Transaction.Schedules); a roll back cancels them.
// As for a transaction's sends, a queue that forwards is refused.
func (e *Entity) ScheduleHeld(queue uint32, msgs []projection.Message, done func([]projection.HeldMessage, error)) {
	if t, _, _, err := e.forwardTarget(queue, msgs); err == nil && t != e {
		done(nil, fmt.Errorf("%w: %s forwards to %s", ErrTxForwarding, e.name, t.name))
		return
	}
	e.schedule(queue, msgs, true, func(evs []event.Event, err error) {
		held := make([]projection.HeldMessage, 0, len(evs))
		for i := range evs {
			if evs[i].Type == event.ScheduledHeld {
				held = append(held, projection.HeldMessage{Seq: evs[i].Index, MessageID: evs[i].MessageID})
			}
		}
		done(held, err)
	})
}

// schedule sends msgs, held or not, and hands done the events it wrote.
func (e *Entity) schedule(queue uint32, msgs []projection.Message, held bool, done func([]event.Event, error)) {
	e.touch(queue)
	if err := e.b.refuseNew(); err != nil {
		done(nil, err)
		return
	}
	t, hops, via, err := e.forwardTarget(queue, msgs)
	if err != nil {
		done(nil, err)
		return
	}
	t.readFilters(msgs)
	err = t.post(func(e *Entity) {
		evs, err := e.decide(projection.Send{Queue: queue, Messages: msgs, Hops: hops, Via: via, Nonce: e.topicNonce(),
			Held: held})
		if err != nil {
			done(nil, err)
			return
		}
		// Append sets each Index under the log's lock before the writer can
		// see the group, so done may read them.
		if err := e.commit(evs, func(err error) { done(evs, err) }); err != nil {
			done(nil, err)
		}
	})
	if err != nil {
		done(nil, err)
	}
}

// Cancel withdraws scheduled messages; numbers no longer scheduled are
// ignored. done runs once the cancellation is durable.
func (e *Entity) Cancel(queue uint32, seqs []uint64, done func(error)) {
	t, _, _, _ := e.forwardTarget(queue, nil)
	t.do(done, func(t *Entity) ([]event.Event, error) {
		return t.decide(projection.Cancel{Queue: queue, Seqs: seqs})
	})
}

// MaxDelete is the most messages one batch delete removes: Service Bus
// Premium's limit (Standard's is 500).
const MaxDelete = 4000

// Delete removes up to max messages of the queue enqueued before the time
// before (unix ns), oldest first, without delivering them: available,
// deferred and scheduled ones, never one a receiver holds locked. With
// session set, only that session's messages. done gets how many went, once
// their removal is durable.
func (e *Entity) Delete(queue uint32, max int, before int64, session string, done func(int, error)) {
	n := 0
	e.do(func(err error) { done(n, err) }, func(e *Entity) ([]event.Event, error) {
		seqs, err := e.deletable(queue, min(max, MaxDelete), before, session)
		if err != nil {
			return nil, err
		}
		evs, err := e.decide(projection.Delete{Queue: queue, Seqs: seqs})
		n = len(evs)
		return evs, err
	})
}

// deletable picks the messages a batch delete removes: walking the queue
// in SequenceNumber order, the first max that are not locked (and in the
// session, if one is named), up to the first enqueued at or after before.
// Enqueued times never fall as SequenceNumbers rise (an event's time is
// never before the last one's, see Entity.now), so the walk reads no
// record past the cut-off.
func (e *Entity) deletable(queue uint32, max int, before int64, session string) ([]uint64, error) {
	q, sessionNo, err := e.sessionOf(queue, session)
	if q == nil || err != nil {
		return nil, err
	}
	const page = 256
	var out []uint64
	for from := uint64(1); len(out) < max; {
		seqs := q.Peek(from, page, e.durable)
		for _, seq := range seqs {
			m, _ := q.Message(seq)
			if m.State == index.Locked || sessionNo != 0 && m.Session != sessionNo {
				continue
			}
			rec, err := e.record(seq, m.Pos)
			if err != nil {
				return nil, fmt.Errorf("read message %d for a batch delete: %w", seq, err)
			}
			if rec.Time >= before {
				return out, nil
			}
			if out = append(out, seq); len(out) == max {
				return out, nil
			}
		}
		if len(seqs) < page {
			break
		}
		from = seqs[len(seqs)-1] + 1
	}
	return out, nil
}

// sessionOf is the queue numbered queue and, when session is named, that
// session's number in it, for operations that go through a queue's
// messages and keep a session's. A queue without sessions refuses a
// session; an unknown session has no messages, which a nil queue says.
func (e *Entity) sessionOf(queue uint32, session string) (q *projection.Queue, sessionNo uint32, err error) {
	q = e.st.Queue(queue)
	if q == nil {
		return nil, 0, projection.ErrInvalid
	}
	if session == "" {
		return q, 0, nil
	}
	if q.Sessions() == nil {
		return nil, 0, projection.ErrNotAllowed
	}
	s := q.Sessions().Get(session)
	if s == nil {
		return nil, 0, nil
	}
	return q, s.No, nil
}

// Settlement ends a message lock.
type Settlement struct {
	Token       event.LockToken
	Outcome     projection.Outcome
	Props       []byte // encoded AMQP map of application properties to set
	Reason      string // dead-letter reason
	Description string // dead-letter error description
}

// Settle ends the lock identified by s.Token with its outcome, from any
// link or by lock token alone. done runs once the outcome is durable, or
// with projection.ErrLockLost if the lock is gone.
func (e *Entity) Settle(queue uint32, s Settlement, done func(error)) {
	e.touch(queue)
	e.do(done, func(e *Entity) ([]event.Event, error) {
		evs, err := e.decide(projection.Settle{Queue: queue, Token: s.Token, Outcome: s.Outcome, Props: s.Props,
			Reason: s.Reason, Description: s.Description})
		e.countLockLost(err)
		return evs, err
	})
}

// Restore puts back receive-and-delete deliveries that never reached their
// receiver (its link closed while their removal was being made durable), so
// that a message is lost only once it was sent: each comes back at the end
// of its queue under a new SequenceNumber (see projection.Restore). done,
// if set, is called once they are durable again.
func (e *Entity) Restore(ds []Delivery, done func(error)) {
	if done == nil {
		done = func(err error) {
			if err != nil {
				e.logger().Error("receive-and-delete messages that never left could not be restored", "count", len(ds), "err", err)
			}
		}
	}
	byQueue := map[uint32][]projection.Restored{}
	var queues []uint32
	for i := range ds {
		d := &ds[i]
		if _, seen := byQueue[d.Queue]; !seen {
			queues = append(queues, d.Queue)
		}
		byQueue[d.Queue] = append(byQueue[d.Queue], restored(d))
	}
	e.do(done, func(e *Entity) ([]event.Event, error) {
		var evs []event.Event
		for _, q := range queues {
			more, err := e.decide(projection.Restore{Queue: q, Messages: byQueue[q]})
			if err != nil {
				return nil, err
			}
			evs = append(evs, more...)
		}
		return evs, nil
	})
}

// restored is a delivery as a Restored record keeps it, its overlays
// folded.
func restored(d *Delivery) projection.Restored {
	f := foldOverlays(d.Overlays)
	r := projection.Restored{Seq: d.Seq, Body: d.Message, MessageID: d.MessageID, SessionID: d.SessionID,
		Expires: d.ExpiresAt, Deliveries: d.Deliveries, Hops: d.Hops,
		Source: f.source, Reason: f.reason, Description: f.description, Props: f.props}
	for _, ov := range d.Overlays {
		if ov.Rule != "" {
			// A rule action's copy: its rule and changes go along.
			r.Copy = projection.EncodeCopy(ov.Rule, ov.Changes)
		}
	}
	return r
}

// folded is what a message's overlays come to in a record that carries
// them along (Forwarded, Restored): its latest dead-letter reason and
// description, where it was dead-lettered if it was forwarded, and every
// property map, oldest first.
type folded struct {
	reason, description, source string
	props                       []byte
}

func foldOverlays(overlays []Overlay) folded {
	var f folded
	for _, ov := range overlays {
		if ov.Type == event.DeadLettered || ov.Type == event.Forwarded || ov.Type == event.TransferDeadLettered ||
			ov.Type == event.Copied && ov.Reason != "" {
			f.reason, f.description = ov.Reason, ov.Description
		}
		if ov.Source != "" {
			f.source = ov.Source
		}
		f.props = append(f.props, ov.Props...)
	}
	return f
}

func (e *Entity) countLockLost(err error) {
	if errors.Is(err, projection.ErrLockLost) {
		e.stats.lockLost.Add(1)
	}
}

// do decides on the actor with decide, commits, and calls done when durable.
func (e *Entity) do(done func(error), decide func(*Entity) ([]event.Event, error)) {
	err := e.post(func(e *Entity) {
		evs, err := decide(e)
		if err != nil {
			done(err)
			return
		}
		if err := e.commit(evs, done); err != nil {
			done(err)
		}
	})
	if err != nil {
		done(err)
	}
}

// Renew extends message locks and reports their new locked-until times
// (unix ns), once durable. It fails as a whole on the first lock that is
// gone.
func (e *Entity) Renew(queue uint32, tokens []event.LockToken, done func([]int64, error)) {
	e.touch(queue)
	err := e.post(func(e *Entity) {
		var all []event.Event
		for _, t := range tokens {
			evs, err := e.decide(projection.Renew{Queue: queue, Token: t})
			e.countLockLost(err)
			if err != nil {
				done(nil, err)
				return
			}
			all = append(all, evs...)
		}
		until := make([]int64, len(all))
		for i, ev := range all {
			until[i] = ev.Until
		}
		if err := e.commit(all, func(err error) { done(until, err) }); err != nil {
			done(nil, err)
		}
	})
	if err != nil {
		done(nil, err)
	}
}

// Peek returns up to max messages of the queue with SequenceNumber >= from,
// in order and in any state, without locking them. With session set, only
// that session's messages.
func (e *Entity) Peek(queue uint32, from uint64, max int, session string) ([]Delivery, error) {
	e.touch(queue)
	return call(e, func(e *Entity) ([]Delivery, error) {
		q, sessionNo, err := e.sessionOf(queue, session)
		if q == nil || err != nil {
			return nil, err
		}
		var out []Delivery
		for len(out) < max {
			seqs := q.Peek(from, max, e.durable)
			for _, seq := range seqs {
				if m, _ := q.Message(seq); sessionNo != 0 && m.Session != sessionNo || m.Flags&index.FlagHeld != 0 {
					continue // another session's, or held for a transaction not yet committed
				}
				d, err := e.delivery(queue, seq)
				if err != nil {
					return nil, err
				}
				if out = append(out, d); len(out) == max {
					break
				}
			}
			if len(seqs) < max {
				break
			}
			from = seqs[len(seqs)-1] + 1
		}
		return out, nil
	})
}

// ReceiveDeferred receives deferred messages by SequenceNumber, locked for
// receiver (PeekLock) or removed (ReceiveAndDelete), with the given session
// if the receiver holds one. done gets them in the order asked; a
// ReceiveAndDelete result comes once the removal is durable.
func (e *Entity) ReceiveDeferred(queue uint32, receiver string, session string, seqs []uint64, mode Mode, done func([]Delivery, error)) {
	e.touch(queue)
	err := e.post(func(e *Entity) {
		evs, err := e.decide(projection.LockBySeq{Queue: queue, Receiver: receiver, Session: session, Seqs: seqs,
			PeekLock: mode == PeekLock, Nonce: e.rng.Uint64()})
		if err != nil {
			done(nil, err)
			return
		}
		out := make([]Delivery, 0, len(evs))
		for _, ev := range evs {
			d, err := e.delivery(queue, ev.Seq)
			if err != nil {
				done(nil, err)
				return
			}
			if ev.Type == event.Locked {
				d.Token, d.LockedUntil, d.State = ev.Token, ev.Until, index.Locked
			}
			out = append(out, d)
		}
		if mode == PeekLock {
			if err := e.commitLazy(evs); err != nil {
				done(nil, err)
				return
			}
			done(out, nil)
			return
		}
		if err := e.commit(evs, func(err error) { done(out, err) }); err != nil {
			done(nil, err)
		}
	})
	if err != nil {
		done(nil, err)
	}
}

// Counts returns how many messages the queue holds in each state.
func (e *Entity) Counts(queue uint32) (projection.Counts, error) {
	return call(e, func(e *Entity) (projection.Counts, error) {
		q := e.st.Queue(queue)
		if q == nil {
			return projection.Counts{}, projection.ErrInvalid
		}
		return q.Counts(), nil
	})
}

// MessageBytes is how much the entity's messages take (the records that
// MaxSizeInMegabytes counts), the administration API's SizeInBytes.
func (e *Entity) MessageBytes() (int64, error) {
	return call(e, func(e *Entity) (int64, error) { return int64(e.st.SizeBytes()), nil })
}

// Config returns the entity's config.
func (e *Entity) Config() (projection.Config, error) {
	return call(e, func(e *Entity) (projection.Config, error) { return e.st.Config(), nil })
}

// Sync waits until every request posted before it has been processed,
// the work that follows a batch of requests (handing out messages, arming
// timers) has run, and everything appended so far is durable.
func (e *Entity) Sync() error {
	ch := make(chan error, 1)
	if err := e.post(func(e *Entity) { e.syncs = append(e.syncs, ch) }); err != nil {
		return err
	}
	select {
	case err := <-ch:
		return err
	case <-e.done:
		return ErrClosed
	}
}

// Times are when the entity was created and last changed.
func (e *Entity) Times() (created, updated time.Time) {
	return time.Unix(0, e.created.Load()), time.Unix(0, e.updated.Load())
}

// Bytes is the size of the entity's log and archives on disk.
func (e *Entity) Bytes() int64 { return (*e.logRef.Load()).Bytes() + e.arcBytes.Load() }
