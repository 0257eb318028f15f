package encoding

import (
	"bytes"
	"errors"
	"testing"

	"github.com/walbus/walbus/amqpserver/internal/hexbytes"
)

func TestSkipUnknownCodesBySubcategory(t *testing.T) {
	for _, hex := range []string{
		"47",             // fixed 0
		"57 01",          // fixed 1
		"67 01 02",       // fixed 2
		"77 01 02 03 04", // fixed 4
		"87 00 00 00 00 00 00 00 00",
		"97 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
		"a5 02 01 02",       // variable 1
		"b5 00 00 00 01 ff", // variable 4
		"c5 03 02 40 40",    // compound 1
		"d5 00 00 00 05 00 00 00 01 40",
		"e5 02 02 40",       // array 1 of two nulls
		"4f 01",             // extension type, fixed 0
		"af 01 02 61 62",    // extension type, variable 1
		"00 a3 01 78 57 01", // described unknown type
	} {
		b := hexbytes.Parse(t, hex)
		r := NewReader(append(b, 0x40))
		raw, err := r.ReadRaw()
		if err != nil || !bytes.Equal(raw, b) {
			t.Errorf("%s: raw % x, %v", hex, raw, err)
		}
		if !r.TryNull() {
			t.Errorf("%s: not positioned after the value", hex)
		}
	}
}

func TestSkipRejectsMalformed(t *testing.T) {
	for _, hex := range []string{
		"",
		"01", "1f", "2f", "30", // reserved subcategories
		"c0 03 02 40",          // count says 2, only 1 item
		"c0 02 01 40 40",       // size covers 1 item, more follows inside? no: size 2 = count + 1 item, then trailing null is fine
		"c0 03 01 40",          // size 3 but only one item byte
		"c0 02 01 a1",          // item runs past its compound
		"e0 04 02 98 00 00",    // uuids do not fit
		"e0 05 02 a1 01 78",    // second element missing
		"e0 03 01 a1 05",       // element longer than the array
		"00",                   // descriptor missing
		"00 53 10",             // described value missing
		"b0 ff ff ff ff",       // length past the end
		"e0 02 01 00",          // descriptor missing in element constructor
		"e0 03 01 00 53",       // no element code after the descriptor
		"e0 04 01 00 53 00",    // doubly described elements
		"c1 02 01 40",          // map with an odd item count
		"e0 05 01 c1 02 01 40", // the same map as an array element
	} {
		r := NewReader(hexbytes.Parse(t, hex))
		err := r.Skip()
		if hex == "c0 02 01 40 40" {
			if err != nil || r.Len() != 1 {
				t.Errorf("%s: %v, %d left", hex, err, r.Len())
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted", hex)
		} else if !errors.Is(err, ErrDecode) {
			t.Errorf("%s: %v is not ErrDecode", hex, err)
		}
	}
}

func TestSkipZeroWidthArrayIsCheap(t *testing.T) {
	// Four billion nulls in ten bytes: skipping must not loop over them.
	r := NewReader(hexbytes.Parse(t, "f0 00 00 00 05 ff ff ff ff 40"))
	if err := r.Skip(); err != nil || r.Len() != 0 {
		t.Fatalf("%v, %d left", err, r.Len())
	}
}

func TestLimits(t *testing.T) {
	deep := AppendNull(nil)
	for range 40 {
		wrapped, start := BeginList(nil)
		wrapped = append(wrapped, deep...)
		deep = EndList(wrapped, start, 1)
	}
	r := NewReader(deep)
	if _, err := r.ReadAny(Limits{MaxDepth: 64}); err != nil {
		t.Fatalf("40 levels with MaxDepth 64: %v", err)
	}
	r = NewReader(deep)
	if _, err := r.ReadAny(Limits{MaxDepth: 10}); !errors.Is(err, ErrLimitExceeded) || !errors.Is(err, ErrDecode) {
		t.Fatalf("MaxDepth 10: %v", err)
	}

	described := bytes.Repeat([]byte{0}, 10000)
	r = NewReader(described)
	if err := r.Skip(); !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("deeply described: %v", err)
	}

	nulls := hexbytes.Parse(t, "f0 00 00 00 05 ff ff ff ff 40")
	r = NewReader(nulls)
	if _, err := r.ReadAny(Limits{}); !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("four billion nulls: %v", err)
	}
	r = NewReader(hexbytes.Parse(t, "e0 02 05 40"))
	if _, err := r.ReadAny(Limits{MaxElements: 4}); !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("MaxElements 4: %v", err)
	}
	r = NewReader(hexbytes.Parse(t, "e0 02 05 40"))
	if v, err := r.ReadAny(Limits{MaxElements: 5}); err != nil || len(v.(Array).Elements) != 5 {
		t.Fatalf("MaxElements 5: %v", err)
	}
	r = NewReader(AppendBinary(nil, make([]byte, 1000)))
	if _, err := r.ReadAny(Limits{MaxBytes: 500}); !errors.Is(err, ErrLimitExceeded) {
		t.Fatalf("MaxBytes: %v", err)
	}
}

func TestReadAnyRejectsMalformed(t *testing.T) {
	for _, hex := range []string{
		"", "57 01", "56 02", "c1 03 01 40 40", "c0 02 02 40", "c0 03 01 40 40",
		"e0 03 01 98 00", "f0 00 00 00 05 00 00 00 01 a1", "00 53", "e0 02 01 57",
	} {
		r := NewReader(hexbytes.Parse(t, hex))
		if v, err := r.ReadAny(Limits{}); err == nil {
			t.Errorf("%s: decoded %#v", hex, v)
		} else if !errors.Is(err, ErrDecode) {
			t.Errorf("%s: %v is not ErrDecode", hex, err)
		}
	}
}
