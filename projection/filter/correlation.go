package filter

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Correlation is a correlation filter as clients define it: the system
// fields to match (nil means not set) and application properties.
type Correlation struct {
	CorrelationID    *string
	MessageID        *string
	To               *string
	ReplyTo          *string
	Subject          *string // sys.Label
	SessionID        *string
	ReplyToSessionID *string
	ContentType      *string
	Properties       map[string]Value
}

// CorrelationFilter is a compiled correlation filter: every field it sets
// must equal the message's, case-sensitively, and every property must be
// present and equal, typed as in SQL = (the string "2" is not the int 2;
// numbers of different widths are equal). It is the same as the SQL
// sys.Label = '…' AND color = '…' (Service Bus doc "Topic filters and
// actions"), without parsing, and never fails.
type CorrelationFilter struct {
	spec  Correlation
	sys   []sysCheck
	props []Property // sorted by name, case-folded
}

type sysCheck struct {
	prop SysProp
	want string
}

var errEmptyCorrelation = errors.New("a correlation filter must set at least one field or property")

// CompileCorrelation checks a correlation filter and compiles it. An empty
// filter is refused, as the AMQP add-rule requires one entry and the JS SDK
// refuses one with none (walbus answers 400); so are two properties whose
// names differ only in case.
func CompileCorrelation(c Correlation) (*CorrelationFilter, error) {
	f := &CorrelationFilter{}
	for _, field := range []struct {
		prop SysProp
		dst  **string
		src  *string
	}{
		{SysCorrelationID, &f.spec.CorrelationID, c.CorrelationID},
		{SysMessageID, &f.spec.MessageID, c.MessageID},
		{SysTo, &f.spec.To, c.To},
		{SysReplyTo, &f.spec.ReplyTo, c.ReplyTo},
		{SysLabel, &f.spec.Subject, c.Subject},
		{SysSessionID, &f.spec.SessionID, c.SessionID},
		{SysReplyToSessionID, &f.spec.ReplyToSessionID, c.ReplyToSessionID},
		{SysContentType, &f.spec.ContentType, c.ContentType},
	} {
		if field.src != nil {
			s := *field.src
			*field.dst = &s
			f.sys = append(f.sys, sysCheck{field.prop, s})
		}
	}
	for name, v := range c.Properties {
		f.props = append(f.props, Property{Name: name, Value: v})
	}
	sort.Slice(f.props, func(i, j int) bool {
		a, b := strings.ToLower(f.props[i].Name), strings.ToLower(f.props[j].Name)
		return a < b || a == b && f.props[i].Name < f.props[j].Name
	})
	for i := range f.props {
		for j := range i {
			if strings.EqualFold(f.props[i].Name, f.props[j].Name) {
				return nil, fmt.Errorf("correlation filter properties %q and %q differ only in case", f.props[j].Name, f.props[i].Name)
			}
		}
	}
	if len(f.sys) == 0 && len(f.props) == 0 {
		return nil, errEmptyCorrelation
	}
	if len(f.props) > 0 {
		f.spec.Properties = make(map[string]Value, len(f.props))
		for _, p := range f.props {
			f.spec.Properties[p.Name] = p.Value
		}
	}
	return f, nil
}

// Match reports whether every field and property of the filter matches m.
// A null property value in the filter never matches, as SQL x = NULL.
// The error is always nil.
func (f *CorrelationFilter) Match(m *Message) (bool, error) {
	for _, c := range f.sys {
		v := m.Sys(c.prop)
		if v.kind != KindString || v.str != c.want {
			return false, nil
		}
	}
	for _, p := range f.props {
		v, ok := m.Property(p.Name)
		if !ok || compareValues(opEq, v, p.Value) != triTrue {
			return false, nil
		}
	}
	return true, nil
}

// Correlation returns the filter's definition (a copy), for enumerate-rules
// and the ATOM API.
func (f *CorrelationFilter) Correlation() Correlation {
	c := f.spec
	if f.spec.Properties != nil {
		c.Properties = make(map[string]Value, len(f.spec.Properties))
		for k, v := range f.spec.Properties {
			c.Properties[k] = v
		}
	}
	return c
}

// Label returns the Subject (sys.Label) the filter requires, if it sets
// one: the broker can index filters by it rather than scan them.
func (f *CorrelationFilter) Label() (string, bool) {
	for _, c := range f.sys {
		if c.prop == SysLabel {
			return c.want, true
		}
	}
	return "", false
}

// String returns the equivalent SQL filter, fields first, then properties
// by name. Values SQL cannot write (timestamps, uuids) show as kind'text'.
func (f *CorrelationFilter) String() string {
	var b strings.Builder
	for _, c := range f.sys {
		if b.Len() > 0 {
			b.WriteString(" AND ")
		}
		b.WriteString("sys." + c.prop.String() + " = ")
		writeQuoted(&b, c.want, '\'')
	}
	for _, p := range f.props {
		if b.Len() > 0 {
			b.WriteString(" AND ")
		}
		b.WriteString("user.")
		writeName(&b, p.Name)
		b.WriteString(" = ")
		writeValue(&b, p.Value)
	}
	return b.String()
}
