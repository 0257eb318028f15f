package filter

import (
	"testing"
)

func ptr(s string) *string { return &s }

func TestCorrelationFilter(t *testing.T) {
	full := &Message{
		CorrelationID: StringValue("high"), MessageID: StringValue("m1"), To: StringValue("to"),
		ReplyTo: StringValue("rt"), Label: StringValue("red"), SessionID: StringValue("s1"),
		ReplyToSessionID: StringValue("rs"), ContentType: StringValue("application/json"),
		Properties: []Property{
			{"Color", StringValue("red")}, {"version", IntValue(2)}, {"ratio", DoubleValue(0.5)},
			{"flag", BoolValue(true)}, {"n", NullValue()},
		},
	}
	for _, c := range []struct {
		name string
		spec Correlation
		msg  *Message
		want bool
	}{
		{"label and correlation id", Correlation{Subject: ptr("red"), CorrelationID: ptr("high")}, full, true},
		{"label case differs", Correlation{Subject: ptr("Red"), CorrelationID: ptr("high")}, full, false},
		{"every field", Correlation{
			CorrelationID: ptr("high"), MessageID: ptr("m1"), To: ptr("to"), ReplyTo: ptr("rt"), Subject: ptr("red"),
			SessionID: ptr("s1"), ReplyToSessionID: ptr("rs"), ContentType: ptr("application/json"),
		}, full, true},
		{"one field differs", Correlation{
			CorrelationID: ptr("high"), MessageID: ptr("m1"), To: ptr("to"), ReplyTo: ptr("rt"), Subject: ptr("red"),
			SessionID: ptr("s1"), ReplyToSessionID: ptr("rs"), ContentType: ptr("text/plain"),
		}, full, false},
		{"field missing on the message", Correlation{To: ptr("to")}, &Message{}, false},
		{"empty string field", Correlation{To: ptr("")}, &Message{To: StringValue("")}, true},
		{"empty string field, message unset", Correlation{To: ptr("")}, &Message{}, false},
		{"property, name case-insensitive", Correlation{Properties: map[string]Value{"color": StringValue("red")}}, full, true},
		{"property value case-sensitive", Correlation{Properties: map[string]Value{"color": StringValue("Red")}}, full, false},
		{"string 2 is not int 2", Correlation{Properties: map[string]Value{"version": StringValue("2")}}, full, false},
		{"int 2 matches int 2", Correlation{Properties: map[string]Value{"version": IntValue(2)}}, full, true},
		{"uint 2 matches int 2", Correlation{Properties: map[string]Value{"version": UintValue(2)}}, full, true},
		{"double 2.0 matches int 2", Correlation{Properties: map[string]Value{"version": DoubleValue(2)}}, full, true},
		{"double", Correlation{Properties: map[string]Value{"ratio": DoubleValue(0.5)}}, full, true},
		{"bool", Correlation{Properties: map[string]Value{"flag": BoolValue(true)}}, full, true},
		{"property missing", Correlation{Properties: map[string]Value{"absent": StringValue("x")}}, full, false},
		{"null never matches", Correlation{Properties: map[string]Value{"n": NullValue()}}, full, false},
		{"all properties must match", Correlation{Properties: map[string]Value{"color": StringValue("red"), "version": IntValue(3)}}, full, false},
		{"fields and properties", Correlation{Subject: ptr("red"), Properties: map[string]Value{"color": StringValue("red"), "version": IntValue(2)}}, full, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, err := CompileCorrelation(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			got, err := f.Match(c.msg)
			if err != nil || got != c.want {
				t.Fatalf("Match = %v, %v; want %v", got, err, c.want)
			}
			// The documented SQL equivalent agrees.
			sql, err := CompileSQL(f.String())
			if err != nil {
				t.Fatalf("CompileSQL(%q): %v", f.String(), err)
			}
			if got, err := sql.Match(c.msg); err != nil || got != c.want {
				t.Fatalf("SQL %q = %v, %v; want %v", f.String(), got, err, c.want)
			}
		})
	}
}

func TestCorrelationRefused(t *testing.T) {
	if _, err := CompileCorrelation(Correlation{}); err == nil {
		t.Error("an empty correlation filter compiled")
	}
	if _, err := CompileCorrelation(Correlation{Properties: map[string]Value{}}); err == nil {
		t.Error("a correlation filter with an empty map compiled")
	}
	if _, err := CompileCorrelation(Correlation{Properties: map[string]Value{"a": IntValue(1), "A": IntValue(1)}}); err == nil {
		t.Error("properties differing only in case compiled")
	}
}

func TestCorrelationDefinition(t *testing.T) {
	label := "red"
	spec := Correlation{Subject: &label, Properties: map[string]Value{"b": IntValue(1), "a": StringValue("x")}}
	f, err := CompileCorrelation(spec)
	if err != nil {
		t.Fatal(err)
	}
	// The compiled filter keeps its own copy of the definition.
	label = "blue"
	spec.Properties["c"] = IntValue(3)
	got := f.Correlation()
	if *got.Subject != "red" || len(got.Properties) != 2 {
		t.Fatalf("Correlation() = %+v", got)
	}
	if l, ok := f.Label(); !ok || l != "red" {
		t.Fatalf("Label() = %q, %v", l, ok)
	}
	if want := "sys.Label = 'red' AND user.a = 'x' AND user.b = 1"; f.String() != want {
		t.Fatalf("String() = %q, want %q", f.String(), want)
	}
	var _ Filter = f
	var _ Filter = TrueFilter{}
	var _ Filter = FalseFilter{}
	var _ Filter = (*SQLFilter)(nil)
}

func TestTrueFalseFilters(t *testing.T) {
	for _, m := range []*Message{{}, props("a", IntValue(1))} {
		if ok, err := (TrueFilter{}).Match(m); !ok || err != nil {
			t.Error("TrueFilter")
		}
		if ok, err := (FalseFilter{}).Match(m); ok || err != nil {
			t.Error("FalseFilter")
		}
	}
	// Their texts are the SQL they stand for.
	for _, f := range []Filter{TrueFilter{}, FalseFilter{}} {
		sql, err := CompileSQL(f.String())
		if err != nil {
			t.Fatal(err)
		}
		a, _ := sql.Match(&Message{})
		b, _ := f.Match(&Message{})
		if a != b {
			t.Errorf("%s: SQL says %v", f, a)
		}
	}
}
