package atom

import (
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/walbus/walbus/projection"
)

// PropertyError is a value Service Bus would reject: the HTTP layer
// answers 400 with it. Property names the element (or "entry" for a
// document that is not an ATOM entry).
type PropertyError struct {
	Property string
	Reason   string
}

func (e *PropertyError) Error() string { return "invalid " + e.Property + ": " + e.Reason }

// Kind is what an entry describes.
type Kind int

// The kinds of entity the administration API manages.
const (
	Queue Kind = iota + 1
	Topic
	Subscription
	Rule
)

var kindNames = [...]string{Queue: "queue", Topic: "topic", Subscription: "subscription", Rule: "rule"}

func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

var descriptions = map[string]Kind{"QueueDescription": Queue, "TopicDescription": Topic,
	"SubscriptionDescription": Subscription, "RuleDescription": Rule}

// KindOf is what body, an ATOM entry, describes. PUT /name creates a queue
// or a topic by the description it carries.
func KindOf(body []byte) (Kind, error) {
	root, err := parseTree(body)
	if err != nil {
		return 0, &PropertyError{Property: "entry", Reason: "not well-formed XML: " + err.Error()}
	}
	d, err := content(root)
	if err != nil {
		return 0, err
	}
	if k, ok := descriptions[d.name.Local]; ok {
		return k, nil
	}
	return 0, &PropertyError{Property: "content", Reason: fmt.Sprintf("unknown description %q", d.name.Local)}
}

// ParseQueue applies the QueueDescription in body (an ATOM <entry>) to cfg:
// elements present replace cfg's values, absent ones keep them (the caller
// passes defaults for a create, the current config for an update). Read-only
// elements (SizeInBytes, MessageCount, CountDetails, CreatedAt...) are
// ignored, and so are unknown ones. On an error cfg is unchanged.
//
// Defaults are kept in their canonical form: MaxSizeInMegabytes 1024 is
// MaxSizeMB 0, Status Active is "", and TimeSpan.MaxValue for
// DefaultMessageTimeToLive or AutoDeleteOnIdle is 0 (never).
func ParseQueue(body []byte, cfg *projection.Config) error {
	_, c, err := parseEntity(body, "QueueDescription", queueFields, *cfg)
	if err == nil {
		*cfg = c
	}
	return err
}

// ParseTopic applies the TopicDescription in body to cfg, as ParseQueue does.
func ParseTopic(body []byte, cfg *projection.Config) error {
	_, c, err := parseEntity(body, "TopicDescription", topicFields, *cfg)
	if err == nil {
		*cfg = c
	}
	return err
}

// ParseSubscription applies the SubscriptionDescription in body to cfg, as
// ParseQueue does, and returns its DefaultRuleDescription's rule (named
// $Default when the body names none), nil if it has none.
func ParseSubscription(body []byte, cfg *projection.Config) (*projection.RuleSpec, error) {
	d, c, err := parseEntity(body, "SubscriptionDescription", subscriptionFields, *cfg)
	if err != nil {
		return nil, err
	}
	var rule *projection.RuleSpec
	if n := d.child("DefaultRuleDescription"); n != nil && !n.isNil() {
		r, err := parseRuleDescription(n)
		if err != nil {
			return nil, err
		}
		if r.Name == "" {
			r.Name = projection.DefaultRuleName
		}
		rule = &r
	}
	*cfg = c
	return rule, nil
}

// parseEntity applies the description's settable elements to cfg, a copy
// the caller keeps only if every one is valid.
func parseEntity(body []byte, want string, fields map[string]setter, cfg projection.Config) (*node, projection.Config, error) {
	d, err := description(body, want)
	if err != nil {
		return nil, cfg, err
	}
	for _, n := range d.children {
		set := fields[n.name.Local]
		if set == nil {
			continue
		}
		if err := set(n, &cfg); err != nil {
			return nil, cfg, &PropertyError{Property: n.name.Local, Reason: err.Error()}
		}
	}
	return d, cfg, nil
}

// setter applies one element to a config.
type setter func(n *node, c *projection.Config) error

// The elements each description may set (Go's internal/atom/models.go,
// JS's serializers/*ResourceSerializer.js). The others are read-only or
// not kept.
var (
	queueFields = map[string]setter{
		"LockDuration":                        setLockDuration,
		"MaxSizeInMegabytes":                  setMaxSize,
		"RequiresDuplicateDetection":          setBool(func(c *projection.Config, b bool) { c.RequiresDuplicateDetection = b }),
		"RequiresSession":                     setBool(func(c *projection.Config, b bool) { c.RequiresSession = b }),
		"DefaultMessageTimeToLive":            setTTL,
		"DeadLetteringOnMessageExpiration":    setBool(func(c *projection.Config, b bool) { c.DeadLetterOnExpiry = b }),
		"DuplicateDetectionHistoryTimeWindow": setDuplicateWindow,
		"MaxDeliveryCount":                    setMaxDeliveryCount,
		"EnableBatchedOperations":             setBool(func(c *projection.Config, b bool) { c.NoBatchedOperations = !b }),
		"Status":                              setStatus,
		"SupportOrdering":                     setBool(func(c *projection.Config, b bool) { c.NoSupportOrdering = !b }),
		"AutoDeleteOnIdle":                    setAutoDelete,
		"EnablePartitioning":                  setBool(func(c *projection.Config, b bool) { c.EnablePartitioning = b }),
		"ForwardTo": setEntityName(func(c *projection.Config, name, address string) {
			c.ForwardTo, c.ForwardToAddress = name, address
		}),
		"ForwardDeadLetteredMessagesTo": setEntityName(func(c *projection.Config, name, address string) {
			c.ForwardDeadLetteredMessagesTo, c.ForwardDeadLetteredMessagesToAddress = name, address
		}),
		"AuthorizationRules":        setAuthorizationRules,
		"UserMetadata":              setUserMetadata,
		"MaxMessageSizeInKilobytes": setMaxMessageSize,
	}
	topicFields = pick(queueFields, "DefaultMessageTimeToLive", "MaxSizeInMegabytes", "RequiresDuplicateDetection",
		"DuplicateDetectionHistoryTimeWindow", "EnableBatchedOperations", "Status", "UserMetadata", "SupportOrdering",
		"AutoDeleteOnIdle", "EnablePartitioning", "MaxMessageSizeInKilobytes", "AuthorizationRules")
	subscriptionFields = with(pick(queueFields, "LockDuration", "RequiresSession", "DefaultMessageTimeToLive",
		"DeadLetteringOnMessageExpiration", "MaxDeliveryCount", "EnableBatchedOperations", "Status", "ForwardTo",
		"UserMetadata", "ForwardDeadLetteredMessagesTo", "AutoDeleteOnIdle"),
		"DeadLetteringOnFilterEvaluationExceptions", setBool(func(c *projection.Config, b bool) { c.DeadLetterOnFilterError = b }))
)

func pick(from map[string]setter, names ...string) map[string]setter {
	out := make(map[string]setter, len(names))
	for _, name := range names {
		out[name] = from[name]
	}
	return out
}

func with(m map[string]setter, name string, set setter) map[string]setter {
	m[name] = set
	return m
}

func setBool(apply func(*projection.Config, bool)) setter {
	return func(n *node, c *projection.Config) error {
		b, err := parseBool(n.value())
		if err == nil {
			apply(c, b)
		}
		return err
	}
}

// parseInt reads an integer in [lo, hi].
func parseInt(n *node, lo, hi int64) (int64, error) {
	i, err := strconv.ParseInt(n.value(), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", n.value())
	}
	if i < lo || i > hi {
		return 0, fmt.Errorf("%d is out of range [%d, %d]", i, lo, hi)
	}
	return i, nil
}

func parseDurationOf(n *node) (time.Duration, error) {
	d, err := ParseDuration(n.value())
	if err != nil {
		return 0, fmt.Errorf("%q is not an ISO-8601 duration", n.value())
	}
	return d, nil
}

func setLockDuration(n *node, c *projection.Config) error {
	d, err := parseDurationOf(n)
	if err != nil {
		return err
	}
	if d <= 0 || d > projection.MaxLockDuration {
		return fmt.Errorf("%s is out of range (0, %s]", n.value(), FormatDuration(projection.MaxLockDuration))
	}
	c.LockDuration = d
	return nil
}

func setTTL(n *node, c *projection.Config) error {
	d, err := parseDurationOf(n)
	if err != nil {
		return err
	}
	switch {
	case d == Forever:
		d = 0 // never expire
	case d <= 0:
		return fmt.Errorf("%s is not positive", n.value())
	}
	c.DefaultTTL = d
	return nil
}

func setDuplicateWindow(n *node, c *projection.Config) error {
	d, err := parseDurationOf(n)
	if err != nil {
		return err
	}
	if d < projection.MinDuplicateWindow || d > projection.MaxDuplicateWindow {
		return fmt.Errorf("%s is out of range [%s, %s]", n.value(), FormatDuration(projection.MinDuplicateWindow),
			FormatDuration(projection.MaxDuplicateWindow))
	}
	c.DuplicateWindow = d
	return nil
}

// setAutoDelete: five minutes at least (Service Bus doc "Message
// expiration", Idleness).
func setAutoDelete(n *node, c *projection.Config) error {
	d, err := parseDurationOf(n)
	if err != nil {
		return err
	}
	switch {
	case d == Forever:
		d = 0 // never delete
	case d < projection.MinAutoDeleteOnIdle:
		return fmt.Errorf("%s is shorter than %s", n.value(), FormatDuration(projection.MinAutoDeleteOnIdle))
	}
	c.AutoDeleteOnIdle = d
	return nil
}

func setMaxDeliveryCount(n *node, c *projection.Config) error {
	i, err := parseInt(n, 1, math.MaxInt32)
	if err == nil {
		c.MaxDeliveryCount = int(i)
	}
	return err
}

func setMaxSize(n *node, c *projection.Config) error {
	i, err := parseInt(n, 1, math.MaxInt32)
	if err != nil {
		return err
	}
	if i == projection.DefaultMaxSizeMB {
		i = 0
	}
	c.MaxSizeMB = int(i)
	return nil
}

// setMaxMessageSize: 1 KB to 100 MB, Premium's limit.
func setMaxMessageSize(n *node, c *projection.Config) error {
	i, err := parseInt(n, 1, projection.MaxMessageSizeLimit/1024)
	if err == nil {
		c.MaxMessageSize = int(i) * 1024
	}
	return err
}

func setStatus(n *node, c *projection.Config) error {
	switch s := projection.Status(n.value()); s {
	case projection.StatusActive:
		c.Status = ""
	case projection.StatusDisabled, projection.StatusSendDisabled, projection.StatusReceiveDisabled:
		c.Status = s
	default:
		return fmt.Errorf("%q is not Active, Disabled, SendDisabled or ReceiveDisabled", n.value())
	}
	return nil
}

// setUserMetadata: at most 1024 characters, counted as bytes as
// projection.Config.Validate counts them.
func setUserMetadata(n *node, c *projection.Config) error {
	s := n.text.String()
	if len(s) > 1024 {
		return fmt.Errorf("%d characters, at most 1024", len(s))
	}
	c.UserMetadata = s
	return nil
}

// setEntityName reads ForwardTo and ForwardDeadLetteredMessagesTo: an
// entity name, or a URL whose path names it (JS turns a name into
// sb://<endpoint>/<name>, and the Go live tests send that form and expect
// it back). apply gets the name and, when the value was a URL, the value
// as written. "" clears the setting.
func setEntityName(apply func(c *projection.Config, name, address string)) setter {
	return func(n *node, c *projection.Config) error {
		v := strings.Trim(n.value(), xmlSpace)
		name, address := entityName(v), ""
		if name != v && name != "" {
			address = v
		}
		apply(c, name, address)
		return nil
	}
}

// setAuthorizationRules reads an entity's own SharedAccessAuthorizationRules:
// each a KeyName, keys and the Rights' AccessRights (Listen, Send, Manage).
// ClaimType and ClaimValue are always SharedAccessKey and None and are not
// kept; neither are the times. A rule without a KeyName (as a listing may
// show one) is skipped; keys left out are the caller's to generate.
func setAuthorizationRules(n *node, c *projection.Config) error {
	var rules []projection.AccessRule
	for _, r := range n.children {
		if r.name.Local != "AuthorizationRule" {
			continue
		}
		var rule projection.AccessRule
		for _, f := range r.children {
			switch f.name.Local {
			case "KeyName":
				rule.KeyName = f.value()
			case "PrimaryKey":
				rule.PrimaryKey = f.value()
			case "SecondaryKey":
				rule.SecondaryKey = f.value()
			case "Rights":
				for _, right := range f.children {
					if right.name.Local == "AccessRights" {
						rule.Rights = append(rule.Rights, right.value())
					}
				}
			}
		}
		if rule.KeyName != "" {
			rules = append(rules, rule)
		}
	}
	probe := *c
	probe.AuthorizationRules = slices.Clone(rules)
	for i := range probe.AuthorizationRules {
		if probe.AuthorizationRules[i].PrimaryKey == "" {
			probe.AuthorizationRules[i].PrimaryKey = "generated"
		}
	}
	if err := probe.Validate(); err != nil {
		return err
	}
	c.AuthorizationRules = rules
	return nil
}

// entityName strips scheme and host until none is left, so that the name
// it gives reads back as itself.
func entityName(s string) string {
	s = strings.Trim(s, xmlSpace)
	for strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil || u.Host == "" {
			break
		}
		s = strings.Trim(strings.Trim(u.Path, "/"), xmlSpace)
	}
	return s
}
