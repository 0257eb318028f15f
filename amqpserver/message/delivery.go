package message

import (
	"github.com/walbus/walbus/amqpserver/encoding"
)

// Delivery describes what the broker adds to a stored message when it
// sends it to a receiver.
type Delivery struct {
	// DeliveryCount is the number of earlier unsuccessful deliveries, the
	// header's delivery-count (§3.2.1; Service Bus sends the count minus
	// one, and the SDKs add one back).
	DeliveryCount uint32
	// TTL, when HasTTL, is the header ttl in milliseconds.
	TTL    uint32
	HasTTL bool
	// LockToken, when HasLockToken, is sent as the delivery annotation
	// x-opt-lock-token (a uuid), which the Go SDK prefers over the tag.
	LockToken    encoding.UUID
	HasLockToken bool
	// Annotations are set in the message annotations, replacing any client
	// entry with the same key.
	Annotations []Annotation
}

// AppendDelivery writes the payload of a delivery of the stored message s:
//
//   - a new header with d's delivery-count and ttl, the other fields copied
//     from the client's header;
//   - a delivery-annotations section: the client's entries byte for byte,
//     as Service Bus keeps them, then the lock token when d has one (a
//     client's own x-opt-lock-token is dropped);
//   - a new message-annotations section: the client's entries byte for
//     byte, except those d overrides, then d's entries;
//   - the bare message and the footer, copied unchanged (§3.2: the bare
//     message is immutable).
//
// With a dst of sufficient capacity it allocates nothing.
func AppendDelivery(dst []byte, s *Sections, d *Delivery) ([]byte, error) {
	h, err := s.ReadHeader()
	if err != nil {
		return dst, err
	}
	h.DeliveryCount, h.TTL, h.HasTTL = d.DeliveryCount, d.TTL, d.HasTTL
	dst = AppendHeader(dst, h)

	if dst, err = appendDeliveryAnnotations(dst, s, d); err != nil {
		return dst, err
	}
	if dst, err = appendAnnotations(dst, s, d.Annotations); err != nil {
		return dst, err
	}
	return append(dst, s.Raw[s.BareStart():]...), nil
}

// appendAnnotations writes the merged message-annotations section, or
// nothing when there is nothing to write. The client's annotations stay
// but for those in set and those only the broker sets (brokerOwned).
func appendAnnotations(dst []byte, s *Sections, set []Annotation) ([]byte, error) {
	if !s.MessageAnnotations.Present() && len(set) == 0 {
		return dst, nil
	}
	dst = encoding.AppendDescriptor(dst, CodeMessageAnnotations)
	dst, start := encoding.BeginMap(dst)
	pairs := 0
	if s.MessageAnnotations.Present() {
		it := NewMapIter(s.ValueBytes(s.MessageAnnotations))
		for it.Next() {
			if overridden(it.Key(), set) {
				continue
			}
			dst = append(append(dst, it.Key()...), it.Value()...)
			pairs++
		}
		if err := it.Err(); err != nil {
			return dst, err
		}
	}
	for i := range set {
		dst = encoding.AppendSymbol(dst, encoding.Symbol(set[i].Key))
		dst = set[i].Value.AppendTo(dst)
		pairs++
	}
	return encoding.EndMap(dst, start, pairs), nil
}

func overridden(encodedKey []byte, set []Annotation) bool {
	text, ok := KeyText(encodedKey)
	if !ok {
		return false
	}
	if brokerOwned(text) {
		return true
	}
	for i := range set {
		if string(text) == set[i].Key {
			return true
		}
	}
	return false
}

// appendDeliveryAnnotations writes the delivery-annotations section: the
// client's entries but its x-opt-lock-token, then d's lock token; nothing
// when there is neither.
func appendDeliveryAnnotations(dst []byte, s *Sections, d *Delivery) ([]byte, error) {
	if !s.DeliveryAnnotations.Present() && !d.HasLockToken {
		return dst, nil
	}
	dst = encoding.AppendDescriptor(dst, CodeDeliveryAnnotations)
	dst, start := encoding.BeginMap(dst)
	pairs := 0
	if s.DeliveryAnnotations.Present() {
		it := NewMapIter(s.ValueBytes(s.DeliveryAnnotations))
		for it.Next() {
			if keyIs(it.Key(), AnnotationLockToken) {
				continue
			}
			dst = append(append(dst, it.Key()...), it.Value()...)
			pairs++
		}
		if err := it.Err(); err != nil {
			return dst, err
		}
	}
	if d.HasLockToken {
		dst = encoding.AppendSymbol(dst, AnnotationLockToken)
		dst = encoding.AppendUUID(dst, d.LockToken)
		pairs++
	}
	return encoding.EndMap(dst, start, pairs), nil
}
