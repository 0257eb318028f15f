package projection

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection/filter"
)

// Command is an input to Decide.
type Command interface{ isCommand() }

// Configure creates the entity (first event of its log) or changes its config.
type Configure struct {
	Name   string
	Config Config
}

// Send accepts messages atomically: all of them, or none with an error.
// A message with ScheduledAt in the future is scheduled instead.
type Send struct {
	Queue    uint32
	Messages []Message
	// Hops is how many ForwardTo links the send followed to reach this
	// entity (0 for one sent to it).
	Hops uint32
	// Forward, if set, makes this the arrival of one message auto-forwarded
	// from another entity's dead-letter queue. Duplicate detection (the
	// entity's own, and Via) does not apply to it; repeats of the same
	// forward are dropped by Forward.Source and Seq instead.
	Forward *Forward
	// Arrival, if set, makes this the arrival of messages from another
	// entity's transfer queue (send-via): they are sent as any others,
	// and repeats of an arrival are dropped by its Source and Seqs.
	Arrival *Arrival
	// Via lists the entities on the ForwardTo chain the send followed
	// (the one it was sent to first) that require duplicate detection,
	// in chain order. Each accepts a message only if it has not seen its
	// MessageId within its window, and then remembers it (a Remembered
	// event), as if it had stored the message and forwarded it on.
	Via []Via
	// Nonce is randomness from the shell, for newid() in a topic's rule
	// actions.
	Nonce uint64
	// Held schedules every message (at its ScheduledAt, or now) and holds
	// it for a transaction's commit (event.ScheduledHeld).
	Held bool
}

// Via is an entity on a send's ForwardTo chain whose duplicate detection
// applies, with its window.
type Via struct {
	Name   string
	Window time.Duration
}

// MaxHops is how many auto-forwards (ForwardTo links and dead-letter
// forwards) a message may take in all, as in Service Bus. A dead-letter
// forward that would take it further is refused with ErrTooManyHops.
const MaxHops = 4

// Forward describes a message auto-forwarded from the dead-letter queue of
// another entity (its ForwardDeadLetteredMessagesTo). The source forwards
// one message at a time and removes it only once the arrival is durable,
// so after a crash it may send the same message again; (Source, Seq) of
// the last arrival per source is remembered and a repeat is dropped.
type Forward struct {
	Source      uint64 // the source entity's id
	SourceName  string // its name: the message's dead-letter source
	Seq         uint64 // the message's SequenceNumber there
	Reason      string // its dead-letter reason and description there
	Description string
	Props       []byte // the property maps its overlays there set, concatenated, oldest first
	// Hops is the auto-forwards the message had taken to reach the source,
	// plus this one; the arrival's hops add the Send's.
	Hops uint32
}

// Message is one message to send, with the fields the broker acts on
// extracted from its encoding.
type Message struct {
	Body        []byte // the bare AMQP message as received
	MessageID   string
	SessionID   string
	TTL         time.Duration // 0: the entity default, if any
	ScheduledAt int64         // unix ns; 0 or past: enqueue now
	// Filter is what a topic's rules see of the message (its system and
	// application properties), or nil: then they see only its MessageId
	// and SessionId. Each message has its own: Decide fills in the
	// properties the broker assigns (EnqueuedTimeUtc, Size, ...).
	Filter *filter.Message
}

// Cancel withdraws scheduled messages. Numbers that are not (or no longer)
// scheduled are ignored: a cancel that loses the race with activation leaves
// the message active.
type Cancel struct {
	Queue uint32
	Seqs  []uint64
}

// Delete removes the messages Seqs names, unread, whatever their state
// (available, deferred or scheduled) but locked: a receiver holding a lock
// keeps its message. The shell picks them (a batch delete takes the oldest
// enqueued before a time, which only the log records); numbers that are
// gone or locked are passed over.
type Delete struct {
	Queue uint32
	Seqs  []uint64
}

// Activate makes due scheduled message Seq live. Record is its Scheduled
// event as read from the log by the shell (Decide cannot read the log).
type Activate struct {
	Queue  uint32
	Seq    uint64
	Record event.Event
	// Filter and Nonce are a topic's, as for Send: what its rules see of
	// the message, and randomness for their newid().
	Filter *filter.Message
	Nonce  uint64
}

// Lock takes up to Max available messages for a peek-lock receiver, oldest
// first. A session receiver names the session it holds. Messages whose
// arrival in the queue is above Limit (not yet durable: the SequenceNumber,
// or in a dead-letter queue the record that moved the message there) are
// not handed out.
type Lock struct {
	Queue    uint32
	Receiver string
	Session  string
	Max      int
	Limit    uint64
	Nonce    uint64 // randomness for lock tokens, from the shell
}

// ReceiveAndDelete takes up to Max available messages and removes them.
type ReceiveAndDelete struct {
	Queue    uint32
	Receiver string
	Session  string
	Max      int
	Limit    uint64
}

// LockBySeq receives deferred messages by SequenceNumber, locking them
// (PeekLock) or removing them. All must exist and be deferred.
type LockBySeq struct {
	Queue    uint32
	Receiver string
	Session  string
	Seqs     []uint64
	PeekLock bool
	Nonce    uint64
}

// Restore puts back messages a receive-and-delete receiver took but could
// not deliver: its link closed while their removal was being made durable.
// Each comes back at the end of its queue under a new SequenceNumber (its
// old one is gone from the log's point of view: the removal is durable),
// with its body, expiry, delivery count and property changes. Duplicate
// detection does not see it: the message was accepted before, and the size
// limit is not applied again for the same reason.
type Restore struct {
	Queue    uint32
	Messages []Restored
}

// Restored is one message of a Restore.
type Restored struct {
	Seq        uint64 // its SequenceNumber before
	Body       []byte // the bare AMQP message as the client sent it
	MessageID  string
	SessionID  string
	Expires    int64  // unix ns; 0 = never (dead-letter queues ignore it)
	Deliveries uint16 // failed delivery attempts so far
	Hops       uint32 // auto-forwards taken to get here
	// Its property changes, folded: the dead-letter source (a message
	// forwarded from another entity's dead-letter queue), its dead-letter
	// reason and description (in a dead-letter queue), and the property
	// maps of its overlays, concatenated, oldest first.
	Source      string
	Reason      string
	Description string
	Props       []byte
	// A rule action's copy also keeps what made it one: Copy, as
	// EncodeCopy writes it (the rule and the action's changes).
	Copy []byte
}

// Outcome is how a receiver settles a locked message.
type Outcome uint8

const (
	Complete Outcome = iota + 1
	Abandon
	Release
	Defer
	DeadLetter
)

func (o Outcome) String() string {
	return [...]string{"invalid", "complete", "abandon", "release", "defer", "dead-letter"}[min(int(o), 5)]
}

// Settle ends a lock with an outcome. Props (an encoded AMQP map) modifies
// the message's application properties for abandon, defer and dead-letter.
type Settle struct {
	Queue       uint32
	Token       event.LockToken
	Outcome     Outcome
	Props       []byte
	Reason      string
	Description string
}

// Renew extends a message lock by the lock duration from now.
type Renew struct {
	Queue uint32
	Token event.LockToken
}

// Tick acts on every timer due at now: lock expiry, message expiry and
// session lock expiry. (Activation needs the log: see DueScheduled.)
type Tick struct{}

// Checkpoint records that nothing happened (event.Checkpoint), so that a
// snapshot of an idle entity can be taken at a new index.
type Checkpoint struct{}

// AcceptSession locks session SessionID, or with an empty SessionID the free
// session whose oldest message has waited longest.
type AcceptSession struct {
	Queue     uint32
	SessionID string
	Receiver  string
}

// RenewSession extends the receiver's session lock.
type RenewSession struct {
	Queue     uint32
	SessionID string
	Receiver  string
}

// ReleaseSession lets a session go (its receiver closed): messages it still
// holds locked are released without counting a delivery.
type ReleaseSession struct {
	Queue     uint32
	SessionID string
	Receiver  string
}

// SetSessionState replaces a held session's state; nil or empty clears it.
type SetSessionState struct {
	Queue     uint32
	SessionID string
	Receiver  string
	State     []byte
}

func (Configure) isCommand()        {}
func (Send) isCommand()             {}
func (Cancel) isCommand()           {}
func (Delete) isCommand()           {}
func (Activate) isCommand()         {}
func (Lock) isCommand()             {}
func (ReceiveAndDelete) isCommand() {}
func (Restore) isCommand()          {}
func (LockBySeq) isCommand()        {}
func (Settle) isCommand()           {}
func (Renew) isCommand()            {}
func (Tick) isCommand()             {}
func (Checkpoint) isCommand()       {}
func (AcceptSession) isCommand()    {}
func (RenewSession) isCommand()     {}
func (ReleaseSession) isCommand()   {}
func (SetSessionState) isCommand()  {}

// Dead-letter reasons the broker itself uses (Service Bus's wording).
const (
	ReasonMaxDeliveryCount = "MaxDeliveryCountExceeded"
	ReasonTTLExpired       = "TTLExpiredException"
)

// Decide returns the events cmd produces at time now (unix ns), or an error
// if it cannot be done. It never changes e; the caller appends the events to
// the log and applies them.
func (e *Entity) Decide(cmd Command, now int64) ([]event.Event, error) {
	d := decision{e: e, now: now}
	var err error
	switch c := cmd.(type) {
	case Configure:
		err = d.configure(c)
	case Send:
		err = d.send(c)
	case Cancel:
		err = d.cancel(c)
	case Delete:
		err = d.delete(c)
	case Activate:
		err = d.activate(c)
	case Lock:
		err = d.take(c.Queue, c.Receiver, c.Session, c.Max, c.Limit, true, c.Nonce)
	case ReceiveAndDelete:
		err = d.take(c.Queue, c.Receiver, c.Session, c.Max, c.Limit, false, 0)
	case Restore:
		err = d.restore(c)
	case LockBySeq:
		err = d.lockBySeq(c)
	case Settle:
		err = d.settle(c)
	case Renew:
		err = d.renew(c)
	case Tick:
		d.tick()
	case Checkpoint:
		d.emit(event.Event{Type: event.Checkpoint})
	case AcceptSession:
		err = d.acceptSession(c)
	case RenewSession:
		err = d.renewSession(c)
	case ReleaseSession:
		err = d.releaseSession(c)
	case SetSessionState:
		err = d.setSessionState(c)
	case TransferDeadLetter:
		err = d.transferDeadLetter(c)
	case Transfer:
		err = d.transfer(c)
	case TransferDone:
		err = d.transferDone(c)
	case Confirm:
		err = d.confirm(c)
	case CreateSubscription:
		err = d.createSubscription(c)
	case UpdateSubscription:
		err = d.updateSubscription(c)
	case DeleteSubscription:
		err = d.deleteSubscription(c)
	case AddRule:
		err = d.addRule(c)
	case RemoveRule:
		err = d.removeRule(c)
	default:
		err = fmt.Errorf("%w: unknown command %T", ErrInvalid, cmd)
	}
	if err != nil {
		return nil, err
	}
	return d.out, nil
}

// decision accumulates the events of one Decide call.
type decision struct {
	e   *Entity
	now int64
	out []event.Event
}

func (d *decision) emit(ev event.Event) {
	ev.Time = d.now
	d.out = append(d.out, ev)
}

func (d *decision) queue(no uint32) (*Queue, error) {
	q := d.e.Queue(no)
	if q == nil {
		return nil, fmt.Errorf("%w: no queue %d", ErrInvalid, no)
	}
	return q, nil
}

func (d *decision) configure(c Configure) error {
	if err := c.Config.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	typ := event.EntityUpdated
	if !d.e.created {
		typ = event.EntityCreated
	} else if c.Config.Topic != d.e.cfg.Topic {
		return fmt.Errorf("%w: a queue cannot become a topic, nor a topic a queue", ErrNotAllowed)
	} else if c.Config.RequiresSession != d.e.cfg.RequiresSession {
		// Service Bus does not allow this change either: messages would
		// lose or lack their grouping.
		return fmt.Errorf("%w: RequiresSession cannot change after creation", ErrNotAllowed)
	}
	d.emit(event.Event{Type: typ, Name: c.Name, Props: c.Config.Encode()})
	return nil
}

// expiry is the unix-ns time a message sent at now with ttl expires, with the
// entity default as both default and ceiling; 0 means never.
func (d *decision) expiry(ttl time.Duration) int64 {
	if def := d.e.cfg.DefaultTTL; def > 0 && (ttl <= 0 || ttl > def) {
		ttl = def
	}
	if ttl <= 0 {
		return 0
	}
	if d.now > math.MaxInt64-int64(ttl) {
		return math.MaxInt64
	}
	return d.now + int64(ttl)
}

// quota refuses msgs when the entity holds MaxSizeMB already, or would
// with them, as Service Bus refuses a send to a full entity; it takes
// sends again once receivers have drained it.
func (e *Entity) quota(msgs []Message) error {
	if e.cfg.MaxSizeMB <= 0 {
		return nil // not set: no quota (Service Bus's default of 1024 is reported, not applied)
	}
	limit := uint64(e.cfg.MaxSizeMB) << 20
	size := e.SizeBytes()
	for _, m := range msgs {
		size += uint64(len(m.Body))
	}
	if size > limit {
		return fmt.Errorf("%w: the entity holds %d bytes of messages, its MaxSizeInMegabytes is %d", ErrQuotaExceeded,
			e.SizeBytes(), e.cfg.MaxSizeMB)
	}
	return nil
}

func (d *decision) send(c Send) error {
	q, err := d.queue(c.Queue)
	if err != nil {
		return err
	}
	if isDeadLetterQueue(c.Queue) {
		return fmt.Errorf("%w: messages cannot be sent to a dead-letter queue", ErrNotAllowed)
	}
	if q.transfer {
		return fmt.Errorf("%w: messages reach the transfer queue only through a transfer", ErrNotAllowed)
	}
	if c.Arrival != nil {
		if c.Forward != nil {
			return fmt.Errorf("%w: a send is a forward or an arrival, not both", ErrInvalid)
		}
		fresh, err := d.e.fresh(c.Arrival, c.Messages)
		if err != nil {
			return err
		}
		if len(fresh) == 0 {
			return nil // arrived before: the source is repeating it after a crash
		}
		c.Messages = fresh
		// Recorded before the messages, in the same atomic group.
		d.emit(event.Event{Type: event.Arrived, Source: c.Arrival.Source, Seq: c.Arrival.Seqs[len(c.Arrival.Seqs)-1]})
	}
	topic := d.e.IsTopic()
	if topic && c.Queue != event.MainQueue {
		return fmt.Errorf("%w: messages cannot be sent to a subscription", ErrNotAllowed)
	}
	cfg := d.e.cfg
	if err := d.e.quota(c.Messages); err != nil {
		return err
	}
	if f := c.Forward; f != nil {
		if len(c.Messages) != 1 {
			return fmt.Errorf("%w: a forward carries one message, not %d", ErrInvalid, len(c.Messages))
		}
		m := c.Messages[0]
		switch {
		case d.e.forwarded[f.Source] == f.Seq:
			return nil // arrived before: the source is repeating it after a crash
		case len(m.Body) > cfg.MaxMessageSize:
			return fmt.Errorf("%w: %d bytes, limit %d", ErrMessageTooLarge, len(m.Body), cfg.MaxMessageSize)
		case q.sessions != nil && m.SessionID == "":
			return ErrSessionIDRequired
		case f.Hops+c.Hops > MaxHops:
			return fmt.Errorf("%w: it would take %d", ErrTooManyHops, f.Hops+c.Hops)
		}
		d.emit(event.Event{Type: event.Forwarded, Queue: c.Queue, Until: d.expiry(m.TTL), MessageID: m.MessageID,
			SessionID: m.SessionID, Name: f.SourceName, Source: f.Source, Seq: f.Seq, Reason: f.Reason,
			Description: f.Description, Props: f.Props, Message: m.Body, Hops: f.Hops + c.Hops})
		if topic {
			d.routeForwarded(m, f.SourceName, d.out[len(d.out)-1].Until, c.Nonce)
		}
		return nil
	}
	var batchIDs map[string]bool
	var viaIDs map[viaID]bool
	if len(c.Via) > 0 {
		viaIDs = make(map[viaID]bool)
	}
	d.out = slices.Grow(d.out, len(c.Messages))
	for _, m := range c.Messages {
		if len(m.Body) > cfg.MaxMessageSize {
			return fmt.Errorf("%w: %d bytes, limit %d", ErrMessageTooLarge, len(m.Body), cfg.MaxMessageSize)
		}
		if q.sessions != nil && m.SessionID == "" {
			return ErrSessionIDRequired
		}
		if len(c.Via) > 0 && m.MessageID != "" && d.droppedOnTheWay(c.Via, m.MessageID, viaIDs) {
			continue // accepted and dropped by an entity it passed
		}
		if cfg.RequiresDuplicateDetection && m.MessageID != "" {
			if d.e.dedup.Seen(m.MessageID, d.now-int64(cfg.DuplicateWindow)) || batchIDs[m.MessageID] {
				continue // accepted and dropped
			}
			if batchIDs == nil {
				batchIDs = make(map[string]bool)
			}
			batchIDs[m.MessageID] = true
		}
		if c.Held {
			d.emit(event.Event{Type: event.ScheduledHeld, Queue: c.Queue, Until: max(m.ScheduledAt, d.now), TTL: int64(m.TTL),
				MessageID: m.MessageID, SessionID: m.SessionID, Message: m.Body, Hops: c.Hops})
			continue
		}
		if m.ScheduledAt > d.now {
			d.emit(event.Event{Type: event.Scheduled, Queue: c.Queue, Until: m.ScheduledAt, TTL: int64(m.TTL),
				MessageID: m.MessageID, SessionID: m.SessionID, Message: m.Body, Hops: c.Hops})
			continue
		}
		if topic {
			d.publish(m, 0, d.expiry(m.TTL), c.Hops, c.Nonce+uint64(len(d.out)))
			continue
		}
		d.emit(event.Event{Type: event.Enqueued, Queue: c.Queue, Until: d.expiry(m.TTL),
			MessageID: m.MessageID, SessionID: m.SessionID, Message: m.Body, Hops: c.Hops})
	}
	return nil
}

// viaID is a MessageId that an entity on a send's way accepted.
type viaID struct{ via, id string }

// droppedOnTheWay runs the duplicate detection of the entities a send
// passed on its ForwardTo chain, in order, for one message: the first that
// has seen id (before, or earlier in the same send) drops it; each one
// before that accepts it and remembers it. batch holds what the send's
// earlier messages were accepted as.
func (d *decision) droppedOnTheWay(via []Via, id string, batch map[viaID]bool) bool {
	for _, v := range via {
		key := viaID{viaKey(v.Name), id}
		if d.e.seenVia(key.via, id, d.now-int64(v.Window)) || batch[key] {
			return true
		}
		batch[key] = true
		d.emit(event.Event{Type: event.Remembered, Name: v.Name, MessageID: id, Until: d.now + int64(v.Window)})
	}
	return false
}

func (d *decision) restore(c Restore) error {
	q, err := d.queue(c.Queue)
	if err != nil {
		return err
	}
	for _, m := range c.Messages {
		if q.sessions != nil && m.SessionID == "" {
			return ErrSessionIDRequired
		}
		until := m.Expires
		if isDeadLetterQueue(c.Queue) {
			until = 0
		}
		typ := event.Restored
		if m.Copy != nil {
			typ = event.RestoredCopy
		}
		d.emit(event.Event{Type: typ, Queue: c.Queue, Seq: m.Seq, Until: until, Deliveries: uint32(m.Deliveries),
			MessageID: m.MessageID, SessionID: m.SessionID, Name: m.Source, Reason: m.Reason,
			Description: m.Description, Props: m.Props, State: m.Copy, Message: m.Body, Hops: m.Hops})
	}
	return nil
}

func (d *decision) cancel(c Cancel) error {
	return d.drop(c.Queue, c.Seqs, event.ScheduleCancelled, func(m index.Meta) bool { return m.State == index.Scheduled })
}

func (d *decision) delete(c Delete) error {
	return d.drop(c.Queue, c.Seqs, event.Deleted, func(m index.Meta) bool { return m.State != index.Locked })
}

// drop emits an event of type typ for each message of seqs (in order, once
// each) that is in the queue and that may go.
func (d *decision) drop(queue uint32, seqs []uint64, typ event.Type, may func(index.Meta) bool) error {
	q, err := d.queue(queue)
	if err != nil {
		return err
	}
	seqs = slices.Clone(seqs)
	slices.Sort(seqs)
	for _, seq := range slices.Compact(seqs) {
		if m, ok := q.msgs.Get(seq); ok && may(m) {
			d.emit(event.Event{Type: typ, Queue: queue, Seq: seq})
		}
	}
	return nil
}

func (d *decision) activate(c Activate) error {
	q, err := d.queue(c.Queue)
	if err != nil {
		return err
	}
	m, ok := q.msgs.Get(c.Seq)
	if !ok || m.State != index.Scheduled || m.Flags&index.FlagHeld != 0 {
		return nil // cancelled meanwhile, or held for a transaction
	}
	r := c.Record
	if r.Type != event.Scheduled && r.Type != event.ScheduledHeld || r.Index != c.Seq {
		return fmt.Errorf("%w: activation of %d given record %s %d", ErrInvalid, c.Seq, r.Type, r.Index)
	}
	if d.e.IsTopic() {
		d.publish(Message{Body: r.Message, MessageID: r.MessageID, SessionID: r.SessionID, Filter: c.Filter},
			c.Seq, d.expiry(time.Duration(r.TTL)), r.Hops, c.Nonce)
		return nil
	}
	d.emit(event.Event{Type: event.Activated, Queue: c.Queue, Seq: c.Seq, Until: d.expiry(time.Duration(r.TTL)),
		MessageID: r.MessageID, SessionID: r.SessionID, Message: r.Message, Hops: r.Hops})
	return nil
}

// take hands out up to max available messages, oldest first, locking them or
// removing them. Messages whose time to live ran out are expired on the way.
func (d *decision) take(no uint32, receiver, session string, max int, limit uint64, peekLock bool, nonce uint64) error {
	q, err := d.queue(no)
	if err != nil {
		return err
	}
	if max <= 0 {
		return nil
	}
	candidates := q.available
	until := d.now + int64(q.cfg.LockDuration)
	if q.sessions != nil {
		s := q.sessions.Get(session)
		if session == "" || s == nil || s.Owner != receiver || s.LockedUntil <= d.now {
			return ErrSessionLockLost
		}
		candidates, until = s.Available, s.LockedUntil
	} else if session != "" {
		return fmt.Errorf("%w: the entity does not use sessions", ErrNotAllowed)
	}
	expired := d.expireDue(q)
	it := candidates.Iterator()
	for taken := 0; taken < max && it.HasNext(); {
		seq := it.Next()
		if seq > limit {
			break
		}
		if expired[seq] || isDeadLetterQueue(no) && q.arrival(seq) > limit {
			continue
		}
		if peekLock {
			d.emit(event.Event{Type: event.Locked, Queue: no, Seq: seq, Token: index.MakeToken(seq, mix(nonce, seq)),
				Until: until, Receiver: receiver})
		} else {
			d.emit(event.Event{Type: event.ReceivedAndDeleted, Queue: no, Seq: seq, Receiver: receiver})
		}
		taken++
	}
	return nil
}

// expireDue emits the expiry of every available message of q whose time to
// live has run out, and returns their numbers.
func (d *decision) expireDue(q *Queue) map[uint64]bool {
	var due []uint64
	q.ttlTimers.Due(d.now, func(t index.Timer) {
		if q.ttlActionable(t) {
			due = append(due, t.Key)
		}
	})
	if len(due) == 0 {
		return nil
	}
	slices.Sort(due)
	due = slices.Compact(due)
	expired := make(map[uint64]bool, len(due))
	for _, seq := range due {
		d.expire(q, seq)
		expired[seq] = true
	}
	return expired
}

func (d *decision) expire(q *Queue, seq uint64) {
	if q.cfg.DeadLetterOnExpiry {
		d.emit(event.Event{Type: event.DeadLettered, Queue: q.No, Seq: seq, Reason: ReasonTTLExpired,
			Description: "The message expired and was dead lettered."})
		return
	}
	d.emit(event.Event{Type: event.Expired, Queue: q.No, Seq: seq})
}

func (d *decision) lockBySeq(c LockBySeq) error {
	q, err := d.queue(c.Queue)
	if err != nil {
		return err
	}
	var s *index.Session
	if c.Session != "" && q.sessions != nil {
		if s = q.sessions.Get(c.Session); s == nil || s.Owner != c.Receiver || s.LockedUntil <= d.now {
			return ErrSessionLockLost
		}
	}
	until := d.now + int64(q.cfg.LockDuration)
	if s != nil {
		until = s.LockedUntil
	}
	seen := map[uint64]bool{}
	for _, seq := range c.Seqs {
		m, ok := q.msgs.Get(seq)
		if !ok || m.State != index.Deferred || s != nil && m.Session != s.No {
			return fmt.Errorf("%w: no deferred message with SequenceNumber %d", ErrMessageNotFound, seq)
		}
		if seen[seq] {
			continue
		}
		seen[seq] = true
		if c.PeekLock {
			d.emit(event.Event{Type: event.Locked, Queue: c.Queue, Seq: seq, Token: index.MakeToken(seq, mix(c.Nonce, seq)),
				Until: until, Receiver: c.Receiver})
		} else {
			d.emit(event.Event{Type: event.ReceivedAndDeleted, Queue: c.Queue, Seq: seq, Receiver: c.Receiver})
		}
	}
	return nil
}

// heldLock returns the message a token locks, if the lock is still held.
func (d *decision) heldLock(q *Queue, token event.LockToken) (uint64, index.Meta, error) {
	seq := index.TokenSeq(token)
	lk, ok := q.locks.Get(seq)
	if !ok || lk.Token != token {
		return 0, index.Meta{}, ErrLockLost
	}
	m, _ := q.msgs.Get(seq)
	if m.Session != 0 {
		// A session's messages are held by the session's lock: when it
		// has run out, that is what the client is told, even before the
		// timer has released the session.
		if s := q.sessions.ByNo(m.Session); s == nil || s.Owner == "" || s.LockedUntil <= d.now {
			return 0, index.Meta{}, ErrSessionLockLost
		}
	}
	if lk.Until <= d.now {
		return 0, index.Meta{}, ErrLockLost
	}
	return seq, m, nil
}

func (d *decision) settle(c Settle) error {
	q, err := d.queue(c.Queue)
	if err != nil {
		return err
	}
	seq, m, err := d.heldLock(q, c.Token)
	if err != nil {
		return err
	}
	switch c.Outcome {
	case Complete:
		d.emit(event.Event{Type: event.Completed, Queue: c.Queue, Seq: seq})
	case Abandon:
		d.emit(event.Event{Type: event.Abandoned, Queue: c.Queue, Seq: seq, Props: c.Props})
		d.afterFailedDelivery(q, seq, m)
	case Release:
		d.emit(event.Event{Type: event.Released, Queue: c.Queue, Seq: seq})
	case Defer:
		d.emit(event.Event{Type: event.Deferred, Queue: c.Queue, Seq: seq, Props: c.Props})
	case DeadLetter:
		if q.transfer {
			return fmt.Errorf("%w: the transfer queue's messages are not dead-lettered", ErrNotAllowed)
		}
		if isDeadLetterQueue(c.Queue) {
			return fmt.Errorf("%w: a dead-lettered message cannot be dead-lettered again", ErrNotAllowed)
		}
		d.emit(event.Event{Type: event.DeadLettered, Queue: c.Queue, Seq: seq, Reason: c.Reason,
			Description: c.Description, Props: c.Props})
	default:
		return fmt.Errorf("%w: outcome %d", ErrInvalid, c.Outcome)
	}
	return nil
}

// afterFailedDelivery follows an abandon or a lock expiry of message seq:
// past the entity's MaxDeliveryCount it goes to the dead-letter queue.
// (Its expiry, if due, follows on the next Tick: it is available again.)
func (d *decision) afterFailedDelivery(q *Queue, seq uint64, m index.Meta) {
	if isDeadLetterQueue(q.No) || q.transfer || int(m.Deliveries)+1 < q.cfg.MaxDeliveryCount {
		return
	}
	d.emit(event.Event{Type: event.DeadLettered, Queue: q.No, Seq: seq, Reason: ReasonMaxDeliveryCount,
		Description: fmt.Sprintf("Message could not be consumed after %d delivery attempts.", q.cfg.MaxDeliveryCount)})
}

func (d *decision) renew(c Renew) error {
	q, err := d.queue(c.Queue)
	if err != nil {
		return err
	}
	seq, m, err := d.heldLock(q, c.Token)
	if err != nil {
		return err
	}
	if m.Session != 0 {
		return fmt.Errorf("%w: messages of a session are locked by the session lock; renew that instead", ErrNotAllowed)
	}
	d.emit(event.Event{Type: event.LockRenewed, Queue: c.Queue, Seq: seq, Until: d.now + int64(q.cfg.LockDuration)})
	return nil
}

func (d *decision) tick() {
	for _, q := range d.e.liveQueues() {
		// Session locks first: their messages' locks end with them.
		if q.sessions != nil {
			var due []*index.Session
			q.sessionTimers.Due(d.now, func(t index.Timer) {
				if q.sessionLive(t) {
					due = append(due, q.sessions.ByNo(uint32(t.Key)))
				}
			})
			slices.SortFunc(due, func(a, b *index.Session) int {
				if c := cmp.Compare(a.LockedUntil, b.LockedUntil); c != 0 {
					return c
				}
				return cmp.Compare(a.ID, b.ID)
			})
			for _, s := range slices.Compact(due) {
				d.endSession(q, s, false)
			}
		}
		var locks []index.Timer
		q.lockTimers.Due(d.now, func(t index.Timer) {
			if q.lockLive(t) {
				locks = append(locks, t)
			}
		})
		slices.SortFunc(locks, compareTimers)
		// The same lock can have two identical entries (relocked at the
		// same instant after a release): act once.
		for _, t := range slices.Compact(locks) {
			if m, ok := q.msgs.Get(t.Key); ok && !d.sessionEnding(q, m) {
				d.emit(event.Event{Type: event.LockExpired, Queue: q.No, Seq: t.Key})
				d.afterFailedDelivery(q, t.Key, m)
			}
		}
		d.expireDue(q)
	}
}

// sessionEnding reports whether this decision already ended the session of
// message m (and with it m's lock).
func (d *decision) sessionEnding(q *Queue, m index.Meta) bool {
	if m.Session == 0 {
		return false
	}
	s := q.sessions.ByNo(m.Session)
	for _, ev := range d.out {
		if ev.Type == event.SessionUnlocked && ev.Queue == q.No && ev.SessionID == s.ID {
			return true
		}
	}
	return false
}

// endSession unlocks session s and ends the locks of its messages: counted as
// failed deliveries when the session lock expired, released when its
// receiver let go.
func (d *decision) endSession(q *Queue, s *index.Session, released bool) {
	it := s.Locked.Iterator()
	for it.HasNext() {
		seq := it.Next()
		if released {
			d.emit(event.Event{Type: event.Released, Queue: q.No, Seq: seq})
			continue
		}
		m, _ := q.msgs.Get(seq)
		d.emit(event.Event{Type: event.LockExpired, Queue: q.No, Seq: seq})
		d.afterFailedDelivery(q, seq, m)
	}
	d.emit(event.Event{Type: event.SessionUnlocked, Queue: q.No, SessionID: s.ID})
}

func (d *decision) sessionQueue(no uint32) (*Queue, error) {
	q, err := d.queue(no)
	if err != nil {
		return nil, err
	}
	if q.sessions == nil {
		return nil, fmt.Errorf("%w: the entity does not use sessions", ErrNotAllowed)
	}
	return q, nil
}

func (d *decision) acceptSession(c AcceptSession) error {
	q, err := d.sessionQueue(c.Queue)
	if err != nil {
		return err
	}
	if c.Receiver == "" {
		return fmt.Errorf("%w: a session receiver needs a name", ErrInvalid)
	}
	var s *index.Session
	if c.SessionID == "" {
		if s = q.sessions.NextFree(); s == nil {
			return ErrNoSession
		}
	} else if s = q.sessions.Get(c.SessionID); s != nil && s.Owner != "" {
		if s.LockedUntil > d.now {
			return ErrSessionCannotBeLocked
		}
		d.endSession(q, s, false) // expired, not yet ticked: end it first
	}
	id := c.SessionID
	if s != nil {
		id = s.ID
	}
	d.emit(event.Event{Type: event.SessionLocked, Queue: c.Queue, SessionID: id,
		Until: d.now + int64(q.cfg.LockDuration), Receiver: c.Receiver})
	return nil
}

// ownedSession returns the session the receiver holds, or ErrSessionLockLost.
func (d *decision) ownedSession(no uint32, id, receiver string) (*Queue, *index.Session, error) {
	q, err := d.sessionQueue(no)
	if err != nil {
		return nil, nil, err
	}
	s := q.sessions.Get(id)
	if s == nil || s.Owner != receiver || s.LockedUntil <= d.now {
		return nil, nil, ErrSessionLockLost
	}
	return q, s, nil
}

func (d *decision) renewSession(c RenewSession) error {
	q, s, err := d.ownedSession(c.Queue, c.SessionID, c.Receiver)
	if err != nil {
		return err
	}
	d.emit(event.Event{Type: event.SessionLockRenewed, Queue: c.Queue, SessionID: s.ID,
		Until: d.now + int64(q.cfg.LockDuration)})
	return nil
}

func (d *decision) releaseSession(c ReleaseSession) error {
	q, err := d.sessionQueue(c.Queue)
	if err != nil {
		return err
	}
	if s := q.sessions.Get(c.SessionID); s != nil && s.Owner == c.Receiver {
		d.endSession(q, s, true)
	}
	return nil
}

func (d *decision) setSessionState(c SetSessionState) error {
	_, s, err := d.ownedSession(c.Queue, c.SessionID, c.Receiver)
	if err != nil {
		return err
	}
	d.emit(event.Event{Type: event.SessionStateSet, Queue: c.Queue, SessionID: s.ID, State: c.State})
	return nil
}

func compareTimers(a, b index.Timer) int {
	if c := cmp.Compare(a.At, b.At); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}

// mix derives a lock token's secret half from the shell's nonce and the
// message, so one nonce serves a whole batch of locks (splitmix64).
func mix(nonce, seq uint64) uint64 {
	z := nonce + seq*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
