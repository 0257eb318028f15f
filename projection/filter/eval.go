package filter

import (
	"errors"
	"strings"
)

// node is one element of a compiled expression. A node is either a
// predNode (a condition, true/false/unknown) or an exprNode (a value);
// the parser checks which one each place needs.
type node interface {
	position() Pos
	prec() int
	format(b *strings.Builder)
}

type predNode interface {
	node
	test(m *Message) (tri, error)
}

type exprNode interface {
	node
	eval(m *Message) (Value, error)
}

// Precedence, loosest first (SQL-92 order; the Service Bus doc gives none).
const (
	precOr = iota + 1
	precAnd
	precNot
	precPred
	precAdd
	precMul
	precUnary
	precPrimary
)

type (
	litNode struct {
		at    Pos
		v     Value
		param string // the @name it came from, if any
	}
	propNode struct {
		at   Pos
		sys  SysProp // sysNone for a user property
		name string  // a user property's name
	}
	newidNode    struct{ at Pos }
	propertyNode struct {
		at  Pos
		arg exprNode
	}
	unaryNode struct {
		at   Pos
		plus bool
		x    exprNode
	}
	binaryNode struct {
		at   Pos
		op   arithOp
		l, r exprNode
	}
	cmpNode struct {
		at   Pos
		op   cmpOp
		l, r exprNode
	}
	inNode struct {
		at   Pos
		not  bool
		x    exprNode
		list []exprNode
	}
	likeNode struct {
		at       Pos
		not      bool
		x, pat   exprNode
		esc      exprNode     // nil without ESCAPE
		compiled *likePattern // set when the pattern and escape are constants
	}
	isNullNode struct {
		at  Pos
		not bool
		p   *propNode
	}
	existsNode struct {
		at Pos
		p  *propNode
	}
	andNode struct {
		at Pos
		xs []predNode
	}
	orNode struct {
		at Pos
		xs []predNode
	}
	notNode struct {
		at Pos
		x  predNode
	}
)

func (n *litNode) eval(*Message) (Value, error) { return n.v, nil }

// eval reads a property: a missing user property is null, i.e. unknown.
func (n *propNode) eval(m *Message) (Value, error) {
	if n.sys != sysNone {
		return m.Sys(n.sys), nil
	}
	v, _ := m.Property(n.name)
	return v, nil
}

var errNoIDSource = errors.New("newid() has no ID source for this message")

func (n *newidNode) eval(m *Message) (Value, error) {
	if m.NewID == nil {
		return Value{}, evalErr(n.at, errNoIDSource)
	}
	return UUIDValue(m.NewID()), nil
}

// eval resolves user properties only: property('sys.Label') names a user
// property called sys.Label, as on Service Bus (MicrosoftDocs/azure-docs#87667).
func (n *propertyNode) eval(m *Message) (Value, error) {
	name, err := n.arg.eval(m)
	if err != nil || name.kind != KindString {
		return Value{}, err
	}
	v, _ := m.Property(name.str)
	return v, nil
}

func (n *unaryNode) eval(m *Message) (Value, error) {
	x, err := n.x.eval(m)
	if err != nil {
		return Value{}, err
	}
	if n.plus {
		return identity(x), nil
	}
	v, err := negate(x)
	if err != nil {
		return Value{}, evalErr(n.at, err)
	}
	return v, nil
}

func (n *binaryNode) eval(m *Message) (Value, error) {
	l, err := n.l.eval(m)
	if err != nil {
		return Value{}, err
	}
	r, err := n.r.eval(m)
	if err != nil {
		return Value{}, err
	}
	v, err := arith(n.op, l, r)
	if err != nil {
		return Value{}, evalErr(n.at, err)
	}
	return v, nil
}

func (n *cmpNode) test(m *Message) (tri, error) {
	l, err := n.l.eval(m)
	if err != nil {
		return triUnknown, err
	}
	r, err := n.r.eval(m)
	if err != nil {
		return triUnknown, err
	}
	return compareValues(n.op, l, r), nil
}

// test is SQL's IN: true if any item equals x, else unknown if x or any
// comparison was unknown, else false. NOT IN negates that, so unknown stays.
func (n *inNode) test(m *Message) (tri, error) {
	x, err := n.x.eval(m)
	if err != nil || x.kind == KindNull {
		return triUnknown, err
	}
	result := triFalse
	for _, item := range n.list {
		v, err := item.eval(m)
		if err != nil {
			return triUnknown, err
		}
		t := compareValues(opEq, x, v)
		if t == triTrue {
			result = triTrue
			break
		}
		if t == triUnknown {
			result = triUnknown
		}
	}
	if n.not {
		return result.not(), nil
	}
	return result, nil
}

func (n *isNullNode) test(m *Message) (tri, error) {
	v, _ := n.p.eval(m)
	return triOf(v.IsNull() != n.not), nil
}

// test is true when the property is present, even with a null value; a
// system property is present when it is set.
func (n *existsNode) test(m *Message) (tri, error) {
	if n.p.sys != sysNone {
		return triOf(!m.Sys(n.p.sys).IsNull()), nil
	}
	_, ok := m.Property(n.p.name)
	return triOf(ok), nil
}

// test is AND: false absorbs unknown; evaluation stops at the first false.
func (n *andNode) test(m *Message) (tri, error) { return junction(n.xs, triFalse, m) }

// test is OR: true absorbs unknown; evaluation stops at the first true.
func (n *orNode) test(m *Message) (tri, error) { return junction(n.xs, triTrue, m) }

// junction evaluates AND (absorb false) or OR (absorb true) left to right:
// the first operand that is absorb decides, else any unknown makes the
// result unknown, else it is the other value.
func junction(xs []predNode, absorb tri, m *Message) (tri, error) {
	result := absorb.not()
	for _, x := range xs {
		t, err := x.test(m)
		if err != nil {
			return triUnknown, err
		}
		switch t {
		case absorb:
			return absorb, nil
		case triUnknown:
			result = triUnknown
		}
	}
	return result, nil
}

func (n *notNode) test(m *Message) (tri, error) {
	t, err := n.x.test(m)
	return t.not(), err
}
