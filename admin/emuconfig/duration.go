package emuconfig

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// .NET counts time in ticks of 100 ns.
const (
	tickNanos     = 100
	ticksPerSec   = uint64(time.Second / tickNanos)
	maxComponent  = math.MaxInt32 // XmlConvert keeps each ISO 8601 component in an int
	maxTickDigits = 7             // fractional digits a tick can hold
)

// ParseDuration reads a duration the way .NET reads TimeSpan values in these
// files. Two forms are accepted, after trimming surrounding white space:
//
//   - ISO 8601, exactly the language of XmlConvert.ToTimeSpan:
//     [-]P[nY][nM][nD][T[nH][nM][n[.f]S]] with at least one component and a
//     T only when time components follow. Each n must fit a 32-bit int. As
//     in .NET, a year is 365 days and a month 30 days, and the fraction may
//     omit either side of the point (PT.5S, PT1.S).
//   - The TimeSpan text form [-][d.]h:mm:ss[.fffffff] (00:01:00), with
//     hours below 24, minutes and seconds below 60, up to 7 fractional digits.
//
// Fractions are truncated to .NET's 100 ns tick. A value beyond .NET's
// TimeSpan range is an error; one inside it but beyond time.Duration's range
// (about 292 years, so TimeSpan.MaxValue, P10675199DT2H48M5.4775807S)
// saturates at math.MaxInt64 or math.MinInt64.
func ParseDuration(s string) (time.Duration, error) {
	body := strings.TrimSpace(s)
	negative := strings.HasPrefix(body, "-")
	if negative {
		body = body[1:]
	}
	var ticks uint64
	var err error
	switch {
	case strings.HasPrefix(body, "P"):
		ticks, err = isoTicks(body[1:])
	case strings.Contains(body, ":"):
		ticks, err = timeSpanTicks(body)
	default:
		err = errors.New("want ISO 8601 (PT1M) or TimeSpan (00:01:00) form")
	}
	if err == nil {
		limit := uint64(math.MaxInt64) // TimeSpan.MaxValue in ticks
		if negative {
			limit++ // TimeSpan.MinValue
		}
		if ticks > limit {
			err = errTooLarge
		}
	}
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: %w", s, err)
	}
	if ticks > math.MaxInt64/tickNanos {
		if negative {
			return math.MinInt64, nil
		}
		return math.MaxInt64, nil
	}
	d := time.Duration(ticks * tickNanos)
	if negative {
		d = -d
	}
	return d, nil
}

var errTooLarge = errors.New("beyond the range of a .NET TimeSpan")

// isoTicks reads what follows the P of an ISO 8601 duration.
func isoTicks(s string) (uint64, error) {
	var years, months, days, hours, minutes, seconds, fraction uint64
	i, found := 0, false
	// Date designators must come in this order, each at most once.
	dateTargets := []*uint64{&years, &months, &days}
	next := 0
	for i < len(s) && s[i] != 'T' {
		n, end, err := isoNumber(s, i)
		if err != nil {
			return 0, err
		}
		if end == i {
			return 0, fmt.Errorf("want digits before %q", s[i])
		}
		if end == len(s) {
			return 0, errors.New("number without a designator")
		}
		k := strings.IndexByte("YMD"[next:], s[end])
		if k < 0 {
			return 0, fmt.Errorf("unexpected %q", s[end])
		}
		next += k
		*dateTargets[next] = n
		next++
		i, found = end+1, true
	}
	if i < len(s) { // at the T
		i++
		timeTargets := []*uint64{&hours, &minutes}
		next = 0
		timeFound := false
		for i < len(s) {
			n, end, err := isoNumber(s, i)
			if err != nil {
				return 0, err
			}
			if end < len(s) && s[end] == '.' {
				// Seconds with a fraction; .NET lets either side of the
				// point be empty.
				fracStart := end + 1
				fracEnd := fracStart
				for fracEnd < len(s) && isDigit(s[fracEnd]) {
					fracEnd++
				}
				if fracEnd == len(s) || s[fracEnd] != 'S' {
					return 0, errors.New("want S after the fractional seconds")
				}
				seconds, fraction = n, fractionTicks(s[fracStart:fracEnd])
				i, timeFound = fracEnd+1, true
				if i != len(s) {
					return 0, fmt.Errorf("unexpected %q after seconds", s[i:])
				}
				break
			}
			if end == i {
				return 0, fmt.Errorf("want digits before %q", s[i])
			}
			if end == len(s) {
				return 0, errors.New("number without a designator")
			}
			if s[end] == 'S' {
				seconds = n
				i, timeFound = end+1, true
				if i != len(s) {
					return 0, fmt.Errorf("unexpected %q after seconds", s[i:])
				}
				break
			}
			k := strings.IndexByte("HM"[min(next, 2):], s[end])
			if k < 0 {
				return 0, fmt.Errorf("unexpected %q", s[end])
			}
			next += k
			*timeTargets[next] = n
			next++
			i, timeFound = end+1, true
		}
		if !timeFound {
			//lint:ignore ST1005 T is the ISO 8601 time designator, which is upper case
			return 0, errors.New("T must be followed by hours, minutes or seconds")
		}
		found = true
	}
	if !found {
		return 0, errors.New("no components")
	}
	// XmlConvert's conversion: months beyond 12 become years of 365 days.
	totalDays, ok := mulAdd(years+months/12, 365, (months%12)*30)
	if ok {
		totalDays, ok = mulAdd(totalDays, 1, days)
	}
	if !ok {
		return 0, errTooLarge
	}
	return clockTicks(totalDays, hours, minutes, seconds, fraction)
}

// isoNumber reads the digits at s[i:]; end == i when there are none.
func isoNumber(s string, i int) (n uint64, end int, err error) {
	end = i
	for end < len(s) && isDigit(s[end]) {
		n = n*10 + uint64(s[end]-'0')
		if n > maxComponent {
			return 0, end, fmt.Errorf("component exceeds %d", maxComponent)
		}
		end++
	}
	return n, end, nil
}

// timeSpanTicks reads [d.]h:mm:ss[.fffffff].
func timeSpanTicks(s string) (uint64, error) {
	bad := errors.New("want [d.]hh:mm:ss[.fffffff]")
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return 0, bad
	}
	var days uint64
	hourText := parts[0]
	if dot := strings.IndexByte(hourText, '.'); dot >= 0 {
		var ok bool
		if days, ok = digits(hourText[:dot], 1, 8); !ok {
			return 0, bad
		}
		hourText = hourText[dot+1:]
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
		if _, ok := digits(fractionText, 1, maxTickDigits); !ok {
			return 0, bad
		}
		fraction = fractionTicks(fractionText)
	}
	return clockTicks(days, hours, minutes, seconds, fraction)
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

// fractionTicks turns the digits after a decimal point into ticks, dropping
// digits below a tick as .NET does.
func fractionTicks(s string) uint64 {
	var ticks uint64
	for i := range maxTickDigits {
		ticks *= 10
		if i < len(s) {
			ticks += uint64(s[i] - '0')
		}
	}
	return ticks
}

// clockTicks is days, hours, minutes, seconds and fractional ticks in ticks,
// or an error if that overflows 64 bits.
func clockTicks(days, hours, minutes, seconds, fraction uint64) (uint64, error) {
	t, ok := mulAdd(days, 24, hours)
	if ok {
		t, ok = mulAdd(t, 60, minutes)
	}
	if ok {
		t, ok = mulAdd(t, 60, seconds)
	}
	if ok {
		t, ok = mulAdd(t, ticksPerSec, fraction)
	}
	if !ok {
		return 0, errTooLarge
	}
	return t, nil
}

// mulAdd is a*m+b, and false if that overflows.
func mulAdd(a, m, b uint64) (uint64, bool) {
	if m != 0 && a > (math.MaxUint64-b)/m {
		return 0, false
	}
	return a*m + b, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// FormatDuration writes d as XmlConvert.ToString(TimeSpan) does: the
// shortest ISO 8601 form in days, hours, minutes and seconds, truncated to a
// 100 ns tick (PT0S for zero). ParseDuration reads it back as
// d.Truncate(100 * time.Nanosecond).
func FormatDuration(d time.Duration) string {
	magnitude := uint64(d)
	if d < 0 {
		magnitude = -magnitude // two's complement: also right for math.MinInt64
	}
	ticks := magnitude / tickNanos
	b := make([]byte, 0, 32)
	if d < 0 && ticks > 0 {
		b = append(b, '-')
	}
	b = append(b, 'P')
	const ticksPerDay = 24 * 60 * 60 * ticksPerSec
	days, rest := ticks/ticksPerDay, ticks%ticksPerDay
	secs, fraction := rest/ticksPerSec, rest%ticksPerSec
	hours, minutes, seconds := secs/3600, secs/60%60, secs%60
	if days > 0 {
		b = strconv.AppendUint(b, days, 10)
		b = append(b, 'D')
	}
	if rest > 0 {
		b = append(b, 'T')
		if hours > 0 {
			b = strconv.AppendUint(b, hours, 10)
			b = append(b, 'H')
		}
		if minutes > 0 {
			b = strconv.AppendUint(b, minutes, 10)
			b = append(b, 'M')
		}
		if seconds > 0 || fraction > 0 {
			b = strconv.AppendUint(b, seconds, 10)
			if fraction > 0 {
				f := strconv.AppendUint(nil, fraction+ticksPerSec, 10)[1:] // zero-padded to 7 digits
				b = append(b, '.')
				b = append(b, strings.TrimRight(string(f), "0")...)
			}
			b = append(b, 'S')
		}
	}
	if days == 0 && rest == 0 {
		b = append(b, "T0S"...)
	}
	return string(b)
}
