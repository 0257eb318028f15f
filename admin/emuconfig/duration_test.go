package emuconfig

import (
	"math"
	"strings"
	"testing"
	"time"
)

const day = 24 * time.Hour

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		// What the emulator's files and XmlConvert write.
		{"PT1M", time.Minute},
		{"PT1H", time.Hour},
		{"PT20S", 20 * time.Second},
		{"P2D", 2 * day},
		{"P1DT2H3M4S", day + 2*time.Hour + 3*time.Minute + 4*time.Second},
		{"PT0S", 0},
		{"P0D", 0},
		{"-PT1M", -time.Minute},
		{"-PT0S", 0},
		{"PT0.5S", 500 * time.Millisecond},
		{"PT1.0000001S", time.Second + 100},
		{"PT90M", 90 * time.Minute}, // components need not be normalised
		{"PT3600S", time.Hour},      // nor here
		{"PT0001S", time.Second},    // leading zeros
		{"  PT1M\t", time.Minute},   // .NET trims white space
		{"PT2147483647S", 2147483647 * time.Second},
		// XmlConvert's fixed conversion: a year is 365 days, a month 30,
		// and twelve months a year.
		{"P1Y", 365 * day},
		{"P1M", 30 * day},
		{"P12M", 365 * day},
		{"P13M", 395 * day},
		{"P1Y2M3DT4H5M6.7S", (365+60+3)*day + 4*time.Hour + 5*time.Minute + 6700*time.Millisecond},
		// XmlConvert's lenient fractions.
		{"PT.5S", 500 * time.Millisecond},
		{"PT1.S", time.Second},
		{"PT1H.25S", time.Hour + 250*time.Millisecond},
		// Below a tick is dropped, however many digits.
		{"PT0.00000009S", 0},
		{"PT0.12345678999999999999S", 123456700},
		{"-PT0.00000019S", -100},
		// Beyond time.Duration but inside TimeSpan: saturates.
		{"P10675199DT2H48M5.4775807S", math.MaxInt64},  // TimeSpan.MaxValue
		{"-P10675199DT2H48M5.4775808S", math.MinInt64}, // TimeSpan.MinValue
		{"P106751DT23H47M16.8547758S", math.MaxInt64 / 100 * 100},
		{"P106751DT23H47M16.8547759S", math.MaxInt64},
		{"P1000Y", math.MaxInt64},
		// The TimeSpan text form.
		{"00:01:00", time.Minute},
		{"1:02:03", time.Hour + 2*time.Minute + 3*time.Second},
		{"2.00:00:00", 2 * day},
		{"-00:00:30", -30 * time.Second},
		{"00:00:00.5", 500 * time.Millisecond},
		{"00:00:00.0000001", 100},
		{"23:59:59.9999999", day - 100},
		{"10675199.02:48:05.4775807", math.MaxInt64},
	} {
		got, err := ParseDuration(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDuration(%q) = %v (%d), %v; want %v (%d)", tc.in, got, int64(got), err, tc.want, int64(tc.want))
		}
	}
}

func TestParseDurationErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "want ISO 8601 (PT1M) or TimeSpan (00:01:00) form"},
		{"1m", "want ISO 8601"},
		{"60", "want ISO 8601"},
		{"pt1m", "want ISO 8601"}, // designators are upper case
		{"+PT1M", "want ISO 8601"},
		{"P", "no components"},
		{"-P", "no components"},
		{"PT", "T must be followed by hours, minutes or seconds"},
		{"P1DT", "T must be followed by hours, minutes or seconds"},
		{"P1H", `unexpected 'H'`},    // T required before time components
		{"PT1D", `unexpected 'D'`},   // and date components before it
		{"P1D1Y", `unexpected 'Y'`},  // out of order
		{"P1D1D", `unexpected 'D'`},  // repeated
		{"PT1M1H", `unexpected 'H'`}, // out of order
		{"PT1S1M", `unexpected "1M" after seconds`},
		{"PT1.5", "want S after the fractional seconds"},
		{"PT1.5M", "want S after the fractional seconds"},
		{"PT1", "number without a designator"},
		{"P1", "number without a designator"},
		{"PD", `want digits before 'D'`},
		{"PTS", `want digits before 'S'`},
		{"P-1D", `want digits before '-'`},
		{"P1.5D", `unexpected '.'`},
		{"P 1D", `want digits before ' '`},
		{"P2147483648D", "component exceeds 2147483647"},
		{"PT99999999999S", "component exceeds 2147483647"},
		{"P10675199DT2H48M5.4775808S", "beyond the range of a .NET TimeSpan"},
		{"P2147483647Y", "beyond the range of a .NET TimeSpan"},
		{"P2147483647Y2147483647M2147483647DT2147483647H2147483647M2147483647S", "beyond the range"},
		{"00:01", "want [d.]hh:mm:ss[.fffffff]"},
		{"00:00:00:00", "want [d.]hh:mm:ss[.fffffff]"},
		{"24:00:00", "hours must be below 24"},
		{"00:60:00", "minutes and seconds below 60"},
		{"00:00:60", "minutes and seconds below 60"},
		{"00:00:00.12345678", "want [d.]hh:mm:ss[.fffffff]"},
		{"00:00:00.", "want [d.]hh:mm:ss[.fffffff]"},
		{"000:00:00", "want [d.]hh:mm:ss[.fffffff]"},
		{"1.2.00:00:00", "want [d.]hh:mm:ss[.fffffff]"},
		{".00:00:00", "want [d.]hh:mm:ss[.fffffff]"},
		{"a:00:00", "want [d.]hh:mm:ss[.fffffff]"},
		{"10675199.02:48:05.4775808", "beyond the range of a .NET TimeSpan"},
	} {
		got, err := ParseDuration(tc.in)
		if err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", tc.in, got)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "invalid duration ") {
			t.Errorf("ParseDuration(%q) error %q, want it to contain %q", tc.in, err, tc.want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for _, tc := range []struct {
		in   time.Duration
		want string
	}{
		{0, "PT0S"},
		{99, "PT0S"}, // below a tick
		{-99, "PT0S"},
		{100, "PT0.0000001S"},
		{time.Minute, "PT1M"},
		{-time.Minute, "-PT1M"},
		{time.Hour, "PT1H"},
		{2 * day, "P2D"},
		{day + time.Hour + time.Minute + time.Second + 500*time.Millisecond, "P1DT1H1M1.5S"},
		{day + time.Second, "P1DT1S"},
		{math.MaxInt64, "P106751DT23H47M16.8547758S"},
		{math.MinInt64, "-P106751DT23H47M16.8547758S"},
	} {
		if got := FormatDuration(tc.in); got != tc.want {
			t.Errorf("FormatDuration(%d) = %q, want %q", int64(tc.in), got, tc.want)
		}
	}
}

// Every duration survives FormatDuration then ParseDuration, to the tick.
func TestDurationRoundTrip(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 100, 101, time.Second, 1234567891234567, -1234567891234567, math.MaxInt64, math.MinInt64, math.MinInt64 + 1} {
		got, err := ParseDuration(FormatDuration(d))
		if want := d.Truncate(tickNanos); err != nil || got != want {
			t.Errorf("ParseDuration(FormatDuration(%d)) = %d, %v; want %d", int64(d), int64(got), err, int64(want))
		}
	}
}
