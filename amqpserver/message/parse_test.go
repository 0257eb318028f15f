package message

import (
	"bytes"
	"errors"
	"testing"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// section builds "descriptor value" for a test message.
func section(code uint64, value []byte) []byte {
	return append(encoding.AppendDescriptor(nil, code), value...)
}

func emptyMap() []byte  { return []byte{encoding.CodeMap8, 1, 0} }
func emptyList() []byte { return []byte{encoding.CodeList0} }

func TestParseLocatesSections(t *testing.T) {
	hdr := section(CodeHeader, emptyList())
	da := section(CodeDeliveryAnnotations, emptyMap())
	ma := section(CodeMessageAnnotations, emptyMap())
	props := section(CodeProperties, emptyList())
	ap := section(CodeApplicationProperties, emptyMap())
	data1 := section(CodeData, encoding.AppendBinary(nil, []byte("a")))
	data2 := section(CodeData, encoding.AppendBinary(nil, []byte("bc")))
	footer := section(CodeFooter, emptyMap())
	var raw []byte
	for _, p := range [][]byte{hdr, da, ma, props, ap, data1, data2, footer} {
		raw = append(raw, p...)
	}
	s := mustParse(t, raw)
	at := 0
	for _, c := range []struct {
		name string
		sp   Span
		len  int
	}{
		{"header", s.Header, len(hdr)}, {"delivery-annotations", s.DeliveryAnnotations, len(da)},
		{"message-annotations", s.MessageAnnotations, len(ma)}, {"properties", s.Properties, len(props)},
		{"application-properties", s.ApplicationProperties, len(ap)}, {"body", s.Body, len(data1) + len(data2)},
		{"footer", s.Footer, len(footer)},
	} {
		if c.sp.Start != at || c.sp.End != at+c.len || c.sp.Value != at+3 {
			t.Errorf("%s: %+v, want start %d length %d", c.name, c.sp, at, c.len)
		}
		at += c.len
	}
	if s.BodyKind != BodyData || s.BodyCount != 2 {
		t.Errorf("body kind %d count %d", s.BodyKind, s.BodyCount)
	}
	if s.BareStart() != s.Properties.Start || s.BareEnd() != s.Footer.Start {
		t.Errorf("bare %d..%d", s.BareStart(), s.BareEnd())
	}
}

func TestParseGrammar(t *testing.T) {
	hdr := section(CodeHeader, emptyList())
	props := section(CodeProperties, emptyList())
	ap := section(CodeApplicationProperties, emptyMap())
	data := section(CodeData, encoding.AppendBinary(nil, nil))
	seq := section(CodeAMQPSequence, emptyList())
	value := section(CodeAMQPValue, encoding.AppendString(nil, "v"))
	footer := section(CodeFooter, emptyMap())
	symbolic := append(encoding.AppendSymbolicDescriptor(nil, "amqp:amqp-value:*"), encoding.CodeNull)
	join := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	good := map[string][]byte{
		"header only":            hdr,
		"properties only":        props,
		"repeated sequences":     join(seq, seq, seq),
		"value":                  join(hdr, value, footer),
		"symbolic descriptor":    symbolic,
		"footer only":            footer,
		"application properties": join(ap, data),
	}
	for name, raw := range good {
		if _, err := Parse(raw); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	bad := map[string][]byte{
		"empty":                   nil,
		"header after properties": join(props, hdr),
		"two headers":             join(hdr, hdr),
		"two values":              join(value, value),
		"data then sequence":      join(data, seq),
		"value then data":         join(value, data),
		"footer then body":        join(footer, data),
		"not described":           []byte{encoding.CodeNull},
		"unknown section":         section(0x79, emptyMap()),
		"unknown symbolic":        append(encoding.AppendSymbolicDescriptor(nil, "amqp:nope"), encoding.CodeNull),
		"header not a list":       section(CodeHeader, emptyMap()),
		"properties not a list":   section(CodeProperties, encoding.AppendString(nil, "x")),
		"annotations not a map":   section(CodeMessageAnnotations, emptyList()),
		"data not binary":         section(CodeData, encoding.AppendString(nil, "x")),
		"truncated":               join(props, data)[:len(props)+2],
		"trailing garbage":        join(data, []byte{0x42}),
		"malformed map inside":    section(CodeApplicationProperties, []byte{encoding.CodeMap8, 2, 1, encoding.CodeNull}),
		"ulong descriptor 0x70 in 8 bytes but bad value": append([]byte{0, encoding.CodeUlong, 0, 0, 0, 0, 0, 0, 0, 0x70}, 0x57),
	}
	for name, raw := range bad {
		_, err := Parse(raw)
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if !errors.Is(err, ErrInvalidMessage) || !errors.Is(err, encoding.ErrDecode) {
			t.Errorf("%s: %v does not match ErrInvalidMessage", name, err)
		}
	}
}

func TestHeaderDefaultsAndRoundTrip(t *testing.T) {
	s := mustParse(t, section(CodeProperties, emptyList()))
	h, err := s.ReadHeader()
	if err != nil || h != (Header{Priority: 4}) {
		t.Fatalf("missing header: %+v %v", h, err)
	}
	for _, want := range []Header{
		{Priority: 4},
		{Durable: true, Priority: 4},
		{Priority: 0},
		{Priority: 4, TTL: 0, HasTTL: true},
		{Priority: 9, TTL: 70000, HasTTL: true, FirstAcquirer: true, DeliveryCount: 300},
		{Priority: 4, DeliveryCount: 1},
	} {
		s := mustParse(t, AppendHeader(nil, want))
		got, err := s.ReadHeader()
		if err != nil || got != want {
			t.Errorf("round trip %+v gave %+v, %v", want, got, err)
		}
	}
	// The default header still carries delivery-count 0 (uint0), which
	// rhea needs to report 0 rather than undefined; the fields before it
	// are nulls.
	if got, want := AppendHeader(nil, Header{Priority: 4}), []byte{0x00, 0x53, 0x70, 0xc0, 0x06, 0x05, 0x40, 0x40, 0x40, 0x40, 0x43}; !bytes.Equal(got, want) {
		t.Errorf("default header % x, want % x", got, want)
	}
	// The priority is a ubyte and must be written as 0x50.
	if got := AppendHeader(nil, Header{Priority: 1}); got[7] != encoding.CodeUbyte || got[8] != 1 {
		t.Errorf("priority encoding % x", got)
	}
}

func TestPropertiesRoundTrip(t *testing.T) {
	for _, want := range []Properties{
		{},
		{MessageID: ID{Kind: IDUlong, Ulong: 1 << 40}},
		{MessageID: ID{Kind: IDUUID, UUID: encoding.UUID{1}}, CorrelationID: ID{Kind: IDBinary, Bytes: []byte{1, 2}}},
		{MessageID: StringID("m"), UserID: []byte{}, To: []byte("to"), Subject: []byte(""), ReplyTo: []byte("r"),
			CorrelationID: StringID("c"), ContentType: []byte("text/plain"), ContentEncoding: []byte("gzip"),
			AbsoluteExpiryTime: -5, HasAbsoluteExpiryTime: true, CreationTime: 0, HasCreationTime: true,
			GroupID: []byte("g"), GroupSequence: 0, HasGroupSequence: true, ReplyToGroupID: []byte("rg")},
		{ReplyToGroupID: []byte("only the last field")},
	} {
		s := mustParse(t, AppendProperties(nil, &want))
		got, err := s.ReadProperties()
		if err != nil {
			t.Fatal(err)
		}
		if !propertiesEqual(got, want) {
			t.Errorf("round trip\n got %+v\nwant %+v", got, want)
		}
	}
}

// propertiesEqual compares treating nil and empty slices as different,
// which is the absent/present distinction the type keeps.
func propertiesEqual(a, b Properties) bool {
	same := func(x, y []byte) bool { return (x == nil) == (y == nil) && string(x) == string(y) }
	sameID := func(x, y ID) bool {
		return x.Kind == y.Kind && x.Ulong == y.Ulong && x.UUID == y.UUID && same(x.Bytes, y.Bytes)
	}
	return sameID(a.MessageID, b.MessageID) && same(a.UserID, b.UserID) && same(a.To, b.To) &&
		same(a.Subject, b.Subject) && same(a.ReplyTo, b.ReplyTo) && sameID(a.CorrelationID, b.CorrelationID) &&
		same(a.ContentType, b.ContentType) && same(a.ContentEncoding, b.ContentEncoding) &&
		a.AbsoluteExpiryTime == b.AbsoluteExpiryTime && a.HasAbsoluteExpiryTime == b.HasAbsoluteExpiryTime &&
		a.CreationTime == b.CreationTime && a.HasCreationTime == b.HasCreationTime &&
		same(a.GroupID, b.GroupID) && a.GroupSequence == b.GroupSequence && a.HasGroupSequence == b.HasGroupSequence &&
		same(a.ReplyToGroupID, b.ReplyToGroupID)
}

func TestIDText(t *testing.T) {
	for _, c := range []struct {
		id   ID
		want string
	}{
		{ID{}, ""}, {ID{Kind: IDUlong, Ulong: 42}, "42"}, {StringID("abc"), "abc"},
		{ID{Kind: IDBinary, Bytes: []byte{0xab, 0x01}}, "ab01"},
		{ID{Kind: IDUUID, UUID: encoding.UUID{0: 1, 15: 2}}, "01000000-0000-0000-0000-000000000002"},
	} {
		if got := string(c.id.AppendText(nil)); got != c.want {
			t.Errorf("%+v: %q", c.id, got)
		}
	}
}

func TestMapIterAndLookup(t *testing.T) {
	m, err := encoding.AppendAny(nil, encoding.Map{
		{Key: encoding.Symbol("sym"), Value: int64(1)},
		{Key: "str", Value: "v"},
		{Key: uint64(5), Value: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	it := NewMapIter(m)
	n := 0
	for it.Next() {
		n++
	}
	if n != 3 || it.Err() != nil {
		t.Fatalf("%d entries, %v", n, it.Err())
	}
	if v, ok, err := FindMapValue(m, "sym"); !ok || err != nil || string(v) != string(encoding.AppendLong(nil, 1)) {
		t.Fatalf("sym: % x %v %v", v, ok, err)
	}
	if v, ok, _ := FindMapValue(m, "str"); !ok || string(v) != string(encoding.AppendString(nil, "v")) {
		t.Fatalf("str: % x", v)
	}
	if _, ok, _ := FindMapValue(m, "5"); ok {
		t.Fatal("a ulong key matched a name")
	}
	bad := NewMapIter([]byte{encoding.CodeMap8, 3, 2, encoding.CodeNull, 0x57})
	for bad.Next() {
	}
	if bad.Err() == nil {
		t.Fatal("malformed map iterated cleanly")
	}
}
