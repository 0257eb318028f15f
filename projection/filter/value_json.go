package filter

import (
	"encoding/json"
	"fmt"
	"math"
)

// valueJSON is a Value as JSON stores it: its kind by name and the value in
// the one field that kind uses. Timestamps and durations are ticks; a uuid
// is its two halves.
type valueJSON struct {
	K string   `json:"k"`
	S string   `json:"s,omitempty"`
	N int64    `json:"n,omitempty"`
	F *float64 `json:"f,omitempty"`
	B bool     `json:"b,omitempty"`
	L uint64   `json:"l,omitempty"`
}

// MarshalJSON encodes v so that UnmarshalJSON gives back an equal Value of
// the same kind: rules and action overlays are stored this way.
func (v Value) MarshalJSON() ([]byte, error) {
	j := valueJSON{K: v.kind.String()}
	switch v.kind {
	case KindBool:
		j.B = v.bits != 0
	case KindInt, KindTimestamp, KindDuration:
		j.N = int64(v.bits)
	case KindDouble, KindDecimal:
		f := math.Float64frombits(v.bits)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			j.S = fmt.Sprint(f) // JSON has no NaN or infinities
		} else {
			j.F = &f
		}
	case KindString:
		j.S = v.str
	case KindUUID:
		j.N, j.L = int64(v.bits), v.lo
	}
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON wrote.
func (v *Value) UnmarshalJSON(b []byte) error {
	var j valueJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	k := -1
	for i, name := range kindNames {
		if name == j.K {
			k = i
		}
	}
	if k < 0 {
		return fmt.Errorf("filter: unknown value kind %q", j.K)
	}
	*v = Value{kind: Kind(k)}
	switch v.kind {
	case KindBool:
		*v = BoolValue(j.B)
	case KindInt, KindDuration:
		v.bits = uint64(j.N)
	case KindTimestamp:
		*v = TicksValue(j.N)
	case KindDouble, KindDecimal:
		f := 0.0
		switch {
		case j.F != nil:
			f = *j.F
		case j.S != "":
			if _, err := fmt.Sscan(j.S, &f); err != nil {
				return fmt.Errorf("filter: number %q: %v", j.S, err)
			}
		}
		v.bits = math.Float64bits(f)
	case KindString:
		v.str = j.S
	case KindUUID:
		v.bits, v.lo = uint64(j.N), j.L
	}
	return nil
}
