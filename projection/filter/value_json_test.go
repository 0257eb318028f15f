package filter

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

func TestValueJSONRoundTrip(t *testing.T) {
	for _, v := range []Value{
		NullValue(), BoolValue(true), BoolValue(false), IntValue(-7), IntValue(math.MaxInt64),
		DoubleValue(2.5), DoubleValue(math.Inf(-1)), DoubleValue(math.NaN()), DecimalValue(1.25), StringValue("a 'b'"),
		StringValue(""), TimeValue(time.Date(2026, 11, 29, 6, 0, 0, 100, time.UTC)), DurationValue(90 * time.Second),
		UUIDValue(UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}), OpaqueValue(),
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%v: %v", v, err)
		}
		var got Value
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if got.Kind() != v.Kind() || got.String() != v.String() {
			t.Errorf("%s: got %v (%v), want %v (%v)", b, got, got.Kind(), v, v.Kind())
		}
	}
	var v Value
	if err := json.Unmarshal([]byte(`{"k":"nonsense"}`), &v); err == nil {
		t.Error("an unknown kind decoded")
	}
}
