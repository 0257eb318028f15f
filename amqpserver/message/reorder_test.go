package message

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
)

// uamqpOrder is a message as uAMQP 1.5 (the Python SDK 7.8) encodes it when
// given every section: header, message-annotations, properties,
// application-properties, footer, delivery-annotations, then the data.
const uamqpOrder = "005370c006054040404043" + // header
	"005372c11002a108782d637573746f6da103616e6e" + // message-annotations {x-custom: ann}
	"005373c00601a1036d6964" + // properties {message-id: mid}
	"005374c10602a101615401" + // application-properties {a: 1}
	"005378c10a02a10166a104666f6f74" + // footer {f: foot}
	"005371c10702a10264615401" + // delivery-annotations {da: 1}
	"005375a00178" // data "x"

func TestReorderMendsUAMQPsOrder(t *testing.T) {
	raw, err := hex.DecodeString(uamqpOrder)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(raw); !errors.Is(err, ErrSectionOrder) {
		t.Fatalf("Parse: %v, want ErrSectionOrder", err)
	}
	out, err := Reorder(raw)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(out)
	if err != nil {
		t.Fatalf("reordered message: %v", err)
	}
	if len(out) != len(raw) {
		t.Fatalf("%d bytes, want %d", len(out), len(raw))
	}
	// Each section is the client's, byte for byte, now in grammar order.
	for _, c := range []struct {
		sp   Span
		want string
	}{
		{s.Header, "005370c006054040404043"},
		{s.DeliveryAnnotations, "005371c10702a10264615401"},
		{s.MessageAnnotations, "005372c11002a108782d637573746f6da103616e6e"},
		{s.Properties, "005373c00601a1036d6964"},
		{s.ApplicationProperties, "005374c10602a101615401"},
		{s.Body, "005375a00178"},
		{s.Footer, "005378c10a02a10166a104666f6f74"},
	} {
		if got := hex.EncodeToString(s.Bytes(c.sp)); got != c.want {
			t.Errorf("section %s, want %s", got, c.want)
		}
	}
}

func TestReorderKeepsOrderedMessagesAndRefusesTheRest(t *testing.T) {
	in := clientMessage()
	in.Data = [][]byte{[]byte("one"), []byte("two")}
	ordered := marshal(t, in)
	if out, err := Reorder(ordered); err != nil || !bytes.Equal(out, ordered) {
		t.Fatalf("an ordered message changed: %v", err)
	}
	header, _ := hex.DecodeString("005370c006054040404043")
	data, _ := hex.DecodeString("005375a00178")
	value, _ := hex.DecodeString("005377a00178")
	for name, raw := range map[string][]byte{
		"two headers":      append(append(append([]byte{}, header...), header...), data...),
		"value after data": append(append([]byte{}, data...), value...),
		"two values":       append(append([]byte{}, value...), value...),
		"trailing garbage": append(append([]byte{}, data...), 0x00),
		"unknown section":  {0x00, 0x53, 0x79, 0x40},
	} {
		if _, err := Reorder(raw); !errors.Is(err, ErrInvalidMessage) {
			t.Errorf("%s: %v, want ErrInvalidMessage", name, err)
		}
	}
}
