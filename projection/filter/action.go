package filter

import (
	"errors"
	"math"
	"slices"
	"strings"
)

// SQLAction is a compiled SQL rule action: SET and REMOVE statements on
// sys. and user. properties, run in order on a matching message's copy
// (Service Bus doc "SQL rule action syntax"). Semicolons between
// statements are optional.
type SQLAction struct {
	expr  string
	stmts []statement
}

type statement struct {
	at     Pos
	remove bool
	target *propNode
	value  exprNode // nil for REMOVE
}

// Change is one effect of an action on a message.
type Change struct {
	Sys    SysProp // the system property changed; zero for a user property
	Name   string  // the user property's name (its existing spelling if it had one)
	Value  Value   // the new value, already converted; unused when Remove
	Remove bool    // REMOVE: a user property is deleted, a system one cleared
}

// Overlay is what an action did to one message, in statement order. The
// broker records it with the routing outcome, so replay applies it with
// ApplyTo and never evaluates the action (or its newid()) again.
type Overlay []Change

// CompileAction compiles a SQL rule action, refusing it with a *SyntaxError
// that names the position: bad syntax, an unknown system property, SET or
// REMOVE on a property the broker assigns, or a limit exceeded.
func CompileAction(expr string) (*SQLAction, error) {
	return compileAction(expr, nil, defaultLimits)
}

// CompileActionParams compiles an action whose @name references take their
// values from params, as CompileSQLParams does for filters.
func CompileActionParams(expr string, params map[string]Value) (*SQLAction, error) {
	return compileAction(expr, params, defaultLimits)
}

func compileAction(expr string, params map[string]Value, lim limits) (*SQLAction, error) {
	p, err := newParser(expr, params, lim)
	if err != nil {
		return nil, err
	}
	stmts, err := p.parseStatements()
	if err != nil {
		return nil, err
	}
	return &SQLAction{expr: expr, stmts: stmts}, nil
}

// parseStatements parses stmt { [";"] stmt } [";"].
func (p *parser) parseStatements() ([]statement, error) {
	var stmts []statement
	for {
		t := p.next()
		if t.kind != kSet && t.kind != kRemove {
			return nil, errorf(t.pos, "expected SET or REMOVE, found %s", t.describe())
		}
		if len(stmts) == p.lim.statements {
			return nil, errorf(t.pos, "the action has more than %d statements", p.lim.statements)
		}
		s := statement{at: t.pos, remove: t.kind == kRemove}
		target, err := p.parseProperty()
		if err != nil {
			return nil, err
		}
		if target.sys != sysNone && !target.sys.Settable() {
			return nil, errorf(target.at, "sys.%s is assigned by the broker; an action cannot change it", target.sys)
		}
		s.target = target
		if !s.remove {
			if _, err := p.expect(tEq, "'=' after the property"); err != nil {
				return nil, err
			}
			n, err := p.parseAdditive()
			if err != nil {
				return nil, err
			}
			if s.value, err = asExpr(n, "SET"); err != nil {
				return nil, err
			}
		}
		stmts = append(stmts, s)
		if p.peek().kind == tSemi {
			p.next()
		}
		if p.peek().kind == tEOF {
			return stmts, nil
		}
	}
}

// Apply runs the action on m and returns what it changed; m itself is not
// modified. Each statement sees the effect of the ones before it. A
// missing user property reads as null (SET x = missing sets x to null).
// Errors are *EvalError: the broker treats them as filter evaluation
// errors.
func (a *SQLAction) Apply(m *Message) (Overlay, error) {
	work := *m
	work.Properties = slices.Clone(m.Properties)
	out := make(Overlay, 0, len(a.stmts))
	for _, s := range a.stmts {
		c, err := s.change(&work)
		if err != nil {
			return nil, err
		}
		c.apply(&work)
		out = append(out, c)
	}
	return out, nil
}

func (s *statement) change(m *Message) (Change, error) {
	c := Change{Sys: s.target.sys, Name: s.target.name, Remove: s.remove}
	i := -1
	if c.Sys == sysNone {
		if i = m.propertyIndex(c.Name); i >= 0 {
			c.Name = m.Properties[i].Name
		}
	}
	if s.remove {
		return c, nil
	}
	v, err := s.value.eval(m)
	if err != nil {
		return Change{}, err
	}
	switch {
	case c.Sys != sysNone:
		if v, err = assignSys(c.Sys, v); err != nil {
			return Change{}, evalErr(s.at, err)
		}
	case i >= 0:
		v = convertLike(m.Properties[i].Value, v)
	}
	c.Value = v
	return c, nil
}

// assignSys checks a value against a system property's type: the address
// fields take strings (a uuid from newid() is formatted as .NET does),
// TimeToLive a duration, ScheduledEnqueueTimeUtc a timestamp; null clears.
func assignSys(p SysProp, v Value) (Value, error) {
	switch {
	case v.kind == KindNull:
		return v, nil
	case p.stringTyped() && v.kind == KindString,
		p == SysTimeToLive && v.kind == KindDuration,
		p == SysScheduledEnqueueTimeUtc && v.kind == KindTimestamp:
		return v, nil
	case p.stringTyped() && v.kind == KindUUID:
		return StringValue(v.UUID().String()), nil
	}
	want := "string"
	switch p {
	case SysTimeToLive:
		want = "duration"
	case SysScheduledEnqueueTimeUtc:
		want = "timestamp"
	}
	return Value{}, errors.New("sys." + p.String() + " takes a " + want + ", not a " + v.kind.String())
}

// convertLike converts a new value to the kind of the property it replaces
// where that loses nothing (Service Bus doc "SQL rule action syntax": SET
// converts to the existing type where possible). Only numbers convert.
func convertLike(old, v Value) Value {
	if old.kind == v.kind || !isNumeric(old.kind) || !isNumeric(v.kind) {
		return v
	}
	f := v.Float()
	switch old.kind {
	case KindInt:
		if f == math.Trunc(f) && f >= math.MinInt64 && f < math.MaxInt64 {
			return IntValue(int64(f))
		}
	case KindDouble:
		return DoubleValue(f)
	case KindDecimal:
		return DecimalValue(f)
	}
	return v
}

// ApplyTo returns a copy of m with the overlay's changes made; m is not
// modified.
func (o Overlay) ApplyTo(m *Message) Message {
	out := *m
	out.Properties = slices.Clone(m.Properties)
	for _, c := range o {
		c.apply(&out)
	}
	return out
}

// apply makes the change on m, whose Properties must be its own copy.
func (c Change) apply(m *Message) {
	if c.Sys != sysNone {
		if f := m.sysField(c.Sys); f != nil {
			*f = c.Value
			if c.Remove {
				*f = Value{}
			}
		}
		return
	}
	if c.Remove {
		m.Properties = slices.DeleteFunc(m.Properties, func(p Property) bool { return strings.EqualFold(p.Name, c.Name) })
		return
	}
	if i := m.propertyIndex(c.Name); i >= 0 {
		m.Properties[i].Value = c.Value
		return
	}
	m.Properties = append(m.Properties, Property{Name: c.Name, Value: c.Value})
}

// Expression returns the text the action was compiled from.
func (a *SQLAction) Expression() string { return a.expr }

// String returns the canonical text of the compiled action.
func (a *SQLAction) String() string {
	var b strings.Builder
	for i, s := range a.stmts {
		if i > 0 {
			b.WriteString("; ")
		}
		if s.remove {
			b.WriteString("REMOVE ")
			s.target.format(&b)
			continue
		}
		b.WriteString("SET ")
		s.target.format(&b)
		b.WriteString(" = ")
		s.value.format(&b)
	}
	return b.String()
}
