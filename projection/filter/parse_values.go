package filter

import (
	"math"
	"strconv"
	"strings"
)

// The value half of the parser: arithmetic, signs, literals, parameters,
// functions and property names.

var (
	addOps = map[tokKind]arithOp{tPlus: opAdd, tMinus: opSub}
	mulOps = map[tokKind]arithOp{tStar: opMul, tSlash: opDiv, tPercent: opMod}
)

func (p *parser) parseAdditive() (node, error) { return p.parseArith(p.parseMultiplicative, addOps) }

func (p *parser) parseMultiplicative() (node, error) { return p.parseArith(p.parseUnary, mulOps) }

// parseArith parses operand { op operand }, associating to the left.
func (p *parser) parseArith(operand func() (node, error), ops map[tokKind]arithOp) (node, error) {
	n, err := operand()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		op, ok := ops[t.kind]
		if !ok {
			return n, nil
		}
		p.next()
		right, err := operand()
		if err != nil {
			return nil, err
		}
		what := "'" + t.text + "'"
		l, err := asExpr(n, what)
		if err != nil {
			return nil, err
		}
		r, err := asExpr(right, what)
		if err != nil {
			return nil, err
		}
		n = &binaryNode{at: t.pos, op: op, l: l, r: r}
		if err := p.counted(t.pos); err != nil {
			return nil, err
		}
	}
}

// parseUnary folds a sign into a number that follows it, so that
// -9223372036854775808 is an int64 and a printed negative number reads back
// as the same literal.
func (p *parser) parseUnary() (node, error) {
	t := p.peek()
	if t.kind != tMinus && t.kind != tPlus {
		return p.parsePrimary()
	}
	p.next()
	if num := p.peek(); num.kind == tInt || num.kind == tFloat {
		p.next()
		v, err := number(num, t.kind == tMinus)
		if err != nil {
			return nil, err
		}
		return &litNode{at: t.pos, v: v}, p.counted(t.pos)
	}
	if err := p.enter(t.pos); err != nil {
		return nil, err
	}
	n, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	p.leave()
	x, err := asExpr(n, "unary "+t.text)
	if err != nil {
		return nil, err
	}
	return &unaryNode{at: t.pos, plus: t.kind == tPlus, x: x}, p.counted(t.pos)
}

func number(t token, negative bool) (Value, error) {
	if t.kind == tFloat {
		f, err := strconv.ParseFloat(t.text, 64)
		if err != nil {
			return Value{}, errorf(t.pos, "the number %s is out of range for a double", t.text)
		}
		if negative {
			f = -f
		}
		return DoubleValue(f), nil
	}
	u, err := strconv.ParseUint(t.text, 10, 64)
	if err != nil || u > math.MaxInt64+1 || (u == math.MaxInt64+1 && !negative) {
		return Value{}, errorf(t.pos, "the integer %s is out of range for int64; write it with a decimal point for a double", t.text)
	}
	if negative {
		return IntValue(-int64(u)), nil
	}
	return IntValue(int64(u)), nil
}

func (p *parser) parsePrimary() (node, error) {
	t := p.next()
	var v Value
	switch t.kind {
	case tInt, tFloat:
		var err error
		if v, err = number(t, false); err != nil {
			return nil, err
		}
	case tString:
		v = StringValue(t.text)
	case kTrue, kFalse:
		v = BoolValue(t.kind == kTrue)
	case kNull:
	case tParam:
		return p.param(t)
	case tLParen:
		return p.parseParens(t)
	case kExists:
		return p.parseExists(t)
	case tIdent:
		if p.peek().kind == tLParen {
			return p.parseFunction(t)
		}
		return p.parsePropertyFrom(t)
	case tDelimited:
		return p.parsePropertyFrom(t)
	default:
		return nil, errorf(t.pos, "expected a value, found %s", t.describe())
	}
	return &litNode{at: t.pos, v: v}, p.counted(t.pos)
}

func (p *parser) parseParens(open token) (node, error) {
	if err := p.enter(open.pos); err != nil {
		return nil, err
	}
	n, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if _, err := p.expect(tRParen, "')'"); err != nil {
		return nil, err
	}
	p.leave()
	return n, nil
}

// param substitutes a parameter from the rule's Parameters (ATOM only).
// Names match with or without their @, ignoring case.
func (p *parser) param(t token) (node, error) {
	var found []string
	for name := range p.params {
		if strings.EqualFold(strings.TrimPrefix(name, "@"), t.text) {
			found = append(found, name)
		}
	}
	switch len(found) {
	case 0:
		return nil, errorf(t.pos, "the parameter @%s is not defined", t.text)
	case 1:
		return &litNode{at: t.pos, v: p.params[found[0]], param: t.text}, p.counted(t.pos)
	}
	return nil, errorf(t.pos, "the parameter @%s is defined more than once", t.text)
}

func (p *parser) parseExists(t token) (node, error) {
	if _, err := p.expect(tLParen, "'(' after EXISTS"); err != nil {
		return nil, err
	}
	prop, err := p.parseProperty()
	if err != nil {
		return nil, err
	}
	if _, err := p.expect(tRParen, "')' after the property"); err != nil {
		return nil, err
	}
	return &existsNode{at: t.pos, p: prop}, p.counted(t.pos)
}

// parseFunction parses the documented functions: newid(), property(name)
// and its short form p(name).
func (p *parser) parseFunction(t token) (node, error) {
	open := p.next()
	switch {
	case equalFoldASCII(t.text, "newid"):
		if _, err := p.expect(tRParen, "')': newid() takes no argument"); err != nil {
			return nil, err
		}
		return &newidNode{at: t.pos}, p.counted(t.pos)
	case equalFoldASCII(t.text, "property"), equalFoldASCII(t.text, "p"):
		if err := p.enter(open.pos); err != nil {
			return nil, err
		}
		n, err := p.parseAdditive()
		if err != nil {
			return nil, err
		}
		arg, err := asExpr(n, t.text+"()")
		if err != nil {
			return nil, err
		}
		if _, err := p.expect(tRParen, "')'"); err != nil {
			return nil, err
		}
		p.leave()
		return &propertyNode{at: t.pos, arg: arg}, p.counted(t.pos)
	}
	return nil, errorf(t.pos, "unknown function %s(); the functions are newid(), property() and p()", t.text)
}

func (p *parser) parseProperty() (*propNode, error) {
	t := p.next()
	if t.kind != tIdent && t.kind != tDelimited {
		return nil, errorf(t.pos, "expected a property name, found %s", t.describe())
	}
	return p.parsePropertyFrom(t)
}

// parsePropertyFrom parses [sys. | user.] name, the name's first token
// already read. Unknown system properties are refused here, at creation.
func (p *parser) parsePropertyFrom(t token) (*propNode, error) {
	if t.kind != tIdent || p.peek().kind != tDot {
		return &propNode{at: t.pos, name: t.text}, p.counted(t.pos)
	}
	sys := equalFoldASCII(t.text, "sys")
	if !sys && !equalFoldASCII(t.text, "user") {
		return nil, errorf(t.pos, "unknown scope %s: write sys.name, user.name or name, and [%s.…] for a name with a dot", t.text, t.text)
	}
	p.next()
	name := p.next()
	if name.kind != tIdent && name.kind != tDelimited && name.kind < kAnd {
		return nil, errorf(name.pos, "expected a property name after %s., found %s", t.text, name.describe())
	}
	if !sys {
		return &propNode{at: t.pos, name: name.text}, p.counted(t.pos)
	}
	sp, ok := lookupSys(name.text)
	if !ok {
		for _, n := range noFilterValue {
			if equalFoldASCII(name.text, n) {
				return nil, errorf(name.pos, "sys.%s has no value when rules run", n)
			}
		}
		return nil, errorf(name.pos, "unknown system property sys.%s", name.text)
	}
	return &propNode{at: t.pos, sys: sp}, p.counted(t.pos)
}
