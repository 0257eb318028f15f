package amqpserver

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/message"
	"github.com/walbus/walbus/broker"
)

// Service Bus message annotations (docs/compatibility.md §5).
const (
	annSequenceNumber = "x-opt-sequence-number"
	annEnqueuedTime   = "x-opt-enqueued-time"
	annLockedUntil    = "x-opt-locked-until"
	annMessageState   = "x-opt-message-state"
	// The entity a message was dead-lettered in, on messages auto-forwarded
	// from its dead-letter queue.
	annDeadLetterSource = "x-opt-deadletter-source"
)

// Application properties the broker sets on dead-lettered messages, and on
// a topic's copy made by a rule action (the rule's name).
const (
	propDeadLetterReason      = "DeadLetterReason"
	propDeadLetterDescription = "DeadLetterErrorDescription"
	propRuleName              = "RuleName"
)

// x-opt-message-state values; active (0) is never sent.
const (
	stateDeferred  = 1
	stateScheduled = 2
)

// errBadMessage wraps a transfer that is not a valid AMQP message.
var errBadMessage = errors.New("the message is not a valid AMQP message")

// maxScratch is the largest encoding buffer a receive link keeps between
// deliveries.
const maxScratch = 1 << 20

// inbound turns a transfer's payload into the messages to store: one, or
// with the batch message format each inner message. A message without a
// message-id gets one (Service Bus assigns an id when the client sends none).
// The messages' bodies are the broker's own: payload may be reused after.
func inbound(payload []byte, format uint32) ([]broker.Message, error) {
	if format != frames.MessageFormatBatch {
		m, err := inboundOne(payload)
		if err != nil {
			return nil, err
		}
		return []broker.Message{m}, nil
	}
	inner, err := message.SplitBatch(payload, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: batch: %v", errBadMessage, err)
	}
	if len(inner) == 0 {
		return nil, fmt.Errorf("%w: an empty batch", errBadMessage)
	}
	msgs := make([]broker.Message, 0, len(inner))
	for _, raw := range inner {
		m, err := inboundOne(raw)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

func inboundOne(raw []byte) (broker.Message, error) {
	s, err := message.Parse(raw)
	if errors.Is(err, message.ErrSectionOrder) {
		// uAMQP (the Python SDK) misplaces footers and delivery
		// annotations; Service Bus takes such messages.
		if raw, err = message.Reorder(raw); err == nil {
			s, err = message.Parse(raw)
		}
	}
	if err != nil {
		return broker.Message{}, fmt.Errorf("%w: %v", errBadMessage, err)
	}
	props, err := s.ReadProperties()
	if err != nil {
		return broker.Message{}, fmt.Errorf("%w: properties: %v", errBadMessage, err)
	}
	var id string
	if props.MessageID.Kind == 0 {
		id = newMessageID()
		// Room for the id (up to 38 bytes with its constructor) and the
		// properties section a message without one gains.
		dst := make([]byte, 0, len(raw)+64)
		if raw, _, err = message.AppendWithMessageID(dst, &s, id); err != nil {
			return broker.Message{}, fmt.Errorf("%w: %v", errBadMessage, err)
		}
	} else {
		id = string(props.MessageID.AppendText(nil))
		raw = bytes.Clone(raw)
	}
	m := broker.Message{Body: raw, MessageID: id, SessionID: sessionIDOf(props.GroupID)}
	hdr, err := s.ReadHeader()
	if err != nil {
		return broker.Message{}, fmt.Errorf("%w: header: %v", errBadMessage, err)
	}
	if hdr.HasTTL && hdr.TTL > 0 {
		m.TTL = time.Duration(hdr.TTL) * time.Millisecond
	}
	ann, err := s.ReadClientAnnotations()
	if err != nil {
		return broker.Message{}, fmt.Errorf("%w: message annotations: %w", errBadMessage, err)
	}
	if ann.HasScheduledEnqueueTime {
		m.ScheduledAt = nanos(encoding.Timestamp(ann.ScheduledEnqueueTime))
	}
	return m, nil
}

// Inbound reads a message that came by another way than a transfer (the
// console's send) as a transfer's payload is read: a message-id assigned
// when it has none, the session, time to live and schedule from its
// sections.
func Inbound(raw []byte) (broker.Message, error) { return inboundOne(raw) }

// Render is a stored message as a receiver gets it: with the broker's
// annotations and the properties its settlements recorded (the console's
// message browser shows this).
func Render(d *broker.Delivery) ([]byte, error) { return outbound(nil, d) }

// sessionIDOf is the broker's session id of a message's group-id: none
// when it is absent (nil), and an empty one is a session of its own, as in
// Service Bus (the Go SDK's session_receiver_test.go
// TestSessionReceiver_blankSessionIDs).
func sessionIDOf(groupID []byte) string {
	if groupID == nil {
		return ""
	}
	return broker.SessionIDOf(string(groupID))
}

// newMessageID is a random (version 4) UUID string, like the ids Service
// Bus assigns. The ids need to be unique, not secret: they come from the
// runtime's per-thread ChaCha8 generator (seeded from the system's entropy
// at start), which costs no system call or lock per message.
func newMessageID() string {
	var u encoding.UUID
	binary.LittleEndian.PutUint64(u[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(u[8:], rand.Uint64())
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u.String()
}

// withoutBody is an encoded delivery without its body sections.
func withoutBody(b []byte) ([]byte, error) {
	s, err := message.Parse(b)
	if err != nil {
		return nil, err
	}
	return message.AppendWithoutBody(nil, &s), nil
}

// outbound writes the payload of a delivery: the stored message with a new
// header (the delivery count of earlier failed attempts and the effective
// time to live), the lock token, the broker's annotations, and the
// application properties that abandons, deferrals and dead-lettering
// recorded; on a topic's copy made by a rule action, also the action's
// changes. The bare message is otherwise copied byte for byte.
func outbound(dst []byte, d *broker.Delivery) ([]byte, error) {
	raw := d.Message
	s, err := message.Parse(raw)
	if err != nil {
		return dst, fmt.Errorf("stored message %d: %w", d.Seq, err)
	}
	if len(d.Overlays) > 0 {
		set, sys, err := overlayProperties(d.Overlays)
		if err != nil {
			return dst, fmt.Errorf("message %d: %w", d.Seq, err)
		}
		if len(sys) > 0 {
			if raw, err = withSystemChanges(&s, sys); err != nil {
				return dst, fmt.Errorf("message %d: %w", d.Seq, err)
			}
			if s, err = message.Parse(raw); err != nil {
				return dst, err
			}
		}
		if raw, err = message.AppendWithApplicationProperties(nil, &s, set); err != nil {
			return dst, fmt.Errorf("message %d: %w", d.Seq, err)
		}
		if s, err = message.Parse(raw); err != nil {
			return dst, err
		}
	}
	del := message.Delivery{DeliveryCount: uint32(d.Deliveries)}
	if d.ExpiresAt > 0 && d.ExpiresAt > d.EnqueuedAt {
		ms := (d.ExpiresAt - d.EnqueuedAt) / int64(time.Millisecond)
		del.TTL, del.HasTTL = uint32(min(ms, 1<<32-1)), true
	}
	// Room for every annotation below, on the stack: a delivery without
	// overlays is written without allocating.
	var annotations [5]message.Annotation
	del.Annotations = append(annotations[:0],
		message.Annotation{Key: annSequenceNumber, Value: message.LongValue(int64(d.Seq))},
		message.Annotation{Key: annEnqueuedTime, Value: message.TimestampValue(timestamp(d.EnqueuedAt))})
	if d.Token != (broker.LockToken{}) {
		del.LockToken, del.HasLockToken = encoding.UUID(d.Token), true
		del.Annotations = append(del.Annotations,
			message.Annotation{Key: annLockedUntil, Value: message.TimestampValue(timestamp(d.LockedUntil))})
	}
	for _, ov := range d.Overlays {
		if ov.Source != "" {
			del.Annotations = append(del.Annotations, message.Annotation{Key: annDeadLetterSource, Value: message.StringValue(ov.Source)})
			break
		}
	}
	// Service Bus leaves x-opt-message-state out for an active message;
	// the SDKs read its absence as active.
	switch {
	case d.State == broker.Scheduled:
		del.Annotations = append(del.Annotations, message.Annotation{Key: annMessageState, Value: message.IntValue(stateScheduled)})
	case d.Deferred:
		del.Annotations = append(del.Annotations, message.Annotation{Key: annMessageState, Value: message.IntValue(stateDeferred)})
	}
	return message.AppendDelivery(dst, &s, &del)
}

// overlayProperties merges, oldest first, the property changes recorded for
// a message into one list of application properties to set or remove, and
// returns the system property changes of rule actions, in order.
func overlayProperties(overlays []broker.Overlay) ([]message.Property, []broker.RuleChange, error) {
	var set []message.Property
	var sys []broker.RuleChange
	change := func(p message.Property) {
		for i := range set {
			if set[i].Key == p.Key {
				set[i] = p
				return
			}
		}
		set = append(set, p)
	}
	put := func(key string, value any) { change(message.Property{Key: key, Value: value}) }
	for _, ov := range overlays {
		switch {
		// A message a subscription forwarded (its ForwardTo) arrives as
		// it was: a Forwarded overlay with no dead-letter source.
		case ov.Type == broker.DeadLettered || ov.Type == broker.TransferDeadLettered,
			ov.Type == broker.Forwarded && ov.Source != "",
			ov.Type == broker.Copied && (ov.Reason != "" || ov.Description != ""):
			put(propDeadLetterReason, ov.Reason)
			put(propDeadLetterDescription, ov.Description)
		}
		if ov.Type == broker.Copied {
			if ov.Rule != "" {
				put(propRuleName, ov.Rule)
			}
			for _, c := range ov.Changes {
				switch {
				case c.Sys != 0:
					sys = append(sys, c)
				case c.Remove:
					change(message.Property{Key: c.Name, Remove: true})
				default:
					put(c.Name, amqpValue(c.Value))
				}
			}
		}
		// One map per overlay; a forwarded message carries those of the
		// overlays it had where it came from, one after another.
		for r := encoding.NewReader(ov.Props); r.Len() > 0; {
			v, err := r.ReadAny(encoding.DefaultLimits)
			if err != nil {
				return nil, nil, fmt.Errorf("recorded properties: %w", err)
			}
			m, ok := v.(encoding.Map)
			if !ok {
				return nil, nil, fmt.Errorf("recorded properties are a %T, not a map", v)
			}
			for _, e := range m {
				key, ok := e.Key.(string)
				if !ok {
					if sym, isSym := e.Key.(encoding.Symbol); isSym {
						key, ok = string(sym), true
					}
				}
				if ok {
					put(key, e.Value)
				}
			}
		}
	}
	return set, sys, nil
}

// amqpValue is the AMQP value a rule action's SET writes: integers as long,
// doubles and decimals as double (a filter computes decimals as doubles),
// timestamps as timestamp, durations as a long count of 100 ns ticks, uuids
// as uuid. An opaque value (a binary, list or map property copied by the
// action) carries no bytes to write: it is written as null.
func amqpValue(v broker.FilterValue) any {
	switch v.Kind() {
	case broker.KindBool:
		return v.Bool()
	case broker.KindInt:
		return v.Int()
	case broker.KindDouble, broker.KindDecimal:
		return v.Float()
	case broker.KindString:
		return v.Text()
	case broker.KindTimestamp:
		return encoding.TimestampOf(v.Time())
	case broker.KindDuration:
		return v.Ticks()
	case broker.KindUUID:
		return encoding.UUID(v.UUID())
	}
	return nil
}

// withSystemChanges writes the message with a rule action's changes to its
// system properties made in its properties section: each sets a field to
// text, or clears it (REMOVE, or SET to null). A TimeToLive change is not
// written: the header's ttl is the copy's expiry as the broker keeps it. A
// ScheduledEnqueueTimeUtc set by an action is ignored, as Service Bus
// ignores it on the subscription (its doc "Topic filters and actions").
func withSystemChanges(s *message.Sections, changes []broker.RuleChange) ([]byte, error) {
	p, err := s.ReadProperties()
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		cleared := c.Remove || c.Value.IsNull()
		if !cleared && c.Value.Kind() != broker.KindString {
			continue // the filter language gives these fields only text
		}
		var text []byte // nil: absent
		id := message.ID{}
		if !cleared {
			text = append(make([]byte, 0, len(c.Value.Text())), c.Value.Text()...)
			id = message.ID{Kind: message.IDString, Bytes: text}
		}
		switch c.Sys {
		case broker.SysMessageID:
			p.MessageID = id
		case broker.SysCorrelationID:
			p.CorrelationID = id
		case broker.SysTo:
			p.To = text
		case broker.SysReplyTo:
			p.ReplyTo = text
		case broker.SysLabel:
			p.Subject = text
		case broker.SysSessionID:
			p.GroupID = text
		case broker.SysReplyToSessionID:
			p.ReplyToGroupID = text
		case broker.SysContentType:
			p.ContentType = text
		}
	}
	return message.AppendWithProperties(nil, s, &p), nil
}

// timestamp converts unix nanoseconds to an AMQP timestamp (ms).
func timestamp(ns int64) encoding.Timestamp { return encoding.Timestamp(ns / int64(time.Millisecond)) }

// nanos is timestamp's inverse, saturating: AMQP timestamps reach far past
// what unix nanoseconds in an int64 hold (the year 2262), and clients send
// such times (the Go SDK's sentinel for all sessions is the year 10000).
func nanos(ts encoding.Timestamp) int64 {
	const ms = int64(time.Millisecond)
	switch {
	case int64(ts) > math.MaxInt64/ms:
		return math.MaxInt64
	case int64(ts) < math.MinInt64/ms:
		return math.MinInt64
	}
	return int64(ts) * ms
}

// deliveryTag is the lock token in .NET GUID byte order, as Service Bus
// sends it: the first three groups are little-endian (docs/compatibility.md §5).
func deliveryTag(t broker.LockToken) [16]byte {
	return [16]byte{t[3], t[2], t[1], t[0], t[5], t[4], t[7], t[6],
		t[8], t[9], t[10], t[11], t[12], t[13], t[14], t[15]}
}

// tokenFromTag reverses deliveryTag.
func tokenFromTag(tag []byte) (broker.LockToken, bool) {
	if len(tag) != 16 {
		return broker.LockToken{}, false
	}
	return broker.LockToken{tag[3], tag[2], tag[1], tag[0], tag[5], tag[4], tag[7], tag[6],
		tag[8], tag[9], tag[10], tag[11], tag[12], tag[13], tag[14], tag[15]}, true
}
