package encoding

import "testing"

func BenchmarkAppendScalars(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 256)
	for b.Loop() {
		d := buf[:0]
		d = AppendUint(d, 70000)
		d = AppendLong(d, -1<<40)
		d = AppendTimestamp(d, 1311704463521)
		d = AppendUUID(d, UUID{1})
		d = AppendString(d, "hello, world")
		d = AppendSymbol(d, "x-opt-sequence-number")
		buf = d
	}
}

func BenchmarkAppendMap(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 256)
	for b.Loop() {
		d, start := BeginMap(buf[:0])
		d = AppendSymbol(d, "x-opt-sequence-number")
		d = AppendLong(d, 1<<40)
		d = AppendSymbol(d, "x-opt-enqueued-time")
		d = AppendTimestamp(d, 1311704463521)
		buf = EndMap(d, start, 2)
	}
}

func BenchmarkReadAny(b *testing.B) {
	b.ReportAllocs()
	enc, err := AppendAny(nil, Map{
		{Key: "lock-tokens", Value: Array{Code: CodeUUID, Elements: []any{UUID{1}, UUID{2}, UUID{3}}}},
		{Key: "operation", Value: "com.microsoft:renew-lock"},
		{Key: "server-timeout", Value: uint64(60000)},
	})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		r := NewReader(enc)
		if _, err := r.ReadAny(Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSkip(b *testing.B) {
	b.ReportAllocs()
	enc, _ := AppendAny(nil, sample())
	for b.Loop() {
		r := NewReader(enc)
		if err := r.Skip(); err != nil {
			b.Fatal(err)
		}
	}
}
