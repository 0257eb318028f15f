package filter

import (
	"math"
	"testing"
	"time"
)

func TestValueConstructors(t *testing.T) {
	for _, tm := range []time.Time{
		date("2020-01-01T00:00:00Z"),
		time.Date(1969, 7, 20, 20, 17, 40, 123456700, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999900, time.UTC),
	} {
		if got := TimeValue(tm).Time(); !got.Equal(tm) {
			t.Errorf("TimeValue(%v).Time() = %v", tm, got)
		}
	}
	if TimeValue(time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC)).Ticks() != 0 {
		t.Error("times before year 1 clamp to DateTime.MinValue")
	}
	if TimeValue(time.Date(20000, 1, 1, 0, 0, 0, 0, time.UTC)).Ticks() != maxDateTicks {
		t.Error("times after 9999 clamp to DateTime.MaxValue")
	}
	if TimestampMillis(0) != TimeValue(time.Unix(0, 0)) || TimestampMillis(1500).Time() != time.Unix(1, 5e8).UTC() {
		t.Error("TimestampMillis")
	}
	if TimestampMillis(math.MaxInt64).Ticks() != maxDateTicks-9999 || TimestampMillis(math.MinInt64).Ticks() != 0 {
		t.Error("TimestampMillis clamps")
	}
	if DurationValue(time.Second).Ticks() != 1e7 || DurationTicks(math.MaxInt64).Duration() != math.MaxInt64 {
		t.Error("durations")
	}
	if UintValue(math.MaxUint64).Kind() != KindDouble || UintValue(5) != IntValue(5) {
		t.Error("UintValue")
	}
	u := UUID{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10}
	if UUIDValue(u).UUID() != u || u.String() != "01234567-89ab-cdef-fedc-ba9876543210" {
		t.Errorf("UUID round trip: %v", UUIDValue(u).UUID())
	}
	for v, want := range map[Value]string{
		NullValue(): "NULL", BoolValue(true): "TRUE", BoolValue(false): "FALSE", IntValue(-3): "-3",
		DoubleValue(2): "2.0", DoubleValue(0.5): "0.5", StringValue("it's"): "'it''s'",
		DecimalValue(1.5): "decimal'1.5'", TimeValue(date("2020-01-01T00:00:00Z")): "timestamp'2020-01-01T00:00:00Z'",
		UUIDValue(u): "uuid'01234567-89ab-cdef-fedc-ba9876543210'", OpaqueValue(): "opaque",
	} {
		if v.String() != want {
			t.Errorf("String() = %s, want %s", v, want)
		}
	}
	// Accessors of the wrong kind give zero values.
	s := StringValue("x")
	if s.Bool() || s.Int() != 0 || s.Float() != 0 || s.Ticks() != 0 || !s.Time().IsZero() || s.Duration() != 0 || s.UUID() != (UUID{}) {
		t.Error("accessors of the wrong kind")
	}
	if IntValue(1).Text() != "" || KindUUID.String() != "uuid" || Kind(99).String() != "kind(99)" {
		t.Error("Text / Kind")
	}
}
