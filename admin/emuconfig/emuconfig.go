// Package emuconfig reads the Azure Service Bus emulator's Config.json, so
// `walbus serve --config FILE` can create the entities it lists. The file is
// JSON with // and /* */ comments:
//
//	{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
//	  "Queues": [{"Name": "q", "Properties": {"LockDuration": "PT1M"}}],
//	  "Topics": [{"Name": "t", "Subscriptions": [{"Name": "s", "Rules": [...]}]}]}]}}
//
// Keys match as the emulator writes them or without regard to case; unknown
// keys are ignored. None of the emulator's own caps apply (entity count,
// time to live, delivery count): only Service Bus's limits, through
// broker.Config.Validate. Parse reports the first problem in the file as
// an *Error naming its line, column and key path.
package emuconfig

import (
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/walbus/walbus/broker"
)

// File is a parsed Config.json (its UserConfig; Logging and other sections
// are ignored).
type File struct {
	Namespaces []Namespace
}

// Namespace is one namespace; the emulator serves exactly one, named
// sbemulatorns. Queue and topic names are unique across both lists.
type Namespace struct {
	Name   string
	Queues []Queue
	Topics []Topic
}

// Queue is a queue and the settings the file gives it.
type Queue struct {
	Name       string
	Properties Properties
}

// Topic is a topic, its settings and its subscriptions.
type Topic struct {
	Name          string
	Properties    Properties
	Subscriptions []Subscription
}

// Subscription is a subscription, its settings and its rules, in file order.
type Subscription struct {
	Name       string
	Properties Properties
	Rules      []Rule
}

// Properties are an entity's settings as the file gives them; nil means the
// file leaves it out (or gives null) and Service Bus's default applies. Each
// kind reads only its own keys and ignores the others:
//
//	queue:        all of them
//	topic:        DefaultMessageTimeToLive, RequiresDuplicateDetection,
//	              DuplicateDetectionHistoryTimeWindow, MaxMessageSizeInKilobytes
//	subscription: LockDuration, MaxDeliveryCount, DefaultMessageTimeToLive,
//	              DeadLetteringOnMessageExpiration, RequiresSession,
//	              ForwardTo, ForwardDeadLetteredMessagesTo
type Properties struct {
	LockDuration                        *time.Duration
	MaxDeliveryCount                    *int
	DefaultMessageTimeToLive            *time.Duration // as written; see Queue.Config for "no limit"
	DeadLetteringOnMessageExpiration    *bool
	RequiresSession                     *bool
	RequiresDuplicateDetection          *bool
	DuplicateDetectionHistoryTimeWindow *time.Duration
	ForwardTo                           *string // "" forwards nowhere
	ForwardDeadLetteredMessagesTo       *string
	MaxMessageSizeInKilobytes           *int64
}

// FilterType says which of a rule's filters applies.
type FilterType string

const (
	FilterCorrelation FilterType = "Correlation"
	FilterSQL         FilterType = "Sql"
)

// Rule is a subscription rule. In the file, everything but Name sits under
// "Properties"; FilterType is matched without case and stored canonically.
type Rule struct {
	Name              string
	FilterType        FilterType
	CorrelationFilter *CorrelationFilter // set when the file gives one
	SQLFilter         *SQLFilter
	Action            *SQLAction
}

// CorrelationFilter matches when every field given equals the message's.
// Subject is the file's "Label".
type CorrelationFilter struct {
	ContentType      string
	CorrelationID    string
	Subject          string
	MessageID        string
	ReplyTo          string
	ReplyToSessionID string
	SessionID        string
	To               string
	// Properties are application properties: string, int64, float64 or
	// bool values.
	Properties map[string]any
}

// SQLFilter is a SQL-like filter expression, not parsed here.
type SQLFilter struct {
	Expression string // "SqlExpression" in the file
}

// SQLAction is a rule's action, a SQL-like SET/REMOVE list, not parsed here.
type SQLAction struct {
	Expression string // "SqlExpression" in the file
}

// Error is a problem in a config file, at the 1-based line and byte column
// of the value (or key, or '{') it is about.
type Error struct {
	File      string
	Line, Col int
	Path      string // e.g. UserConfig.Namespaces[0].Queues[2].Properties.LockDuration
	Err       error
}

func (e *Error) Error() string {
	if e.Path == "" {
		return fmt.Sprintf("%s:%d:%d: %v", e.File, e.Line, e.Col, e.Err)
	}
	return fmt.Sprintf("%s:%d:%d: %s: %v", e.File, e.Line, e.Col, e.Path, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Load reads and parses the config file at path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// Parse parses a config file's contents; path only names the file in
// errors. The error, if any, is an *Error for the first problem in the file:
// the file is read once, front to back, and each value is checked where it
// stands, so a bad value is reported before any later syntax error. Checks
// that need a whole object (a missing Name, a queue forwarding to itself)
// run as that object closes.
func Parse(path string, data []byte) (f *File, err error) {
	d := &decoder{file: path, data: data}
	defer func() {
		if r := recover(); r != nil {
			fail, ok := r.(failure)
			if !ok {
				panic(r)
			}
			f, err = nil, fail.err
		}
	}()
	return d.document(), nil
}

// Config is the queue's settings as walbus stores them: Service Bus's
// defaults with each property the file gives applied. A time to live of 100
// years or more (.NET writes "no limit" as TimeSpan.MaxValue) becomes 0,
// walbus's "no limit". For a File from Parse the result passes Validate.
func (q Queue) Config() broker.Config { return q.Properties.config() }

// Config is the subscription's settings, as for Queue.Config.
func (s Subscription) Config() broker.Config {
	c := s.Properties.config()
	c.DeadLetterOnFilterError = true // Service Bus's default; the file has no such key
	return c
}

// Config is the topic's settings, as for Queue.Config; a topic has no lock
// or delivery count of its own, so those stay at their defaults.
func (t Topic) Config() broker.Config {
	c := t.Properties.config()
	c.Topic = true
	return c
}

// RuleSpecs are the subscription's rules as the broker takes them: nil
// (the $Default rule) when the file lists none.
func (s Subscription) RuleSpecs() []broker.RuleSpec {
	if len(s.Rules) == 0 {
		return nil
	}
	out := make([]broker.RuleSpec, len(s.Rules))
	for i, r := range s.Rules {
		out[i] = r.Spec()
	}
	return out
}

// Spec is the rule as the broker takes it. A correlation filter's empty
// strings are fields the file leaves out; its properties go in name order.
func (r Rule) Spec() broker.RuleSpec {
	spec := broker.RuleSpec{Name: r.Name}
	if r.Action != nil {
		spec.Action = r.Action.Expression
	}
	switch {
	case r.FilterType == FilterSQL && r.SQLFilter != nil:
		spec.Filter = broker.FilterSpec{Kind: broker.FilterSQL, SQL: r.SQLFilter.Expression}
	case r.FilterType == FilterCorrelation && r.CorrelationFilter != nil:
		f := r.CorrelationFilter
		opt := func(s string) *string {
			if s == "" {
				return nil
			}
			return &s
		}
		c := &broker.CorrelationSpec{CorrelationID: opt(f.CorrelationID), MessageID: opt(f.MessageID), To: opt(f.To),
			ReplyTo: opt(f.ReplyTo), Subject: opt(f.Subject), SessionID: opt(f.SessionID),
			ReplyToSessionID: opt(f.ReplyToSessionID), ContentType: opt(f.ContentType)}
		for _, name := range slices.Sorted(maps.Keys(f.Properties)) {
			var v broker.FilterValue
			switch x := f.Properties[name].(type) {
			case string:
				v = broker.StringValue(x)
			case int64:
				v = broker.IntValue(x)
			case float64:
				v = broker.DoubleValue(x)
			case bool:
				v = broker.BoolValue(x)
			}
			c.Properties = append(c.Properties, broker.FilterProperty{Name: name, Value: v})
		}
		spec.Filter = broker.FilterSpec{Kind: broker.FilterCorrelation, Correlation: c}
	}
	return spec
}

// unlimitedTTL and beyond means no expiry: .NET's TimeSpan.MaxValue (which
// ParseDuration saturates) and anything a person writes to mean "never".
const unlimitedTTL = 100 * 365 * 24 * time.Hour

func effectiveTTL(ttl time.Duration) time.Duration {
	if ttl >= unlimitedTTL {
		return 0
	}
	return ttl
}

func (p Properties) config() broker.Config {
	c := broker.DefaultConfig()
	if p.LockDuration != nil {
		c.LockDuration = *p.LockDuration
	}
	if p.MaxDeliveryCount != nil {
		c.MaxDeliveryCount = *p.MaxDeliveryCount
	}
	if p.DefaultMessageTimeToLive != nil {
		c.DefaultTTL = effectiveTTL(*p.DefaultMessageTimeToLive)
	}
	if p.DeadLetteringOnMessageExpiration != nil {
		c.DeadLetterOnExpiry = *p.DeadLetteringOnMessageExpiration
	}
	if p.RequiresSession != nil {
		c.RequiresSession = *p.RequiresSession
	}
	if p.RequiresDuplicateDetection != nil {
		c.RequiresDuplicateDetection = *p.RequiresDuplicateDetection
	}
	if p.DuplicateDetectionHistoryTimeWindow != nil {
		c.DuplicateWindow = *p.DuplicateDetectionHistoryTimeWindow
	}
	if p.ForwardTo != nil {
		c.ForwardTo = *p.ForwardTo
	}
	if p.ForwardDeadLetteredMessagesTo != nil {
		c.ForwardDeadLetteredMessagesTo = *p.ForwardDeadLetteredMessagesTo
	}
	if p.MaxMessageSizeInKilobytes != nil {
		c.MaxMessageSize = int(*p.MaxMessageSizeInKilobytes * 1024) // range checked by the parser
	}
	return c
}

// Name rules beyond broker.ValidateName, from the Service Bus docs: a
// namespace is letters, digits and hyphens, starting with a letter and
// ending with a letter or digit; subscription and rule names are at most 50
// characters and a single path segment; rule names may be "$Default" and
// may not contain @ ? # * / \.
const maxShortName = 50

func validateNamespaceName(name string) error {
	if name == "" || len(name) > maxShortName {
		return fmt.Errorf("invalid namespace name %q: length must be 1 to %d", name, maxShortName)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; !isLetter(c) && !isDigit(c) && c != '-' {
			return fmt.Errorf("invalid namespace name %q: %q is not allowed", name, c)
		}
	}
	if !isLetter(name[0]) || name[len(name)-1] == '-' {
		return fmt.Errorf("invalid namespace name %q: must start with a letter and end with a letter or digit", name)
	}
	return nil
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func validateSubscriptionName(name string) error {
	if err := broker.ValidateName(name); err != nil {
		return err
	}
	if len(name) > maxShortName {
		return fmt.Errorf("%w %q: a subscription name is at most %d characters", broker.ErrBadName, name, maxShortName)
	}
	if strings.Contains(name, "/") {
		return fmt.Errorf("%w %q: '/' is not allowed in a subscription name", broker.ErrBadName, name)
	}
	return nil
}

func validateRuleName(name string) error {
	if name == "" || len(name) > maxShortName {
		return fmt.Errorf("%w %q: a rule name is 1 to %d characters", broker.ErrBadName, name, maxShortName)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c == 0x7f || strings.IndexByte(`@?#*/\`, c) >= 0 {
			return fmt.Errorf("%w %q: %q is not allowed in a rule name", broker.ErrBadName, name, c)
		}
	}
	return nil
}

// maxKilobytes keeps MaxMessageSizeInKilobytes*1024 inside an int.
const maxKilobytes = math.MaxInt / 1024
