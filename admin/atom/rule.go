package atom

import (
	"fmt"
	"strings"
	"time"

	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/projection/filter"
)

// ParseRule reads the RuleDescription in body (an ATOM <entry>). A missing
// Filter is a TrueFilter and a missing Action is none, as the SDKs expect
// (Go's TestAdminClient_CreateRules). Name is the body's, "" if it has
// none: the URL names the rule. The filter and the action are compiled, so
// a rule ParseRule returns is one the broker takes.
func ParseRule(body []byte) (projection.RuleSpec, error) {
	d, err := description(body, "RuleDescription")
	if err != nil {
		return projection.RuleSpec{}, err
	}
	return parseRuleDescription(d)
}

// parseRuleDescription reads a RuleDescription or a subscription's
// DefaultRuleDescription: Filter, Action and Name (CreatedAt is the
// service's to set).
func parseRuleDescription(d *node) (projection.RuleSpec, error) {
	var spec projection.RuleSpec
	if n := d.child("Name"); n != nil {
		spec.Name = n.value()
		if spec.Name != "" && spec.Name != projection.DefaultRuleName {
			if err := projection.ValidateSubName("rule", spec.Name); err != nil {
				return spec, &PropertyError{Property: "Name", Reason: err.Error()}
			}
		}
	}
	var err error
	if spec.Filter, err = parseFilter(d.child("Filter")); err != nil {
		return spec, err
	}
	if spec.Action, spec.ActionParameters, err = parseAction(d.child("Action")); err != nil {
		return spec, err
	}
	return spec, nil
}

// filterType is a Filter's or Action's xsi:type, or what its children
// imply when a client leaves the type out.
func filterType(n *node, sql, other string) string {
	if t, ok := n.typeAttr(); ok {
		_, local := n.qname(t)
		return local
	}
	if n.child("SqlExpression") != nil {
		return sql
	}
	return other
}

// parseFilter reads a <Filter>: SqlFilter, TrueFilter, FalseFilter or
// CorrelationFilter.
func parseFilter(f *node) (projection.FilterSpec, error) {
	if f == nil || f.isNil() {
		return projection.FilterSpec{Kind: projection.FilterTrue}, nil
	}
	switch typ := filterType(f, "SqlFilter", "CorrelationFilter"); typ {
	case "TrueFilter":
		// Its SqlExpression is 1=1 by definition (Python sends 1>1 for
		// FalseFilter, so the text is not read).
		return projection.FilterSpec{Kind: projection.FilterTrue}, nil
	case "FalseFilter":
		return projection.FilterSpec{Kind: projection.FilterFalse}, nil
	case "SqlFilter":
		expr := f.child("SqlExpression")
		if expr == nil {
			return projection.FilterSpec{}, &PropertyError{Property: "Filter", Reason: "a SqlFilter without a SqlExpression"}
		}
		spec := projection.FilterSpec{Kind: projection.FilterSQL, SQL: expr.text.String()}
		var err error
		if spec.Parameters, err = parseKeyValues(f.child("Parameters"), "Filter"); err != nil {
			return spec, err
		}
		if _, err := filter.CompileSQLParams(spec.SQL, paramMap(spec.Parameters)); err != nil {
			return spec, &PropertyError{Property: "Filter", Reason: err.Error()}
		}
		return spec, nil
	case "CorrelationFilter":
		return parseCorrelation(f)
	default:
		return projection.FilterSpec{}, &PropertyError{Property: "Filter", Reason: fmt.Sprintf("unknown filter type %q", typ)}
	}
}

// correlationFields are a correlation filter's system properties in the
// order .NET writes them.
func correlationFields(c *projection.CorrelationSpec) []struct {
	name  string
	field **string
} {
	return []struct {
		name  string
		field **string
	}{
		{"CorrelationId", &c.CorrelationID}, {"MessageId", &c.MessageID}, {"To", &c.To}, {"ReplyTo", &c.ReplyTo},
		{"Label", &c.Subject}, {"SessionId", &c.SessionID}, {"ReplyToSessionId", &c.ReplyToSessionID},
		{"ContentType", &c.ContentType},
	}
}

// parseCorrelation reads a CorrelationFilter: an element present sets its
// field, even to "", and an absent or nil one leaves it unset.
func parseCorrelation(f *node) (projection.FilterSpec, error) {
	c := &projection.CorrelationSpec{}
	for _, fld := range correlationFields(c) {
		if n := f.child(fld.name); n != nil && !n.isNil() {
			text := n.text.String()
			*fld.field = &text
		}
	}
	var err error
	if c.Properties, err = parseKeyValues(f.child("Properties"), "Filter"); err != nil {
		return projection.FilterSpec{}, err
	}
	spec := projection.FilterSpec{Kind: projection.FilterCorrelation, Correlation: c}
	fc := filter.Correlation{CorrelationID: c.CorrelationID, MessageID: c.MessageID, To: c.To, ReplyTo: c.ReplyTo,
		Subject: c.Subject, SessionID: c.SessionID, ReplyToSessionID: c.ReplyToSessionID, ContentType: c.ContentType,
		Properties: paramMap(c.Properties)}
	if _, err := filter.CompileCorrelation(fc); err != nil {
		return spec, &PropertyError{Property: "Filter", Reason: err.Error()}
	}
	return spec, nil
}

// parseAction reads an <Action>: SqlRuleAction or EmptyRuleAction.
func parseAction(a *node) (string, []filter.Property, error) {
	if a == nil || a.isNil() {
		return "", nil, nil
	}
	switch typ := filterType(a, "SqlRuleAction", "EmptyRuleAction"); typ {
	case "EmptyRuleAction":
		return "", nil, nil
	case "SqlRuleAction":
		expr := a.child("SqlExpression")
		if expr == nil || strings.Trim(expr.text.String(), xmlSpace) == "" {
			return "", nil, &PropertyError{Property: "Action", Reason: "a SqlRuleAction without a SqlExpression"}
		}
		params, err := parseKeyValues(a.child("Parameters"), "Action")
		if err != nil {
			return "", nil, err
		}
		if _, err := filter.CompileActionParams(expr.text.String(), paramMap(params)); err != nil {
			return "", nil, &PropertyError{Property: "Action", Reason: err.Error()}
		}
		return expr.text.String(), params, nil
	default:
		return "", nil, &PropertyError{Property: "Action", Reason: fmt.Sprintf("unknown action type %q", typ)}
	}
}

// paramMap is props as the compilers take them (keys are unique: see
// parseKeyValues).
func paramMap(props []filter.Property) map[string]filter.Value {
	if len(props) == 0 {
		return nil
	}
	m := make(map[string]filter.Value, len(props))
	for _, p := range props {
		m[p.Name] = p.Value
	}
	return m
}

// rule writes a RuleDescription's children in the service's order: Filter,
// Action, CreatedAt, Name (responses captured by the old
// Azure/azure-service-bus-go tests). Action is always written, and True
// and False filters carry their SqlExpression: JS reads both
// (ruleResourceSerializer.js, getTopicFilter and getRuleAction). CreatedAt
// is the rule's, else the entry's.
func (w *writer) rule(r projection.RuleSpec, name string, created time.Time) {
	switch r.Filter.Kind {
	case projection.FilterTrue:
		w.sqlFilter("TrueFilter", "1=1", nil)
	case projection.FilterFalse:
		w.sqlFilter("FalseFilter", "1=0", nil)
	case projection.FilterSQL:
		w.sqlFilter("SqlFilter", r.Filter.SQL, r.Filter.Parameters)
	case projection.FilterCorrelation:
		w.open("Filter", "i:type", "CorrelationFilter")
		if c := r.Filter.Correlation; c != nil {
			for _, fld := range correlationFields(c) {
				if *fld.field != nil {
					w.elem(fld.name, **fld.field)
				}
			}
			w.keyValues("Properties", c.Properties)
		}
		w.close("Filter")
	}
	if r.Action == "" {
		w.empty("Action", "i:type", "EmptyRuleAction")
	} else {
		w.open("Action", "i:type", "SqlRuleAction")
		w.elem("SqlExpression", r.Action)
		w.elem("CompatibilityLevel", "20")
		w.keyValues("Parameters", r.ActionParameters)
		w.close("Action")
	}
	if r.Created != 0 {
		created = time.Unix(0, r.Created)
	}
	w.elem("CreatedAt", timeText(created))
	w.elem("Name", name)
}

func (w *writer) sqlFilter(typ, expr string, params []filter.Property) {
	w.open("Filter", "i:type", typ)
	w.elem("SqlExpression", expr)
	w.elem("CompatibilityLevel", "20")
	w.keyValues("Parameters", params)
	w.close("Filter")
}
