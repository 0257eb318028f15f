package atom

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Forever is what ParseDuration gives for TimeSpan.MaxValue
// (P10675199DT2H48M5.4775807S), which Service Bus writes for "never", and
// for any duration longer than a time.Duration holds. FormatDuration writes
// it back as TimeSpan.MaxValue.
const Forever = time.Duration(math.MaxInt64)

// timeSpanMax is TimeSpan.MaxValue as XmlConvert writes it.
const timeSpanMax = "P10675199DT2H48M5.4775807S"

// .NET TimeSpan units, in ticks of 100 ns. XmlConvert counts a year as
// 365 days and a month as 30.
const (
	tickNs        = 100
	ticksPerSec   = int64(time.Second / tickNs)
	ticksPerMin   = 60 * ticksPerSec
	ticksPerHour  = 60 * ticksPerMin
	ticksPerDay   = 24 * ticksPerHour
	ticksPerMonth = 30 * ticksPerDay
	ticksPerYear  = 365 * ticksPerDay
)

var errDurationRange = errors.New("out of TimeSpan's range")

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
		return 0, fmt.Errorf("duration %q: %w", s, errDurationRange)
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

// parseTicks reads an ISO-8601 duration into TimeSpan ticks.
func parseTicks(s string) (int64, error) {
	text := strings.Trim(s, xmlSpace)
	bad := func(why string) error { return fmt.Errorf("duration %q: %s", s, why) }
	neg := strings.HasPrefix(text, "-")
	text = strings.TrimPrefix(text, "-")
	if !strings.HasPrefix(text, "P") {
		return 0, bad("does not start with P")
	}
	text = text[1:]
	// Components in their only allowed order; 'M' means months before the
	// T and minutes after it.
	type unit struct {
		letter byte
		ticks  int64
		time   bool
	}
	units := []unit{{'Y', ticksPerYear, false}, {'M', ticksPerMonth, false}, {'D', ticksPerDay, false},
		{'H', ticksPerHour, true}, {'M', ticksPerMin, true}, {'S', ticksPerSec, true}}
	var total uint64 // magnitude in ticks
	limit := uint64(math.MaxInt64)
	if neg {
		limit++
	}
	add := func(n uint64) error {
		if total > limit-n {
			return bad(errDurationRange.Error())
		}
		total += n
		return nil
	}
	next, inTime, components, timeComponents := 0, false, 0, 0
	for text != "" {
		if text[0] == 'T' {
			if inTime {
				return 0, bad("two T separators")
			}
			inTime = true
			text = text[1:]
			for next < len(units) && !units[next].time {
				next++
			}
			continue
		}
		digits := 0
		for digits < len(text) && text[digits] >= '0' && text[digits] <= '9' {
			digits++
		}
		if digits == 0 {
			return 0, bad("a number is missing")
		}
		number := text[:digits]
		text = text[digits:]
		fraction := ""
		if strings.HasPrefix(text, ".") {
			n := 1
			for n < len(text) && text[n] >= '0' && text[n] <= '9' {
				n++
			}
			if n == 1 {
				return 0, bad("no digits after the decimal point")
			}
			fraction, text = text[1:n], text[n:]
		}
		if text == "" {
			return 0, bad("a number has no unit")
		}
		letter := text[0]
		text = text[1:]
		for next < len(units) && (units[next].letter != letter || units[next].time != inTime) {
			next++
		}
		if next == len(units) {
			return 0, bad(fmt.Sprintf("unexpected %q", letter))
		}
		u := units[next]
		next++
		if fraction != "" && u.letter != 'S' {
			return 0, bad("only seconds may have a fraction")
		}
		n, err := strconv.ParseUint(number, 10, 64)
		if err != nil || n > limit/uint64(u.ticks) {
			return 0, bad(errDurationRange.Error())
		}
		if err := add(n * uint64(u.ticks)); err != nil {
			return 0, err
		}
		if fraction != "" {
			// Seven digits are ticks; the rest is below a tick.
			f := (fraction + "0000000")[:7]
			n, _ := strconv.ParseUint(f, 10, 64)
			if err := add(n); err != nil {
				return 0, err
			}
		}
		components++
		if inTime {
			timeComponents++
		}
	}
	switch {
	case components == 0:
		return 0, bad("no components")
	case inTime && timeComponents == 0:
		return 0, bad("nothing after T")
	}
	if neg {
		return int64(-total), nil // -(1<<63) wraps to MinInt64, as wanted
	}
	return int64(total), nil
}

// formatTicks writes TimeSpan ticks as XmlConvert does.
func formatTicks(ticks int64) string {
	var b strings.Builder
	mag := uint64(ticks)
	if ticks < 0 {
		b.WriteByte('-')
		mag = -mag
	}
	b.WriteByte('P')
	days := mag / uint64(ticksPerDay)
	rest := mag % uint64(ticksPerDay)
	if days > 0 {
		b.WriteString(strconv.FormatUint(days, 10) + "D")
	}
	if rest == 0 && days > 0 {
		return b.String()
	}
	b.WriteByte('T')
	hours, rest := rest/uint64(ticksPerHour), rest%uint64(ticksPerHour)
	minutes, rest := rest/uint64(ticksPerMin), rest%uint64(ticksPerMin)
	seconds, frac := rest/uint64(ticksPerSec), rest%uint64(ticksPerSec)
	if hours > 0 {
		b.WriteString(strconv.FormatUint(hours, 10) + "H")
	}
	if minutes > 0 {
		b.WriteString(strconv.FormatUint(minutes, 10) + "M")
	}
	if seconds > 0 || frac > 0 || (hours == 0 && minutes == 0) {
		b.WriteString(strconv.FormatUint(seconds, 10))
		if frac > 0 {
			f := strconv.FormatUint(frac+uint64(ticksPerSec), 10)[1:] // seven digits, zero-padded
			b.WriteString("." + strings.TrimRight(f, "0"))
		}
		b.WriteByte('S')
	}
	return b.String()
}
