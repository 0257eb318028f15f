package filter

import (
	"fmt"
	"unicode/utf8"
)

// Limits on one filter or action, checked when the rule is created.
const (
	// MaxExpressionLength is Service Bus's limit on a SQL filter or action
	// string, in characters (Service Bus doc "Azure Service Bus quotas").
	MaxExpressionLength = 1024
	// MaxActionStatements is Service Bus's limit on expressions per action;
	// walbus counts SET and REMOVE statements.
	MaxActionStatements = 32
	// MaxNodes bounds the work one evaluation can do.
	MaxNodes = 1024
	// MaxDepth bounds nesting: parentheses, NOT, unary signs and function
	// arguments. It keeps the parser's and the evaluator's recursion small.
	MaxDepth = 64
)

type limits struct{ length, nodes, depth, statements int }

var defaultLimits = limits{MaxExpressionLength, MaxNodes, MaxDepth, MaxActionStatements}

// parser is a recursive-descent parser over the whole token list. It
// parses conditions and values with one precedence ladder and then checks
// that each place got the kind it needs, so "(" never needs backtracking.
type parser struct {
	toks   []token
	i      int
	params map[string]Value
	lim    limits
	depth  int
	nodes  int
}

func newParser(src string, params map[string]Value, lim limits) (*parser, error) {
	if n := utf8.RuneCountInString(src); n > lim.length {
		return nil, &SyntaxError{Pos: posOfChar(src, lim.length),
			Msg: fmt.Sprintf("the expression has %d characters; Service Bus allows at most %d", n, lim.length)}
	}
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	return &parser{toks: toks, params: params, lim: lim}, nil
}

// posOfChar returns the position of the n-th character (0-based) of src.
func posOfChar(src string, n int) Pos {
	lx := &lexer{src: src, line: 1, col: 1}
	for i := 0; i < n && lx.off < len(src); i++ {
		lx.advance()
	}
	return lx.pos()
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) peekAt(n int) token { return p.toks[min(p.i+n, len(p.toks)-1)] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func errorf(at Pos, format string, args ...any) error {
	return &SyntaxError{Pos: at, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) expect(kind tokKind, what string) (token, error) {
	t := p.peek()
	if t.kind != kind {
		return t, errorf(t.pos, "expected %s, found %s", what, t.describe())
	}
	return p.next(), nil
}

// counted charges one node against MaxNodes.
func (p *parser) counted(at Pos) error {
	p.nodes++
	if p.nodes > p.lim.nodes {
		return errorf(at, "the expression has more than %d elements", p.lim.nodes)
	}
	return nil
}

func (p *parser) enter(at Pos) error {
	p.depth++
	if p.depth > p.lim.depth {
		return errorf(at, "the expression nests more than %d levels deep", p.lim.depth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

func asPred(n node, what string) (predNode, error) {
	if x, ok := n.(predNode); ok {
		return x, nil
	}
	return nil, errorf(n.position(), "%s needs a condition such as x = 1, found a value", what)
}

func asExpr(n node, what string) (exprNode, error) {
	if x, ok := n.(exprNode); ok {
		return x, nil
	}
	return nil, errorf(n.position(), "%s needs a value, found a condition", what)
}

// parseFilter parses a whole filter: a condition and nothing after it.
// A bare value (TRUE, or a property alone) is refused: 1=1 is the idiom.
func (p *parser) parseFilter() (predNode, error) {
	n, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		if _, ok := n.(exprNode); ok {
			return nil, errorf(t.pos, "expected a comparison, IN, LIKE or IS after a value, found %s", t.describe())
		}
		return nil, errorf(t.pos, "expected AND, OR or the end of the filter, found %s", t.describe())
	}
	return asPred(n, "a filter")
}

func (p *parser) parseOr() (node, error) {
	return p.parseLogic(kOr, "OR", p.parseAnd)
}

func (p *parser) parseAnd() (node, error) {
	return p.parseLogic(kAnd, "AND", p.parseNot)
}

// parseLogic parses operand { op operand } into one n-ary AND or OR node.
func (p *parser) parseLogic(op tokKind, name string, operand func() (node, error)) (node, error) {
	n, err := operand()
	if err != nil || p.peek().kind != op {
		return n, err
	}
	first, err := asPred(n, name)
	if err != nil {
		return nil, err
	}
	xs := []predNode{first}
	for p.peek().kind == op {
		p.next()
		n, err := operand()
		if err != nil {
			return nil, err
		}
		x, err := asPred(n, name)
		if err != nil {
			return nil, err
		}
		xs = append(xs, x)
	}
	if err := p.counted(first.position()); err != nil {
		return nil, err
	}
	if op == kOr {
		return &orNode{at: first.position(), xs: xs}, nil
	}
	return &andNode{at: first.position(), xs: xs}, nil
}

func (p *parser) parseNot() (node, error) {
	t := p.peek()
	if t.kind != kNot {
		return p.parsePredicate()
	}
	p.next()
	if err := p.enter(t.pos); err != nil {
		return nil, err
	}
	n, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	p.leave()
	x, err := asPred(n, "NOT")
	if err != nil {
		return nil, err
	}
	return &notNode{at: t.pos, x: x}, p.counted(t.pos)
}

var cmpOps = map[tokKind]cmpOp{tEq: opEq, tNe: opNe, tLt: opLt, tLe: opLe, tGt: opGt, tGe: opGe}

// parsePredicate parses a comparison, [NOT] IN, [NOT] LIKE or IS [NOT]
// NULL, or passes a lone value or parenthesised condition through.
func (p *parser) parsePredicate() (node, error) {
	left, err := p.parseAdditive()
	if err != nil {
		return nil, err
	}
	t := p.peek()
	if op, ok := cmpOps[t.kind]; ok {
		p.next()
		right, err := p.parseAdditive()
		if err != nil {
			return nil, err
		}
		what := "'" + t.text + "'"
		l, err := asExpr(left, what)
		if err != nil {
			return nil, err
		}
		r, err := asExpr(right, what)
		if err != nil {
			return nil, err
		}
		return &cmpNode{at: t.pos, op: op, l: l, r: r}, p.counted(t.pos)
	}
	switch t.kind {
	case kNot:
		switch p.peekAt(1).kind {
		case kIn:
			p.next()
			return p.parseIn(left, true)
		case kLike:
			p.next()
			return p.parseLike(left, true)
		}
		return nil, errorf(p.peekAt(1).pos, "expected IN or LIKE after NOT, found %s", p.peekAt(1).describe())
	case kIn:
		return p.parseIn(left, false)
	case kLike:
		return p.parseLike(left, false)
	case kIs:
		return p.parseIsNull(left)
	}
	return left, nil
}

func (p *parser) parseIn(left node, not bool) (node, error) {
	in := p.next()
	x, err := asExpr(left, "IN")
	if err != nil {
		return nil, err
	}
	open, err := p.expect(tLParen, "'(' after IN")
	if err != nil {
		return nil, err
	}
	if err := p.enter(open.pos); err != nil {
		return nil, err
	}
	n := &inNode{at: in.pos, not: not, x: x}
	for {
		item, err := p.parseAdditive()
		if err != nil {
			return nil, err
		}
		v, err := asExpr(item, "an IN list")
		if err != nil {
			return nil, err
		}
		n.list = append(n.list, v)
		if p.peek().kind != tComma {
			break
		}
		p.next()
	}
	if _, err := p.expect(tRParen, "',' or ')' in the IN list"); err != nil {
		return nil, err
	}
	p.leave()
	return n, p.counted(in.pos)
}

func (p *parser) parseLike(left node, not bool) (node, error) {
	like := p.next()
	x, err := asExpr(left, "LIKE")
	if err != nil {
		return nil, err
	}
	n := &likeNode{at: like.pos, not: not, x: x}
	pat, err := p.parseAdditive()
	if err != nil {
		return nil, err
	}
	if n.pat, err = asExpr(pat, "LIKE"); err != nil {
		return nil, err
	}
	if p.peek().kind == kEscape {
		p.next()
		esc, err := p.parseAdditive()
		if err != nil {
			return nil, err
		}
		if n.esc, err = asExpr(esc, "ESCAPE"); err != nil {
			return nil, err
		}
	}
	if err := compileConstantLike(n); err != nil {
		return nil, err
	}
	return n, p.counted(like.pos)
}

// compileConstantLike checks a constant pattern and escape now, so a bad
// one is refused at creation, and compiles the pattern once.
func compileConstantLike(n *likeNode) error {
	pat, ok := n.pat.(*litNode)
	if ok && pat.v.kind != KindString && pat.v.kind != KindNull {
		return errorf(pat.at, "%v", errPatternType)
	}
	escape := ""
	if n.esc != nil {
		esc, escOK := n.esc.(*litNode)
		if !escOK {
			return nil
		}
		switch {
		case esc.v.kind == KindNull:
			return nil
		case esc.v.kind != KindString:
			return errorf(esc.at, "%v", errEscapeType)
		}
		if err := checkEscape(esc.v.str); err != nil {
			return errorf(esc.at, "%v", err)
		}
		escape = esc.v.str
	}
	if !ok || pat.v.kind != KindString {
		return nil
	}
	compiled, err := compileLike(pat.v.str, escape)
	if err != nil {
		return errorf(pat.at, "%v", err)
	}
	n.compiled = compiled
	return nil
}

func (p *parser) parseIsNull(left node) (node, error) {
	is := p.next()
	prop, ok := left.(*propNode)
	if !ok {
		return nil, errorf(is.pos, "IS NULL needs a property on its left")
	}
	n := &isNullNode{at: is.pos, p: prop}
	if p.peek().kind == kNot {
		p.next()
		n.not = true
	}
	if _, err := p.expect(kNull, "NULL after IS"); err != nil {
		return nil, err
	}
	return n, p.counted(is.pos)
}
