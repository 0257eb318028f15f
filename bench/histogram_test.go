package bench

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// Every value lands in a bucket whose bounds hold it, buckets tile the
// range without gaps, and a bucket wider than one value is at most 1/128
// of its values wide.
func TestHistogramBuckets(t *testing.T) {
	for i := range bucketOf(math.MaxInt64) {
		hi := bucketHigh(i)
		if bucketOf(hi) != i || bucketOf(hi+1) != i+1 {
			t.Fatalf("bucket %d: high %d maps to %d, high+1 to %d", i, hi, bucketOf(hi), bucketOf(hi+1))
		}
		lo := int64(0)
		if i > 0 {
			lo = bucketHigh(i-1) + 1
		}
		if width := hi - lo + 1; width > 1 && float64(width) > float64(lo)/subBucketCount {
			t.Fatalf("bucket %d [%d, %d] wider than 1/%d of its values", i, lo, hi, subBucketCount)
		}
	}
	if got := bucketOf(math.MaxInt64); got >= bucketCount {
		t.Fatalf("MaxInt64 in bucket %d of %d", got, bucketCount)
	}
}

// exactQuantile is the nearest-rank quantile of sorted values.
func exactQuantile(sorted []int64, q float64) int64 {
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[max(rank, 1)-1]
}

// Quantiles of known distributions are within the histogram's precision
// of the exact nearest-rank quantiles, and never below them.
func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dists := map[string]func() int64{
		"uniform 1..1e6":     func() int64 { return 1 + rng.Int64N(1e6) },
		"exponential 1ms":    func() int64 { return int64(rng.ExpFloat64() * 1e6) },
		"lognormal":          func() int64 { return int64(math.Exp(rng.NormFloat64()*2 + 12)) },
		"bimodal 50µs/200ms": func() int64 { return []int64{50e3, 200e6}[rng.IntN(2)] + rng.Int64N(1000) },
		"small integers":     func() int64 { return rng.Int64N(300) },
	}
	for name, draw := range dists {
		h := newHistogram()
		vals := make([]int64, 100_000)
		var sum float64
		for i := range vals {
			vals[i] = draw()
			sum += float64(vals[i])
			h.Record(time.Duration(vals[i]))
		}
		sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
		for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999, 1} {
			exact := exactQuantile(vals, q)
			got := int64(h.Quantile(q))
			if got < exact || float64(got-exact) > float64(exact)/subBucketCount {
				t.Errorf("%s: q%v = %d, exact %d", name, q, got, exact)
			}
		}
		if h.Count() != uint64(len(vals)) || int64(h.Min()) != vals[0] || int64(h.Max()) != vals[len(vals)-1] {
			t.Errorf("%s: count %d min %v max %v", name, h.Count(), h.Min(), h.Max())
		}
		if mean := sum / float64(len(vals)); math.Abs(float64(h.Mean())-mean) > 1 {
			t.Errorf("%s: mean %v, want %v", name, h.Mean(), mean)
		}
	}
}

// Merging histograms equals recording everything in one.
func TestHistogramMerge(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	all, parts := newHistogram(), []*histogram{newHistogram(), newHistogram(), newHistogram()}
	for range 10_000 {
		d := time.Duration(rng.Int64N(1e9))
		all.Record(d)
		parts[rng.IntN(len(parts))].Record(d)
	}
	merged := newHistogram()
	merged.Merge(newHistogram()) // an empty one changes nothing
	for _, p := range parts {
		merged.Merge(p)
	}
	if merged.counts != all.counts || merged.Count() != all.Count() || merged.Min() != all.Min() || merged.Max() != all.Max() {
		t.Fatal("merged histogram differs")
	}
}

func TestHistogramEdges(t *testing.T) {
	h := newHistogram()
	if h.Quantile(0.5) != 0 || h.Max() != 0 || h.Min() != 0 || h.Mean() != 0 {
		t.Fatal("empty histogram reports values")
	}
	h.Record(-time.Second) // a clock step: counted as zero
	h.Record(7 * time.Millisecond)
	if h.Quantile(0) != 0 || h.Quantile(1) != 7*time.Millisecond {
		t.Fatalf("q0 %v q1 %v", h.Quantile(0), h.Quantile(1))
	}
}
