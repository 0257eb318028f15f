package message

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	amqp "github.com/Azure/go-amqp"
	"github.com/walbus/walbus/amqpserver/encoding"
)

func TestMergeApplicationProperties(t *testing.T) {
	in := clientMessage()
	in.ApplicationProperties = map[string]any{"keep": int64(1), "DeadLetterReason": "old", "n": "x"}
	sent := marshal(t, in)
	s := mustParse(t, sent)
	out, err := AppendWithApplicationProperties([]byte{0xee}, &s, []Property{
		{Key: "DeadLetterReason", Value: "first"},
		{Key: "DeadLetterReason", Value: "expired"},
		{Key: "DeadLetterErrorDescription", Value: "too old"},
		{Key: "added", Value: int32(7)},
		{Key: "added", Value: int32(8)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out[0] != 0xee {
		t.Fatal("prefix lost")
	}
	out = out[1:]
	got := unmarshal(t, out)
	want := map[string]any{"keep": int64(1), "DeadLetterReason": "expired", "n": "x", "DeadLetterErrorDescription": "too old", "added": int32(8)}
	if !reflect.DeepEqual(got.ApplicationProperties, want) {
		t.Errorf("got %#v", got.ApplicationProperties)
	}
	s2 := mustParse(t, out)
	for _, c := range []struct {
		name      string
		old, new_ Span
	}{
		{"header", s.Header, s2.Header}, {"message-annotations", s.MessageAnnotations, s2.MessageAnnotations},
		{"properties", s.Properties, s2.Properties}, {"body", s.Body, s2.Body},
	} {
		if !bytes.Equal(s.Bytes(c.old), s2.Bytes(c.new_)) {
			t.Errorf("%s changed", c.name)
		}
	}
	// Untouched entries keep their exact bytes and order.
	it := NewMapIter(s2.ValueBytes(s2.ApplicationProperties))
	var keys []string
	for it.Next() {
		k, _ := KeyText(it.Key())
		keys = append(keys, string(k))
	}
	if len(keys) != 5 || keys[3] != "DeadLetterErrorDescription" || keys[4] != "added" {
		t.Errorf("key order %q", keys)
	}
	oldKeep, _, _ := s.ApplicationProperty("keep")
	newKeep, _, _ := s2.ApplicationProperty("keep")
	if !bytes.Equal(oldKeep, newKeep) {
		t.Error("kept entry re-encoded")
	}
}

func TestMergeInsertsMissingSection(t *testing.T) {
	for name, m := range map[string]*amqp.Message{
		"after properties":       {Properties: &amqp.MessageProperties{MessageID: "m"}, Data: [][]byte{[]byte("b")}},
		"before body":            {Annotations: amqp.Annotations{"x-opt-a": "b"}, Value: "v"},
		"bodyless before footer": {Header: &amqp.MessageHeader{Priority: 4}, Footer: amqp.Annotations{"x-opt-f": "f"}},
	} {
		s := mustParse(t, marshal(t, m))
		out, err := AppendWithApplicationProperties(nil, &s, []Property{{Key: "DeadLetterReason", Value: "r"}})
		if err != nil {
			t.Fatal(err)
		}
		got := unmarshal(t, out)
		if got.ApplicationProperties["DeadLetterReason"] != "r" {
			t.Errorf("%s: %#v", name, got.ApplicationProperties)
		}
		if _, err := Parse(out); err != nil {
			t.Errorf("%s: result does not parse: %v", name, err)
		}
	}
}

func TestMergeRejectsUnencodableValue(t *testing.T) {
	s := mustParse(t, marshal(t, clientMessage()))
	if _, err := AppendWithApplicationProperties(nil, &s, []Property{{Key: "k", Value: struct{}{}}}); !errors.Is(err, encoding.ErrUnsupportedValue) {
		t.Fatalf("got %v", err)
	}
}

func TestAssignMessageID(t *testing.T) {
	cases := map[string]*amqp.Message{
		"no properties":    {Data: [][]byte{[]byte("b")}, ApplicationProperties: map[string]any{"a": int64(1)}},
		"null message-id":  {Properties: &amqp.MessageProperties{To: ptr("q"), GroupID: ptr("g")}, Data: [][]byte{[]byte("b")}},
		"empty properties": {Properties: &amqp.MessageProperties{}, Value: "v"},
		"annotations only": {Annotations: amqp.Annotations{"x-opt-a": "b"}},
	}
	for name, m := range cases {
		sent := marshal(t, m)
		s := mustParse(t, sent)
		out, changed, err := AppendWithMessageID(nil, &s, "assigned-1")
		if err != nil || !changed {
			t.Fatalf("%s: %v %v", name, changed, err)
		}
		got := unmarshal(t, out)
		if got.Properties == nil || got.Properties.MessageID != "assigned-1" {
			t.Errorf("%s: message id %#v", name, got.Properties)
		}
		before := unmarshal(t, sent)
		if before.Properties == nil {
			before.Properties = &amqp.MessageProperties{}
		}
		before.Properties.MessageID = "assigned-1"
		if !reflect.DeepEqual(got, before) {
			t.Errorf("%s: other fields changed:\n%#v\n%#v", name, got, before)
		}
	}

	s := mustParse(t, marshal(t, clientMessage()))
	out, changed, err := AppendWithMessageID([]byte{1}, &s, "ignored")
	if err != nil || changed || !bytes.Equal(out, []byte{1}) {
		t.Fatalf("existing id: %v %v % x", changed, err, out)
	}
}

// TestWithoutBody drops every body section, of each body kind, and keeps
// the other sections byte for byte; a message without a body is copied.
func TestWithoutBody(t *testing.T) {
	for _, body := range []func(*amqp.Message){
		func(m *amqp.Message) { m.Data = [][]byte{[]byte("one"), []byte("two")} },
		func(m *amqp.Message) { m.Sequence = [][]any{{"a", int64(1)}, {"b"}} },
		func(m *amqp.Message) { m.Value = map[string]any{"k": "v"} },
	} {
		in := clientMessage()
		in.Data = nil
		in.Footer = amqp.Annotations{"f": "footer"}
		body(in)
		s := mustParse(t, marshal(t, in))
		out := AppendWithoutBody([]byte{0xee}, &s)
		if out[0] != 0xee {
			t.Fatal("prefix lost")
		}
		s2 := mustParse(t, out[1:])
		if s2.Body.Present() || s2.BodyCount != 0 {
			t.Fatalf("body kind %d still has %d body sections", s.BodyKind, s2.BodyCount)
		}
		for _, c := range []struct {
			name      string
			old, new_ Span
		}{
			{"header", s.Header, s2.Header}, {"message-annotations", s.MessageAnnotations, s2.MessageAnnotations},
			{"properties", s.Properties, s2.Properties}, {"application-properties", s.ApplicationProperties, s2.ApplicationProperties},
			{"footer", s.Footer, s2.Footer},
		} {
			if !c.old.Present() || !bytes.Equal(s.Bytes(c.old), s2.Bytes(c.new_)) {
				t.Errorf("body kind %d: %s changed or missing", s.BodyKind, c.name)
			}
		}
		if len(out)-1 != len(s.Raw)-(s.Body.End-s.Body.Start) {
			t.Errorf("body kind %d: %d bytes, want %d", s.BodyKind, len(out)-1, len(s.Raw)-(s.Body.End-s.Body.Start))
		}
		again := mustParse(t, AppendWithoutBody(nil, &s2))
		if !bytes.Equal(again.Raw, s2.Raw) {
			t.Error("a message without a body changed")
		}
	}
}

// A removal deletes an existing entry, wherever it is; a later set of the
// same key wins over it, and a removal of a key the map lacks adds nothing.
func TestMergeRemovesApplicationProperties(t *testing.T) {
	in := clientMessage()
	in.ApplicationProperties = map[string]any{"gone": "x", "back": "old", "keep": int64(1)}
	s := mustParse(t, marshal(t, in))
	out, err := AppendWithApplicationProperties(nil, &s, []Property{
		{Key: "gone", Remove: true},
		{Key: "back", Remove: true},
		{Key: "back", Value: "new"},
		{Key: "never", Remove: true},
		{Key: "added", Value: true},
		{Key: "added-then-removed", Value: 1},
		{Key: "added-then-removed", Remove: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"back": "new", "keep": int64(1), "added": true}
	if got := unmarshal(t, out).ApplicationProperties; !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v, want %#v", got, want)
	}
	// Removing every entry leaves an empty map.
	out, err = AppendWithApplicationProperties(nil, &s, []Property{{Key: "gone", Remove: true}, {Key: "back", Remove: true}, {Key: "keep", Remove: true}})
	if err != nil {
		t.Fatal(err)
	}
	if got := unmarshal(t, out).ApplicationProperties; len(got) != 0 {
		t.Errorf("all removed: %#v", got)
	}
}

// The properties section is replaced, or inserted where the grammar puts
// it; the other sections are copied byte for byte.
func TestWithProperties(t *testing.T) {
	in := clientMessage()
	in.Footer = amqp.Annotations{"f": "footer"}
	s := mustParse(t, marshal(t, in))
	p, err := s.ReadProperties()
	if err != nil {
		t.Fatal(err)
	}
	p.Subject, p.To, p.CorrelationID = []byte("tagged"), nil, StringID("corr")
	out := AppendWithProperties([]byte{0xee}, &s, &p)
	if out[0] != 0xee {
		t.Fatal("prefix lost")
	}
	got := unmarshal(t, out[1:])
	want := unmarshal(t, s.Raw)
	want.Properties.Subject, want.Properties.To, want.Properties.CorrelationID = ptr("tagged"), nil, "corr"
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%#v\nwant\n%#v", got.Properties, want.Properties)
	}
	s2 := mustParse(t, out[1:])
	for _, c := range []struct {
		name      string
		old, new_ Span
	}{
		{"header", s.Header, s2.Header}, {"message-annotations", s.MessageAnnotations, s2.MessageAnnotations},
		{"application-properties", s.ApplicationProperties, s2.ApplicationProperties}, {"body", s.Body, s2.Body},
		{"footer", s.Footer, s2.Footer},
	} {
		if !bytes.Equal(s.Bytes(c.old), s2.Bytes(c.new_)) {
			t.Errorf("%s changed", c.name)
		}
	}

	for name, m := range map[string]*amqp.Message{
		"before application properties": {ApplicationProperties: map[string]any{"k": "v"}, Value: "v"},
		"before body":                   {Annotations: amqp.Annotations{"x-opt-a": "b"}, Data: [][]byte{[]byte("b")}},
		"annotations only":              {Annotations: amqp.Annotations{"x-opt-a": "b"}},
	} {
		s := mustParse(t, marshal(t, m))
		out := AppendWithProperties(nil, &s, &Properties{Subject: []byte("new")})
		if _, err := Parse(out); err != nil {
			t.Errorf("%s: result does not parse: %v", name, err)
		}
		got := unmarshal(t, out)
		if got.Properties == nil || got.Properties.Subject == nil || *got.Properties.Subject != "new" {
			t.Errorf("%s: properties %#v", name, got.Properties)
		}
		m.Properties = got.Properties
		if !reflect.DeepEqual(got, unmarshal(t, marshal(t, m))) {
			t.Errorf("%s: other sections changed", name)
		}
	}
}
