package tools

import (
	"fmt"
	"strconv"
	"time"

	"github.com/walbus/walbus/log/event"
)

// Point is a place in a log: a log index (a SequenceNumber is one) or a time.
// The zero Point is unset.
type Point struct {
	Index uint64
	Time  int64 // unix ns
}

// ParsePoint reads a log index ("42") or an RFC 3339 time
// ("2026-01-01T00:00:00Z", fractions allowed).
func ParsePoint(s string) (Point, error) {
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		if n == 0 {
			return Point{}, fmt.Errorf("log index %q: indexes start at 1", s)
		}
		return Point{Index: n}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return Point{}, fmt.Errorf("%q is neither a log index nor an RFC 3339 time", s)
	}
	return Point{Time: t.UnixNano()}, nil
}

// IsZero reports whether p is unset.
func (p Point) IsZero() bool { return p.Index == 0 && p.Time == 0 }

// String renders p as ParsePoint reads it.
func (p Point) String() string {
	switch {
	case p.Index != 0:
		return strconv.FormatUint(p.Index, 10)
	case p.Time != 0:
		return time.Unix(0, p.Time).UTC().Format(time.RFC3339Nano)
	}
	return "end"
}

// notBefore reports whether ev is at or after p (true when p is unset).
func (p Point) notBefore(ev *event.Event) bool {
	switch {
	case p.Index != 0:
		return ev.Index >= p.Index
	case p.Time != 0:
		return ev.Time >= p.Time
	}
	return true
}

// notAfter reports whether ev is at or before p (true when p is unset).
func (p Point) notAfter(ev *event.Event) bool {
	switch {
	case p.Index != 0:
		return ev.Index <= p.Index
	case p.Time != 0:
		return ev.Time <= p.Time
	}
	return true
}
