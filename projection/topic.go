package projection

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection/filter"
)

// A topic is an entity whose config says Topic. What is sent to it is
// written once, as a Published event with the routing outcome: which
// subscriptions got it as sent, and a Copied event for each copy a rule
// action made. Each subscription is a group of queues inside the topic's
// state (event.QueueGroup): subscription k (k >= 1, never reused) owns
// queues 3k, 3k+1 and 3k+2, and the lock, settle and session events that
// name those queues are its own. The topic's own group 0 holds its
// scheduled messages until they activate.

// topicState is what a topic adds to an entity.
type topicState struct {
	subs    []*Subscription // live subscriptions by queue number
	next    uint32          // the next subscription's group
	lastPub Ref             // the last Published record: Copied events follow it
	index   *ruleIndex      // nil after a change to subscriptions or rules
}

// ruleIndex finds the rules a message can match without trying every
// one: correlation filters that require a Label are listed by it (the
// usual topology: one such filter per subscription), the others are tried
// for every message. Both lists are in evaluation order: subscriptions by
// queue number, each one's rules by name.
type ruleIndex struct {
	byLabel map[string][]ruleAt
	always  []ruleAt
}

// ruleAt is rule r of subscription s, by their places in the topic's lists.
type ruleAt struct{ s, r int }

func (a ruleAt) before(b ruleAt) bool { return a.s < b.s || a.s == b.s && a.r < b.r }

// rules returns the index, building it after a change.
func (t *topicState) rules() *ruleIndex {
	if t.index != nil {
		return t.index
	}
	ix := &ruleIndex{byLabel: map[string][]ruleAt{}}
	for si, s := range t.subs {
		for ri, r := range s.rules {
			at := ruleAt{si, ri}
			if cf, ok := r.filter.(*filter.CorrelationFilter); ok {
				if label, ok := cf.Label(); ok {
					ix.byLabel[label] = append(ix.byLabel[label], at)
					continue
				}
			}
			ix.always = append(ix.always, at)
		}
	}
	t.index = ix
	return ix
}

// candidates are the rules a message with the given label (nil: none) may
// match, in evaluation order.
func (ix *ruleIndex) candidates(label *string, buf []ruleAt) []ruleAt {
	var byLabel []ruleAt
	if label != nil {
		byLabel = ix.byLabel[*label]
	}
	if len(byLabel) == 0 {
		return ix.always
	}
	if len(ix.always) == 0 {
		return byLabel
	}
	out := buf[:0]
	i, j := 0, 0
	for i < len(byLabel) || j < len(ix.always) {
		if j == len(ix.always) || i < len(byLabel) && byLabel[i].before(ix.always[j]) {
			out = append(out, byLabel[i])
			i++
		} else {
			out = append(out, ix.always[j])
			j++
		}
	}
	return out
}

// Subscription is one subscription of a topic.
type Subscription struct {
	name    string
	no      uint32 // its first queue number
	cfg     Config
	rules   []*rule // by name (ordinal)
	created int64
}

// Name is the subscription's name.
func (s *Subscription) Name() string { return s.name }

// Queue is the subscription's queue number; its dead-letter queue is the
// next one (event.SubqueueOf).
func (s *Subscription) Queue() uint32 { return s.no }

// Config is the subscription's config.
func (s *Subscription) Config() Config { return s.cfg }

// Created is when the subscription was created, unix ns.
func (s *Subscription) Created() int64 { return s.created }

// Rules returns the subscription's rules sorted by name.
func (s *Subscription) Rules() []RuleSpec {
	out := make([]RuleSpec, len(s.rules))
	for i, r := range s.rules {
		out[i] = r.spec
	}
	return out
}

// IsTopic reports whether the entity is a topic.
func (e *Entity) IsTopic() bool { return e.created && e.cfg.Topic }

// Subscriptions returns the topic's subscriptions in creation order.
func (e *Entity) Subscriptions() []*Subscription { return slices.Clone(e.topic.subs) }

// Subscription returns the subscription called name (compared without
// case), or nil.
func (e *Entity) Subscription(name string) *Subscription {
	for _, s := range e.topic.subs {
		if strings.EqualFold(s.name, name) {
			return s
		}
	}
	return nil
}

// SubscriptionOf returns the subscription that owns queue no, or nil.
func (e *Entity) SubscriptionOf(no uint32) *Subscription {
	first := no - no%event.QueueGroup
	i, ok := slices.BinarySearchFunc(e.topic.subs, first, func(s *Subscription, no uint32) int { return cmp.Compare(s.no, no) })
	if !ok {
		return nil
	}
	return e.topic.subs[i]
}

// liveQueues returns the queues that exist, in number order.
func (e *Entity) liveQueues() []*Queue {
	if len(e.queues) == event.QueueGroup {
		return e.queues
	}
	out := make([]*Queue, 0, len(e.queues))
	for _, q := range e.queues {
		if q != nil {
			out = append(out, q)
		}
	}
	return out
}

// Subscription and rule commands.
type (
	// CreateSubscription adds a subscription with the given rules, or with
	// the $Default rule when Rules is nil. It sees only what is published
	// after it.
	CreateSubscription struct {
		Name   string
		Config Config
		Rules  []RuleSpec
	}
	// UpdateSubscription changes a subscription's config.
	UpdateSubscription struct {
		Name   string
		Config Config
	}
	// DeleteSubscription removes a subscription, its messages and its
	// rules.
	DeleteSubscription struct{ Name string }
	// AddRule adds a rule to the subscription whose queue is Queue.
	AddRule struct {
		Queue uint32
		Rule  RuleSpec
	}
	// RemoveRule removes a rule by name.
	RemoveRule struct {
		Queue uint32
		Name  string
	}
)

func (CreateSubscription) isCommand() {}
func (UpdateSubscription) isCommand() {}
func (DeleteSubscription) isCommand() {}
func (AddRule) isCommand()            {}
func (RemoveRule) isCommand()         {}

// Limits of a topic (Service Bus's).
const (
	MaxSubscriptions = 2000
	MaxRules         = 2000 // per subscription: walbus's bound on the work of one send
)

func (d *decision) topicOnly() error {
	if !d.e.IsTopic() {
		return fmt.Errorf("%w: the entity is not a topic", ErrNotAllowed)
	}
	return nil
}

func (d *decision) createSubscription(c CreateSubscription) error {
	if err := d.topicOnly(); err != nil {
		return err
	}
	if err := ValidateSubName("subscription", c.Name); err != nil {
		return err
	}
	if err := c.Config.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if c.Config.Topic {
		return fmt.Errorf("%w: a subscription is not a topic", ErrInvalid)
	}
	if d.e.Subscription(c.Name) != nil {
		return fmt.Errorf("%w: subscription %s", ErrExists, c.Name)
	}
	if len(d.e.topic.subs) >= MaxSubscriptions {
		return fmt.Errorf("%w: a topic has at most %d subscriptions", ErrQuotaExceeded, MaxSubscriptions)
	}
	rules := c.Rules
	if rules == nil {
		rules = []RuleSpec{DefaultRule()}
	}
	names := map[string]bool{}
	for _, r := range rules {
		if err := r.Compile(); err != nil {
			return err
		}
		if names[r.Name] {
			return fmt.Errorf("%w: rule %s given twice", ErrInvalid, r.Name)
		}
		names[r.Name] = true
	}
	next := max(d.e.topic.next, 1)
	if uint64(next)*event.QueueGroup > 1<<32-event.QueueGroup {
		return fmt.Errorf("%w: the topic has used up its subscription numbers", ErrQuotaExceeded)
	}
	no := next * event.QueueGroup
	d.emit(event.Event{Type: event.SubscriptionCreated, Queue: no, Name: c.Name, Props: c.Config.Encode()})
	for _, r := range rules {
		r.Created = 0
		d.emit(event.Event{Type: event.RuleAdded, Queue: no, Name: r.Name, Props: r.encode()})
	}
	return nil
}

func (d *decision) updateSubscription(c UpdateSubscription) error {
	if err := d.topicOnly(); err != nil {
		return err
	}
	s := d.e.Subscription(c.Name)
	if s == nil {
		return fmt.Errorf("%w: subscription %s", ErrNotFound, c.Name)
	}
	if err := c.Config.Validate(); err != nil || c.Config.Topic {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if c.Config.RequiresSession != s.cfg.RequiresSession {
		return fmt.Errorf("%w: RequiresSession cannot change after creation", ErrNotAllowed)
	}
	d.emit(event.Event{Type: event.SubscriptionUpdated, Queue: s.no, Props: c.Config.Encode()})
	return nil
}

func (d *decision) deleteSubscription(c DeleteSubscription) error {
	if err := d.topicOnly(); err != nil {
		return err
	}
	s := d.e.Subscription(c.Name)
	if s == nil {
		return fmt.Errorf("%w: subscription %s", ErrNotFound, c.Name)
	}
	d.emit(event.Event{Type: event.SubscriptionDeleted, Queue: s.no})
	return nil
}

func (d *decision) subscriptionAt(no uint32) (*Subscription, error) {
	if err := d.topicOnly(); err != nil {
		return nil, err
	}
	s := d.e.SubscriptionOf(no)
	if s == nil || no != s.no {
		return nil, fmt.Errorf("%w: no subscription has queue %d", ErrNotFound, no)
	}
	return s, nil
}

func (d *decision) addRule(c AddRule) error {
	s, err := d.subscriptionAt(c.Queue)
	if err != nil {
		return err
	}
	if err := c.Rule.Compile(); err != nil {
		return err
	}
	if _, ok := s.rule(c.Rule.Name); ok {
		return fmt.Errorf("%w: rule %s", ErrExists, c.Rule.Name)
	}
	if len(s.rules) >= MaxRules {
		return fmt.Errorf("%w: a subscription has at most %d rules", ErrQuotaExceeded, MaxRules)
	}
	r := c.Rule
	r.Created = 0
	d.emit(event.Event{Type: event.RuleAdded, Queue: s.no, Name: r.Name, Props: r.encode()})
	return nil
}

func (d *decision) removeRule(c RemoveRule) error {
	s, err := d.subscriptionAt(c.Queue)
	if err != nil {
		return err
	}
	if _, ok := s.rule(c.Name); !ok {
		return fmt.Errorf("%w: rule %s", ErrNotFound, c.Name)
	}
	d.emit(event.Event{Type: event.RuleRemoved, Queue: s.no, Name: c.Name})
	return nil
}

// rule finds a rule by exact name.
func (s *Subscription) rule(name string) (int, bool) {
	return slices.BinarySearchFunc(s.rules, name, func(r *rule, name string) int { return strings.Compare(r.spec.Name, name) })
}

// Dead-letter reasons of a message that entered a subscription's
// dead-letter queue on arrival. The session texts are Service Bus's; the
// filter reason is walbus's (Service Bus documents none), with the
// evaluation error as its description.
const (
	ReasonSessionIDNull        = "Session id is null."
	descriptionSessionIDNull   = "Session enabled entity doesn't allow a message whose session identifier is null."
	ReasonFilterEvaluation     = "FilterEvaluationException"
	descriptionFilterEvaluated = "A rule of the subscription failed to evaluate: "
)

// copyOut is one Copied event a publish makes.
type copyOut struct {
	queue       uint32
	until       int64 // expiry by the topic's default
	session     string
	rule        string
	overlay     []byte
	reason, why string
}

// publish routes one message through the subscriptions' rules: a Published
// event with the subscriptions that take it as sent, then a Copied event
// per action copy and per copy that goes straight to a dead-letter queue.
// seq is the scheduled message being activated (0 for a send); until is
// its expiry by the topic's default.
func (d *decision) publish(m Message, seq uint64, until int64, hops uint32, nonce uint64) {
	// The broker hands each message its own Filter: its broker-assigned
	// properties are filled in here, in place.
	fm := m.Filter
	if fm == nil {
		fm = &filter.Message{}
	}
	d.fillFilter(fm, m, until, nonce)
	r := d.route(fm, m.SessionID, until)
	d.emit(event.Event{Type: event.Published, Seq: seq, Until: until, MessageID: m.MessageID, SessionID: m.SessionID,
		Props: event.AppendRoutes(nil, r.routes), Message: m.Body, Hops: hops})
	d.emitCopies(r.copies)
}

// fillFilter fills in the properties the broker assigns to a message rules
// see, and newid().
func (d *decision) fillFilter(fm *filter.Message, m Message, until int64, nonce uint64) {
	if fm.MessageID.IsNull() && m.MessageID != "" {
		fm.MessageID = filter.StringValue(m.MessageID)
	}
	if fm.SessionID.IsNull() && m.SessionID != "" {
		fm.SessionID = filter.StringValue(ClientSessionID(m.SessionID))
	}
	fm.EnqueuedTimeUtc = filter.TimeValue(time.Unix(0, d.now))
	fm.Size = filter.IntValue(int64(len(m.Body)))
	fm.DeliveryCount = filter.IntValue(0)
	if until > 0 {
		fm.ExpiresAtUtc = filter.TimeValue(time.Unix(0, until))
	}
	ids := uint64(0)
	fm.NewID = func() filter.UUID {
		ids++
		var u filter.UUID
		binary.BigEndian.PutUint64(u[:8], mix(nonce, ids))
		binary.BigEndian.PutUint64(u[8:], mix(nonce^0x5bd1e995, ids))
		u[6] = u[6]&0x0f | 0x40
		u[8] = u[8]&0x3f | 0x80
		return u
	}
}

// route runs the subscriptions' rules on a message.
func (d *decision) route(fm *filter.Message, session string, until int64) *router {
	var label *string
	if fm.Label.Kind() == filter.KindString {
		l := fm.Label.Text()
		label = &l
	}
	var buf [16]ruleAt
	cands := d.e.topic.rules().candidates(label, buf[:0])
	r := &router{fm: fm, session: session, until: until, expiry: d.expiry}
	for len(cands) > 0 {
		// The candidate rules of one subscription, then the next's.
		n := 1
		for n < len(cands) && cands[n].s == cands[0].s {
			n++
		}
		r.subscription(d.e.topic.subs[cands[0].s], cands[:n])
		cands = cands[n:]
	}
	return r
}

// emitCopies emits the Copied events of copies, which follow the record
// holding their body (Published, or Forwarded) in the same atomic group.
func (d *decision) emitCopies(copies []copyOut) {
	for i, c := range copies {
		d.emit(event.Event{Type: event.Copied, Queue: c.queue, Seq: uint64(i + 1), Until: c.until, SessionID: c.session,
			Name: c.rule, Reason: c.reason, Description: c.why, Props: c.overlay})
	}
}

// routeForwarded routes a message another entity's dead-letter queue
// forwarded here, whose Forwarded record (holding the body, and how it was
// dead-lettered there) was just emitted: every subscription that takes it
// gets a copy of its own, so that the record is its first overlay in each.
func (d *decision) routeForwarded(m Message, source string, until int64, nonce uint64) {
	fm := m.Filter
	if fm == nil {
		fm = &filter.Message{}
	}
	d.fillFilter(fm, m, until, nonce)
	fm.DeadLetterSource = filter.StringValue(source)
	r := d.route(fm, m.SessionID, until)
	copies := make([]copyOut, 0, len(r.routes)+len(r.copies))
	for _, no := range r.routes {
		copies = append(copies, copyOut{queue: no, session: m.SessionID, until: until})
	}
	d.emitCopies(append(copies, r.copies...))
}

// router gathers the routing outcome of one message.
type router struct {
	fm      *filter.Message
	session string
	until   int64                     // the message's expiry by the topic's default
	expiry  func(time.Duration) int64 // a time to live's expiry, by the topic's default
	routes  []uint32
	copies  []copyOut
}

// subscription evaluates the candidate rules of subscription s (the
// others cannot match): any matching rule without an action routes the
// message as sent, each matching rule with an action makes a copy, a rule
// that fails to evaluate sends the message to the dead-letter queue (or
// nowhere) instead.
func (r *router) subscription(s *Subscription, cands []ruleAt) {
	plain := false
	first := len(r.copies)
	dlq := event.SubqueueOf(s.no, event.KindDeadLetter)
	for _, at := range cands {
		rule := s.rules[at.r]
		ok, err := rule.filter.Match(r.fm)
		var ov filter.Overlay
		if err == nil && ok && rule.action != nil {
			ov, err = rule.action.Apply(r.fm)
		}
		if err != nil {
			r.copies = r.copies[:first]
			if s.cfg.DeadLetterOnFilterError {
				r.copies = append(r.copies, copyOut{queue: dlq, session: r.session, reason: ReasonFilterEvaluation,
					why: descriptionFilterEvaluated + err.Error()})
			}
			return
		}
		switch {
		case !ok:
		case rule.action == nil:
			plain = true
		default:
			session, until := r.session, r.until
			for _, c := range ov {
				switch c.Sys {
				case filter.SysSessionID:
					session = ""
					if !c.Remove && c.Value.Kind() == filter.KindString {
						session = SessionIDOf(c.Value.Text()) // '' is a session
					}
				case filter.SysTimeToLive:
					// The copy lives as the action says, within the
					// topic's default.
					var ttl time.Duration
					if !c.Remove && c.Value.Kind() == filter.KindDuration {
						ttl = c.Value.Duration()
					}
					until = r.expiry(ttl)
				}
			}
			c := copyOut{queue: s.no, session: session, until: until, rule: rule.spec.Name, overlay: EncodeOverlay(ov)}
			if s.cfg.RequiresSession && session == "" {
				c.queue, c.reason, c.why = dlq, ReasonSessionIDNull, descriptionSessionIDNull
			}
			r.copies = append(r.copies, c)
		}
	}
	if !plain {
		return
	}
	if s.cfg.RequiresSession && r.session == "" {
		r.copies = append(r.copies, copyOut{queue: dlq, reason: ReasonSessionIDNull, why: descriptionSessionIDNull})
		return
	}
	r.routes = append(r.routes, s.no)
}

// subExpiry is when a message published at t with topic expiry until
// expires in subscription s: the subscription's default may cut it.
func subExpiry(s *Subscription, until, t int64) int64 {
	if def := s.cfg.DefaultTTL; def > 0 {
		limit := t + int64(def)
		if t > 0 && limit < t {
			limit = 1<<63 - 1
		}
		if until == 0 || limit < until {
			return limit
		}
	}
	return until
}

// applyTopic applies the events only a topic's log holds.
func (e *Entity) applyTopic(ev *event.Event) error {
	if !e.IsTopic() {
		return fmt.Errorf("event %d (%s) in the log of an entity that is not a topic", ev.Index, ev.Type)
	}
	switch ev.Type {
	case event.Published:
		return e.applyPublished(ev)
	case event.Copied:
		return e.applyCopied(ev)
	}
	e.topic.index = nil // the rules change
	switch ev.Type {
	case event.SubscriptionCreated:
		cfg, err := DecodeConfig(ev.Props)
		if err != nil {
			return fmt.Errorf("event %d: %w", ev.Index, err)
		}
		no := ev.Queue
		if no%event.QueueGroup != 0 || no/event.QueueGroup < max(e.topic.next, 1) {
			return fmt.Errorf("event %d: subscription queue %d is not the next one", ev.Index, no)
		}
		e.addSubscription(&Subscription{name: ev.Name, no: no, cfg: cfg, created: ev.Time})
		return nil
	}
	s := e.SubscriptionOf(ev.Queue)
	if s == nil || s.no != ev.Queue {
		return fmt.Errorf("event %d (%s): no subscription has queue %d", ev.Index, ev.Type, ev.Queue)
	}
	switch ev.Type {
	case event.SubscriptionUpdated:
		cfg, err := DecodeConfig(ev.Props)
		if err != nil {
			return fmt.Errorf("event %d: %w", ev.Index, err)
		}
		if cfg.RequiresSession != s.cfg.RequiresSession {
			return fmt.Errorf("event %d: RequiresSession changed", ev.Index)
		}
		s.cfg = cfg
	case event.SubscriptionDeleted:
		e.dropSubscription(s)
	case event.RuleAdded:
		r, err := decodeRule(ev.Props)
		if err != nil {
			return fmt.Errorf("event %d: %w", ev.Index, err)
		}
		r.spec.Created = ev.Time
		i, found := s.rule(r.spec.Name)
		if found {
			return fmt.Errorf("event %d: rule %s exists", ev.Index, r.spec.Name)
		}
		s.rules = slices.Insert(s.rules, i, r)
	case event.RuleRemoved:
		i, found := s.rule(ev.Name)
		if !found {
			return fmt.Errorf("event %d: no rule %s", ev.Index, ev.Name)
		}
		s.rules = slices.Delete(s.rules, i, i+1)
	}
	return nil
}

// addSubscription makes s's queues and lists it.
func (e *Entity) addSubscription(s *Subscription) {
	for len(e.queues) < int(s.no) {
		e.queues = append(e.queues, nil)
	}
	e.queues = append(e.queues, newQueue(s.no, s.cfg.RequiresSession, &s.cfg),
		newQueue(s.no+1, false, &s.cfg), newQueue(s.no+2, false, &s.cfg))
	e.topic.subs = append(e.topic.subs, s)
	e.topic.next = s.no/event.QueueGroup + 1
}

// dropSubscription forgets s and everything it held.
func (e *Entity) dropSubscription(s *Subscription) {
	for _, no := range event.GroupOf(s.no) {
		e.queues[no] = nil
	}
	for len(e.queues) > event.QueueGroup && e.queues[len(e.queues)-1] == nil {
		e.queues = e.queues[:len(e.queues)-1]
	}
	e.topic.subs = slices.DeleteFunc(e.topic.subs, func(x *Subscription) bool { return x == s })
}

func (e *Entity) applyPublished(ev *event.Event) error {
	if ev.Queue != event.MainQueue {
		return fmt.Errorf("event %d: published to queue %d", ev.Index, ev.Queue)
	}
	routes, err := event.DecodeRoutes(ev.Props)
	if err != nil {
		return fmt.Errorf("event %d: %w", ev.Index, err)
	}
	if ev.Seq != 0 {
		q := e.queues[event.MainQueue]
		m, ok := q.msgs.Get(ev.Seq)
		if !ok || m.State != index.Scheduled {
			return fmt.Errorf("event %d: no scheduled message %d to activate", ev.Index, ev.Seq)
		}
		q.remove(ev.Seq, m)
	}
	subs := e.topic.subs
	for _, no := range routes {
		// Both ascend: walk the subscriptions along.
		for len(subs) > 0 && subs[0].no < no {
			subs = subs[1:]
		}
		if len(subs) == 0 || subs[0].no != no {
			return fmt.Errorf("event %d: routed to queue %d, which no subscription has", ev.Index, no)
		}
		s := subs[0]
		q := e.queues[no]
		e.enqueue(q, ev.Index, ev.Pos, ev.SessionID, subExpiry(s, ev.Until, ev.Time))
		q.dropStaleTimers()
	}
	e.remember(ev.MessageID, ev.Time)
	e.topic.lastPub = Ref{Index: ev.Index, Pos: ev.Pos}
	return nil
}

func (e *Entity) applyCopied(ev *event.Event) error {
	pub := e.topic.lastPub
	if ev.Seq == 0 || ev.Seq >= ev.Index || ev.Index-ev.Seq != pub.Index {
		return fmt.Errorf("event %d: a copy of record %d, not of the last published %d", ev.Index, ev.Index-ev.Seq, pub.Index)
	}
	s := e.SubscriptionOf(ev.Queue)
	q := e.Queue(ev.Queue)
	if s == nil || q == nil || event.KindOf(ev.Queue) == event.KindTransferDeadLetter {
		return fmt.Errorf("event %d: copied to queue %d, which no subscription has", ev.Index, ev.Queue)
	}
	own := Ref{Index: ev.Index, Pos: ev.Pos}
	if isDeadLetterQueue(ev.Queue) {
		q.add(ev.Index, index.Meta{Pos: own.Pos, State: index.Available}, "")
	} else {
		e.enqueue(q, ev.Index, ev.Pos, ev.SessionID, subExpiry(s, ev.Until, ev.Time))
	}
	// The body is the published record's; the copy's own record is its
	// first change.
	q.overlays[ev.Index] = []Ref{pub, own}
	q.dropStaleTimers()
	return nil
}

// Expiry is when a message whose record says until (its expiry by the
// entity's default) and t (its time) expires in queue no: a subscription's
// own default may cut it shorter.
func (e *Entity) Expiry(no uint32, until, t int64) int64 {
	if s := e.SubscriptionOf(no); s != nil {
		return subExpiry(s, until, t)
	}
	return until
}

// QueueNumbers lists the entity's queues in number order: its own three,
// then each subscription's.
func (e *Entity) QueueNumbers() []uint32 {
	var out []uint32
	for _, q := range e.liveQueues() {
		out = append(out, q.No)
	}
	return out
}
