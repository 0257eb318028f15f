package amqpserver

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/message"
	"github.com/walbus/walbus/broker"
)

// timespanDescriptor marks a .NET TimeSpan application property: a long
// count of 100 ns ticks (Azure.Messaging.ServiceBus, Amqp/AmqpMessageConverter.cs).
const timespanDescriptor = "com.microsoft:timespan"

// FilterMessage reads what a topic's rules see of a stored message: the
// system properties from the properties section, the header's ttl and the
// client's annotations, and the application properties, in order and
// typed. It is the broker.Options.FilterMessage of a served broker: it
// reads nothing but body and keeps no state, so any goroutine may call it.
//
// The system properties are read from the AMQP fields Service Bus reads
// them from: MessageId and CorrelationId as text (a uuid, ulong or binary
// id formatted as inbound formats a message-id), Label from subject,
// SessionId from group-id, ReplyToSessionId from reply-to-group-id,
// TimeToLive from the header's ttl, ScheduledEnqueueTimeUtc,
// PartitionKey and ViaPartitionKey from their x-opt- annotations. Absent
// fields stay null.
func FilterMessage(body []byte) (*broker.FilterMessage, error) {
	s, err := message.Parse(body)
	if errors.Is(err, message.ErrSectionOrder) {
		// Stored messages are in order already (inbound mends them); a
		// body from elsewhere is read as inbound would read it.
		if body, err = message.Reorder(body); err == nil {
			s, err = message.Parse(body)
		}
	}
	if err != nil {
		return nil, err
	}
	props, err := s.ReadProperties()
	if err != nil {
		return nil, fmt.Errorf("properties: %w", err)
	}
	fm := &broker.FilterMessage{
		MessageID:        idValue(props.MessageID),
		CorrelationID:    idValue(props.CorrelationID),
		To:               textValue(props.To),
		ReplyTo:          textValue(props.ReplyTo),
		Label:            textValue(props.Subject),
		SessionID:        textValue(props.GroupID),
		ReplyToSessionID: textValue(props.ReplyToGroupID),
		ContentType:      textValue(props.ContentType),
	}
	hdr, err := s.ReadHeader()
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if hdr.HasTTL && hdr.TTL > 0 { // a ttl of 0 is none, as inbound reads it
		fm.TimeToLive = broker.DurationTicks(int64(hdr.TTL) * 10_000)
	}
	ann, err := s.ReadClientAnnotations()
	if err != nil {
		return nil, fmt.Errorf("message annotations: %w", err)
	}
	if ann.HasScheduledEnqueueTime {
		fm.ScheduledEnqueueTimeUtc = broker.TimestampMillis(int64(ann.ScheduledEnqueueTime))
	}
	fm.PartitionKey = textValue(ann.PartitionKey)
	fm.ViaPartitionKey = textValue(ann.ViaPartitionKey)
	if s.ApplicationProperties.Present() {
		it := message.NewMapIter(s.ValueBytes(s.ApplicationProperties))
		for it.Next() {
			key, isText := message.KeyText(it.Key())
			if !isText {
				continue // AMQP 1.0 §3.2.5 allows only string keys
			}
			fm.Properties = append(fm.Properties, broker.FilterProperty{Name: string(key), Value: filterValue(it.Value())})
		}
		if err := it.Err(); err != nil {
			return nil, fmt.Errorf("application properties: %w", err)
		}
	}
	return fm, nil
}

// idValue is a message-id or correlation-id as the text a filter compares.
func idValue(id message.ID) broker.FilterValue {
	if id.Kind == message.IDNone {
		return broker.NullValue()
	}
	return broker.StringValue(string(id.AppendText(nil)))
}

// textValue is a string field, null when absent.
func textValue(b []byte) broker.FilterValue {
	if b == nil {
		return broker.NullValue()
	}
	return broker.StringValue(string(b))
}

// filterValue types one encoded application property value (Service Bus
// SQL filter doc, "Types"): every integer width is an integer, float and
// double are doubles, string, symbol and char are strings, a described
// .NET TimeSpan is a duration; binary, lists, maps, arrays and other
// described values exist but compare with nothing (opaque). A value that
// does not read as its code says is opaque too.
func filterValue(encoded []byte) broker.FilterValue {
	r := encoding.NewReader(encoded)
	code, err := r.PeekCode()
	if err != nil {
		return broker.OpaqueValue()
	}
	var v broker.FilterValue
	switch code {
	case encoding.CodeNull:
		return broker.NullValue()
	case encoding.CodeBoolean, encoding.CodeTrue, encoding.CodeFalse:
		var b bool
		b, err = r.ReadBool()
		v = broker.BoolValue(b)
	case encoding.CodeUbyte, encoding.CodeUshort, encoding.CodeUint, encoding.CodeSmallUint, encoding.CodeUint0,
		encoding.CodeUlong, encoding.CodeSmallUlong, encoding.CodeUlong0:
		var n uint64
		n, err = r.ReadUlong()
		v = broker.UintValue(n) // above math.MaxInt64: the nearest double
	case encoding.CodeByte, encoding.CodeShort, encoding.CodeInt, encoding.CodeSmallInt,
		encoding.CodeLong, encoding.CodeSmallLong:
		var n int64
		n, err = r.ReadLong()
		v = broker.IntValue(n)
	case encoding.CodeFloat:
		var f float32
		f, err = r.ReadFloat()
		v = broker.DoubleValue(float64(f))
	case encoding.CodeDouble:
		var f float64
		f, err = r.ReadDouble()
		v = broker.DoubleValue(f)
	case encoding.CodeDecimal32:
		var d encoding.Decimal32
		d, err = r.ReadDecimal32()
		v = decimalValue(d[:], 8, 101, 7)
	case encoding.CodeDecimal64:
		var d encoding.Decimal64
		d, err = r.ReadDecimal64()
		v = decimalValue(d[:], 10, 398, 16)
	case encoding.CodeDecimal128:
		var d encoding.Decimal128
		d, err = r.ReadDecimal128()
		v = decimalValue(d[:], 14, 6176, 34)
	case encoding.CodeChar:
		var c encoding.Char
		c, err = r.ReadChar()
		v = broker.StringValue(string(rune(c)))
	case encoding.CodeStr8, encoding.CodeStr32, encoding.CodeSym8, encoding.CodeSym32:
		var text []byte
		text, err = r.ReadStringOrSymbolBytes()
		v = broker.StringValue(string(text))
	case encoding.CodeTimestamp:
		var ts encoding.Timestamp
		ts, err = r.ReadTimestamp()
		v = broker.TimestampMillis(int64(ts))
	case encoding.CodeUUID:
		var u encoding.UUID
		u, err = r.ReadUUID()
		v = broker.UUIDValue(broker.FilterUUID(u))
	case encoding.CodeDescribed:
		return describedValue(&r)
	default:
		return broker.OpaqueValue()
	}
	if err != nil || r.Len() != 0 {
		return broker.OpaqueValue()
	}
	return v
}

// describedValue reads a described application property: a .NET TimeSpan
// is a duration, anything else opaque.
func describedValue(r *encoding.Reader) broker.FilterValue {
	d, err := r.ReadDescriptor()
	if err != nil || !d.Symbolic || string(d.Name) != timespanDescriptor {
		return broker.OpaqueValue()
	}
	ticks, err := r.ReadLong()
	if err != nil || r.Len() != 0 {
		return broker.OpaqueValue()
	}
	return broker.DurationTicks(ticks)
}

// decimalValue reads an IEEE 754-2008 decimal in the binary integer
// encoding (AMQP 1.0 §1.6.13-15) of len(raw) bytes, with an exponent of
// expBits bits biased by bias and a coefficient of at most digits decimal
// digits, as the nearest float64 (a filter's decimals compute as doubles).
// Infinities and NaNs are opaque: a filter has no literal for them.
func decimalValue(raw []byte, expBits uint, bias int, digits int) broker.FilterValue {
	w := uint(len(raw) * 8)
	n := new(big.Int).SetBytes(raw)
	negative := n.Bit(int(w-1)) == 1
	var exp, coef *big.Int
	if n.Bit(int(w-2)) == 1 && n.Bit(int(w-3)) == 1 {
		if n.Bit(int(w-4)) == 1 && n.Bit(int(w-5)) == 1 {
			return broker.OpaqueValue() // infinity or NaN
		}
		// The coefficient's leading bits are an implied 100.
		coefBits := w - 3 - expBits
		exp = field(n, coefBits, expBits)
		coef = field(n, 0, coefBits)
		coef.SetBit(coef, int(coefBits)+2, 1)
	} else {
		coefBits := w - 1 - expBits
		exp = field(n, coefBits, expBits)
		coef = field(n, 0, coefBits)
	}
	if len(coef.String()) > digits {
		coef.SetInt64(0) // non-canonical: the standard reads it as zero
	}
	f, err := strconv.ParseFloat(coef.String()+"e"+strconv.Itoa(int(exp.Int64())-bias), 64)
	var numErr *strconv.NumError
	if err != nil && !(errors.As(err, &numErr) && numErr.Err == strconv.ErrRange) {
		return broker.OpaqueValue()
	}
	if negative {
		f = -f
	}
	return broker.DecimalValue(f) // out of range: ±Inf or 0, as ParseFloat rounds
}

// field returns bits [from, from+width) of n.
func field(n *big.Int, from, width uint) *big.Int {
	f := new(big.Int).Rsh(n, from)
	mask := new(big.Int).Lsh(big.NewInt(1), width)
	return f.And(f, mask.Sub(mask, big.NewInt(1)))
}
