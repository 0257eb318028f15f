package filter

import "strings"

// The canonical text of a compiled expression: keywords upper-case, every
// property scoped (sys.Label, user.color), parentheses only where the
// precedence needs them. It compiles back to the same tree, so the broker
// can show it and the fuzz tests can check the round trip.

func (n *litNode) position() Pos      { return n.at }
func (n *propNode) position() Pos     { return n.at }
func (n *newidNode) position() Pos    { return n.at }
func (n *propertyNode) position() Pos { return n.at }
func (n *unaryNode) position() Pos    { return n.at }
func (n *binaryNode) position() Pos   { return n.at }
func (n *cmpNode) position() Pos      { return n.at }
func (n *inNode) position() Pos       { return n.at }
func (n *likeNode) position() Pos     { return n.at }
func (n *isNullNode) position() Pos   { return n.at }
func (n *existsNode) position() Pos   { return n.at }
func (n *andNode) position() Pos      { return n.at }
func (n *orNode) position() Pos       { return n.at }
func (n *notNode) position() Pos      { return n.at }

func (n *litNode) prec() int      { return precPrimary }
func (n *propNode) prec() int     { return precPrimary }
func (n *newidNode) prec() int    { return precPrimary }
func (n *propertyNode) prec() int { return precPrimary }
func (n *unaryNode) prec() int    { return precUnary }
func (n *cmpNode) prec() int      { return precPred }
func (n *inNode) prec() int       { return precPred }
func (n *likeNode) prec() int     { return precPred }
func (n *isNullNode) prec() int   { return precPred }
func (n *existsNode) prec() int   { return precPred }
func (n *andNode) prec() int      { return precAnd }
func (n *orNode) prec() int       { return precOr }
func (n *notNode) prec() int      { return precNot }

func (n *binaryNode) prec() int {
	if n.op == opAdd || n.op == opSub {
		return precAdd
	}
	return precMul
}

// child writes n, in parentheses if it binds looser than minPrec.
func child(b *strings.Builder, n node, minPrec int) {
	if n.prec() >= minPrec {
		n.format(b)
		return
	}
	b.WriteByte('(')
	n.format(b)
	b.WriteByte(')')
}

func (n *litNode) format(b *strings.Builder) {
	if n.param != "" {
		b.WriteString("@" + n.param)
		return
	}
	writeValue(b, n.v)
}

func (n *propNode) format(b *strings.Builder) {
	if n.sys != sysNone {
		b.WriteString("sys." + n.sys.String())
		return
	}
	b.WriteString("user.")
	writeName(b, n.name)
}

// writeName writes a name bare when it reads back as the same regular
// identifier, else delimited with [ ].
func writeName(b *strings.Builder, name string) {
	regular := name != ""
	for i, r := range name {
		if !(isIdentPart(r) && (i > 0 || isIdentStart(r))) {
			regular = false
			break
		}
	}
	if _, keyword := keywords[strings.ToUpper(name)]; regular && !(keyword && isASCII(name)) {
		b.WriteString(name)
		return
	}
	b.WriteByte('[')
	b.WriteString(strings.ReplaceAll(name, "]", "]]"))
	b.WriteByte(']')
}

func (n *newidNode) format(b *strings.Builder) { b.WriteString("newid()") }

func (n *propertyNode) format(b *strings.Builder) {
	b.WriteString("property(")
	n.arg.format(b)
	b.WriteByte(')')
}

// format keeps a sign and its operand apart where reading them back
// together would differ: "- 5" folds into the literal -5, so a negated
// number is written "- +5" (or "- -5"), and a sign before a sign gets a
// space. Neither adds a level of nesting.
func (n *unaryNode) format(b *strings.Builder) {
	if n.plus {
		b.WriteByte('+')
	} else {
		b.WriteByte('-')
	}
	if lit, ok := n.x.(*litNode); ok && lit.param == "" && isNumeric(lit.v.kind) {
		b.WriteByte(' ')
		var text strings.Builder
		lit.format(&text)
		if !strings.HasPrefix(text.String(), "-") {
			b.WriteByte('+')
		}
		b.WriteString(text.String())
		return
	}
	if _, ok := n.x.(*unaryNode); ok {
		b.WriteByte(' ')
	}
	child(b, n.x, precUnary)
}

func (n *binaryNode) format(b *strings.Builder) {
	child(b, n.l, n.prec())
	b.WriteString(" " + arithOpText[n.op] + " ")
	child(b, n.r, n.prec()+1)
}

func (n *cmpNode) format(b *strings.Builder) {
	child(b, n.l, precAdd)
	b.WriteString(" " + cmpOpText[n.op] + " ")
	child(b, n.r, precAdd)
}

func (n *inNode) format(b *strings.Builder) {
	child(b, n.x, precAdd)
	if n.not {
		b.WriteString(" NOT")
	}
	b.WriteString(" IN (")
	for i, x := range n.list {
		if i > 0 {
			b.WriteString(", ")
		}
		child(b, x, precAdd)
	}
	b.WriteByte(')')
}

func (n *likeNode) format(b *strings.Builder) {
	child(b, n.x, precAdd)
	if n.not {
		b.WriteString(" NOT")
	}
	b.WriteString(" LIKE ")
	child(b, n.pat, precAdd)
	if n.esc != nil {
		b.WriteString(" ESCAPE ")
		child(b, n.esc, precAdd)
	}
}

func (n *isNullNode) format(b *strings.Builder) {
	n.p.format(b)
	if n.not {
		b.WriteString(" IS NOT NULL")
	} else {
		b.WriteString(" IS NULL")
	}
}

func (n *existsNode) format(b *strings.Builder) {
	b.WriteString("EXISTS(")
	n.p.format(b)
	b.WriteByte(')')
}

func (n *andNode) format(b *strings.Builder) { formatLogic(b, " AND ", n.xs, precAnd+1) }

func (n *orNode) format(b *strings.Builder) { formatLogic(b, " OR ", n.xs, precOr+1) }

func formatLogic(b *strings.Builder, op string, xs []predNode, minPrec int) {
	for i, x := range xs {
		if i > 0 {
			b.WriteString(op)
		}
		child(b, x, minPrec)
	}
}

func (n *notNode) format(b *strings.Builder) {
	b.WriteString("NOT ")
	child(b, n.x, precNot)
}
