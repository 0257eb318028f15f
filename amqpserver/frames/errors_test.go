package frames

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/internal/hexbytes"
)

func TestMissingMandatoryFields(t *testing.T) {
	for _, c := range []struct {
		name string
		hex  string
		into Performative
	}{
		{"open without container-id", "00 53 10 45", &Open{}},
		{"open with null container-id", "00 53 10 C0 02 01 40", &Open{}},
		{"begin without windows", "00 53 11 C0 03 02 40 43", &Begin{}},
		{"attach without role", "00 53 12 C0 05 02 A1 01 6E 43", &Attach{}},
		{"flow without windows", "00 53 13 C0 02 01 43", &Flow{}},
		{"transfer without handle", "00 53 14 45", &Transfer{}},
		{"disposition without first", "00 53 15 C0 02 01 41", &Disposition{}},
		{"detach without handle", "00 53 16 45", &Detach{}},
		{"sasl-init without mechanism", "00 53 41 45", &SASLInit{}},
		{"sasl-outcome without code", "00 53 44 45", &SASLOutcome{}},
		{"sasl-mechanisms empty", "00 53 40 C0 05 01 E0 02 00 A3", &SASLMechanisms{}},
		{"sasl-response without response", "00 53 43 45", &SASLResponse{}},
		{"error without condition", "00 53 1D 45", &Error{}},
		{"received without offset", "00 53 23 C0 02 01 43", &Received{}},
		{"declared without txn-id", "00 53 33 45", &Declared{}},
	} {
		err := c.into.Decode(hexbytes.Parse(t, c.hex))
		if !errors.Is(err, ErrMissingField) || !errors.Is(err, encoding.ErrDecode) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, c := range []struct {
		name string
		hex  string
		into Performative
	}{
		{"wrong descriptor", "00 53 11 45", &Open{}},
		{"not described", "45", &Close{}},
		{"field of the wrong type", "00 53 16 C0 02 01 A1", &Detach{}},
		{"ubyte settle mode sent as uint", "00 53 12 C0 08 04 A1 01 6E 43 42 52 01", &Attach{}},
		{"field runs past its list", "00 53 16 C0 02 01 70 00 00 00 01", &Detach{}},
		{"list count larger than its fields", "00 53 16 C0 02 02 43 40", &Detach{}},
		{"trailing bytes", "00 53 18 45 45", &Close{}},
		{"unknown delivery state", "00 53 15 C0 09 05 41 43 40 41 00 53 99 45", &Disposition{}},
		{"properties not a map", "00 53 10 C0 0D 0A A1 01 63 40 40 40 40 40 40 40 40 43", &Open{}},
	} {
		err := c.into.Decode(hexbytes.Parse(t, c.hex))
		if err == nil || !errors.Is(err, encoding.ErrDecode) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	if _, _, err := ParseBody(hexbytes.Parse(t, "00 53 77 45")); !errors.Is(err, ErrUnknownPerformative) {
		t.Errorf("amqp-value as a performative: %v", err)
	}
	sym := append([]byte{0x00, encoding.CodeSym8, 9}, "amqp:nope"...)
	if _, _, err := ParseBody(append(sym, 0x45)); !errors.Is(err, ErrUnknownPerformative) {
		t.Errorf("unknown symbolic descriptor: %v", err)
	}
}

// Fields added by a later protocol version are skipped (AMQP 1.0 §1.4).
func TestExtraFieldsIgnored(t *testing.T) {
	var c Close
	if err := c.Decode(hexbytes.Parse(t, "00 53 18 C0 05 02 40 A1 01 78")); err != nil || c.Error != nil {
		t.Fatalf("%+v %v", c, err)
	}
}

// TestDynamicFieldsAreBounded: the dynamic values of a performative
// (here an attach's properties) decode within small limits. An array of
// nulls costs no bytes per element on the wire; a million of them in an
// attach would otherwise be a 16 MiB value kept for the link's life. A
// thousand real properties still decode.
func TestDynamicFieldsAreBounded(t *testing.T) {
	nulls := []byte{0xf0, 0, 0, 0, 5, 0, 0x10, 0, 0, 0x40} // array32: 2^20 nulls
	props := append([]byte{0xc1, byte(4 + len(nulls)), 2, 0xa3, 1, 'a'}, nulls...)
	perf := hexbytes.Parse(t, "00 53 12 C0")
	fields := append(hexbytes.Parse(t, "A1 01 78 43 42 40 40 40 40 40 40 40 40 40 40"), props...)
	perf = append(perf, byte(1+len(fields)), 14)
	perf = append(perf, fields...)
	var a Attach
	if err := a.Decode(perf); !errors.Is(err, encoding.ErrLimitExceeded) {
		t.Fatalf("attach with a million-null property: %v, properties %d entries", err, len(a.Properties))
	}

	var many encoding.Map
	for i := range 1000 {
		many = append(many, encoding.MapEntry{Key: encoding.Symbol(fmt.Sprintf("p%d", i)), Value: strings.Repeat("v", 100)})
	}
	in := Attach{Name: "x", Role: RoleSender, Properties: many}
	var out Attach
	if err := out.Decode(in.AppendTo(nil)); err != nil || len(out.Properties) != 1000 {
		t.Fatalf("attach with 1000 properties: %v, %d entries", err, len(out.Properties))
	}
}
