package atom

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/walbus/walbus/admin/timespan"
)

// Forever is what ParseDuration gives for TimeSpan.MaxValue
// (P10675199DT2H48M5.4775807S), which Service Bus writes for "never", and
// for any duration longer than a time.Duration holds. FormatDuration writes
// it back as TimeSpan.MaxValue.
const Forever = time.Duration(math.MaxInt64)

// timeSpanMax is TimeSpan.MaxValue as XmlConvert writes it.
const timeSpanMax = "P10675199DT2H48M5.4775807S"

// tickNs is a TimeSpan tick in nanoseconds.
const tickNs = 100

// ParseDuration reads an ISO-8601 duration as .NET writes a TimeSpan in
// XML: [-]P[nY][nM][nD][T[nH][nM][n[.f]S]], e.g. PT1M, P14D, PT0.5S.
// Precision is a tick (100 ns); further fraction digits are dropped.
// TimeSpan.MaxValue, and anything beyond a time.Duration's range that a
// TimeSpan holds, gives Forever; a negative duration that long is an error.
func ParseDuration(s string) (time.Duration, error) {
	ticks, err := parseTicks(s)
	if err != nil {
		return 0, err
	}
	switch {
	case ticks > math.MaxInt64/tickNs:
		return Forever, nil
	case ticks < math.MinInt64/tickNs:
		return 0, fmt.Errorf("duration %q: beyond time.Duration's range", s)
	}
	return time.Duration(ticks * tickNs), nil
}

// FormatDuration writes d as XmlConvert writes a TimeSpan: days, hours,
// minutes and seconds with up to seven fraction digits (PT0S for zero);
// Forever as TimeSpan.MaxValue. d is truncated to a tick (100 ns).
func FormatDuration(d time.Duration) string {
	if d == Forever {
		return timeSpanMax
	}
	return formatTicks(int64(d / tickNs))
}

// parseTicks reads an ISO-8601 duration into TimeSpan ticks with
// XmlConvert's rules, after trimming XML white space.
func parseTicks(s string) (int64, error) {
	ticks, err := timespan.ParseISO(strings.Trim(s, xmlSpace))
	if err != nil {
		return 0, fmt.Errorf("duration %q: %w", s, err)
	}
	return ticks, nil
}

// formatTicks writes TimeSpan ticks as XmlConvert does.
func formatTicks(ticks int64) string { return timespan.Format(ticks) }
