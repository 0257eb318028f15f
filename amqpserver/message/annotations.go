package message

import (
	"errors"
	"fmt"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// Message annotation keys Service Bus clients send or read
// (docs/compatibility.md §5). All start with x-opt-, so peers that do not
// know them ignore them (AMQP 1.0 §3.2.10).
const (
	AnnotationScheduledEnqueueTime  = "x-opt-scheduled-enqueue-time"
	AnnotationPartitionKey          = "x-opt-partition-key"
	AnnotationViaPartitionKey       = "x-opt-via-partition-key"
	AnnotationSequenceNumber        = "x-opt-sequence-number"
	AnnotationEnqueueSequenceNumber = "x-opt-enqueue-sequence-number"
	AnnotationEnqueuedTime          = "x-opt-enqueued-time"
	AnnotationLockedUntil           = "x-opt-locked-until"
	AnnotationMessageState          = "x-opt-message-state"
	AnnotationDeadLetterSource      = "x-opt-deadletter-source"
	// AnnotationLockToken is a delivery annotation, not a message one.
	AnnotationLockToken = "x-opt-lock-token"
)

// ErrNullAnnotation reports a message annotation that Service Bus does not
// accept as null.
var ErrNullAnnotation = errors.New("a Service Bus message annotation must not be null")

// brokerOwned reports the annotations only the broker sets: a client's
// value never goes out with the message, even where the broker sets none
// (x-opt-locked-until on a peek), as Service Bus ignores them on send and
// the Go SDK panics on a null one.
func brokerOwned(key []byte) bool {
	switch string(key) {
	case AnnotationLockedUntil, AnnotationSequenceNumber, AnnotationEnqueuedTime, AnnotationMessageState:
		return true
	}
	return false
}

// ClientAnnotations are the message annotations a broker acts on when a
// client sends a message.
type ClientAnnotations struct {
	// ScheduledEnqueueTime asks for the message to become visible later.
	ScheduledEnqueueTime    encoding.Timestamp
	HasScheduledEnqueueTime bool
	// PartitionKey and ViaPartitionKey alias the message; nil when absent
	// or null.
	PartitionKey    []byte
	ViaPartitionKey []byte
}

// ReadClientAnnotations extracts the Service Bus annotations from the
// message-annotations section in one pass.
func (s *Sections) ReadClientAnnotations() (ClientAnnotations, error) {
	var a ClientAnnotations
	if !s.MessageAnnotations.Present() {
		return a, nil
	}
	it := NewMapIter(s.ValueBytes(s.MessageAnnotations))
	for it.Next() {
		key, ok := KeyText(it.Key())
		if !ok {
			continue
		}
		r := encoding.NewReader(it.Value())
		if r.IsNull() {
			switch string(key) {
			case AnnotationScheduledEnqueueTime, AnnotationMessageState, AnnotationEnqueueSequenceNumber:
				// Service Bus refuses these null (docs/compatibility.md §5);
				// the Go SDK panics on receiving one.
				return a, fmt.Errorf("%w: %s is null", ErrNullAnnotation, key)
			}
			continue
		}
		var err error
		switch string(key) {
		case AnnotationScheduledEnqueueTime:
			a.ScheduledEnqueueTime, err = r.ReadTimestamp()
			a.HasScheduledEnqueueTime = err == nil
		case AnnotationPartitionKey:
			a.PartitionKey, err = r.ReadStringOrSymbolBytes()
		case AnnotationViaPartitionKey:
			a.ViaPartitionKey, err = r.ReadStringOrSymbolBytes()
		}
		if err != nil {
			return a, fmt.Errorf("annotation %s: %w", key, err)
		}
	}
	return a, it.Err()
}

type valueKind uint8

const (
	kindNull valueKind = iota
	kindBool
	kindInt
	kindLong
	kindTimestamp
	kindString
	kindSymbol
	kindUUID
)

// Value is a broker-set annotation value of a fixed AMQP type. It exists
// so that building a delivery needs no interface boxing: the SDKs assert
// exact types (x-opt-sequence-number must be a long, x-opt-enqueued-time a
// timestamp), and each constructor fixes one.
type Value struct {
	kind valueKind
	num  int64
	text string
	uuid encoding.UUID
}

// NullValue is an AMQP null.
func NullValue() Value { return Value{} }

// BoolValue is an AMQP boolean.
func BoolValue(v bool) Value {
	if v {
		return Value{kind: kindBool, num: 1}
	}
	return Value{kind: kindBool}
}

// IntValue is an AMQP int (x-opt-message-state).
func IntValue(v int32) Value { return Value{kind: kindInt, num: int64(v)} }

// LongValue is an AMQP long (sequence numbers).
func LongValue(v int64) Value { return Value{kind: kindLong, num: v} }

// TimestampValue is an AMQP timestamp (enqueued time, locked until).
func TimestampValue(v encoding.Timestamp) Value { return Value{kind: kindTimestamp, num: int64(v)} }

// StringValue is an AMQP string (dead-letter source).
func StringValue(v string) Value { return Value{kind: kindString, text: v} }

// SymbolValue is an AMQP symbol.
func SymbolValue(v encoding.Symbol) Value { return Value{kind: kindSymbol, text: string(v)} }

// UUIDValue is an AMQP uuid (lock tokens).
func UUIDValue(v encoding.UUID) Value { return Value{kind: kindUUID, uuid: v} }

// AppendTo writes the value.
func (v Value) AppendTo(dst []byte) []byte {
	switch v.kind {
	case kindBool:
		return encoding.AppendBool(dst, v.num != 0)
	case kindInt:
		return encoding.AppendInt(dst, int32(v.num))
	case kindLong:
		return encoding.AppendLong(dst, v.num)
	case kindTimestamp:
		return encoding.AppendTimestamp(dst, encoding.Timestamp(v.num))
	case kindString:
		return encoding.AppendString(dst, v.text)
	case kindSymbol:
		return encoding.AppendSymbol(dst, encoding.Symbol(v.text))
	case kindUUID:
		return encoding.AppendUUID(dst, v.uuid)
	}
	return encoding.AppendNull(dst)
}

// Annotation is one broker-set message annotation.
type Annotation struct {
	Key   string
	Value Value
}
