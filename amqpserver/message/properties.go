package message

import (
	"fmt"
	"strconv"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// IDKind is the AMQP type of a message-id or correlation-id (§3.2.11-15).
type IDKind uint8

// ID kinds; IDNone is an absent (null) id.
const (
	IDNone IDKind = iota
	IDUlong
	IDUUID
	IDBinary
	IDString
)

// ID is a message-id or correlation-id of any of its four allowed types.
// Bytes holds binary and string ids and aliases the message buffer.
type ID struct {
	Kind  IDKind
	Ulong uint64
	UUID  encoding.UUID
	Bytes []byte
}

// StringID returns an ID holding text.
func StringID(s string) ID { return ID{Kind: IDString, Bytes: []byte(s)} }

// AppendText writes the id as text, for logs, duplicate detection keys and
// Service Bus APIs that expose ids as strings: ulongs in decimal, uuids in
// canonical form, binaries in hex, strings as they are.
func (id ID) AppendText(dst []byte) []byte {
	switch id.Kind {
	case IDUlong:
		return strconv.AppendUint(dst, id.Ulong, 10)
	case IDUUID:
		return append(dst, id.UUID.String()...)
	case IDBinary:
		const digits = "0123456789abcdef"
		for _, b := range id.Bytes {
			dst = append(dst, digits[b>>4], digits[b&0xf])
		}
		return dst
	case IDString:
		return append(dst, id.Bytes...)
	}
	return dst
}

func appendID(dst []byte, id ID) []byte {
	switch id.Kind {
	case IDUlong:
		return encoding.AppendUlong(dst, id.Ulong)
	case IDUUID:
		return encoding.AppendUUID(dst, id.UUID)
	case IDBinary:
		return encoding.AppendBinary(dst, id.Bytes)
	case IDString:
		return encoding.AppendStringBytes(dst, id.Bytes)
	}
	return encoding.AppendNull(dst)
}

func readID(r *encoding.Reader) (ID, error) {
	code, err := r.PeekCode()
	if err != nil {
		return ID{}, err
	}
	switch code {
	case encoding.CodeUlong, encoding.CodeSmallUlong, encoding.CodeUlong0:
		v, err := r.ReadUlong()
		return ID{Kind: IDUlong, Ulong: v}, err
	case encoding.CodeUUID:
		v, err := r.ReadUUID()
		return ID{Kind: IDUUID, UUID: v}, err
	case encoding.CodeVbin8, encoding.CodeVbin32:
		v, err := r.ReadBinary()
		return ID{Kind: IDBinary, Bytes: v}, err
	case encoding.CodeStr8, encoding.CodeStr32:
		v, err := r.ReadStringBytes()
		return ID{Kind: IDString, Bytes: v}, err
	}
	return ID{}, fmt.Errorf("%w: message id of format code 0x%02x", encoding.ErrDecode, code)
}

// Properties is the properties section (AMQP 1.0 §3.2.4), descriptor 0x73.
//
//	#   field                 type                               default
//	0   message-id            ulong | uuid | binary | string
//	1   user-id               binary
//	2   to                    address (string)
//	3   subject               string
//	4   reply-to              address (string)
//	5   correlation-id        ulong | uuid | binary | string
//	6   content-type          symbol
//	7   content-encoding      symbol
//	8   absolute-expiry-time  timestamp
//	9   creation-time         timestamp
//	10  group-id              string
//	11  group-sequence        sequence-no (uint)
//	12  reply-to-group-id     string
//
// No field is mandatory. A nil slice means absent; text fields alias the
// message buffer.
type Properties struct {
	MessageID             ID
	UserID                []byte
	To                    []byte
	Subject               []byte
	ReplyTo               []byte
	CorrelationID         ID
	ContentType           []byte
	ContentEncoding       []byte
	AbsoluteExpiryTime    encoding.Timestamp
	HasAbsoluteExpiryTime bool
	CreationTime          encoding.Timestamp
	HasCreationTime       bool
	GroupID               []byte
	GroupSequence         uint32
	HasGroupSequence      bool
	ReplyToGroupID        []byte
}

// ReadProperties decodes the properties section; a message without one
// has every property absent.
func (s *Sections) ReadProperties() (Properties, error) {
	var p Properties
	if !s.Properties.Present() {
		return p, nil
	}
	r := encoding.NewReader(s.ValueBytes(s.Properties))
	count, _, err := r.ReadListHeader()
	if err != nil {
		return p, err
	}
	for i := 0; i < count; i++ {
		if r.TryNull() {
			continue
		}
		switch i {
		case 0:
			p.MessageID, err = readID(&r)
		case 1:
			p.UserID, err = r.ReadBinary()
		case 2:
			p.To, err = r.ReadStringOrSymbolBytes()
		case 3:
			p.Subject, err = r.ReadStringBytes()
		case 4:
			p.ReplyTo, err = r.ReadStringOrSymbolBytes()
		case 5:
			p.CorrelationID, err = readID(&r)
		case 6:
			p.ContentType, err = r.ReadSymbolBytes()
		case 7:
			p.ContentEncoding, err = r.ReadSymbolBytes()
		case 8:
			p.AbsoluteExpiryTime, err = r.ReadTimestamp()
			p.HasAbsoluteExpiryTime = err == nil
		case 9:
			p.CreationTime, err = r.ReadTimestamp()
			p.HasCreationTime = err == nil
		case 10:
			p.GroupID, err = r.ReadStringBytes()
		case 11:
			p.GroupSequence, err = r.ReadUint()
			p.HasGroupSequence = err == nil
		case 12:
			p.ReplyToGroupID, err = r.ReadStringBytes()
		default:
			err = r.Skip()
		}
		if err != nil {
			return p, fmt.Errorf("properties field %d: %w", i, err)
		}
	}
	return p, nil
}

// AppendProperties writes p as a properties section, for messages the
// broker creates itself (management and CBS responses) and for properties
// it rewrites (AppendWithProperties). Absent fields are null and trailing
// ones are left out.
func AppendProperties(dst []byte, p *Properties) []byte {
	dst, w := beginList(dst, CodeProperties)
	dst = w.id(dst, p.MessageID)
	dst = w.binary(dst, p.UserID)
	dst = w.text(dst, p.To, encoding.AppendStringBytes)
	dst = w.text(dst, p.Subject, encoding.AppendStringBytes)
	dst = w.text(dst, p.ReplyTo, encoding.AppendStringBytes)
	dst = w.id(dst, p.CorrelationID)
	dst = w.text(dst, p.ContentType, encoding.AppendSymbolBytes)
	dst = w.text(dst, p.ContentEncoding, encoding.AppendSymbolBytes)
	dst = w.timestamp(dst, p.HasAbsoluteExpiryTime, p.AbsoluteExpiryTime)
	dst = w.timestamp(dst, p.HasCreationTime, p.CreationTime)
	dst = w.text(dst, p.GroupID, encoding.AppendStringBytes)
	if p.HasGroupSequence {
		dst = w.kept(encoding.AppendUint(dst, p.GroupSequence))
	} else {
		dst = w.null(dst)
	}
	dst = w.text(dst, p.ReplyToGroupID, encoding.AppendStringBytes)
	return w.end(dst)
}
