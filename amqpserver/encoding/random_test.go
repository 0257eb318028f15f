package encoding

import (
	"math/rand/v2"
	"testing"
)

// TestRandomScalarRoundTrips pushes random values of every integer width,
// biased toward the encoding boundaries, through Append and Read.
func TestRandomScalarRoundTrips(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	edge := func() uint64 {
		// Half the time pick a value near a power of two, where the
		// encoders switch width.
		if rng.IntN(2) == 0 {
			return rng.Uint64()
		}
		shift := rng.IntN(64)
		return uint64(1)<<shift + uint64(rng.IntN(3)) - 1
	}
	for range 20000 {
		u := edge()
		i := int64(u)
		buf := AppendUint(nil, uint32(u))
		buf = AppendUlong(buf, u)
		buf = AppendInt(buf, int32(i))
		buf = AppendLong(buf, i)
		buf = AppendShort(buf, int16(i))
		buf = AppendUshort(buf, uint16(u))
		buf = AppendTimestamp(buf, Timestamp(i))
		buf = AppendChar(buf, Char(u))
		r := NewReader(buf)
		if v, err := r.ReadUint(); err != nil || v != uint32(u) {
			t.Fatalf("uint %d: %d %v", uint32(u), v, err)
		}
		if v, err := r.ReadUlong(); err != nil || v != u {
			t.Fatalf("ulong %d: %d %v", u, v, err)
		}
		if v, err := r.ReadInt(); err != nil || v != int32(i) {
			t.Fatalf("int %d: %d %v", int32(i), v, err)
		}
		if v, err := r.ReadLong(); err != nil || v != i {
			t.Fatalf("long %d: %d %v", i, v, err)
		}
		if v, err := r.ReadShort(); err != nil || v != int16(i) {
			t.Fatalf("short %d: %d %v", int16(i), v, err)
		}
		if v, err := r.ReadUshort(); err != nil || v != uint16(u) {
			t.Fatalf("ushort %d: %d %v", uint16(u), v, err)
		}
		if v, err := r.ReadTimestamp(); err != nil || v != Timestamp(i) {
			t.Fatalf("timestamp %d: %d %v", i, v, err)
		}
		if v, err := r.ReadChar(); err != nil || v != Char(u) {
			t.Fatalf("char %d: %d %v", Char(u), v, err)
		}
		if r.Len() != 0 {
			t.Fatalf("%d bytes left", r.Len())
		}
	}
}
