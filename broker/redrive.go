package broker

import (
	"fmt"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// MaxRedrive is the most dead-lettered messages one Redrive moves.
const MaxRedrive = 1000

// Redrive moves dead-lettered messages of queue's dead-letter queue back
// to queue (a queue's main queue or a subscription's): those of seqs, or,
// with seqs nil, the oldest up to MaxRedrive. Each comes back at the end
// of the queue under a new SequenceNumber, with its body and the property
// changes made to it, without its dead-letter reason, description and
// source, with a delivery count of zero and the queue's default time to
// live from now. Locked ones (a receiver is looking at them) and numbers
// not in the dead-letter queue are skipped. It is one atomic group of the
// entity's log (a Restored event in the queue, a Deleted one in its
// dead-letter queue, per message); done gets how many moved, once durable.
// Service Bus has no such operation: it is walbus's, for the console and
// `walbus dlq redrive`.
func (e *Entity) Redrive(queue uint32, seqs []uint64, done func(int, error)) {
	n := 0
	e.do(func(err error) { done(n, err) }, func(e *Entity) ([]event.Event, error) {
		if q := e.st.Queue(queue); q == nil || event.KindOf(queue) != event.KindMessages {
			return nil, fmt.Errorf("%w: no queue %d to re-drive to", projection.ErrInvalid, queue)
		}
		if queue == event.MainQueue && e.st.IsTopic() {
			return nil, fmt.Errorf("%w: a topic has no dead-letter queue; re-drive a subscription's", projection.ErrNotAllowed)
		}
		dlq := event.SubqueueOf(queue, event.KindDeadLetter)
		q := e.st.Queue(dlq)
		if seqs == nil {
			seqs = q.Peek(0, MaxRedrive, e.durable)
		}
		cfg := e.st.Config()
		if s := e.st.SubscriptionOf(queue); s != nil {
			cfg = s.Config()
		}
		var back []projection.Restored
		var gone []uint64
		for _, seq := range seqs {
			if m, ok := q.Message(seq); !ok || seq > e.durable || m.State == index.Locked {
				continue
			}
			d, err := e.delivery(dlq, seq)
			if err != nil {
				return nil, err
			}
			r := restored(&d)
			r.Source, r.Reason, r.Description, r.Deliveries, r.Expires = "", "", "", 0, 0
			if cfg.DefaultTTL > 0 {
				r.Expires = e.now() + int64(cfg.DefaultTTL)
			}
			back = append(back, r)
			gone = append(gone, seq)
		}
		if len(back) == 0 {
			return nil, nil
		}
		evs, err := e.decide(projection.Restore{Queue: queue, Messages: back})
		if err != nil {
			return nil, err
		}
		removed, err := e.decide(projection.Delete{Queue: dlq, Seqs: gone})
		if err != nil {
			return nil, err
		}
		n = len(back)
		return append(evs, removed...), nil
	})
}
