package event

import (
	"slices"
	"testing"
)

func TestRoutesRoundTrip(t *testing.T) {
	for _, qs := range [][]uint32{nil, {3}, {3, 6, 9}, {3, 300, 1<<32 - 3}} {
		b := AppendRoutes(nil, qs)
		got, err := DecodeRoutes(b)
		if err != nil || !slices.Equal(got, qs) && len(qs) > 0 {
			t.Fatalf("%v: %v, %v", qs, got, err)
		}
	}
	for _, bad := range [][]byte{{2, 3, 0}, {1}, {1, 3, 0}, {0xff}} {
		if _, err := DecodeRoutes(bad); err == nil {
			t.Errorf("% x decoded", bad)
		}
	}
}

func FuzzDecodeRoutes(f *testing.F) {
	f.Add(AppendRoutes(nil, []uint32{3, 6, 9}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		qs, err := DecodeRoutes(b)
		if err != nil {
			return
		}
		// What decodes ascends, and its encoding decodes to it again.
		if !slices.IsSorted(qs) {
			t.Fatalf("routes %v not ascending", qs)
		}
		again, err := DecodeRoutes(AppendRoutes(nil, qs))
		if err != nil || !slices.Equal(again, qs) {
			t.Fatalf("% x decodes to %v, which encodes to what decodes to %v, %v", b, qs, again, err)
		}
	})
}
