package admin

import (
	"math"
	"testing"
	"time"
)

func TestOneTwoFive(t *testing.T) {
	want := []float64{1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2}
	got := oneTwoFive(1e-4, 22)
	if len(got) != 22 || got[21] != 1000 {
		t.Fatalf("%d bounds ending at %v", len(got), got[len(got)-1])
	}
	for i, w := range want {
		if math.Abs(got[i]-w) > w*1e-9 {
			t.Fatalf("bound %d is %v, want %v", i, got[i], w)
		}
	}
}

// BenchmarkObserveFirstDelivery: what the wait histogram adds to each
// first delivery.
func BenchmarkObserveFirstDelivery(b *testing.B) {
	m := NewMetrics()
	for i := 0; b.Loop(); i++ {
		m.ObserveFirstDelivery("q", time.Duration(100+i%5000)*time.Microsecond)
	}
}
