package broker

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/projection/filter"
)

// Topics. A topic is an entity with one log; each subscription is a group of
// queues inside it (its messages, its dead-letter and transfer dead-letter
// queues), named by the number of its first queue, which every queue
// operation of Entity takes. Subscription and rule changes go through the
// topic's actor, so they are ordered against its sends.

// Rule and filter types of the broker's API (see projection/rules.go).
type (
	RuleSpec        = projection.RuleSpec
	FilterSpec      = projection.FilterSpec
	FilterKind      = projection.FilterKind
	CorrelationSpec = projection.CorrelationSpec
)

// The filter types a rule can have.
const (
	FilterSQL         = projection.FilterSQL
	FilterTrue        = projection.FilterTrue
	FilterFalse       = projection.FilterFalse
	FilterCorrelation = projection.FilterCorrelation
	DefaultRuleName   = projection.DefaultRuleName
)

// What a topic's rules see of a message, and the values they compare: the
// protocol layer fills a FilterMessage from each message sent to a topic.
type (
	FilterMessage  = filter.Message
	FilterValue    = filter.Value
	FilterProperty = filter.Property
	FilterUUID     = filter.UUID
	FilterKindOf   = filter.Kind
	// RuleChange is one change a rule action made to its copy of a
	// message: Overlay.Changes.
	RuleChange = filter.Change
	// SysProp names the system property a RuleChange sets (zero: an
	// application property).
	SysProp = filter.SysProp
)

// The system properties a rule action may change.
const (
	SysMessageID               = filter.SysMessageID
	SysCorrelationID           = filter.SysCorrelationID
	SysTo                      = filter.SysTo
	SysReplyTo                 = filter.SysReplyTo
	SysLabel                   = filter.SysLabel
	SysSessionID               = filter.SysSessionID
	SysReplyToSessionID        = filter.SysReplyToSessionID
	SysContentType             = filter.SysContentType
	SysTimeToLive              = filter.SysTimeToLive
	SysScheduledEnqueueTimeUtc = filter.SysScheduledEnqueueTimeUtc
)

// The kinds of a FilterValue.
const (
	KindNull      = filter.KindNull
	KindBool      = filter.KindBool
	KindInt       = filter.KindInt
	KindDouble    = filter.KindDouble
	KindDecimal   = filter.KindDecimal
	KindString    = filter.KindString
	KindTimestamp = filter.KindTimestamp
	KindDuration  = filter.KindDuration
	KindUUID      = filter.KindUUID
	KindOpaque    = filter.KindOpaque
)

// FilterValue constructors.
var (
	NullValue       = filter.NullValue
	BoolValue       = filter.BoolValue
	IntValue        = filter.IntValue
	UintValue       = filter.UintValue
	DoubleValue     = filter.DoubleValue
	DecimalValue    = filter.DecimalValue
	StringValue     = filter.StringValue
	TimestampMillis = filter.TimestampMillis
	DurationValue   = filter.DurationValue
	DurationTicks   = filter.DurationTicks
	UUIDValue       = filter.UUIDValue
	OpaqueValue     = filter.OpaqueValue
)

// Copied is the overlay type of a topic's message copy (a rule action's, or
// one dead-lettered on arrival).
const Copied = event.Copied

// DefaultTopicConfig and DefaultSubscriptionConfig are Service Bus's
// defaults.
func DefaultTopicConfig() Config        { return projection.DefaultTopicConfig() }
func DefaultSubscriptionConfig() Config { return projection.DefaultSubscriptionConfig() }

// SubscriptionInfo describes one subscription.
type SubscriptionInfo struct {
	Name    string
	Queue   uint32 // its first queue number
	Config  Config
	Rules   []RuleSpec // sorted by name
	Created int64      // unix ns
}

// CreateTopic creates a topic. It fails with ErrEntityExists if an entity
// of that name (compared without case) exists.
func (b *Broker) CreateTopic(name string, cfg Config) (*Entity, error) {
	return b.create(NewEntity{Name: name, Topic: true, Config: cfg})
}

// UpdateTopic changes a topic's config.
func (b *Broker) UpdateTopic(name string, cfg Config) error {
	cfg.Topic = true
	return b.update(name, "topic", cfg)
}

// IsTopic reports whether the entity is a topic.
func (e *Entity) IsTopic() bool {
	cfg := e.cfg.Load()
	return cfg != nil && cfg.Topic
}

// notFound is Service Bus's text for a missing subscription or rule: JS
// maps it to MessagingEntityNotFound (docs/compatibility.md §4).
func (e *Entity) notFound(path string) error {
	//lint:ignore ST1005 Service Bus's own words, punctuation included
	return fmt.Errorf("%w: The messaging entity '%s' could not be found.", projection.ErrNotFound, path)
}

// CreateSubscription adds a subscription with the given rules (nil: the
// $Default rule) and waits until it is durable.
func (e *Entity) CreateSubscription(name string, cfg Config, rules []RuleSpec) error {
	cfg.Topic = false
	if err := e.checkSubscriptionForwarding(name, cfg); err != nil {
		return err
	}
	return e.topicCall(projection.CreateSubscription{Name: name, Config: cfg, Rules: rules})
}

// UpdateSubscription changes a subscription's config.
func (e *Entity) UpdateSubscription(name string, cfg Config) error {
	cfg.Topic = false
	if err := e.checkSubscriptionForwarding(name, cfg); err != nil {
		return err
	}
	return e.topicCall(projection.UpdateSubscription{Name: name, Config: cfg})
}

// checkSubscriptionForwarding checks a subscription's forwarding targets:
// they exist and are not its own topic (which would send each message
// round until its hops ran out), and a subscription that requires sessions
// has no ForwardTo, as in Service Bus. A chain of hops beyond the target is
// cut by the hop count each message carries.
func (e *Entity) checkSubscriptionForwarding(name string, cfg Config) error {
	if cfg.RequiresSession && cfg.ForwardTo != "" {
		return fmt.Errorf("%w: subscription %s requires sessions; ForwardTo is not supported for session-enabled subscriptions",
			ErrForwarding, name)
	}
	for _, target := range []string{cfg.ForwardTo, cfg.ForwardDeadLetteredMessagesTo} {
		if target == "" {
			continue
		}
		if strings.EqualFold(target, e.name) {
			return fmt.Errorf("%w: subscription %s cannot forward to its own topic", ErrForwarding, name)
		}
		if _, err := e.b.Entity(target); err != nil {
			return fmt.Errorf("%w: subscription %s forwards to %s, which does not exist", ErrForwarding, name, target)
		}
	}
	return nil
}

// DeleteSubscription removes a subscription with its messages and rules;
// its receivers are detached.
func (e *Entity) DeleteSubscription(name string) error {
	if err := e.topicCall(projection.DeleteSubscription{Name: name}); err != nil {
		return err
	}
	// What it held may have kept the log's front: checkpoint and snapshot
	// now, as an idle entity does, so the disk comes back at once.
	e.post(func(e *Entity) {
		if e.failed == nil && !e.snap.running {
			e.checkpoint(2)
		}
	})
	return nil
}

// AddRule adds a rule to the subscription whose queue is queue.
func (e *Entity) AddRule(queue uint32, r RuleSpec) error {
	return e.topicCall(projection.AddRule{Queue: queue, Rule: r})
}

// RemoveRule removes a subscription's rule by name.
func (e *Entity) RemoveRule(queue uint32, name string) error {
	return e.topicCall(projection.RemoveRule{Queue: queue, Name: name})
}

func (e *Entity) topicCall(cmd projection.Command) error {
	ch := make(chan error, 1)
	e.do(func(err error) { ch <- err }, func(e *Entity) ([]event.Event, error) {
		evs, err := e.decide(cmd)
		if err == nil {
			e.afterTopicChange(evs)
		}
		return evs, err
	})
	return <-ch
}

// afterTopicChange tells the receivers of a subscription being deleted.
func (e *Entity) afterTopicChange(evs []event.Event) {
	for _, ev := range evs {
		if ev.Type != event.SubscriptionDeleted {
			continue
		}
		s := e.st.SubscriptionOf(ev.Queue)
		if s == nil {
			continue
		}
		err := e.notFound(e.name + "/Subscriptions/" + s.Name())
		for r := range e.receivers {
			if event.SubqueueOf(r.opts.Queue, event.KindMessages) == ev.Queue {
				r.fail(err)
				delete(e.receivers, r)
				e.credit.drop(r)
			}
		}
	}
}

// SubscriptionQueue returns the queue number of subscription name
// (compared without case).
func (e *Entity) SubscriptionQueue(name string) (uint32, error) {
	return call(e, func(e *Entity) (uint32, error) {
		if !e.st.IsTopic() {
			return 0, e.notFound(e.name + "/Subscriptions/" + name)
		}
		s := e.st.Subscription(name)
		if s == nil {
			return 0, e.notFound(e.name + "|" + name)
		}
		return s.Queue(), nil
	})
}

// Subscriptions lists the topic's subscriptions in creation order.
func (e *Entity) Subscriptions() ([]SubscriptionInfo, error) {
	return call(e, func(e *Entity) ([]SubscriptionInfo, error) {
		var out []SubscriptionInfo
		for _, s := range e.st.Subscriptions() {
			out = append(out, SubscriptionInfo{Name: s.Name(), Queue: s.Queue(), Config: s.Config(),
				Rules: s.Rules(), Created: s.Created()})
		}
		return out, nil
	})
}

// Rules returns the rules of the subscription whose queue is queue, sorted
// by name.
func (e *Entity) Rules(queue uint32) ([]RuleSpec, error) {
	return call(e, func(e *Entity) ([]RuleSpec, error) {
		s := e.st.SubscriptionOf(queue)
		if s == nil || s.Queue() != queue {
			return nil, e.notFound(fmt.Sprintf("%s|%d", e.name, queue))
		}
		return s.Rules(), nil
	})
}

// QueueConfig returns the config that governs queue: a subscription's for
// its queues, the entity's otherwise.
func (e *Entity) QueueConfig(queue uint32) (Config, error) {
	return call(e, func(e *Entity) (Config, error) {
		if s := e.st.SubscriptionOf(queue); s != nil {
			return s.Config(), nil
		}
		if e.st.Queue(queue) == nil {
			return Config{}, fmt.Errorf("%w: no queue %d", projection.ErrInvalid, queue)
		}
		return e.st.Config(), nil
	})
}

// QueuePath is how people name queue no of the entity: "orders",
// "orders/$DeadLetterQueue", "news/Subscriptions/s1", ...
func (e *Entity) QueuePath(no uint32) string {
	path, _ := call(e, func(e *Entity) (string, error) { return queuePath(e.st, e.name, no), nil })
	return path
}

func queuePath(st *projection.Entity, name string, no uint32) string {
	path := name
	if s := st.SubscriptionOf(no); s != nil {
		path += "/Subscriptions/" + s.Name()
	}
	switch event.KindOf(no) {
	case event.KindDeadLetter:
		path += "/$DeadLetterQueue"
	case event.KindTransferDeadLetter:
		path += "/$Transfer/$DeadLetterQueue"
	}
	return path
}

// update changes an entity's config, the entity's log first (it refuses
// the changes Service Bus forbids), then the namespace's. In a cluster
// the entity's log alone holds it: the node that leads the entity need
// not lead the metadata group.
func (b *Broker) update(name, kind string, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %v", projection.ErrInvalid, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.entities[strings.ToLower(name)]
	if !ok {
		return fmt.Errorf("%w: %s", ErrEntityNotFound, name)
	}
	if err := b.checkForwarding(name, cfg); err != nil {
		return err
	}
	if err := e.configure(cfg); err != nil {
		return err
	}
	if b.meta == nil {
		spec, _ := json.Marshal(entitySpec{Kind: kind, Config: cfg})
		if err := b.appendNamespace([]event.Event{{Type: event.EntityUpdated, Name: e.name, Props: spec}}); err != nil {
			return err
		}
	}
	now := b.clock.Now().UnixNano()
	e.updated.Store(now)
	e.active.last.Store(now) // a change: not idle, but not an access either
	return nil
}
