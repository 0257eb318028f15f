package bench

import (
	"math"
	"math/bits"
	"time"
)

// subBucketBits sets the histogram's precision: each power-of-two range of
// values is split into 1<<subBucketBits equal buckets, so a recorded value
// is known to within 1/128 (0.8%) of itself.
const (
	subBucketBits  = 7
	subBucketCount = 1 << subBucketBits
	// Values below 2*subBucketCount get a bucket of width 1; above, the
	// exponent e (1..64-subBucketBits-1) selects a band of subBucketCount
	// buckets of width 1<<e.
	bucketCount = (64 - subBucketBits + 1) * subBucketCount
)

// histogram records non-negative durations in log-linear buckets, in the
// manner of HdrHistogram: constant relative precision over the whole int64
// range with a fixed 58 KiB of counters. It is not safe for concurrent use;
// give each goroutine its own and Merge them.
type histogram struct {
	counts [bucketCount]uint64
	total  uint64
	sum    float64
	min    int64
	max    int64
}

// newHistogram returns an empty histogram.
func newHistogram() *histogram { return &histogram{min: math.MaxInt64} }

// bucketOf is the bucket index of v >= 0.
func bucketOf(v int64) int {
	u := uint64(v)
	if u < 2*subBucketCount {
		return int(u)
	}
	e := bits.Len64(u) - subBucketBits - 1
	return e*subBucketCount + int(u>>e)
}

// bucketHigh is the largest value that falls into bucket i.
func bucketHigh(i int) int64 {
	if i < 2*subBucketCount {
		return int64(i)
	}
	e := i/subBucketCount - 1
	m := uint64(i%subBucketCount + subBucketCount)
	return int64((m+1)<<e - 1)
}

// Record adds one observation; negative durations count as zero (a clock
// step between two hosts, never a real latency).
func (h *histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucketOf(v)]++
	h.total++
	h.sum += float64(v)
	h.min = min(h.min, v)
	h.max = max(h.max, v)
}

// Merge adds all of o's observations to h.
func (h *histogram) Merge(o *histogram) {
	if o.total == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.sum += o.sum
	h.min = min(h.min, o.min)
	h.max = max(h.max, o.max)
}

// Count is the number of observations.
func (h *histogram) Count() uint64 { return h.total }

// Max is the largest observation, exactly.
func (h *histogram) Max() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.max)
}

// Min is the smallest observation, exactly.
func (h *histogram) Min() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.min)
}

// Mean is the average observation.
func (h *histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.total))
}

// Quantile is the smallest bucket bound at or below which a fraction q of
// the observations lie (q in [0, 1]): it overstates the true quantile by
// at most one bucket width, never understates it, and never exceeds Max.
func (h *histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(max(bucketHigh(i), h.min), h.max))
		}
	}
	return time.Duration(h.max)
}
