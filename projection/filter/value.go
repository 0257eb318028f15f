package filter

import (
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"time"
)

// Kind is the type of a Value.
type Kind uint8

// The kinds a filter sees. Every AMQP integer width is an Int, float and
// double are Double, string and symbol are String, and AMQP types the
// filter language cannot compare (binary, lists, maps) are Opaque: they
// exist and are not null, but every comparison with them is unknown.
const (
	KindNull Kind = iota
	KindBool
	KindInt
	KindDouble
	KindDecimal
	KindString
	KindTimestamp
	KindDuration
	KindUUID
	KindOpaque
)

var kindNames = [...]string{"null", "bool", "int", "double", "decimal", "string", "timestamp", "duration", "uuid", "opaque"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// UUID is a uuid in the byte order AMQP carries it (RFC 4122).
type UUID [16]byte

// String formats u the way .NET's Guid.ToString does: 8-4-4-4-12 lower-case
// hex digits.
func (u UUID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], u[10:16])
	return string(b[:])
}

// Value is one typed property value. The zero Value is null, which is also
// how the evaluator represents unknown (Service Bus SQL filter doc,
// "Property evaluation semantics").
//
// Timestamps and durations are held as .NET ticks (100 ns), the unit of
// DateTime and TimeSpan, so DateTime.MaxValue and TimeSpan.MaxValue fit.
// Decimal is held as a float64: it keeps its kind through arithmetic and
// actions, but compares and computes with double precision.
type Value struct {
	kind Kind
	bits uint64 // bool, int, float bits, ticks, or the first half of a uuid
	lo   uint64 // the second half of a uuid
	str  string
}

const (
	unixEpochTicks = 621355968000000000  // DateTime(1970-01-01).Ticks
	maxDateTicks   = 3155378975999999999 // DateTime.MaxValue.Ticks
	ticksPerSecond = 10_000_000
	minUnixSeconds = -unixEpochTicks / ticksPerSecond
	maxUnixSeconds = maxDateTicks/ticksPerSecond - unixEpochTicks/ticksPerSecond
)

// NullValue returns null.
func NullValue() Value { return Value{} }

// BoolValue returns a bool.
func BoolValue(b bool) Value {
	v := Value{kind: KindBool}
	if b {
		v.bits = 1
	}
	return v
}

// IntValue returns an integer; AMQP byte, short, int and long all map here.
func IntValue(n int64) Value { return Value{kind: KindInt, bits: uint64(n)} }

// UintValue returns an integer for an AMQP ubyte, ushort, uint or ulong;
// a ulong above math.MaxInt64 becomes the nearest Double.
func UintValue(n uint64) Value {
	if n > math.MaxInt64 {
		return DoubleValue(float64(n))
	}
	return IntValue(int64(n))
}

// DoubleValue returns a double; AMQP float maps here too.
func DoubleValue(f float64) Value { return Value{kind: KindDouble, bits: math.Float64bits(f)} }

// DecimalValue returns a decimal, held as its nearest float64.
func DecimalValue(f float64) Value { return Value{kind: KindDecimal, bits: math.Float64bits(f)} }

// StringValue returns a string; AMQP string, symbol and char map here.
func StringValue(s string) Value { return Value{kind: KindString, str: s} }

// TimeValue returns a timestamp, clamped to DateTime's range (years 1 to 9999).
func TimeValue(t time.Time) Value {
	secs := t.Unix()
	switch {
	case secs < minUnixSeconds:
		return TicksValue(0)
	case secs > maxUnixSeconds:
		return TicksValue(maxDateTicks)
	}
	return TicksValue((secs-minUnixSeconds)*ticksPerSecond + int64(t.Nanosecond())/100)
}

// TimestampMillis returns a timestamp from an AMQP timestamp (milliseconds
// since the Unix epoch), clamped to DateTime's range.
func TimestampMillis(ms int64) Value {
	const minMs, maxMs = minUnixSeconds * 1000, maxUnixSeconds*1000 + 999
	ms = max(minMs, min(maxMs, ms))
	return TicksValue(ms*10_000 + unixEpochTicks)
}

// TicksValue returns a timestamp of ticks 100 ns intervals since
// 0001-01-01T00:00:00Z (DateTime.Ticks), clamped to DateTime's range.
func TicksValue(ticks int64) Value {
	ticks = max(0, min(maxDateTicks, ticks))
	return Value{kind: KindTimestamp, bits: uint64(ticks)}
}

// DurationValue returns a duration (a .NET TimeSpan), truncated to 100 ns.
func DurationValue(d time.Duration) Value { return DurationTicks(int64(d / 100)) }

// DurationTicks returns a duration of ticks 100 ns intervals.
func DurationTicks(ticks int64) Value { return Value{kind: KindDuration, bits: uint64(ticks)} }

// UUIDValue returns a uuid.
func UUIDValue(u UUID) Value {
	v := Value{kind: KindUUID}
	for i := range 8 {
		v.bits = v.bits<<8 | uint64(u[i])
		v.lo = v.lo<<8 | uint64(u[8+i])
	}
	return v
}

// OpaqueValue returns a value that exists but compares with nothing, for
// AMQP binary, list, map and array properties.
func OpaqueValue() Value { return Value{kind: KindOpaque} }

// Kind returns v's kind.
func (v Value) Kind() Kind { return v.kind }

// IsNull reports whether v is null (or unknown).
func (v Value) IsNull() bool { return v.kind == KindNull }

// Bool returns a bool's value, else false.
func (v Value) Bool() bool { return v.kind == KindBool && v.bits != 0 }

// Int returns an Int's value, else 0.
func (v Value) Int() int64 {
	if v.kind != KindInt {
		return 0
	}
	return int64(v.bits)
}

// Float returns a Double's or Decimal's value, an Int's as a float64, else 0.
func (v Value) Float() float64 {
	switch v.kind {
	case KindInt:
		return float64(int64(v.bits))
	case KindDouble, KindDecimal:
		return math.Float64frombits(v.bits)
	}
	return 0
}

// Text returns a String's value, else "".
func (v Value) Text() string { return v.str }

// Ticks returns a Timestamp's or Duration's ticks, else 0.
func (v Value) Ticks() int64 {
	if v.kind != KindTimestamp && v.kind != KindDuration {
		return 0
	}
	return int64(v.bits)
}

// Time returns a Timestamp as a UTC time.Time, else the zero time.Time.
func (v Value) Time() time.Time {
	if v.kind != KindTimestamp {
		return time.Time{}
	}
	ticks := int64(v.bits)
	return time.Unix(ticks/ticksPerSecond+minUnixSeconds, ticks%ticksPerSecond*100).UTC()
}

// Duration returns a Duration as a time.Duration (saturated), else 0.
func (v Value) Duration() time.Duration {
	if v.kind != KindDuration {
		return 0
	}
	ticks := int64(v.bits)
	switch {
	case ticks > math.MaxInt64/100:
		return math.MaxInt64
	case ticks < math.MinInt64/100:
		return math.MinInt64
	}
	return time.Duration(ticks * 100)
}

// UUID returns a UUID's value, else the zero UUID.
func (v Value) UUID() UUID {
	var u UUID
	if v.kind != KindUUID {
		return u
	}
	for i := range 8 {
		u[i] = byte(v.bits >> (56 - 8*i))
		u[8+i] = byte(v.lo >> (56 - 8*i))
	}
	return u
}

// String formats v for people: as a SQL literal where the language has one
// (NULL, TRUE, 12, 1.5, 'text'), else as kind'text' (timestamp'2020-01-01T00:00:00Z').
func (v Value) String() string {
	var b strings.Builder
	writeValue(&b, v)
	return b.String()
}

func writeValue(b *strings.Builder, v Value) {
	switch v.kind {
	case KindNull:
		b.WriteString("NULL")
	case KindBool:
		if v.Bool() {
			b.WriteString("TRUE")
		} else {
			b.WriteString("FALSE")
		}
	case KindInt:
		b.WriteString(strconv.FormatInt(v.Int(), 10))
	case KindDouble:
		b.WriteString(formatDouble(v.Float()))
	case KindDecimal:
		b.WriteString("decimal'" + strconv.FormatFloat(v.Float(), 'g', -1, 64) + "'")
	case KindString:
		writeQuoted(b, v.str, '\'')
	case KindTimestamp:
		b.WriteString("timestamp'" + v.Time().Format(time.RFC3339Nano) + "'")
	case KindDuration:
		b.WriteString("duration'" + strconv.FormatInt(v.Ticks(), 10) + " ticks'")
	case KindUUID:
		b.WriteString("uuid'" + v.UUID().String() + "'")
	default:
		b.WriteString("opaque")
	}
}

// formatDouble writes f so that it reads back as a double, never an int.
func formatDouble(f float64) string {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eEIN") {
		s += ".0"
	}
	return s
}

// writeQuoted writes s between quote characters, doubling any inside.
func writeQuoted(b *strings.Builder, s string, quote byte) {
	b.WriteByte(quote)
	for i := range len(s) {
		if s[i] == quote {
			b.WriteByte(quote)
		}
		b.WriteByte(s[i])
	}
	b.WriteByte(quote)
}
