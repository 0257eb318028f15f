package timespan

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

const (
	second = int64(ticksPerSecond)
	minute = 60 * second
	hour   = 60 * minute
	day    = 24 * hour
)

func TestParseISO(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"PT1M", minute},
		{"PT30S", 30 * second},
		{"P14D", 14 * day},
		{"P1DT2H3M4.5S", day + 2*hour + 3*minute + 45*second/10},
		{"P1DT0.0005S", day + 5000},
		{"PT0S", 0},
		{"P0D", 0},
		{"-PT0S", 0},
		{"-PT1M", -minute},
		{"PT90M", 90 * minute}, // components need not be normalised
		{"PT36H", 36 * hour},
		{"PT0001S", second}, // leading zeros
		{"PT00000000000000000000001S", second},
		// A year is 365 days, a month 30, and twelve months a year.
		{"P1Y", 365 * day},
		{"P1M", 30 * day},
		{"P11M", 330 * day},
		{"P12M", 365 * day},
		{"P13M", 395 * day},
		{"P1Y13M", 760 * day},
		{"P1Y2M3DT4H5M6.7S", (365+60+3)*day + 4*hour + 5*minute + 67*second/10},
		{"P1YT1S", 365*day + second}, // components may be skipped
		{"P1MT1M", 30*day + minute},  // M is months before T, minutes after
		// Fractions: seven digits are ticks, the rest is dropped.
		{"PT0.5S", 5_000_000},
		{"PT0.0000001S", 1},
		{"PT0.00000009S", 0},
		{"PT1.23456789S", 12_345_678},
		{"PT0.99999999999999999999999999S", 9_999_999},
		{"-PT0.00000019S", -1},
		// Either side of the point may be empty, as XmlConvert reads it.
		{"PT.5S", 5_000_000},
		{"PT1.S", second},
		{"PT.S", 0},
		{"PT1H.25S", hour + 2_500_000},
		{"PT1M1.S", minute + second},
		// Each component may reach 2^31-1.
		{"PT2147483647S", 2147483647 * second},
		{"PT2147483647M", 2147483647 * minute},
		{"PT2147483647.9999999S", 2147483647*second + 9_999_999},
		// TimeSpan.MaxValue and MinValue, however written.
		{"P10675199DT2H48M5.4775807S", math.MaxInt64},
		{"-P10675199DT2H48M5.4775808S", math.MinInt64},
		{"P10675199DT2H48M5.47758079999S", math.MaxInt64},
		{"P29247Y44DT2H48M5.4775807S", math.MaxInt64},
	} {
		got, err := ParseISO(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseISO(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseISOErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "want P"},
		{"-", "want P"},
		{"p1d", "want P"}, // designators are upper case
		{"+PT1M", "want P"},
		{"1M", "want P"},
		{" PT1M", "want P"}, // white space is the caller's
		{"PT1M ", "want digits before ' '"},
		{"--PT1M", "want P"},
		{"P", "no components"},
		{"-P", "no components"},
		{"PT", "T must be followed by hours, minutes or seconds"},
		{"P1DT", "T must be followed by hours, minutes or seconds"},
		{"PTT1H", "want digits before 'T'"},
		{"PT1HT1M", "want digits before 'T'"},
		{"P1T1H", "unexpected 'T'"},
		{"P1H", "unexpected 'H'"},  // T is needed before time components
		{"PT1D", "unexpected 'D'"}, // and date components come before it
		{"PT1Y", "unexpected 'Y'"},
		{"P1S", "unexpected 'S'"},
		{"P1W", "unexpected 'W'"}, // no weeks
		{"P1D1Y", "unexpected 'Y'"},
		{"P1D1D", "unexpected 'D'"},
		{"PT1M1H", "unexpected 'H'"},
		{"PT1M1M", "unexpected 'M'"},
		{"PT1S1M", `unexpected "1M" after seconds`},
		{"PT1.5S1M", `unexpected "1M" after seconds`},
		{"PT1SX", `unexpected "X" after seconds`},
		{"PT1.5", "want S after the fractional seconds"},
		{"PT1.5M", "want S after the fractional seconds"},
		{"PT1.5.5S", "want S after the fractional seconds"},
		{"PT.", "want S after the fractional seconds"},
		{"P1.5D", "unexpected '.'"}, // only seconds have a fraction
		{"P.5D", "want digits before '.'"},
		{"PT1", "number without a designator"},
		{"P1", "number without a designator"},
		{"PD", "want digits before 'D'"},
		{"PTS", "want digits before 'S'"},
		{"PTH", "want digits before 'H'"},
		{"P-1D", "want digits before '-'"},
		{"PT+1S", "want digits before '+'"},
		{"P 1D", "want digits before ' '"},
		{"P1 D", "unexpected ' '"},
		{"P1,5D", "unexpected ','"},
		{"PT\uff11S", "want digits before 'ï'"}, // ASCII digits only
		// Each component must fit a 32-bit int, as in XmlConvert.
		{"P2147483648D", "component exceeds 2147483647"},
		{"PT2147483648S", "component exceeds 2147483647"},
		{"PT922337203685.4775807S", "component exceeds 2147483647"},
		{"P99999999999999999999D", "component exceeds 2147483647"},
		// Beyond TimeSpan's range.
		{"P10675199DT2H48M5.4775808S", "beyond the range of a .NET TimeSpan"},
		{"-P10675199DT2H48M5.4775809S", "beyond the range of a .NET TimeSpan"},
		{"P10675200D", "beyond the range of a .NET TimeSpan"},
		{"P2147483647D", "beyond the range of a .NET TimeSpan"},
		{"P29248Y", "beyond the range of a .NET TimeSpan"},
		{"P2147483647Y2147483647M2147483647DT2147483647H2147483647M2147483647.9999999S", "beyond the range of a .NET TimeSpan"},
	} {
		got, err := ParseISO(tc.in)
		if err == nil {
			t.Errorf("ParseISO(%q) = %d, want an error", tc.in, got)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseISO(%q) error %q, want %q", tc.in, err, tc.want)
		}
	}
}

func TestParseText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"00:01:00", minute},
		{"0:0:0", 0},
		{"-00:00:00", 0},
		{"1:02:03", hour + 2*minute + 3*second},
		{"2.00:00:00", 2 * day},
		{"-00:00:30", -30 * second},
		{"00:00:00.5", 5_000_000},
		{"00:00:00.0000001", 1},
		{"23:59:59.9999999", day - 1},
		{"10675199.02:48:05.4775807", math.MaxInt64},
		{"-10675199.02:48:05.4775808", math.MinInt64},
	} {
		got, err := ParseText(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseText(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"", "want [d.]hh:mm:ss[.fffffff]"},
		{"00:01", "want [d.]hh:mm:ss[.fffffff]"},
		{"00:00:00:00", "want [d.]hh:mm:ss[.fffffff]"},
		{"000:00:00", "want [d.]hh:mm:ss[.fffffff]"},
		{"00:000:00", "want [d.]hh:mm:ss[.fffffff]"},
		{"00:00:000", "want [d.]hh:mm:ss[.fffffff]"},
		{"00:00:00.", "want [d.]hh:mm:ss[.fffffff]"},
		{"00:00:00.12345678", "want [d.]hh:mm:ss[.fffffff]"},
		{"1.2.00:00:00", "want [d.]hh:mm:ss[.fffffff]"},
		{".00:00:00", "want [d.]hh:mm:ss[.fffffff]"},
		{"123456789.00:00:00", "want [d.]hh:mm:ss[.fffffff]"},
		{"a:00:00", "want [d.]hh:mm:ss[.fffffff]"},
		{" 00:00:00", "want [d.]hh:mm:ss[.fffffff]"},
		{"+00:00:00", "want [d.]hh:mm:ss[.fffffff]"},
		{"--00:00:00", "want [d.]hh:mm:ss[.fffffff]"},
		{"24:00:00", "hours must be below 24"},
		{"00:60:00", "minutes and seconds below 60"},
		{"00:00:60", "minutes and seconds below 60"},
		{"10675199.02:48:05.4775808", "beyond the range of a .NET TimeSpan"},
		{"-10675199.02:48:05.4775809", "beyond the range of a .NET TimeSpan"},
		{"99999999.00:00:00", "beyond the range of a .NET TimeSpan"},
	} {
		got, err := ParseText(tc.in)
		if err == nil {
			t.Errorf("ParseText(%q) = %d, want an error", tc.in, got)
		} else if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseText(%q) error %q, want %q", tc.in, err, tc.want)
		}
	}
}

// TestParse: Parse tells the forms apart by the P and the colon.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"PT1M", minute, ""},
		{"-PT1M", -minute, ""},
		{"00:01:00", minute, ""},
		{"-00:01:00", -minute, ""},
		{"P1D:", 0, "want digits before ':'"},
		{"1:00", 0, "want [d.]hh:mm:ss[.fffffff]"},
		{"", 0, "want ISO 8601 (PT1M) or TimeSpan (00:01:00) form"},
		{"60", 0, "want ISO 8601"},
		{"1m", 0, "want ISO 8601"},
		{"pt1m", 0, "want ISO 8601"},
		{"+PT1M", 0, "want ISO 8601"},
		{"--PT1M", 0, "want ISO 8601"},
	} {
		got, err := Parse(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("Parse(%q) = %d, %v; want an error %q", tc.in, got, err, tc.err)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		in   int64
		want string
	}{
		{0, "PT0S"},
		{1, "PT0.0000001S"},
		{-1, "-PT0.0000001S"},
		{5_000_000, "PT0.5S"},
		{12_345_670, "PT1.234567S"},
		{minute, "PT1M"},
		{-minute, "-PT1M"},
		{hour, "PT1H"},
		{90 * second, "PT1M30S"},
		{hour + second, "PT1H1S"},
		{14 * day, "P14D"},
		{26 * hour, "P1DT2H"},
		{day + 5000, "P1DT0.0005S"},
		{day + hour + minute + second + 5_000_000, "P1DT1H1M1.5S"},
		{400 * day, "P400D"}, // never years or months
		{math.MaxInt64, "P10675199DT2H48M5.4775807S"},
		{math.MinInt64, "-P10675199DT2H48M5.4775808S"},
		{math.MinInt64 + 1, "-P10675199DT2H48M5.4775807S"},
	} {
		if got := Format(tc.in); got != tc.want {
			t.Errorf("Format(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestRoundTrip: every tick count is written and read back exactly.
func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		ticks := int64(r.Uint64())
		switch i % 4 {
		case 1:
			ticks %= 1000 * day
		case 2:
			ticks = ticks % (1000 * day) / second * second
		case 3:
			ticks %= 100
		}
		s := Format(ticks)
		if got, err := ParseISO(s); err != nil || got != ticks {
			t.Fatalf("ParseISO(Format(%d) = %q) = %d, %v", ticks, s, got, err)
		}
	}
}

// FuzzParse: Parse never panics; what it accepts is what ParseISO or
// ParseText accepts, and it is written as text that reads back as the same
// ticks; any tick count is written as text that reads back as it.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"PT1M", "P14D", "P1Y13M", "P1Y2M3DT4H5M6.7S", "-PT1.23456789S", "PT.5S", "PT1.S",
		"P10675199DT2H48M5.4775807S", "-P10675199DT2H48M5.4775808S", "P2147483647D", "PT2147483648S", "P", "PT", "P1DT",
		"PT1S1M", "00:01:00", "-1.23:59:59.9999999", "10675199.02:48:05.4775807", "24:00:00"} {
		f.Add(s, int64(0))
	}
	f.Add("", int64(math.MaxInt64))
	f.Add("", int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, s string, n int64) {
		if got, err := ParseISO(Format(n)); err != nil || got != n {
			t.Fatalf("%d is written %q, which reads as %d, %v", n, Format(n), got, err)
		}
		ticks, err := Parse(s)
		iso, isoErr := ParseISO(s)
		text, textErr := ParseText(s)
		switch {
		case err != nil:
			if isoErr == nil && textErr == nil {
				t.Fatalf("Parse(%q) refuses what both forms accept: %v", s, err)
			}
			return
		case isoErr == nil && iso == ticks, textErr == nil && text == ticks:
		default:
			t.Fatalf("Parse(%q) = %d; ParseISO %d, %v; ParseText %d, %v", s, ticks, iso, isoErr, text, textErr)
		}
		out := Format(ticks)
		if got, err := Parse(out); err != nil || got != ticks {
			t.Fatalf("Parse(%q) = %d, written %q, which reads as %d, %v", s, ticks, out, got, err)
		}
	})
}
