package projection

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
)

// model is a deliberately naive implementation of the same semantics: one
// flat map of messages, linear scans and sorting instead of bitmaps, heaps
// and session tables. The model-based test runs both on the same commands.
type model struct {
	cfg      Config
	created  bool
	msgs     map[uint64]*mMsg
	sessions map[string]*mSession
	dedup    map[string]int64
	via      map[string]map[string]int64 // lower-case entity name -> MessageId -> time it was accepted there
	lastFwd  map[uint64]uint64           // source id -> seq of the last forwarded arrival
	// arrived is the seq of the last send-via arrival per source. The
	// projection keeps both in one table; the history never uses a source
	// for both, so apart they behave the same.
	arrived  map[uint64]uint64
	transfer bool // the transfer queue exists: something was sent through
	last     uint64
}

type mMsg struct {
	seq      uint64
	queue    uint32
	state    index.State
	deferred bool
	// held: scheduled in a transaction that has not committed (a
	// ScheduledHeld record without its Confirmed yet); it does not
	// activate.
	held       bool
	activates  int64 // a scheduled message's activation time
	deliveries int
	session    string
	expires    int64
	overlays   []uint64 // indexes of the records modifying it
	token      event.LockToken
	lockUntil  int64
	receiver   string
}

type mSession struct {
	owner string
	until int64
	state []byte
}

func newModel() *model {
	return &model{msgs: map[uint64]*mMsg{}, sessions: map[string]*mSession{}, dedup: map[string]int64{},
		lastFwd: map[uint64]uint64{}, arrived: map[uint64]uint64{}, via: map[string]map[string]int64{}}
}

// queues are the model's queues in number order: those of every queue
// entity, and the transfer queue once the first transfer made it.
func (m *model) queues() []uint32 {
	if m.transfer {
		return append(slices.Clone(modelQueues), event.TransferQueue)
	}
	return modelQueues
}

// deadLetter reports whether queue no is a dead-letter queue (plain or
// transfer): nothing there counts deliveries or expires, and a message
// arrives there by the record that moved it.
func deadLetter(no uint32) bool {
	return no == event.DeadLetterQueue || no == event.TransferDeadLetterQueue
}

func (m *model) session(id string) *mSession {
	s := m.sessions[id]
	if s == nil {
		s = &mSession{}
		m.sessions[id] = s
	}
	return s
}

// inQueue returns the messages of queue no matching keep, by SequenceNumber.
func (m *model) inQueue(no uint32, keep func(*mMsg) bool) []*mMsg {
	var out []*mMsg
	for _, msg := range m.msgs {
		if msg.queue == no && keep(msg) {
			out = append(out, msg)
		}
	}
	slices.SortFunc(out, func(a, b *mMsg) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

type mDecision struct {
	m   *model
	now int64
	out []event.Event
}

func (d *mDecision) emit(ev event.Event) {
	ev.Time = d.now
	d.out = append(d.out, ev)
}

func (m *model) decide(cmd Command, now int64) ([]event.Event, error) {
	d := &mDecision{m: m, now: now}
	err := d.run(cmd)
	if err != nil {
		return nil, err
	}
	return d.out, nil
}

func (d *mDecision) run(cmd Command) error {
	m := d.m
	// Whatever names a queue the entity does not have is malformed (the
	// transfer queue exists from the first transfer on).
	if q := reflect.ValueOf(cmd).FieldByName("Queue"); q.IsValid() && !slices.Contains(m.queues(), uint32(q.Uint())) {
		return ErrInvalid
	}
	switch c := cmd.(type) {
	case Configure:
		typ := event.EntityUpdated
		if !m.created {
			typ = event.EntityCreated
		}
		d.emit(event.Event{Type: typ, Name: c.Name, Props: c.Config.Encode()})
	case Send:
		if c.Queue != event.MainQueue {
			return ErrNotAllowed
		}
		if a := c.Arrival; a != nil {
			if c.Forward != nil {
				return ErrInvalid
			}
			if len(a.Seqs) != len(c.Messages) || !slices.IsSorted(a.Seqs) || len(slices.Compact(slices.Clone(a.Seqs))) != len(a.Seqs) {
				return ErrInvalid
			}
			// Sources send in order: no higher than the last is a repeat.
			for last, ok := m.arrived[a.Source]; ok && len(a.Seqs) > 0 && a.Seqs[0] <= last; {
				a = &Arrival{Source: a.Source, Seqs: a.Seqs[1:]}
				c.Messages = c.Messages[1:]
			}
			if len(c.Messages) == 0 {
				return nil
			}
			d.emit(event.Event{Type: event.Arrived, Source: a.Source, Seq: a.Seqs[len(a.Seqs)-1]})
		}
		if f := c.Forward; f != nil {
			msg := c.Messages[0]
			if last, ok := m.lastFwd[f.Source]; ok && last == f.Seq {
				return nil
			}
			if len(msg.Body) > m.cfg.MaxMessageSize {
				return ErrMessageTooLarge
			}
			if m.cfg.RequiresSession && msg.SessionID == "" {
				return ErrSessionIDRequired
			}
			d.emit(event.Event{Type: event.Forwarded, Queue: c.Queue, Until: d.expiry(msg.TTL), MessageID: msg.MessageID,
				SessionID: msg.SessionID, Name: f.SourceName, Source: f.Source, Seq: f.Seq, Reason: f.Reason,
				Description: f.Description, Props: f.Props, Message: msg.Body})
			return nil
		}
		batch := map[string]bool{}
		viaBatch := map[string]bool{}
	messages:
		for _, msg := range c.Messages {
			if len(msg.Body) > m.cfg.MaxMessageSize {
				return ErrMessageTooLarge
			}
			if m.cfg.RequiresSession && msg.SessionID == "" {
				return ErrSessionIDRequired
			}
			for _, v := range c.Via {
				if msg.MessageID == "" {
					break
				}
				name := strings.ToLower(v.Name)
				at, seen := m.via[name][msg.MessageID]
				if seen && at >= d.now-int64(v.Window) || viaBatch[name+"/"+msg.MessageID] {
					continue messages
				}
				viaBatch[name+"/"+msg.MessageID] = true
				d.emit(event.Event{Type: event.Remembered, Name: v.Name, MessageID: msg.MessageID, Until: d.now + int64(v.Window)})
			}
			if m.cfg.RequiresDuplicateDetection && msg.MessageID != "" {
				at, seen := m.dedup[msg.MessageID]
				if seen && at >= d.now-int64(m.cfg.DuplicateWindow) || batch[msg.MessageID] {
					continue
				}
				batch[msg.MessageID] = true
			}
			if c.Held {
				// Scheduled whenever it is due, now at the earliest, and
				// held for the transaction's commit.
				d.emit(event.Event{Type: event.ScheduledHeld, Queue: c.Queue, Until: max(msg.ScheduledAt, d.now), TTL: int64(msg.TTL),
					MessageID: msg.MessageID, SessionID: msg.SessionID, Message: msg.Body})
				continue
			}
			if msg.ScheduledAt > d.now {
				d.emit(event.Event{Type: event.Scheduled, Queue: c.Queue, Until: msg.ScheduledAt, TTL: int64(msg.TTL),
					MessageID: msg.MessageID, SessionID: msg.SessionID, Message: msg.Body})
			} else {
				d.emit(event.Event{Type: event.Enqueued, Queue: c.Queue, Until: d.expiry(msg.TTL),
					MessageID: msg.MessageID, SessionID: msg.SessionID, Message: msg.Body})
			}
		}
	case Transfer:
		// No size or session checks: the messages are for another entity,
		// which applies its own on arrival. (No quota either: the model's
		// configs set none.)
		if c.To == "" {
			return ErrInvalid
		}
		for _, msg := range c.Messages {
			d.emit(event.Event{Type: event.Transfer, Queue: event.TransferQueue, Until: max(msg.ScheduledAt, 0),
				TTL: int64(msg.TTL), MessageID: msg.MessageID, SessionID: msg.SessionID, Name: c.To, Message: msg.Body})
		}
	case TransferDone:
		if !m.transfer {
			return ErrInvalid
		}
		done := map[uint64]bool{}
		for _, seq := range c.Seqs {
			if msg := m.msgs[seq]; msg != nil && msg.queue == event.TransferQueue && !done[seq] {
				done[seq] = true
				d.emit(event.Event{Type: event.Completed, Queue: event.TransferQueue, Seq: seq})
			}
		}
	case Cancel:
		seqs := slices.Sorted(slices.Values(c.Seqs))
		for _, seq := range slices.Compact(seqs) {
			if msg := m.msgs[seq]; msg != nil && msg.queue == c.Queue && msg.state == index.Scheduled {
				d.emit(event.Event{Type: event.ScheduleCancelled, Queue: c.Queue, Seq: seq})
			}
		}
	case Delete:
		seqs := slices.Sorted(slices.Values(c.Seqs))
		for _, seq := range slices.Compact(seqs) {
			if msg := m.msgs[seq]; msg != nil && msg.queue == c.Queue && msg.state != index.Locked {
				d.emit(event.Event{Type: event.Deleted, Queue: c.Queue, Seq: seq})
			}
		}
	case Confirm:
		done := map[uint64]bool{}
		for _, hm := range c.Messages {
			if msg := m.msgs[hm.Seq]; msg != nil && msg.queue == c.Queue && msg.state == index.Scheduled && msg.held && !done[hm.Seq] {
				done[hm.Seq] = true
				d.emit(event.Event{Type: event.Confirmed, Queue: c.Queue, Seq: hm.Seq, MessageID: hm.MessageID})
			}
		}
	case Activate:
		if msg := m.msgs[c.Seq]; msg != nil && msg.held {
			// The shell activates only what DueScheduled lists, never a
			// held message: the projection listed one.
			return fmt.Errorf("model: activation of held message %d", c.Seq)
		}
		if msg := m.msgs[c.Seq]; msg != nil && msg.state == index.Scheduled {
			d.emit(event.Event{Type: event.Activated, Queue: c.Queue, Seq: c.Seq, Until: d.expiry(time.Duration(c.Record.TTL)),
				MessageID: c.Record.MessageID, SessionID: c.Record.SessionID, Message: c.Record.Message})
		}
	case Restore:
		for _, msg := range c.Messages {
			if m.cfg.RequiresSession && c.Queue == event.MainQueue && msg.SessionID == "" {
				return ErrSessionIDRequired
			}
			until := msg.Expires
			if deadLetter(c.Queue) {
				until = 0
			}
			d.emit(event.Event{Type: event.Restored, Queue: c.Queue, Seq: msg.Seq, Until: until, Deliveries: uint32(msg.Deliveries),
				MessageID: msg.MessageID, SessionID: msg.SessionID, Name: msg.Source, Reason: msg.Reason,
				Description: msg.Description, Props: msg.Props, Message: msg.Body})
		}
	case Lock:
		return d.take(c.Queue, c.Receiver, c.Session, c.Max, c.Limit, true, c.Nonce)
	case ReceiveAndDelete:
		return d.take(c.Queue, c.Receiver, c.Session, c.Max, c.Limit, false, 0)
	case LockBySeq:
		until := d.now + int64(m.cfg.LockDuration)
		if c.Session != "" && m.cfg.RequiresSession && c.Queue == event.MainQueue {
			s := m.sessions[c.Session]
			if s == nil || s.owner != c.Receiver || s.until <= d.now {
				return ErrSessionLockLost
			}
			until = s.until
		}
		seen := map[uint64]bool{}
		for _, seq := range c.Seqs {
			msg := m.msgs[seq]
			if msg == nil || msg.queue != c.Queue || msg.state != index.Deferred ||
				c.Session != "" && m.cfg.RequiresSession && c.Queue == event.MainQueue && msg.session != c.Session {
				return ErrMessageNotFound
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
	case Settle:
		msg, err := d.held(c.Queue, c.Token)
		if err != nil {
			return err
		}
		switch c.Outcome {
		case Complete:
			d.emit(event.Event{Type: event.Completed, Queue: c.Queue, Seq: msg.seq})
		case Abandon:
			d.emit(event.Event{Type: event.Abandoned, Queue: c.Queue, Seq: msg.seq, Props: c.Props})
			d.failed(msg)
		case Release:
			d.emit(event.Event{Type: event.Released, Queue: c.Queue, Seq: msg.seq})
		case Defer:
			d.emit(event.Event{Type: event.Deferred, Queue: c.Queue, Seq: msg.seq, Props: c.Props})
		case DeadLetter:
			if c.Queue != event.MainQueue { // a dead-letter queue's, or the transfer queue's
				return ErrNotAllowed
			}
			d.emit(event.Event{Type: event.DeadLettered, Queue: c.Queue, Seq: msg.seq, Reason: c.Reason,
				Description: c.Description, Props: c.Props})
		}
	case Renew:
		msg, err := d.held(c.Queue, c.Token)
		if err != nil {
			return err
		}
		if msg.session != "" && c.Queue == event.MainQueue && m.cfg.RequiresSession {
			return ErrNotAllowed
		}
		d.emit(event.Event{Type: event.LockRenewed, Queue: c.Queue, Seq: msg.seq, Until: d.now + int64(m.cfg.LockDuration)})
	case TransferDeadLetter:
		if c.Queue == event.TransferQueue {
			// The transfer queue holds no locks: its message is named.
			msg := m.msgs[c.Seq]
			if msg == nil || msg.queue != event.TransferQueue {
				return ErrInvalid
			}
			d.emit(event.Event{Type: event.TransferDeadLettered, Queue: c.Queue, Seq: msg.seq, Reason: c.Reason,
				Description: c.Description})
			return nil
		}
		msg, err := d.held(c.Queue, c.Token)
		if c.Queue != event.DeadLetterQueue {
			return ErrNotAllowed
		}
		if err != nil {
			return err
		}
		d.emit(event.Event{Type: event.TransferDeadLettered, Queue: c.Queue, Seq: msg.seq, Reason: c.Reason,
			Description: c.Description})
	case Checkpoint:
		d.emit(event.Event{Type: event.Checkpoint})
	case Tick:
		for _, no := range m.queues() {
			ended := map[string]bool{}
			if m.cfg.RequiresSession && no == event.MainQueue {
				var due []string
				for id, s := range m.sessions {
					if s.owner != "" && s.until <= d.now {
						due = append(due, id)
					}
				}
				slices.SortFunc(due, func(a, b string) int {
					if c := cmp.Compare(m.sessions[a].until, m.sessions[b].until); c != 0 {
						return c
					}
					return cmp.Compare(a, b)
				})
				for _, id := range due {
					d.endSession(id, false)
					ended[id] = true
				}
			}
			locked := m.inQueue(no, func(msg *mMsg) bool { return msg.state == index.Locked && msg.lockUntil <= d.now })
			slices.SortStableFunc(locked, func(a, b *mMsg) int { return cmp.Compare(a.lockUntil, b.lockUntil) })
			for _, msg := range locked {
				if ended[msg.session] && no == event.MainQueue && m.cfg.RequiresSession {
					continue
				}
				d.emit(event.Event{Type: event.LockExpired, Queue: no, Seq: msg.seq})
				d.failed(msg)
			}
			d.expireDue(no)
		}
	case AcceptSession:
		if !m.cfg.RequiresSession || c.Queue != event.MainQueue {
			return ErrNotAllowed
		}
		id := c.SessionID
		if id == "" {
			best := uint64(0)
			for _, msg := range m.inQueue(c.Queue, func(msg *mMsg) bool { return msg.state == index.Available }) {
				if s := m.sessions[msg.session]; (s == nil || s.owner == "") && (best == 0 || msg.seq < best) {
					best, id = msg.seq, msg.session
				}
			}
			if id == "" {
				return ErrNoSession
			}
		} else if s := m.sessions[id]; s != nil && s.owner != "" {
			if s.until > d.now {
				return ErrSessionCannotBeLocked
			}
			d.endSession(id, false)
		}
		d.emit(event.Event{Type: event.SessionLocked, Queue: c.Queue, SessionID: id,
			Until: d.now + int64(m.cfg.LockDuration), Receiver: c.Receiver})
	case RenewSession:
		if err := d.owned(c.Queue, c.SessionID, c.Receiver); err != nil {
			return err
		}
		d.emit(event.Event{Type: event.SessionLockRenewed, Queue: c.Queue, SessionID: c.SessionID,
			Until: d.now + int64(m.cfg.LockDuration)})
	case ReleaseSession:
		if !m.cfg.RequiresSession || c.Queue != event.MainQueue {
			return ErrNotAllowed
		}
		if s := m.sessions[c.SessionID]; s != nil && s.owner == c.Receiver {
			d.endSession(c.SessionID, true)
		}
	case SetSessionState:
		if err := d.owned(c.Queue, c.SessionID, c.Receiver); err != nil {
			return err
		}
		d.emit(event.Event{Type: event.SessionStateSet, Queue: c.Queue, SessionID: c.SessionID, State: c.State})
	default:
		return fmt.Errorf("model: %T", cmd)
	}
	return nil
}

func (d *mDecision) expiry(ttl time.Duration) int64 {
	if def := d.m.cfg.DefaultTTL; def > 0 && (ttl <= 0 || ttl > def) {
		ttl = def
	}
	if ttl <= 0 {
		return 0
	}
	return d.now + int64(ttl)
}

func (d *mDecision) take(no uint32, receiver, session string, max int, limit uint64, peekLock bool, nonce uint64) error {
	m := d.m
	if max <= 0 {
		return nil
	}
	sessions := m.cfg.RequiresSession && no == event.MainQueue
	until := d.now + int64(m.cfg.LockDuration)
	if sessions {
		s := m.sessions[session]
		if session == "" || s == nil || s.owner != receiver || s.until <= d.now {
			return ErrSessionLockLost
		}
		until = s.until
	} else if session != "" {
		return ErrNotAllowed
	}
	expired := d.expireDue(no)
	taken := 0
	for _, msg := range m.inQueue(no, func(msg *mMsg) bool { return msg.state == index.Available }) {
		if taken == max || msg.seq > limit {
			break
		}
		if expired[msg.seq] || sessions && msg.session != session {
			continue
		}
		if deadLetter(no) && len(msg.overlays) > 0 && msg.overlays[len(msg.overlays)-1] > limit {
			continue // in a dead-letter queue: every record that changed it must be durable
		}
		if peekLock {
			d.emit(event.Event{Type: event.Locked, Queue: no, Seq: msg.seq, Token: index.MakeToken(msg.seq, mix(nonce, msg.seq)),
				Until: until, Receiver: receiver})
		} else {
			d.emit(event.Event{Type: event.ReceivedAndDeleted, Queue: no, Seq: msg.seq, Receiver: receiver})
		}
		taken++
	}
	return nil
}

func (d *mDecision) expireDue(no uint32) map[uint64]bool {
	expired := map[uint64]bool{}
	for _, msg := range d.m.inQueue(no, func(msg *mMsg) bool {
		return msg.state == index.Available && msg.expires > 0 && msg.expires <= d.now
	}) {
		if d.m.cfg.DeadLetterOnExpiry {
			d.emit(event.Event{Type: event.DeadLettered, Queue: no, Seq: msg.seq, Reason: ReasonTTLExpired,
				Description: "The message expired and was dead lettered."})
		} else {
			d.emit(event.Event{Type: event.Expired, Queue: no, Seq: msg.seq})
		}
		expired[msg.seq] = true
	}
	return expired
}

func (d *mDecision) held(no uint32, token event.LockToken) (*mMsg, error) {
	msg := d.m.msgs[index.TokenSeq(token)]
	if msg == nil || msg.queue != no || msg.state != index.Locked || msg.token != token {
		return nil, ErrLockLost
	}
	if d.m.cfg.RequiresSession && no == event.MainQueue && msg.session != "" {
		if s := d.m.sessions[msg.session]; s == nil || s.owner == "" || s.until <= d.now {
			return nil, ErrSessionLockLost
		}
	}
	if msg.lockUntil <= d.now {
		return nil, ErrLockLost
	}
	return msg, nil
}

func (d *mDecision) failed(msg *mMsg) {
	if msg.queue != event.MainQueue || msg.deliveries+1 < d.m.cfg.MaxDeliveryCount {
		return
	}
	d.emit(event.Event{Type: event.DeadLettered, Queue: msg.queue, Seq: msg.seq, Reason: ReasonMaxDeliveryCount,
		Description: fmt.Sprintf("Message could not be consumed after %d delivery attempts.", d.m.cfg.MaxDeliveryCount)})
}

func (d *mDecision) endSession(id string, released bool) {
	for _, msg := range d.m.inQueue(event.MainQueue, func(msg *mMsg) bool { return msg.state == index.Locked && msg.session == id }) {
		if released {
			d.emit(event.Event{Type: event.Released, Queue: event.MainQueue, Seq: msg.seq})
			continue
		}
		d.emit(event.Event{Type: event.LockExpired, Queue: event.MainQueue, Seq: msg.seq})
		d.failed(msg)
	}
	d.emit(event.Event{Type: event.SessionUnlocked, Queue: event.MainQueue, SessionID: id})
}

func (d *mDecision) owned(no uint32, id, receiver string) error {
	if !d.m.cfg.RequiresSession || no != event.MainQueue {
		return ErrNotAllowed
	}
	if s := d.m.sessions[id]; s == nil || s.owner != receiver || s.until <= d.now {
		return ErrSessionLockLost
	}
	return nil
}

func (m *model) apply(ev *event.Event) {
	m.last = ev.Index
	sessions := m.cfg.RequiresSession
	switch ev.Type {
	case event.EntityCreated, event.EntityUpdated:
		m.cfg, _ = DecodeConfig(ev.Props)
		m.created = true
	case event.Remembered:
		name := strings.ToLower(ev.Name)
		if m.via[name] == nil {
			m.via[name] = map[string]int64{}
		}
		m.via[name][ev.MessageID] = ev.Time
	case event.Arrived:
		m.arrived[ev.Source] = ev.Seq
	case event.Transfer:
		// Waiting to be moved on: no session, expiry or activation here.
		m.transfer = true
		m.msgs[ev.Index] = &mMsg{seq: ev.Index, queue: ev.Queue, state: index.Available}
	case event.Enqueued, event.Scheduled, event.ScheduledHeld, event.Activated, event.Forwarded:
		if ev.Type == event.Activated {
			delete(m.msgs, ev.Seq)
		}
		msg := &mMsg{seq: ev.Index, queue: ev.Queue, state: index.Available, expires: ev.Until}
		if ev.Type == event.Forwarded {
			msg.overlays = []uint64{ev.Index}
			m.lastFwd[ev.Source] = ev.Seq
		}
		if sessions {
			msg.session = ev.SessionID
		}
		if ev.Type == event.Scheduled || ev.Type == event.ScheduledHeld {
			msg.state, msg.expires, msg.activates = index.Scheduled, 0, ev.Until
			msg.held = ev.Type == event.ScheduledHeld
		}
		m.msgs[ev.Index] = msg
		if (ev.Type == event.Enqueued || ev.Type == event.Scheduled) && m.cfg.RequiresDuplicateDetection && ev.MessageID != "" {
			m.dedup[ev.MessageID] = ev.Time
		}
	case event.Restored:
		msg := &mMsg{seq: ev.Index, queue: ev.Queue, state: index.Available, expires: ev.Until, deliveries: int(ev.Deliveries)}
		if sessions && ev.Queue == event.MainQueue {
			msg.session = ev.SessionID
		}
		if deadLetter(ev.Queue) || ev.Name != "" || ev.Reason != "" || ev.Description != "" || len(ev.Props) > 0 {
			msg.overlays = []uint64{ev.Index}
		}
		m.msgs[ev.Index] = msg
	case event.Confirmed:
		// Activates from now on, and counts for duplicate detection (from
		// the commit's time: a held message's MessageId did not).
		m.msgs[ev.Seq].held = false
		if m.cfg.RequiresDuplicateDetection && ev.MessageID != "" {
			m.dedup[ev.MessageID] = ev.Time
		}
	case event.ScheduleCancelled, event.Completed, event.Expired, event.ReceivedAndDeleted, event.Deleted:
		delete(m.msgs, ev.Seq)
	case event.Locked:
		msg := m.msgs[ev.Seq]
		msg.state, msg.token, msg.lockUntil, msg.receiver = index.Locked, ev.Token, ev.Until, ev.Receiver
	case event.LockRenewed:
		m.msgs[ev.Seq].lockUntil = ev.Until
	case event.LockExpired, event.Abandoned, event.Released, event.Deferred:
		msg := m.msgs[ev.Seq]
		if (ev.Type == event.LockExpired || ev.Type == event.Abandoned) && !deadLetter(msg.queue) {
			msg.deliveries++ // a dead-letter queue counts none
		}
		if ev.Type == event.Deferred {
			msg.deferred = true
		}
		msg.state, msg.token, msg.lockUntil, msg.receiver = index.Available, event.LockToken{}, 0, ""
		if msg.deferred {
			msg.state = index.Deferred
		}
		if len(ev.Props) > 0 {
			msg.overlays = append(msg.overlays, ev.Index)
		}
	case event.DeadLettered, event.TransferDeadLettered:
		msg := m.msgs[ev.Seq]
		to := event.DeadLetterQueue
		if ev.Type == event.TransferDeadLettered {
			to = event.TransferDeadLetterQueue
		}
		*msg = mMsg{seq: msg.seq, queue: to, state: index.Available, deliveries: msg.deliveries,
			overlays: append(msg.overlays, ev.Index)}
	case event.SessionLocked:
		s := m.session(ev.SessionID)
		s.owner, s.until = ev.Receiver, ev.Until
	case event.SessionLockRenewed:
		m.session(ev.SessionID).until = ev.Until
		for _, msg := range m.msgs {
			if msg.state == index.Locked && msg.session == ev.SessionID && msg.queue == ev.Queue {
				msg.lockUntil = ev.Until
			}
		}
	case event.SessionUnlocked:
		s := m.session(ev.SessionID)
		s.owner, s.until = "", 0
	case event.SessionStateSet:
		m.session(ev.SessionID).state = nil
		if len(ev.State) > 0 {
			m.session(ev.SessionID).state = append([]byte{}, ev.State...)
		}
	}
}

// observe renders everything the model and the projection must agree on.
func (m *model) observe(now int64) string {
	var out []string
	var held map[uint32][]uint64
	for _, no := range m.queues() {
		var counts Counts
		for _, msg := range m.inQueue(no, func(*mMsg) bool { return true }) {
			out = append(out, fmt.Sprintf("q%d seq=%d %s deferred=%v held=%v deliveries=%d session=%q overlays=%d lock=%x/%d/%s",
				no, msg.seq, msg.state, msg.deferred, msg.held, msg.deliveries, msg.session, len(msg.overlays), msg.token, msg.lockUntil, msg.receiver))
			switch msg.state {
			case index.Available:
				counts.Available++
			case index.Locked:
				counts.Locked++
			case index.Deferred:
				counts.Deferred++
			case index.Scheduled:
				counts.Scheduled++ // held or not
			}
			counts.Total++
			if msg.held {
				if held == nil {
					held = map[uint32][]uint64{}
				}
				held[no] = append(held[no], msg.seq)
			}
		}
		if counts.Total > 0 {
			out = append(out, fmt.Sprintf("q%d counts %+v", no, counts))
		}
	}
	out = append(out, fmt.Sprintf("held %v", held))
	for _, id := range slices.Sorted(maps.Keys(m.sessions)) {
		if s := m.sessions[id]; s.owner != "" || s.state != nil {
			out = append(out, fmt.Sprintf("session %q owner=%q until=%d state=%q", id, s.owner, s.until, s.state))
		}
	}
	// The next deadline and what is due.
	next := int64(0)
	consider := func(t int64) {
		if next == 0 || t < next {
			next = t
		}
	}
	var due []uint64
	for _, msg := range m.msgs {
		switch {
		case msg.state == index.Locked:
			consider(msg.lockUntil)
		case msg.state == index.Available && msg.expires > 0:
			consider(msg.expires)
		}
	}
	for _, s := range m.sessions {
		if s.owner != "" {
			consider(s.until)
		}
	}
	// NextDeadline is that or the first activation, of a message that is
	// not held.
	lockTTLSession := next
	for _, msg := range m.msgs {
		if msg.state == index.Scheduled && !msg.held {
			consider(msg.activates)
		}
	}
	out = append(out, fmt.Sprintf("next deadline=%d", next))
	next = lockTTLSession
	first := m.last + 1
	for _, msg := range m.msgs {
		first = min(first, msg.seq)
	}
	out = append(out, fmt.Sprintf("first-needed=%d", first))
	// As if an archive held everything below from: messages at or above
	// it, and the records modifying older messages written at or above it.
	for _, from := range []uint64{m.last / 2, m.last * 3 / 4} {
		first := m.last + 1
		for _, msg := range m.msgs {
			if msg.seq >= from {
				first = min(first, msg.seq)
				continue
			}
			for _, ov := range msg.overlays {
				if ov >= from {
					first = min(first, ov)
				}
			}
		}
		out = append(out, fmt.Sprintf("first-needed-from(%d)=%d", from, first))
	}
	return fmt.Sprintf("%s\nlock/ttl/session deadline=%d due=%v", joinLines(out), next, due)
}

// observe renders the projection the same way as model.observe.
func observe(e *Entity, now int64) string {
	var out []string
	for _, q := range e.queues {
		it := q.all.Iterator()
		for it.HasNext() {
			seq := it.Next()
			meta, _ := q.msgs.Get(seq)
			lk, _ := q.locks.Get(seq)
			session := ""
			if meta.Session != 0 {
				session = q.sessions.ByNo(meta.Session).ID
			}
			out = append(out, fmt.Sprintf("q%d seq=%d %s deferred=%v held=%v deliveries=%d session=%q overlays=%d lock=%x/%d/%s",
				q.No, seq, meta.State, meta.Flags&index.FlagDeferred != 0, meta.Flags&index.FlagHeld != 0, meta.Deliveries,
				session, len(q.overlays[seq]), lk.Token, lk.Until, lk.Receiver))
		}
		if c := q.Counts(); c.Total > 0 {
			out = append(out, fmt.Sprintf("q%d counts %+v", q.No, c))
		}
	}
	out = append(out, fmt.Sprintf("held %v", e.Held()))
	if s := e.queues[0].sessions; s != nil {
		for _, s := range s.Sorted() {
			if s.Owner != "" || s.State != nil {
				out = append(out, fmt.Sprintf("session %q owner=%q until=%d state=%q", s.ID, s.Owner, s.LockedUntil, s.State))
			}
		}
	}
	out = append(out, fmt.Sprintf("next deadline=%d", e.NextDeadline()))
	out = append(out, fmt.Sprintf("first-needed=%d", e.FirstNeeded()))
	for _, from := range []uint64{e.last / 2, e.last * 3 / 4} {
		out = append(out, fmt.Sprintf("first-needed-from(%d)=%d", from, e.FirstNeededFrom(from)))
	}
	// NextDeadline (above) also covers activations; compare the rest on
	// its own too, through the model's rule, by masking them out.
	next := int64(0)
	for _, q := range e.queues {
		for _, t := range []struct {
			ts   *index.Timers
			live func(index.Timer) bool
		}{{&q.lockTimers, q.lockLive}, {&q.ttlTimers, q.ttlActionable}} {
			if tm, ok := t.ts.Earliest(t.live); ok && (next == 0 || tm.At < next) {
				next = tm.At
			}
		}
		if q.sessions != nil {
			if tm, ok := q.sessionTimers.Earliest(q.sessionLive); ok && (next == 0 || tm.At < next) {
				next = tm.At
			}
		}
	}
	var due []uint64
	return fmt.Sprintf("%s\nlock/ttl/session deadline=%d due=%v", joinLines(out), next, due)
}

func joinLines(lines []string) string { return strings.Join(lines, "\n") }

// history drives an entity and the model with random commands and returns
// the events, failing on the first disagreement.
type history struct {
	rng     *rand.Rand
	e       *Entity
	m       *model
	now     int64
	events  []event.Event
	records map[uint64]event.Event // Scheduled and ScheduledHeld records by index, for activation
	// sendVia lets step send through the entity (Transfer), which gives it
	// a transfer queue. Off, the state is one an older encoding can hold,
	// as the tests of reading those need.
	sendVia bool
	fail    func(format string, args ...any)
	// exec, if set, takes the commands step issues instead of run, which
	// decides them at once: the replicated test queues them and has the
	// group's leader decide each when its turn comes.
	exec func(Command)
}

var receivers = []string{"r1", "r2", "r3"}

// modelQueues are the queues of a queue entity, in number order.
var modelQueues = []uint32{event.MainQueue, event.DeadLetterQueue, event.TransferDeadLetterQueue}
var sessionIDs = []string{"s1", "s2", "s3", "s4"}

func (h *history) run(cmd Command) {
	if h.exec != nil {
		h.exec(cmd)
		return
	}
	if f, ok := cmd.(thunk); ok {
		f()
		return
	}
	got, gotErr := h.e.Decide(cmd, h.now)
	want, wantErr := h.m.decide(cmd, h.now)
	if !sameError(gotErr, wantErr) {
		h.fail("%T %+v: projection error %v, model error %v", cmd, cmd, gotErr, wantErr)
		return
	}
	if fmt.Sprint(eventKeys(got)) != fmt.Sprint(eventKeys(want)) {
		h.fail("%T %+v at %d:\nprojection %v\nmodel      %v", cmd, cmd, h.now, eventKeys(got), eventKeys(want))
		return
	}
	for i := range got {
		ev := got[i]
		ev.Index = uint64(len(h.events) + 1)
		ev.Pos = event.Position{Offset: uint32(ev.Index * 7 % 100000), Size: uint32(event.RecordSize(&ev))}
		h.events = append(h.events, ev)
		if ev.Type == event.Scheduled || ev.Type == event.ScheduledHeld {
			h.records[ev.Index] = ev
		}
		if err := h.e.Apply(&ev); err != nil {
			h.fail("apply %s: %v", ev.Type, err)
			return
		}
		h.m.apply(&ev)
	}
	if a, b := observe(h.e, h.now), h.m.observe(h.now); a != b {
		h.fail("after %T %+v states differ:\nprojection:\n%s\nmodel:\n%s", cmd, cmd, a, b)
	}
	if got, want := h.e.DueScheduled(0, h.now), h.dueScheduled(h.now); fmt.Sprint(got) != fmt.Sprint(want) {
		h.fail("due scheduled: projection %v model %v", got, want)
	}
}

// later calls f once the commands issued before it are decided and
// applied: at once, or in its turn when exec queues commands.
func (h *history) later(f func()) { h.run(thunk(f)) }

// thunk is a function later queues among the commands.
type thunk func()

func (thunk) isCommand() {}

// dueScheduled is what the model says is due for activation: scheduled,
// not held, at or before now.
func (h *history) dueScheduled(now int64) []uint64 {
	var due []uint64
	for _, msg := range h.m.inQueue(event.MainQueue, func(msg *mMsg) bool {
		return msg.state == index.Scheduled && !msg.held && msg.activates <= now
	}) {
		due = append(due, msg.seq)
	}
	return due
}

func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	for _, kind := range []error{ErrLockLost, ErrSessionLockLost, ErrSessionCannotBeLocked, ErrNoSession,
		ErrMessageNotFound, ErrMessageTooLarge, ErrSessionIDRequired, ErrNotAllowed, ErrInvalid} {
		if errors.Is(a, kind) != errors.Is(b, kind) {
			return false
		}
	}
	return true
}

// eventKeys renders events without their payload bytes.
func eventKeys(evs []event.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = fmt.Sprintf("%s q%d seq=%d until=%d ttl=%d tok=%x id=%q sess=%q rcv=%q reason=%q name=%q props=%d body=%d",
			e.Type, e.Queue, e.Seq, e.Until, e.TTL, e.Token, e.MessageID, e.SessionID, e.Receiver, e.Reason, e.Name,
			len(e.Props), len(e.Message))
	}
	return out
}

// step issues one random command.
func (h *history) step() {
	r := h.rng
	cfg := h.m.cfg
	op := r.IntN(21)
	if h.sendVia {
		op = r.IntN(23)
	} else if op == 20 {
		op = 22 // 20 and 21 send through the entity
	}
	if r.IntN(200) == 0 {
		// Change the config under way (not RequiresSession: Service Bus forbids that).
		cfg.LockDuration = time.Duration(10+r.IntN(50)) * time.Second
		cfg.MaxDeliveryCount = 1 + r.IntN(4)
		h.run(Configure{Name: "q", Config: cfg})
		return
	}
	if (op < 4 || op == 20) && len(h.m.msgs) > 60 {
		// Full enough: consume or let time pass instead, so the state stays
		// small and busy.
		op = []int{4, 11}[r.IntN(2)]
	}
	switch op {
	case 0, 1, 2, 3:
		n := 1 + r.IntN(3)
		msgs := make([]Message, n)
		for i := range msgs {
			msgs[i] = Message{Body: make([]byte, 1+r.IntN(64)), MessageID: fmt.Sprintf("id%d", r.IntN(30))}
			if cfg.RequiresSession || r.IntN(4) == 0 {
				msgs[i].SessionID = sessionIDs[r.IntN(len(sessionIDs))]
			}
			if r.IntN(3) == 0 {
				msgs[i].TTL = time.Duration(1+r.IntN(300)) * time.Second
			}
			if r.IntN(6) == 0 {
				msgs[i].ScheduledAt = h.now + int64(r.IntN(120))*int64(time.Second)
			}
			if r.IntN(40) == 0 {
				msgs[i].Body = make([]byte, cfg.MaxMessageSize+1)
			}
		}
		if held := h.m.inQueue(event.MainQueue, func(msg *mMsg) bool { return msg.held }); len(held) > 0 && r.IntN(3) == 0 {
			// The MessageId of a message a transaction holds: no duplicate
			// until the commit.
			msgs[0].MessageID = h.records[held[r.IntN(len(held))].seq].MessageID
		}
		// hold makes some sends a transaction's: held, each message due
		// now (at the earliest), at a time past (long ago, even), or later.
		hold := func(s Send) Send {
			if r.IntN(5) > 0 {
				return s
			}
			s.Held = true
			for i := range s.Messages {
				switch r.IntN(3) {
				case 0:
					s.Messages[i].ScheduledAt = h.now - int64(1+r.IntN(3600))*int64(time.Second)
				case 1:
					s.Messages[i].ScheduledAt = h.now + int64(r.IntN(120))*int64(time.Second)
				}
			}
			return s
		}
		if r.IntN(5) == 0 {
			// An arrival from another entity's dead-letter queue; small
			// numbers so that repeats (after a source's crash) come up.
			h.run(Send{Queue: event.MainQueue, Messages: msgs[:1], Forward: &Forward{Source: uint64(1 + r.IntN(2)),
				SourceName: "src", Seq: uint64(1 + r.IntN(4)), Reason: "r", Props: []byte{0xc1, 1, 0}}})
			return
		}
		if r.IntN(5) == 0 {
			// An arrival from another entity's transfer queue (sources
			// apart from the forwards'): the next one or one past it, or a
			// repeat of the last or of the one before (a source's crash),
			// perhaps with new ones after the repeats.
			a := &Arrival{Source: uint64(10 + r.IntN(2))}
			first := uint64(1 + r.IntN(3))
			if last, ok := h.m.arrived[a.Source]; ok {
				first = max(last+uint64(r.IntN(4)), 3) - 2
			}
			for i := range msgs {
				a.Seqs = append(a.Seqs, first+uint64(i))
			}
			if r.IntN(30) == 0 && len(a.Seqs) > 1 {
				a.Seqs[0], a.Seqs[1] = a.Seqs[1], a.Seqs[0] // out of order: refused
			}
			send := Send{Queue: event.MainQueue, Messages: msgs, Arrival: a}
			if r.IntN(20) == 0 {
				send.Forward = &Forward{Source: 1, SourceName: "src", Seq: 1} // both: refused
			}
			h.run(send)
			return
		}
		if r.IntN(4) == 0 {
			// Sent to entities that forward here, with duplicate detection
			// of their own ("A" and "a" are one entity). Their windows stay
			// as they are: a changed one applies to what the entity accepts
			// from then on, which the model does not follow.
			via := []Via{{Name: "A", Window: 45 * time.Second}}
			if r.IntN(2) == 0 {
				via = append(via, Via{Name: "b", Window: 100 * time.Second})
			}
			if r.IntN(3) == 0 {
				via[0].Name = "a"
			}
			h.run(hold(Send{Queue: event.MainQueue, Messages: msgs, Via: via}))
			return
		}
		q := uint32(r.IntN(8) / 7)
		if r.IntN(30) == 0 {
			q = event.TransferQueue // only a transfer reaches it
		}
		h.run(hold(Send{Queue: q, Messages: msgs}))
	case 4, 5, 6:
		limit := uint64(len(h.events)) - uint64(r.IntN(3))
		session := ""
		if cfg.RequiresSession {
			session = sessionIDs[r.IntN(len(sessionIDs))]
		}
		q := uint32(r.IntN(4) / 3)
		if len(h.m.inQueue(event.DeadLetterQueue, func(*mMsg) bool { return true })) > 20 && r.IntN(2) == 0 {
			q = event.DeadLetterQueue
		}
		if len(h.m.inQueue(event.TransferDeadLetterQueue, func(*mMsg) bool { return true })) > 0 && r.IntN(4) == 0 {
			q = event.TransferDeadLetterQueue
		}
		if q != event.MainQueue {
			session = ""
		}
		if r.IntN(4) == 0 {
			before := map[uint64]mMsg{}
			for seq, msg := range h.m.msgs {
				before[seq] = *msg
			}
			from := len(h.events)
			h.run(ReceiveAndDelete{Queue: q, Receiver: receivers[r.IntN(3)], Session: session, Max: r.IntN(4), Limit: limit})
			if r.IntN(2) == 0 {
				// The receiver's link closed before some of them left.
				h.later(func() {
					var back []Restored
					for _, ev := range h.events[from:] {
						if ev.Type == event.ReceivedAndDeleted && r.IntN(3) > 0 {
							back = append(back, h.restored(before[ev.Seq]))
						}
					}
					if len(back) > 0 {
						h.run(Restore{Queue: q, Messages: back})
					}
				})
			}
		} else {
			h.run(Lock{Queue: q, Receiver: receivers[r.IntN(3)], Session: session, Max: r.IntN(4), Limit: limit, Nonce: r.Uint64()})
		}
	case 7, 8, 9:
		q, token := h.someToken()
		props := []byte(nil)
		if r.IntN(2) == 0 {
			props = []byte{0xc1, 0x01, 0x00}
		}
		if r.IntN(4) == 0 {
			// The dead-letter forwarder's target refused a message for good
			// (refused here for the other queues and for lost locks).
			h.run(TransferDeadLetter{Queue: q, Token: token, Reason: "refused", Description: "by the target"})
			return
		}
		h.run(Settle{Queue: q, Token: token, Outcome: Outcome(1 + r.IntN(5)), Props: props, Reason: "r", Description: "d"})
	case 10:
		q, token := h.someToken()
		h.run(Renew{Queue: q, Token: token})
	case 11, 12:
		h.now += []int64{0, 1, 10, 31, 61, 200}[r.IntN(6)] * int64(time.Second)
		if r.IntN(4) == 0 {
			h.run(Checkpoint{}) // an idle entity's: changes nothing
		}
		h.run(Tick{})
		h.later(func() {
			for _, seq := range h.e.DueScheduled(0, h.now) {
				h.run(Activate{Queue: 0, Seq: seq, Record: h.records[seq]})
			}
		})
	case 13:
		var seqs []uint64
		// In order: a map's order differs from run to run, and with a draw
		// per record so would the history.
		for _, seq := range slices.Sorted(maps.Keys(h.records)) {
			if r.IntN(3) == 0 {
				seqs = append(seqs, seq)
			}
		}
		if r.IntN(2) == 0 {
			h.run(Cancel{Queue: 0, Seqs: seqs})
			return
		}
		// A batch delete, of fewer: any state but locked, in any queue.
		seqs = slices.DeleteFunc(seqs, func(uint64) bool { return r.IntN(3) > 0 })
		q := modelQueues[r.IntN(len(modelQueues))]
		if h.sendVia && r.IntN(4) == 0 {
			// The transfer queue's (refused until a transfer made it),
			// whose messages are no scheduled records.
			q, seqs = event.TransferQueue, nil
			for _, msg := range h.m.inQueue(q, func(*mMsg) bool { return true }) {
				if r.IntN(4) == 0 {
					seqs = append(seqs, msg.seq)
				}
			}
		}
		h.run(Delete{Queue: q, Seqs: seqs})
	case 14:
		q := uint32(0)
		if h.m.transfer && r.IntN(3) == 0 {
			q = event.TransferQueue // what a settle deferred there
		}
		var deferred []uint64
		for _, msg := range h.m.msgs {
			if msg.state == index.Deferred && msg.queue == q {
				deferred = append(deferred, msg.seq)
			}
		}
		slices.Sort(deferred)
		if r.IntN(5) == 0 {
			deferred = append(deferred, 999999)
		}
		if len(deferred) > 2 {
			deferred = deferred[:2]
		}
		session := ""
		if cfg.RequiresSession && r.IntN(2) == 0 {
			session = sessionIDs[r.IntN(len(sessionIDs))]
		}
		h.run(LockBySeq{Queue: q, Receiver: receivers[r.IntN(3)], Session: session, Seqs: deferred, PeekLock: r.IntN(3) > 0, Nonce: r.Uint64()})
	case 15, 16:
		id := ""
		if r.IntN(2) == 0 {
			id = sessionIDs[r.IntN(len(sessionIDs))]
		}
		h.run(AcceptSession{Queue: 0, SessionID: id, Receiver: receivers[r.IntN(3)]})
	case 17:
		h.run(RenewSession{Queue: 0, SessionID: sessionIDs[r.IntN(len(sessionIDs))], Receiver: receivers[r.IntN(3)]})
	case 18:
		h.run(ReleaseSession{Queue: 0, SessionID: sessionIDs[r.IntN(len(sessionIDs))], Receiver: receivers[r.IntN(3)]})
	case 19:
		state := []byte(nil)
		if r.IntN(3) > 0 {
			state = []byte(fmt.Sprintf("state-%d", r.IntN(100)))
		}
		h.run(SetSessionState{Queue: 0, SessionID: sessionIDs[r.IntN(len(sessionIDs))], Receiver: receivers[r.IntN(3)], State: state})
	case 20:
		// Sent through this entity for another one.
		msgs := make([]Message, 1+r.IntN(3))
		for i := range msgs {
			msgs[i] = Message{Body: make([]byte, 1+r.IntN(64)), MessageID: fmt.Sprintf("id%d", r.IntN(30))}
			if r.IntN(3) == 0 {
				msgs[i].SessionID = sessionIDs[r.IntN(len(sessionIDs))]
			}
			if r.IntN(3) == 0 {
				msgs[i].TTL = time.Duration(1+r.IntN(300)) * time.Second
			}
			if r.IntN(4) == 0 {
				// For the destination: past, future, or before the epoch.
				msgs[i].ScheduledAt = h.now + int64(r.IntN(240)-120)*int64(time.Second)
				if r.IntN(5) == 0 {
					msgs[i].ScheduledAt = -1
				}
			}
			if r.IntN(40) == 0 {
				msgs[i].Body = make([]byte, cfg.MaxMessageSize+1) // the destination's to refuse
			}
		}
		to := []string{"dest", "Other/dest"}[r.IntN(2)]
		if r.IntN(30) == 0 {
			to = ""
		}
		h.run(Transfer{To: to, Messages: msgs})
	case 21:
		// The shell moving transfers on: what reached the destination is
		// done (some seqs twice, or gone, or never there); what it refused
		// goes to the transfer dead-letter queue. Locks work there too,
		// though the shell takes none.
		var seqs []uint64
		// In order, as in case 13: a draw per message in a map's order
		// would make the history differ from run to run.
		for _, msg := range h.m.inQueue(event.TransferQueue, func(*mMsg) bool { return true }) {
			if r.IntN(2) == 0 {
				seqs = append(seqs, msg.seq)
			}
		}
		slices.Sort(seqs)
		if r.IntN(4) == 0 {
			seqs = append(seqs, uint64(r.IntN(len(h.events)+1)))
		}
		if len(seqs) > 0 && r.IntN(5) == 0 {
			seqs = append(seqs, seqs[0])
		}
		switch r.IntN(6) {
		case 0:
			h.run(Lock{Queue: event.TransferQueue, Receiver: "via", Max: 1 + r.IntN(3),
				Limit: uint64(len(h.events)) - uint64(r.IntN(3)), Nonce: r.Uint64()})
		case 1, 2:
			seq := uint64(r.IntN(len(h.events) + 1))
			if len(seqs) > 0 && r.IntN(4) > 0 {
				seq = seqs[0]
			}
			h.run(TransferDeadLetter{Queue: event.TransferQueue, Seq: seq, Reason: "refused", Description: "by the destination"})
		default:
			h.run(TransferDone{Seqs: seqs})
		}
	case 22:
		// A transaction ends. A roll back cancels its held messages; a
		// commit confirms them, with their MessageIds, mostly ones still
		// held, sometimes with ones that are not (cancelled or deleted
		// meanwhile, confirmed already, activated since, never there), in
		// any order, some twice.
		var held []uint64
		for _, msg := range h.m.inQueue(event.MainQueue, func(msg *mMsg) bool { return msg.held }) {
			if r.IntN(3) > 0 {
				held = append(held, msg.seq)
			}
		}
		if r.IntN(5) == 0 {
			h.run(Cancel{Queue: event.MainQueue, Seqs: held})
			return
		}
		var msgs []HeldMessage
		for _, seq := range held {
			msgs = append(msgs, HeldMessage{Seq: seq, MessageID: h.records[seq].MessageID})
		}
		if len(h.records) > 0 && r.IntN(4) == 0 {
			recs := slices.Sorted(maps.Keys(h.records))
			seq := recs[r.IntN(len(recs))]
			msgs = append(msgs, HeldMessage{Seq: seq, MessageID: h.records[seq].MessageID})
		}
		if waiting := h.m.inQueue(event.MainQueue, func(msg *mMsg) bool {
			return msg.state == index.Scheduled && !msg.held
		}); len(waiting) > 0 && r.IntN(4) == 0 {
			// Scheduled but not held: never held, or confirmed already.
			seq := waiting[r.IntN(len(waiting))].seq
			msgs = append(msgs, HeldMessage{Seq: seq, MessageID: h.records[seq].MessageID})
		}
		if r.IntN(6) == 0 {
			msgs = append(msgs, HeldMessage{Seq: uint64(r.IntN(len(h.events) + 2)), MessageID: "idX"})
		}
		if len(msgs) > 0 && r.IntN(5) == 0 {
			msgs = append(msgs, msgs[r.IntN(len(msgs))])
		}
		if r.IntN(3) == 0 {
			r.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
		}
		if len(msgs) > 0 && r.IntN(10) == 0 {
			msgs[0].MessageID = "" // one sent without a MessageId
		}
		q := event.MainQueue
		switch r.IntN(15) {
		case 0:
			q = event.DeadLetterQueue // holds nothing held
		case 1:
			q = event.TransferQueue // refused until a transfer made it; holds nothing held
		case 2:
			q = 7 // no such queue
		}
		h.run(Confirm{Queue: uint32(q), Messages: msgs})
	}
}

// restored is what a receive-and-delete receiver's link hands back for
// msg, as the broker builds it from the message's records.
func (h *history) restored(msg mMsg) Restored {
	own := h.events[msg.seq-1]
	out := Restored{Seq: msg.seq, Body: own.Message, MessageID: own.MessageID, SessionID: own.SessionID,
		Expires: msg.expires, Deliveries: uint16(msg.deliveries)}
	for _, idx := range msg.overlays {
		ov := h.events[idx-1]
		switch ov.Type {
		case event.DeadLettered, event.TransferDeadLettered:
			out.Reason, out.Description = ov.Reason, ov.Description
		case event.Forwarded, event.Restored:
			out.Reason, out.Description, out.Source = ov.Reason, ov.Description, ov.Name
		}
		out.Props = append(out.Props, ov.Props...)
	}
	return out
}

// someToken returns a current lock token most of the time, and otherwise a
// stale or made-up one.
func (h *history) someToken() (uint32, event.LockToken) {
	var held []*mMsg
	for _, msg := range h.m.msgs {
		if msg.state == index.Locked {
			held = append(held, msg)
		}
	}
	slices.SortFunc(held, func(a, b *mMsg) int { return cmp.Compare(a.seq, b.seq) })
	if len(held) == 0 || h.rng.IntN(6) == 0 {
		return uint32(h.rng.IntN(event.QueueGroup + 1)), index.MakeToken(uint64(h.rng.IntN(len(h.events)+1)), h.rng.Uint64())
	}
	msg := held[h.rng.IntN(len(held))]
	return msg.queue, msg.token
}

var modelConfigs = map[string]Config{
	"plain": {LockDuration: 30 * time.Second, MaxDeliveryCount: 3, DuplicateWindow: DefaultDuplicateWindow,
		MaxMessageSize: 1024},
	"ttl-dedup-dlq": {LockDuration: 30 * time.Second, MaxDeliveryCount: 2, DefaultTTL: 2 * time.Minute,
		DeadLetterOnExpiry: true, RequiresDuplicateDetection: true, DuplicateWindow: 30 * time.Second, MaxMessageSize: 1024},
	"sessions": {LockDuration: 30 * time.Second, MaxDeliveryCount: 2, RequiresSession: true, DefaultTTL: 3 * time.Minute,
		DuplicateWindow: DefaultDuplicateWindow, MaxMessageSize: 1024},
}

func newHistory(seed uint64, cfg Config, fail func(string, ...any)) *history {
	h := &history{rng: rand.New(rand.NewPCG(seed, seed*7+1)), e: New(), m: newModel(),
		now: 1_700_000_000 * int64(time.Second), records: map[uint64]event.Event{}, fail: fail}
	h.run(Configure{Name: "q", Config: cfg})
	return h
}

// TestHeldAgainstModel walks a transaction's schedules through the
// projection and the model on every config: a held message due long ago
// activates only once confirmed; its MessageId blocks a later send only
// from its Confirm on; confirming twice, or a cancelled one, does nothing.
func TestHeldAgainstModel(t *testing.T) {
	const sec = int64(time.Second)
	for _, name := range slices.Sorted(mapsKeys(modelConfigs)) {
		t.Run(name, func(t *testing.T) {
			cfg := modelConfigs[name]
			h := newHistory(1, cfg, t.Fatalf)
			run := func(cmd Command) []event.Event {
				t.Helper()
				from := len(h.events)
				h.run(cmd)
				return h.events[from:]
			}
			types := func(evs []event.Event) string {
				var out []string
				for _, ev := range evs {
					out = append(out, ev.Type.String())
				}
				return strings.Join(out, " ")
			}
			send := func(id string, at int64, held bool) []event.Event {
				t.Helper()
				return run(Send{Queue: event.MainQueue, Held: held,
					Messages: []Message{{Body: []byte("m"), MessageID: id, SessionID: "s1", ScheduledAt: at}}})
			}
			// Time passes, and the shell activates what is due.
			pass := func(d int64) []event.Event {
				t.Helper()
				h.now += d
				evs := run(Tick{})
				for _, seq := range h.e.DueScheduled(event.MainQueue, h.now) {
					evs = append(evs, run(Activate{Queue: event.MainQueue, Seq: seq, Record: h.records[seq]})...)
				}
				return evs
			}

			evs := send("x", h.now-3600*sec, true)
			if len(evs) != 1 || evs[0].Type != event.ScheduledHeld || evs[0].Until != h.now {
				t.Fatalf("held send due an hour ago: %v", eventKeys(evs))
			}
			x := evs[0].Index
			// Its MessageId is not remembered while held.
			if got := types(send("x", 0, false)); got != "enqueued" {
				t.Fatalf("send of a held message's MessageId: %s", got)
			}
			if got := types(pass(600 * sec)); strings.Contains(got, "activated") {
				t.Fatalf("held for 10 minutes, past its time: %s", got)
			}
			if got := h.e.Held(); !reflect.DeepEqual(got, map[uint32][]uint64{event.MainQueue: {x}}) {
				t.Fatalf("Held() = %v", got)
			}
			if c := h.e.Queue(event.MainQueue).Counts(); c.Scheduled != 1 {
				t.Fatalf("counts %+v: the held message is scheduled", c)
			}
			if got := types(run(Confirm{Queue: event.MainQueue, Messages: []HeldMessage{{x, "x"}, {x, "x"}, {999, "z"}}})); got != "confirmed" {
				t.Fatalf("confirm (its number twice, and an unknown one): %s", got)
			}
			// Remembered from the Confirm on: a send, held or not, is dropped.
			if cfg.RequiresDuplicateDetection {
				if got := types(send("x", 0, false)) + types(send("x", 0, true)); got != "" {
					t.Fatalf("sends of a confirmed message's MessageId: %s", got)
				}
			}
			if got := types(run(Confirm{Queue: event.MainQueue, Messages: []HeldMessage{{x, "x"}}})); got != "" {
				t.Fatalf("confirmed again: %s", got)
			}
			if got := types(pass(0)); got != "activated" {
				t.Fatalf("confirmed, due long ago: %s", got)
			}
			if got := h.e.Held(); got != nil {
				t.Fatalf("Held() = %v", got)
			}

			// Held until later: after its Confirm it waits for its time.
			evs = send("y", h.now+100*sec, true)
			y := evs[0].Index
			if got := types(run(Confirm{Queue: event.MainQueue, Messages: []HeldMessage{{y, "y"}}})); got != "confirmed" {
				t.Fatalf("confirm: %s", got)
			}
			if got := types(pass(99 * sec)); strings.Contains(got, "activated") {
				t.Fatalf("confirmed, not yet due: %s", got)
			}
			if got := types(pass(sec)); !strings.Contains(got, "activated") {
				t.Fatalf("confirmed, due: %s", got)
			}

			// A roll back cancels; a later confirm finds nothing.
			evs = send("z", 0, true)
			z := evs[0].Index
			if got := types(run(Cancel{Queue: event.MainQueue, Seqs: []uint64{z}})); got != "schedule-cancelled" {
				t.Fatalf("roll back: %s", got)
			}
			if got := types(run(Confirm{Queue: event.MainQueue, Messages: []HeldMessage{{z, "z"}}})); got != "" {
				t.Fatalf("confirm after the roll back: %s", got)
			}
			// A delete takes a held message too.
			evs = send("w", 0, true)
			if got := types(run(Delete{Queue: event.MainQueue, Seqs: []uint64{evs[0].Index}})); got != "deleted" {
				t.Fatalf("delete of a held message: %s", got)
			}
			if _, err := h.e.Decide(Confirm{Queue: 7}, h.now); !errors.Is(err, ErrInvalid) {
				t.Fatalf("confirm in no such queue: %v", err)
			}
		})
	}
}
