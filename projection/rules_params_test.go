package projection

import (
	"errors"
	"reflect"
	"testing"

	"github.com/walbus/walbus/projection/filter"
)

// TestRuleParameters: a SQL filter's Parameters and an action's
// ActionParameters give its @name references their values (only the ATOM
// API carries them), and they survive the JSON the log stores.
func TestRuleParameters(t *testing.T) {
	spec := RuleSpec{Name: "p",
		Filter: FilterSpec{Kind: FilterSQL, SQL: "color = @c AND n > @min",
			Parameters: []filter.Property{{Name: "@c", Value: filter.StringValue("red")}, {Name: "min", Value: filter.IntValue(2)}}},
		Action:           "SET tag = @tag",
		ActionParameters: []filter.Property{{Name: "@tag", Value: filter.StringValue("hot")}}}
	r, err := compileRule(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		color string
		n     int64
		want  bool
	}{{"red", 3, true}, {"red", 2, false}, {"blue", 3, false}} {
		m := &filter.Message{Properties: []filter.Property{{Name: "color", Value: filter.StringValue(c.color)},
			{Name: "n", Value: filter.IntValue(c.n)}}}
		if got, err := r.filter.Match(m); err != nil || got != c.want {
			t.Errorf("%s, %d: match %v, %v; want %v", c.color, c.n, got, err, c.want)
		}
	}
	overlay, err := r.action.Apply(&filter.Message{})
	if err != nil || len(overlay) != 1 || overlay[0].Value != filter.StringValue("hot") {
		t.Errorf("action gave %+v, %v", overlay, err)
	}

	back, err := decodeRule(spec.encode())
	if err != nil || !reflect.DeepEqual(back.spec, spec) {
		t.Errorf("decoded %+v, %v; want %+v", back.spec, err, spec)
	}
	// A rule stored before parameters existed reads as it did.
	old, err := decodeRule([]byte(`{"name":"o","filter":{"kind":"sql","sql":"a = 1"},"action":"SET b = 2"}`))
	if err != nil || old.spec.Filter.Parameters != nil || old.spec.ActionParameters != nil {
		t.Errorf("old rule %+v, %v", old, err)
	}
	if b := (RuleSpec{Name: "x", Filter: FilterSpec{Kind: FilterTrue}}).encode(); string(b) != `{"name":"x","filter":{"kind":"true"}}` {
		t.Errorf("a rule without parameters is stored as %s", b)
	}
}

func TestRuleParametersRefused(t *testing.T) {
	p := func(name string, v filter.Value) filter.Property { return filter.Property{Name: name, Value: v} }
	for _, spec := range []RuleSpec{
		{Name: "missing", Filter: FilterSpec{Kind: FilterSQL, SQL: "a = @p"}},
		{Name: "twice", Filter: FilterSpec{Kind: FilterSQL, SQL: "a = @p",
			Parameters: []filter.Property{p("@p", filter.IntValue(1)), p("@p", filter.IntValue(2))}}},
		{Name: "ambiguous", Filter: FilterSpec{Kind: FilterSQL, SQL: "a = @p",
			Parameters: []filter.Property{p("@p", filter.IntValue(1)), p("P", filter.IntValue(2))}}},
		{Name: "action", Filter: FilterSpec{Kind: FilterTrue}, Action: "SET a = @v"},
		{Name: "actiontwice", Filter: FilterSpec{Kind: FilterTrue}, Action: "SET a = @v",
			ActionParameters: []filter.Property{p("@v", filter.IntValue(1)), p("@v", filter.IntValue(1))}},
		{Name: "utf8", Filter: FilterSpec{Kind: FilterSQL, SQL: "a = @p",
			Parameters: []filter.Property{p("@p", filter.StringValue("\xff"))}}},
		{Name: "utf8name", Filter: FilterSpec{Kind: FilterTrue}, Action: "SET a = 1",
			ActionParameters: []filter.Property{p("\xff", filter.IntValue(1))}},
	} {
		if err := spec.Compile(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Compile() = %v, want ErrInvalid", spec.Name, err)
		}
	}
}
