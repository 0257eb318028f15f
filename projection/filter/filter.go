package filter

import "strings"

// Filter decides whether a message gets a copy in a subscription through
// one rule. Match never changes the message and is safe for concurrent use.
type Filter interface {
	// Match reports whether the filter is true for m. An unknown result is
	// false. An error is an evaluation error (*EvalError).
	Match(m *Message) (bool, error)
	// String returns the filter as SQL text.
	String() string
}

// TrueFilter matches every message: the $Default rule's filter, SQL 1=1.
type TrueFilter struct{}

// Match returns true.
func (TrueFilter) Match(*Message) (bool, error) { return true, nil }

func (TrueFilter) String() string { return "1=1" }

// FalseFilter matches no message, whatever text a client sent with it
// (1=0 from Go, 1>1 from Python): it is evaluated by type.
type FalseFilter struct{}

// Match returns false.
func (FalseFilter) Match(*Message) (bool, error) { return false, nil }

func (FalseFilter) String() string { return "1=0" }

// SQLFilter is a compiled SQL filter expression.
type SQLFilter struct {
	expr string
	root predNode
}

// CompileSQL compiles a SQL filter expression, refusing it with a
// *SyntaxError that names the position of the problem.
func CompileSQL(expr string) (*SQLFilter, error) {
	return compileSQL(expr, nil, defaultLimits)
}

// CompileSQLParams compiles a SQL filter whose @name references take their
// values from params (a rule's Parameters, which only the ATOM API
// carries). Keys may be written with or without the @.
func CompileSQLParams(expr string, params map[string]Value) (*SQLFilter, error) {
	return compileSQL(expr, params, defaultLimits)
}

func compileSQL(expr string, params map[string]Value, lim limits) (*SQLFilter, error) {
	p, err := newParser(expr, params, lim)
	if err != nil {
		return nil, err
	}
	root, err := p.parseFilter()
	if err != nil {
		return nil, err
	}
	return &SQLFilter{expr: expr, root: root}, nil
}

// Match evaluates the filter on m: true only if the expression is true;
// unknown is false. Evaluation reads nothing but m and allocates nothing
// unless the expression concatenates strings or calls newid().
func (f *SQLFilter) Match(m *Message) (bool, error) {
	t, err := f.root.test(m)
	return t == triTrue && err == nil, err
}

// Expression returns the text the filter was compiled from.
func (f *SQLFilter) Expression() string { return f.expr }

// String returns the canonical text of the compiled filter: keywords in
// upper case, properties scoped, parentheses only where needed.
func (f *SQLFilter) String() string {
	var b strings.Builder
	f.root.format(&b)
	return b.String()
}
