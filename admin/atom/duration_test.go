package atom

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	const day = 24 * time.Hour
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"PT1M", time.Minute},
		{"PT30S", 30 * time.Second},
		{"P14D", 14 * day},
		{"PT10M", 10 * time.Minute},
		{"PT1M30S", 90 * time.Second},
		{"P1DT2H3M4.5S", day + 2*time.Hour + 3*time.Minute + 4500*time.Millisecond},
		{"P1DT0.0005S", day + 500*time.Microsecond}, // Python's isodate
		{"PT0.5S", 500 * time.Millisecond},
		{"PT.5S", 500 * time.Millisecond}, // XmlConvert reads a fraction without its whole part,
		{"PT1.S", time.Second},            // or with nothing after the point
		{"P1Y", 365 * 24 * time.Hour},
		{"PT0.0000001S", 100 * time.Nanosecond},
		{"PT1.23456789S", 1234567800 * time.Nanosecond}, // below a tick is dropped
		{"PT0S", 0},
		{"P0D", 0},
		{"P12M", 365 * day}, // XmlConvert's year and month: twelve months are a year
		{"P13M", 365*day + 30*day},
		{"P1M", 30 * day},
		{"P1Y2M3DT4H5M6S", 365*day + 60*day + 3*day + 4*time.Hour + 5*time.Minute + 6*time.Second},
		{"PT36H", 36 * time.Hour},
		{"-PT1M", -time.Minute},
		{" \n PT5M\t", 5 * time.Minute},
		{timeSpanMax, Forever},
		{"P200000D", Forever}, // longer than a time.Duration, shorter than TimeSpan.MaxValue
		{"P106751DT23H47M16.8547758S", 106751*day + 23*time.Hour + 47*time.Minute + 16854775800*time.Nanosecond},
	} {
		got, err := ParseDuration(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

func TestParseDurationErrors(t *testing.T) {
	for _, in := range []string{
		"", "P", "PT", "1M", "T1M", "P1DT", "P1H", "PT1D", "P1D1D", "PT1S1M", "P1.5D",
		"PT1M1M", "P-1D", "PT+1S", "P1DTT1H", "PT1Mx", "PT5", "p1d", "P10675199DT2H48M5.4775808S",
		"P99999999999999999999D", "-P10675199DT2H48M5.4775809S", "-P200000D", "P1 D",
	} {
		if d, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, d)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for _, c := range []struct {
		in   time.Duration
		want string
	}{
		{0, "PT0S"},
		{time.Minute, "PT1M"},
		{5 * time.Minute, "PT5M"},
		{14 * 24 * time.Hour, "P14D"},
		{26 * time.Hour, "P1DT2H"},
		{90 * time.Second, "PT1M30S"},
		{1500 * time.Millisecond, "PT1.5S"},
		{100 * time.Nanosecond, "PT0.0000001S"},
		{50 * time.Nanosecond, "PT0S"}, // truncated to a tick
		{-time.Minute, "-PT1M"},
		{24*time.Hour + 500*time.Microsecond, "P1DT0.0005S"},
		{Forever, timeSpanMax},
	} {
		if got := FormatDuration(c.in); got != c.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestTimeSpanExtremes: TimeSpan.MinValue and MaxValue, as ticks, are
// written and read exactly (filter values hold ticks, not time.Duration).
func TestTimeSpanExtremes(t *testing.T) {
	for _, ticks := range []int64{math.MaxInt64, math.MinInt64, 0, 1, -1, 864000000000} {
		s := formatTicks(ticks)
		got, err := parseTicks(s)
		if err != nil || got != ticks {
			t.Errorf("parseTicks(formatTicks(%d) = %q) = %d, %v", ticks, s, got, err)
		}
	}
	if s := formatTicks(math.MaxInt64); s != timeSpanMax {
		t.Errorf("TimeSpan.MaxValue is written %q", s)
	}
	if s := formatTicks(math.MinInt64); s != "-P10675199DT2H48M5.4775808S" {
		t.Errorf("TimeSpan.MinValue is written %q", s)
	}
}

// TestDurationRoundTrip: every tick count in time.Duration's range is
// written and read back exactly.
func TestDurationRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		d := time.Duration(r.Int64N(math.MaxInt64/tickNs)) * tickNs
		if r.IntN(2) == 0 {
			d = -d
		}
		if r.IntN(3) == 0 {
			d = d.Truncate(time.Second) % (1000 * time.Hour)
		}
		s := FormatDuration(d)
		got, err := ParseDuration(s)
		if err != nil || got != d {
			t.Fatalf("ParseDuration(FormatDuration(%d) = %q) = %d, %v", d, s, got, err)
		}
	}
}
