// Package projection is walbus's pure state machine per entity: Decide turns
// a command, the current state and the time into events (or a precise
// error); Apply changes the state by one event. Neither reads the clock, the
// disk or the network, so replaying a log always rebuilds the same state.
package projection

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"time"
)

// Config is the behaviour of a queue (or, later, a subscription). It is
// recorded in the entity's own log (EntityCreated, EntityUpdated), so a
// replay of that log alone decides the same way.
type Config struct {
	LockDuration               time.Duration `json:"lockDuration"`
	MaxDeliveryCount           int           `json:"maxDeliveryCount"`
	DefaultTTL                 time.Duration `json:"defaultMessageTimeToLive"` // 0: messages do not expire unless they say so
	DeadLetterOnExpiry         bool          `json:"deadLetteringOnMessageExpiration"`
	RequiresSession            bool          `json:"requiresSession"`
	RequiresDuplicateDetection bool          `json:"requiresDuplicateDetection"`
	DuplicateWindow            time.Duration `json:"duplicateDetectionHistoryTimeWindow"`
	MaxMessageSize             int           `json:"maxMessageSizeBytes"`
	// Auto-forwarding destinations (entity names); the broker moves
	// messages, so the projection only records them.
	ForwardTo                     string `json:"forwardTo,omitempty"`
	ForwardDeadLetteredMessagesTo string `json:"forwardDeadLetteredMessagesTo,omitempty"`
	// Topic makes the entity a topic: what is sent to it goes to its
	// subscriptions. It is set at creation and never changes.
	Topic bool `json:"topic,omitempty"`
	// DeadLetterOnFilterError (a subscription's): a message whose rule
	// fails to evaluate goes to the subscription's dead-letter queue
	// instead of being dropped there. Service Bus's default is true.
	DeadLetterOnFilterError bool `json:"deadLetteringOnFilterEvaluationExceptions,omitempty"`

	// Settings of the administration API. They are stored and reported;
	// the broker honours Status, AutoDeleteOnIdle and MaxSizeMB.
	Status           Status        `json:"status,omitempty"`             // "" is Active
	AutoDeleteOnIdle time.Duration `json:"autoDeleteOnIdle,omitempty"`   // 0: never
	MaxSizeMB        int           `json:"maxSizeInMegabytes,omitempty"` // 0: DefaultMaxSizeMB
	UserMetadata     string        `json:"userMetadata,omitempty"`
	// Accepted and reported only: walbus has one partition and always
	// keeps order, and it batches what it can whatever the setting.
	NoBatchedOperations bool `json:"noBatchedOperations,omitempty"` // EnableBatchedOperations false
	EnablePartitioning  bool `json:"enablePartitioning,omitempty"`
	NoSupportOrdering   bool `json:"noSupportOrdering,omitempty"` // a topic's SupportOrdering false

	// ForwardTo and ForwardDeadLetteredMessagesTo as the client wrote them
	// when that was a URL (sb://host/name) rather than the name: the
	// administration API reports them as written.
	ForwardToAddress                     string `json:"forwardToAddress,omitempty"`
	ForwardDeadLetteredMessagesToAddress string `json:"forwardDeadLetteredMessagesToAddress,omitempty"`

	// AuthorizationRules are the entity's own shared access keys: a token
	// signed with one of them grants its rights on this entity alone.
	AuthorizationRules []AccessRule `json:"authorizationRules,omitempty"`
}

// AccessRule is a shared access authorization rule of an entity.
type AccessRule struct {
	KeyName      string   `json:"keyName"`
	PrimaryKey   string   `json:"primaryKey"`
	SecondaryKey string   `json:"secondaryKey,omitempty"`
	Rights       []string `json:"rights"` // Listen, Send, Manage
}

// MaxAccessRules is how many AuthorizationRules an entity may have, as
// Service Bus allows.
const MaxAccessRules = 12

// Status is an entity's availability, as the administration API sets it.
type Status string

// The statuses Service Bus lets a client set.
const (
	StatusActive          Status = "Active"
	StatusDisabled        Status = "Disabled"
	StatusSendDisabled    Status = "SendDisabled"
	StatusReceiveDisabled Status = "ReceiveDisabled"
)

// DefaultMaxSizeMB is an entity's MaxSizeInMegabytes when none is given.
const DefaultMaxSizeMB = 1024

// MinAutoDeleteOnIdle is the shortest AutoDeleteOnIdle Service Bus takes.
const MinAutoDeleteOnIdle = 5 * time.Minute

// Service Bus defaults and limits.
const (
	DefaultLockDuration     = time.Minute
	MaxLockDuration         = 5 * time.Minute
	DefaultMaxDeliveryCount = 10
	DefaultDuplicateWindow  = 10 * time.Minute
	MinDuplicateWindow      = 20 * time.Second
	MaxDuplicateWindow      = 7 * 24 * time.Hour
	DefaultMaxMessageSize   = 1 << 20
	MaxMessageSizeLimit     = 100 << 20
)

// DefaultConfig is a queue with every setting at its Service Bus default.
func DefaultConfig() Config {
	return Config{
		LockDuration:     DefaultLockDuration,
		MaxDeliveryCount: DefaultMaxDeliveryCount,
		DuplicateWindow:  DefaultDuplicateWindow,
		MaxMessageSize:   DefaultMaxMessageSize,
	}
}

// DefaultSubscriptionConfig is a subscription with every setting at its
// Service Bus default.
func DefaultSubscriptionConfig() Config {
	c := DefaultConfig()
	c.DeadLetterOnFilterError = true
	return c
}

// DefaultTopicConfig is a topic with every setting at its Service Bus
// default.
func DefaultTopicConfig() Config {
	c := DefaultConfig()
	c.Topic = true
	return c
}

// Validate checks the settings against Service Bus's limits.
func (c Config) Validate() error {
	switch {
	case c.LockDuration <= 0 || c.LockDuration > MaxLockDuration:
		return fmt.Errorf("lock duration %v out of range (0, %v]", c.LockDuration, MaxLockDuration)
	case c.MaxDeliveryCount < 1:
		return fmt.Errorf("max delivery count %d must be at least 1", c.MaxDeliveryCount)
	case c.DefaultTTL < 0:
		return fmt.Errorf("negative default time to live %v", c.DefaultTTL)
	case c.RequiresDuplicateDetection && (c.DuplicateWindow < MinDuplicateWindow || c.DuplicateWindow > MaxDuplicateWindow):
		return fmt.Errorf("duplicate detection window %v out of range [%v, %v]", c.DuplicateWindow, MinDuplicateWindow, MaxDuplicateWindow)
	case c.MaxMessageSize < 1 || c.MaxMessageSize > MaxMessageSizeLimit:
		return fmt.Errorf("max message size %d out of range [1, %d]", c.MaxMessageSize, MaxMessageSizeLimit)
	case c.Status != "" && c.Status != StatusActive && c.Status != StatusDisabled && c.Status != StatusSendDisabled &&
		c.Status != StatusReceiveDisabled:
		return fmt.Errorf("status %q is not Active, Disabled, SendDisabled or ReceiveDisabled", c.Status)
	case c.AutoDeleteOnIdle < 0:
		return fmt.Errorf("negative auto-delete-on-idle %v", c.AutoDeleteOnIdle)
	case c.MaxSizeMB < 0:
		return fmt.Errorf("negative max size %d MB", c.MaxSizeMB)
	case len(c.UserMetadata) > 1024:
		return fmt.Errorf("user metadata of %d characters, at most 1024", len(c.UserMetadata))
	case len(c.AuthorizationRules) > MaxAccessRules:
		return fmt.Errorf("%d authorization rules, at most %d", len(c.AuthorizationRules), MaxAccessRules)
	}
	seen := make(map[string]bool, len(c.AuthorizationRules))
	for _, r := range c.AuthorizationRules {
		switch {
		case r.KeyName == "" || len(r.KeyName) > 256:
			return fmt.Errorf("authorization rule key name %q: 1 to 256 characters", r.KeyName)
		case seen[r.KeyName]:
			return fmt.Errorf("authorization rule %q appears twice", r.KeyName)
		case r.PrimaryKey == "" || len(r.PrimaryKey) > 256 || len(r.SecondaryKey) > 256:
			return fmt.Errorf("authorization rule %q: keys of 1 to 256 characters", r.KeyName)
		case len(r.Rights) == 0:
			return fmt.Errorf("authorization rule %q grants no rights", r.KeyName)
		}
		seen[r.KeyName] = true
		for _, right := range r.Rights {
			if right != "Listen" && right != "Send" && right != "Manage" {
				return fmt.Errorf("authorization rule %q: %q is not Listen, Send or Manage", r.KeyName, right)
			}
		}
	}
	return nil
}

// Equal reports whether c and o hold the same settings.
func (c Config) Equal(o Config) bool {
	if !slices.EqualFunc(c.AuthorizationRules, o.AuthorizationRules, func(a, b AccessRule) bool {
		return a.KeyName == b.KeyName && a.PrimaryKey == b.PrimaryKey && a.SecondaryKey == b.SecondaryKey &&
			slices.Equal(a.Rights, b.Rights)
	}) {
		return false
	}
	c.AuthorizationRules, o.AuthorizationRules = nil, nil
	return reflect.DeepEqual(c, o) // plain values only, now
}

// Encode is the config as stored in EntityCreated and EntityUpdated events.
func (c Config) Encode() []byte {
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // plain fields only: cannot fail
	}
	return b
}

// DecodeConfig reads a config stored by Encode.
func DecodeConfig(b []byte) (Config, error) {
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("decode entity config: %w", err)
	}
	return c, c.Validate()
}
