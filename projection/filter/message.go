package filter

import "strings"

// SysProp names a system (broker) property, the sys. scope of the SQL
// filter language. The zero SysProp names none: it marks a user property.
type SysProp uint8

// The system properties a filter or action can name (Service Bus doc
// "Messages, payloads, and serialization" lists them as the message's
// broker properties).
const (
	sysNone SysProp = iota
	SysMessageID
	SysCorrelationID
	SysTo
	SysReplyTo
	SysLabel // also spelled sys.Subject
	SysSessionID
	SysReplyToSessionID
	SysContentType
	SysTimeToLive
	SysScheduledEnqueueTimeUtc
	SysSequenceNumber
	SysEnqueuedSequenceNumber
	SysEnqueuedTimeUtc
	SysExpiresAtUtc
	SysDeliveryCount
	SysSize
	SysPartitionKey
	SysViaPartitionKey
	SysDeadLetterSource
	sysCount
)

var sysNames = [sysCount]string{
	"", "MessageId", "CorrelationId", "To", "ReplyTo", "Label", "SessionId", "ReplyToSessionId",
	"ContentType", "TimeToLive", "ScheduledEnqueueTimeUtc", "SequenceNumber", "EnqueuedSequenceNumber",
	"EnqueuedTimeUtc", "ExpiresAtUtc", "DeliveryCount", "Size", "PartitionKey", "ViaPartitionKey",
	"DeadLetterSource",
}

// String returns the property's canonical name, without the sys. prefix.
func (p SysProp) String() string {
	if p < sysCount {
		return sysNames[p]
	}
	return "?"
}

// Settable reports whether a rule action may SET or REMOVE p. The broker
// assigns the others (Service Bus doc "SQL rule action syntax").
func (p SysProp) Settable() bool {
	switch p {
	case SysMessageID, SysCorrelationID, SysTo, SysReplyTo, SysLabel, SysSessionID,
		SysReplyToSessionID, SysContentType, SysTimeToLive, SysScheduledEnqueueTimeUtc:
		return true
	}
	return false
}

// stringTyped reports whether p holds a string when set.
func (p SysProp) stringTyped() bool { return p.Settable() && p < SysTimeToLive }

// noFilterValue names properties a message has but that mean nothing while
// a filter runs: no lock exists yet.
var noFilterValue = []string{"LockToken", "LockedUntilUtc", "State", "ForcePersistence"}

// lookupSys finds a system property by name, ignoring ASCII case.
func lookupSys(name string) (SysProp, bool) {
	if equalFoldASCII(name, "Subject") {
		return SysLabel, true
	}
	for p := SysMessageID; p < sysCount; p++ {
		if equalFoldASCII(name, sysNames[p]) {
			return p, true
		}
	}
	return sysNone, false
}

// Property is one application (user) property.
type Property struct {
	Name  string
	Value Value
}

// Message is what a filter or action sees of one message. The broker fills
// it from the AMQP message: unset system properties stay null.
//
// MessageId, CorrelationId and the other address fields are Strings (the
// broker formats a uuid, ulong or binary message-id as text); TimeToLive is
// a Duration; the times are Timestamps; the numbers are Ints.
type Message struct {
	MessageID               Value
	CorrelationID           Value
	To                      Value
	ReplyTo                 Value
	Label                   Value // AMQP subject
	SessionID               Value // AMQP group-id
	ReplyToSessionID        Value // AMQP reply-to-group-id
	ContentType             Value
	TimeToLive              Value
	ScheduledEnqueueTimeUtc Value
	SequenceNumber          Value
	EnqueuedSequenceNumber  Value
	EnqueuedTimeUtc         Value
	ExpiresAtUtc            Value
	DeliveryCount           Value
	Size                    Value
	PartitionKey            Value
	ViaPartitionKey         Value
	DeadLetterSource        Value

	// Properties are the application properties in the message's order.
	// Names match case-insensitively; the first match wins.
	Properties []Property

	// NewID supplies newid()'s uuids. Filters and actions never read a
	// clock or a random source: the broker decides (and, for an action,
	// the result is recorded in the Overlay). Nil makes newid() an
	// evaluation error.
	NewID func() UUID
}

// Sys returns a system property's value (null when unset).
func (m *Message) Sys(p SysProp) Value {
	if f := m.sysField(p); f != nil {
		return *f
	}
	return Value{}
}

func (m *Message) sysField(p SysProp) *Value {
	switch p {
	case SysMessageID:
		return &m.MessageID
	case SysCorrelationID:
		return &m.CorrelationID
	case SysTo:
		return &m.To
	case SysReplyTo:
		return &m.ReplyTo
	case SysLabel:
		return &m.Label
	case SysSessionID:
		return &m.SessionID
	case SysReplyToSessionID:
		return &m.ReplyToSessionID
	case SysContentType:
		return &m.ContentType
	case SysTimeToLive:
		return &m.TimeToLive
	case SysScheduledEnqueueTimeUtc:
		return &m.ScheduledEnqueueTimeUtc
	case SysSequenceNumber:
		return &m.SequenceNumber
	case SysEnqueuedSequenceNumber:
		return &m.EnqueuedSequenceNumber
	case SysEnqueuedTimeUtc:
		return &m.EnqueuedTimeUtc
	case SysExpiresAtUtc:
		return &m.ExpiresAtUtc
	case SysDeliveryCount:
		return &m.DeliveryCount
	case SysSize:
		return &m.Size
	case SysPartitionKey:
		return &m.PartitionKey
	case SysViaPartitionKey:
		return &m.ViaPartitionKey
	case SysDeadLetterSource:
		return &m.DeadLetterSource
	}
	return nil
}

// Property returns the first application property whose name equals name
// ignoring case (Unicode simple folding), and whether there is one.
func (m *Message) Property(name string) (Value, bool) {
	if i := m.propertyIndex(name); i >= 0 {
		return m.Properties[i].Value, true
	}
	return Value{}, false
}

func (m *Message) propertyIndex(name string) int {
	for i := range m.Properties {
		if strings.EqualFold(m.Properties[i].Name, name) {
			return i
		}
	}
	return -1
}

// equalFoldASCII compares ignoring ASCII case only, so that keywords and
// system property names never match through Unicode folding.
func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
