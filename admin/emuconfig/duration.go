package emuconfig

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/walbus/walbus/admin/timespan"
)

// tickNanos is a .NET tick, 100 ns, in nanoseconds.
const tickNanos = 100

// ParseDuration reads a duration the way .NET reads TimeSpan values in these
// files. Two forms are accepted, after trimming surrounding white space:
//
//   - ISO 8601, exactly the language of XmlConvert.ToTimeSpan:
//     [-]P[nY][nM][nD][T[nH][nM][n[.f]S]] with at least one component and a
//     T only when time components follow. Each n must fit a 32-bit int. As
//     in .NET, a year is 365 days and a month 30 days (twelve months make a
//     year), and the fraction may omit either side of the point (PT.5S,
//     PT1.S).
//   - The TimeSpan text form [-][d.]h:mm:ss[.fffffff] (00:01:00), with
//     hours below 24, minutes and seconds below 60, up to 7 fractional digits.
//
// Fractions are truncated to .NET's 100 ns tick. A value beyond .NET's
// TimeSpan range is an error; one inside it but beyond time.Duration's range
// (about 292 years, so TimeSpan.MaxValue, P10675199DT2H48M5.4775807S)
// saturates at math.MaxInt64 or math.MinInt64.
func ParseDuration(s string) (time.Duration, error) {
	ticks, err := timespan.Parse(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: %w", s, err)
	}
	switch {
	case ticks > math.MaxInt64/tickNanos:
		return math.MaxInt64, nil
	case ticks < math.MinInt64/tickNanos:
		return math.MinInt64, nil
	}
	return time.Duration(ticks * tickNanos), nil
}

// FormatDuration writes d as XmlConvert.ToString(TimeSpan) does: the
// shortest ISO 8601 form in days, hours, minutes and seconds, truncated to a
// 100 ns tick (PT0S for zero). ParseDuration reads it back as
// d.Truncate(100 * time.Nanosecond).
func FormatDuration(d time.Duration) string {
	return timespan.Format(int64(d / tickNanos))
}
