package message

import (
	"fmt"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// DefaultPriority is the header priority when none is given (§3.2.1).
const DefaultPriority = 4

// Header is the header section (AMQP 1.0 §3.2.1), descriptor 0x70.
//
//	#  field           type                mandatory  default
//	0  durable         boolean             no         false
//	1  priority        ubyte               no         4
//	2  ttl             milliseconds (uint) no         none
//	3  first-acquirer  boolean             no         false
//	4  delivery-count  uint                no         0
type Header struct {
	Durable       bool
	Priority      uint8
	TTL           uint32
	HasTTL        bool
	FirstAcquirer bool
	DeliveryCount uint32
}

// ReadHeader decodes the header section, or returns the defaults when the
// message has none (§3.2.1: a missing header means default values).
func (s *Sections) ReadHeader() (Header, error) {
	h := Header{Priority: DefaultPriority}
	if !s.Header.Present() {
		return h, nil
	}
	r := encoding.NewReader(s.ValueBytes(s.Header))
	count, _, err := r.ReadListHeader()
	if err != nil {
		return h, err
	}
	for i := 0; i < count; i++ {
		if r.TryNull() {
			continue
		}
		switch i {
		case 0:
			h.Durable, err = r.ReadBool()
		case 1:
			h.Priority, err = r.ReadUbyte()
		case 2:
			h.TTL, err = r.ReadUint()
			h.HasTTL = err == nil
		case 3:
			h.FirstAcquirer, err = r.ReadBool()
		case 4:
			h.DeliveryCount, err = r.ReadUint()
		default:
			err = r.Skip()
		}
		if err != nil {
			return h, fmt.Errorf("header field %d: %w", i, err)
		}
	}
	return h, nil
}

// AppendHeader writes h as a header section, leaving out trailing fields
// that hold their defaults.
func AppendHeader(dst []byte, h Header) []byte {
	dst, w := beginList(dst, CodeHeader)
	dst = w.flag(dst, h.Durable)
	if h.Priority != DefaultPriority {
		dst = w.kept(encoding.AppendUbyte(dst, h.Priority))
	} else {
		dst = w.null(dst)
	}
	if h.HasTTL {
		dst = w.kept(encoding.AppendUint(dst, h.TTL))
	} else {
		dst = w.null(dst)
	}
	dst = w.flag(dst, h.FirstAcquirer)
	// Always written, 0 too: rhea (the JS SDK) only sets delivery_count
	// from a field present on the wire, and the SDK passes it on as is, so
	// an omitted 0 reaches applications as undefined.
	dst = w.kept(encoding.AppendUint(dst, h.DeliveryCount))
	return w.end(dst)
}
