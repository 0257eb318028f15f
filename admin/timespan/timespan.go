// Package timespan reads and writes .NET TimeSpan values as text, in ticks
// of 100 ns, the unit a TimeSpan counts in. It knows two forms: the
// ISO 8601 duration that .NET's XmlConvert reads and writes, which Service
// Bus uses in its ATOM XML and the emulator in its Config.json, and the
// TimeSpan form [-][d.]h:mm:ss[.fffffff]. White space, saturation and what
// a value means are left to the callers.
package timespan

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

const (
	ticksPerSecond = 10_000_000
	ticksPerDay    = 24 * 60 * 60 * ticksPerSecond
	fractionDigits = 7             // a tick is the seventh decimal of a second
	maxComponent   = math.MaxInt32 // XmlConvert holds each ISO 8601 number in an int
)

// ErrRange means a value is beyond TimeSpan's range, from MinValue
// (-P10675199DT2H48M5.4775808S) to MaxValue (P10675199DT2H48M5.4775807S).
var ErrRange = errors.New("beyond the range of a .NET TimeSpan")

// Parse reads either form. As the emulator does, it takes text starting
// with P (after an optional minus) as ISO 8601, and text with a colon as
// the TimeSpan form.
func Parse(s string) (int64, error) {
	body := strings.TrimPrefix(s, "-")
	switch {
	case strings.HasPrefix(body, "P"):
		return ParseISO(s)
	case strings.Contains(body, ":"):
		return ParseText(s)
	}
	return 0, errors.New("want ISO 8601 (PT1M) or TimeSpan (00:01:00) form")
}

// ParseISO reads an ISO 8601 duration with XmlConvert.ToTimeSpan's rules,
// but trims no white space (callers differ on what that is):
//
//   - The form is [-]P[nY][nM][nD][T[nH][nM][n[.f]S]]: designators in upper
//     case, each at most once and in this order, at least one of them, and
//     a T only if a time component follows it.
//   - Each number is plain digits that fit a 32-bit int. Only the seconds
//     may have a fraction, and either side of its point may be empty
//     (PT.5S, PT1.S). Fraction digits below a tick are dropped.
//   - A year is 365 days and a month 30 days, but every twelve months make
//     a year, so P12M is 365 days.
//   - The total must fit a TimeSpan, or the result is ErrRange.
func ParseISO(s string) (int64, error) {
	body, negative := strings.CutPrefix(s, "-")
	body, ok := strings.CutPrefix(body, "P")
	if !ok {
		return 0, errors.New("want P")
	}
	ticks, err := isoTicks(body)
	if err != nil {
		return 0, err
	}
	return signed(ticks, negative)
}

// designators are ISO 8601's units in their only allowed order. M is months
// before the T and minutes after it.
const designators = "YMDHMS"

// isoTicks reads what follows the P of an ISO 8601 duration.
func isoTicks(s string) (uint64, error) {
	var n [len(designators)]uint64
	var fraction uint64
	next := 0 // designators before this one are used up or out of order
	inTime, dateFound, timeFound := false, false, false
	for i := 0; i < len(s); {
		if s[i] == 'T' && !inTime {
			inTime, next, i = true, 3, i+1
			continue
		}
		v, end, err := isoNumber(s, i)
		if err != nil {
			return 0, err
		}
		switch {
		case inTime && end < len(s) && s[end] == '.':
			// Seconds with a fraction; XmlConvert lets either side of the
			// point be empty.
			f := end + 1
			for f < len(s) && isDigit(s[f]) {
				f++
			}
			if f == len(s) || s[f] != 'S' {
				return 0, errors.New("want S after the fractional seconds")
			}
			fraction, end = fractionTicks(s[end+1:f]), f
		case end == i:
			return 0, fmt.Errorf("want digits before %q", s[i])
		case end == len(s):
			return 0, errors.New("number without a designator")
		}
		last := 3 // the date's designators end at D, the time's at S
		if inTime {
			last = len(designators)
		}
		k := strings.IndexByte(designators[next:last], s[end])
		if k < 0 {
			return 0, fmt.Errorf("unexpected %q", s[end])
		}
		next += k
		n[next] = v
		next++
		i = end + 1
		if inTime {
			timeFound = true
		} else {
			dateFound = true
		}
		if next == len(designators) && i < len(s) {
			return 0, fmt.Errorf("unexpected %q after seconds", s[i:])
		}
	}
	switch {
	case inTime && !timeFound:
		//lint:ignore ST1005 T is the ISO 8601 time designator, which is upper case
		return 0, errors.New("T must be followed by hours, minutes or seconds")
	case !inTime && !dateFound:
		return 0, errors.New("no components")
	}
	// Components below 2^31 cannot overflow here.
	years, months := n[0]+n[1]/12, n[1]%12
	days := years*365 + months*30 + n[2]
	return clockTicks(days, n[3], n[4], n[5], fraction)
}

// isoNumber reads the digits at s[i:]; end == i when there are none.
func isoNumber(s string, i int) (n uint64, end int, err error) {
	for end = i; end < len(s) && isDigit(s[end]); end++ {
		n = n*10 + uint64(s[end]-'0')
		if n > maxComponent {
			return 0, end, fmt.Errorf("component exceeds %d", maxComponent)
		}
	}
	return n, end, nil
}

// ParseText reads the TimeSpan form [-][d.]h:mm:ss[.fffffff]: up to 8 digits
// of days, 1 or 2 digits each of hours (below 24), minutes and seconds
// (below 60), and 1 to 7 fraction digits. The total must fit a TimeSpan,
// or the result is ErrRange.
func ParseText(s string) (int64, error) {
	body, negative := strings.CutPrefix(s, "-")
	bad := errors.New("want [d.]hh:mm:ss[.fffffff]")
	parts := strings.Split(body, ":")
	if len(parts) != 3 {
		return 0, bad
	}
	var days uint64
	hourText := parts[0]
	if dayText, rest, ok := strings.Cut(hourText, "."); ok {
		if days, ok = digits(dayText, 1, 8); !ok {
			return 0, bad
		}
		hourText = rest
	}
	secondText, fractionText, hasFraction := strings.Cut(parts[2], ".")
	hours, okH := digits(hourText, 1, 2)
	minutes, okM := digits(parts[1], 1, 2)
	seconds, okS := digits(secondText, 1, 2)
	if !okH || !okM || !okS {
		return 0, bad
	}
	if hours > 23 || minutes > 59 || seconds > 59 {
		return 0, errors.New("hours must be below 24, minutes and seconds below 60")
	}
	var fraction uint64
	if hasFraction {
		if _, ok := digits(fractionText, 1, fractionDigits); !ok {
			return 0, bad
		}
		fraction = fractionTicks(fractionText)
	}
	ticks, err := clockTicks(days, hours, minutes, seconds, fraction)
	if err != nil {
		return 0, err
	}
	return signed(ticks, negative)
}

// digits parses s as between minLen and maxLen ASCII digits.
func digits(s string, minLen, maxLen int) (uint64, bool) {
	if len(s) < minLen || len(s) > maxLen {
		return 0, false
	}
	var n uint64
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return 0, false
		}
		n = n*10 + uint64(s[i]-'0')
	}
	return n, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// fractionTicks turns the digits after a decimal point into ticks. Digits
// below a tick are dropped, not rounded, as .NET does.
func fractionTicks(s string) uint64 {
	var ticks uint64
	for i := range fractionDigits {
		ticks *= 10
		if i < len(s) {
			ticks += uint64(s[i] - '0')
		}
	}
	return ticks
}

// clockTicks is the total in ticks, or ErrRange if no TimeSpan holds it.
// Every input is below 2^40, so the seconds cannot overflow 64 bits.
func clockTicks(days, hours, minutes, seconds, fraction uint64) (uint64, error) {
	secs := ((days*24+hours)*60+minutes)*60 + seconds
	if secs > math.MaxInt64/ticksPerSecond+1 {
		return 0, ErrRange
	}
	return secs*ticksPerSecond + fraction, nil // signed checks the rest
}

// signed gives ticks the sign, or ErrRange beyond TimeSpan's range, which
// reaches one tick further below zero than above it.
func signed(ticks uint64, negative bool) (int64, error) {
	switch {
	case !negative && ticks <= math.MaxInt64:
		return int64(ticks), nil
	case negative && ticks <= 1<<63:
		return int64(-ticks), nil // 1<<63 wraps to math.MinInt64, as wanted
	}
	return 0, ErrRange
}

// Format writes ticks as XmlConvert writes a TimeSpan: the sign, then days,
// hours, minutes and seconds, each only if not zero, with the seconds'
// fraction to at most seven digits and no trailing zeros; PT0S for zero.
// It never writes years or months, so every value reads back exactly.
func Format(ticks int64) string {
	b := make([]byte, 0, 32)
	magnitude := uint64(ticks)
	if ticks < 0 {
		b = append(b, '-')
		magnitude = -magnitude // two's complement: also right for math.MinInt64
	}
	b = append(b, 'P')
	days, rest := magnitude/ticksPerDay, magnitude%ticksPerDay
	if days > 0 {
		b = append(strconv.AppendUint(b, days, 10), 'D')
	}
	if rest == 0 {
		if days == 0 {
			b = append(b, "T0S"...)
		}
		return string(b)
	}
	b = append(b, 'T')
	secs, fraction := rest/ticksPerSecond, rest%ticksPerSecond
	if hours := secs / 3600; hours > 0 {
		b = append(strconv.AppendUint(b, hours, 10), 'H')
	}
	if minutes := secs / 60 % 60; minutes > 0 {
		b = append(strconv.AppendUint(b, minutes, 10), 'M')
	}
	if seconds := secs % 60; seconds > 0 || fraction > 0 {
		b = strconv.AppendUint(b, seconds, 10)
		if fraction > 0 {
			f := strconv.FormatUint(fraction+ticksPerSecond, 10)[1:] // zero-padded to seven digits
			b = append(b, '.')
			b = append(b, strings.TrimRight(f, "0")...)
		}
		b = append(b, 'S')
	}
	return string(b)
}
