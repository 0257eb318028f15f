package encoding

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"time"
)

// Symbol is an AMQP symbol: ASCII text used for names such as annotation
// keys, error conditions and capabilities (AMQP 1.0 §1.6.21). It is a
// distinct Go type so that a decoded symbol is re-encoded as a symbol, not a
// string.
type Symbol string

// Char is an AMQP char: one Unicode code point sent as UTF-32BE (§1.6.16).
type Char rune

// UUID is an AMQP uuid in RFC 4122 byte order (§1.6.18).
type UUID [16]byte

// String formats u in the canonical 8-4-4-4-12 hex form.
func (u UUID) String() string {
	var out [36]byte
	hex.Encode(out[0:8], u[0:4])
	out[8] = '-'
	hex.Encode(out[9:13], u[4:6])
	out[13] = '-'
	hex.Encode(out[14:18], u[6:8])
	out[18] = '-'
	hex.Encode(out[19:23], u[8:10])
	out[23] = '-'
	hex.Encode(out[24:], u[10:])
	return string(out[:])
}

// Decimal32, Decimal64 and Decimal128 carry IEEE 754 decimal values as their
// raw big-endian bytes (§1.6.13-15). The broker never does arithmetic on
// them; it only has to pass them through unchanged.
type (
	Decimal32  [4]byte
	Decimal64  [8]byte
	Decimal128 [16]byte
)

// Timestamp is an AMQP timestamp: signed milliseconds since the Unix epoch,
// UTC (§1.6.17). Keeping the raw count (instead of time.Time) makes every
// value round-trip exactly, including ones far outside time.Time's
// comfortable range such as .NET's DateTime.MaxValue.
type Timestamp int64

// TimestampOf converts t to a Timestamp, truncating to whole milliseconds.
func TimestampOf(t time.Time) Timestamp {
	return Timestamp(t.UnixMilli())
}

// Time returns the instant ts denotes, in UTC.
func (ts Timestamp) Time() time.Time {
	return time.UnixMilli(int64(ts)).UTC()
}

// List is a decoded AMQP list (§1.6.22): a sequence of values of any type.
type List []any

// MapEntry is one key/value pair of a Map.
type MapEntry struct {
	Key   any
	Value any
}

// Map is a decoded AMQP map (§1.6.23). AMQP maps are ordered and their keys
// can be of any type (symbol, string, ulong, even described values), which a
// Go map cannot represent, so Map is an ordered slice of pairs.
type Map []MapEntry

// Get returns the value stored under a string or symbol key equal to key.
// Annotations use symbol keys and application properties string keys, and
// lookups by name should not care which one the peer sent.
func (m Map) Get(key string) (any, bool) {
	if i := m.index(key); i >= 0 {
		return m[i].Value, true
	}
	return nil, false
}

// Set overwrites the value of the first string or symbol key equal to the
// key's text, keeping its position, or appends a new entry when there is
// none. Other keys are compared with ==.
func (m Map) Set(key, value any) Map {
	i := -1
	switch k := key.(type) {
	case string:
		i = m.index(k)
	case Symbol:
		i = m.index(string(k))
	default:
		for j := range m {
			if sameKey(m[j].Key, key) {
				i = j
				break
			}
		}
	}
	if i >= 0 {
		m[i].Value = value
		return m
	}
	return append(m, MapEntry{Key: key, Value: value})
}

func (m Map) index(key string) int {
	for i := range m {
		switch k := m[i].Key.(type) {
		case string:
			if k == key {
				return i
			}
		case Symbol:
			if string(k) == key {
				return i
			}
		}
	}
	return -1
}

// sameKey compares two keys of any type. Binary keys (delivery tags in an
// attach's unsettled map) compare by content; values == would panic on are
// never equal.
func sameKey(a, b any) bool {
	if ab, ok := a.([]byte); ok {
		bb, ok := b.([]byte)
		return ok && bytes.Equal(ab, bb)
	}
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if va.Type() != vb.Type() || !va.Comparable() || !vb.Comparable() {
		return false
	}
	return a == b
}

// Array is a decoded AMQP array (§1.6.24): elements that share a single
// constructor. Code is the element format code as it was received (for
// example CodeUUID or CodeSym8); AppendAny re-encodes with the smallest code
// of the same type that fits every element. When Descriptor is not nil the
// elements are described values sharing that descriptor, and Elements hold
// the undescribed values.
type Array struct {
	Code       byte
	Descriptor any
	Elements   []any
}

// Described is a value with a descriptor (§1.2, §1.5). The descriptor is a
// uint64 or a Symbol for every type the spec defines.
type Described struct {
	Descriptor any
	Value      any
}
