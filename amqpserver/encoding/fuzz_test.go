package encoding

import (
	"bytes"
	"testing"
)

// FuzzReadAny feeds arbitrary bytes to the decoders. Nothing may panic, and
// whatever ReadAny accepts must survive AppendAny and a second ReadAny
// unchanged, with Skip agreeing on where the value ends.
func FuzzReadAny(f *testing.F) {
	for _, v := range sample() {
		enc, err := AppendAny(nil, v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
	}
	f.Add([]byte{0xf0, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x40})
	f.Add([]byte{0x00, 0x53, 0x10, 0xc0, 0x03, 0x01, 0xa1, 0x00})
	f.Add([]byte{0xe0, 0x06, 0x01, 0x00, 0x53, 0x24, 0xc0, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(data)
		v, err := r.ReadAny(Limits{MaxBytes: 1 << 20})
		s := NewReader(data)
		skipErr := s.Skip()
		if err != nil {
			return
		}
		if skipErr != nil || s.Offset() != r.Offset() {
			t.Fatalf("ReadAny consumed %d bytes but Skip %d (%v)", r.Offset(), s.Offset(), skipErr)
		}
		first, err := AppendAny(nil, v)
		if err != nil {
			t.Fatalf("cannot re-encode %#v: %v", v, err)
		}
		again := NewReader(first)
		v2, err := again.ReadAny(Limits{MaxBytes: 1 << 22})
		if err != nil {
			t.Fatalf("re-encoded value does not decode: %v\n% x", err, first)
		}
		second, err := AppendAny(nil, v2)
		if err != nil || !bytes.Equal(first, second) {
			t.Fatalf("encoding is not stable:\n% x\n% x", first, second)
		}
	})
}

// FuzzReaders runs every typed reader over arbitrary bytes; they may fail
// but must not panic or read outside the input.
func FuzzReaders(f *testing.F) {
	f.Add([]byte{0x70, 0, 0, 1, 0})
	f.Add([]byte{0xd0, 0, 0, 0, 4, 0, 0, 0, 0})
	f.Add([]byte{0xf0, 0, 0, 0, 5, 0, 0, 0, 1, 0xa3})
	f.Fuzz(func(t *testing.T, data []byte) {
		readers := []func(r *Reader) error{
			func(r *Reader) error { _, err := r.ReadBool(); return err },
			func(r *Reader) error { _, err := r.ReadUlong(); return err },
			func(r *Reader) error { _, err := r.ReadLong(); return err },
			func(r *Reader) error { _, err := r.ReadUUID(); return err },
			func(r *Reader) error { _, err := r.ReadStringOrSymbolBytes(); return err },
			func(r *Reader) error { _, err := r.ReadBinary(); return err },
			func(r *Reader) error { _, _, err := r.ReadListHeader(); return err },
			func(r *Reader) error { _, _, err := r.ReadMapHeader(); return err },
			func(r *Reader) error { _, err := r.ReadArrayHeader(); return err },
			func(r *Reader) error { _, err := r.ReadDescriptor(); return err },
			func(r *Reader) error { _, err := r.ReadSymbols(nil); return err },
			func(r *Reader) error { _, err := r.ReadRaw(); return err },
		}
		for _, read := range readers {
			r := NewReader(data)
			if err := read(&r); err == nil && (r.Offset() > len(data) || r.Offset() < 0) {
				t.Fatalf("offset %d outside input of %d bytes", r.Offset(), len(data))
			}
		}
	})
}
