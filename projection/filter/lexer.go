package filter

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokKind uint8

const (
	tEOF tokKind = iota
	tIdent
	tDelimited // [name] or "name"
	tString
	tInt
	tFloat
	tParam
	tLParen
	tRParen
	tComma
	tDot
	tSemi
	tEq
	tNe
	tLt
	tLe
	tGt
	tGe
	tPlus
	tMinus
	tStar
	tSlash
	tPercent
	kAnd
	kOr
	kNot
	kIn
	kLike
	kEscape
	kIs
	kNull
	kTrue
	kFalse
	kExists
	kSet
	kRemove
)

// keywords are reserved in filters and actions alike; write [set] for a
// property with such a name.
var keywords = map[string]tokKind{
	"AND": kAnd, "OR": kOr, "NOT": kNot, "IN": kIn, "LIKE": kLike, "ESCAPE": kEscape,
	"IS": kIs, "NULL": kNull, "TRUE": kTrue, "FALSE": kFalse, "EXISTS": kExists,
	"SET": kSet, "REMOVE": kRemove,
}

// token is one lexeme. text is the decoded name for identifiers (quotes
// removed, doubled quotes undone), the content of a string, the digits of a
// number, the name after @, and the source text of anything else.
type token struct {
	kind tokKind
	text string
	pos  Pos
}

// describe names a token in an error message.
func (t token) describe() string {
	switch t.kind {
	case tEOF:
		return "the end of the expression"
	case tString:
		return "the string '" + t.text + "'"
	case tParam:
		return "@" + t.text
	case tDelimited:
		return "[" + t.text + "]"
	}
	return "'" + t.text + "'"
}

type lexer struct {
	src  string
	off  int
	line int
	col  int
	toks []token
}

// lex splits src into tokens, ending with tEOF.
func lex(src string) ([]token, error) {
	lx := &lexer{src: src, line: 1, col: 1}
	for {
		lx.skipSpace()
		if lx.off >= len(src) {
			lx.toks = append(lx.toks, token{kind: tEOF, pos: lx.pos()})
			return lx.toks, nil
		}
		if err := lx.next(); err != nil {
			return nil, err
		}
	}
}

func (lx *lexer) pos() Pos { return Pos{Offset: lx.off, Line: lx.line, Column: lx.col} }

func (lx *lexer) peek() rune {
	if lx.off >= len(lx.src) {
		return -1
	}
	r, _ := utf8.DecodeRuneInString(lx.src[lx.off:])
	return r
}

func (lx *lexer) peekAt(n int) byte {
	if lx.off+n >= len(lx.src) {
		return 0
	}
	return lx.src[lx.off+n]
}

func (lx *lexer) advance() rune {
	r, w := utf8.DecodeRuneInString(lx.src[lx.off:])
	lx.off += w
	if r == '\n' {
		lx.line++
		lx.col = 1
	} else {
		lx.col++
	}
	return r
}

func (lx *lexer) skipSpace() {
	for lx.off < len(lx.src) && unicode.IsSpace(lx.peek()) {
		lx.advance()
	}
}

func (lx *lexer) emit(kind tokKind, text string, at Pos) {
	lx.toks = append(lx.toks, token{kind: kind, text: text, pos: at})
}

func isIdentStart(r rune) bool { return unicode.IsLetter(r) || r == '_' }

func isIdentPart(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func (lx *lexer) next() error {
	at := lx.pos()
	r := lx.peek()
	switch {
	case isIdentStart(r):
		text := lx.ident()
		kind := tIdent
		if isASCII(text) {
			if k, ok := keywords[strings.ToUpper(text)]; ok {
				kind = k
			}
		}
		lx.emit(kind, text, at)
		return nil
	case r < utf8.RuneSelf && isDigit(byte(r)), r == '.' && isDigit(lx.peekAt(1)) && !lx.afterName():
		return lx.number(at)
	case r == '\'':
		text, err := lx.quoted('\'', "string")
		if err == nil {
			lx.emit(tString, text, at)
		}
		return err
	case r == '[':
		return lx.delimited(']', at)
	case r == '"':
		return lx.delimited('"', at)
	case r == '@':
		lx.advance()
		if !isIdentStart(lx.peek()) {
			return &SyntaxError{Pos: at, Msg: "expected a parameter name after '@'"}
		}
		lx.emit(tParam, lx.ident(), at)
		return nil
	}
	kind, width := symbol(lx.src[lx.off:])
	if width == 0 {
		return &SyntaxError{Pos: at, Msg: "unexpected character " + quoteRune(r)}
	}
	for range width {
		lx.advance()
	}
	lx.emit(kind, lx.src[at.Offset:lx.off], at)
	return nil
}

// afterName reports whether the last token was a name, after which a dot
// is a scope separator (sys.1 is a bad name, not sys followed by 0.1).
func (lx *lexer) afterName() bool {
	if len(lx.toks) == 0 {
		return false
	}
	k := lx.toks[len(lx.toks)-1].kind
	return k == tIdent || k == tDelimited
}

func symbol(s string) (tokKind, int) {
	if len(s) >= 2 {
		switch s[:2] {
		case "<>":
			return tNe, 2
		case "!=":
			return tNe, 2
		case "<=":
			return tLe, 2
		case ">=":
			return tGe, 2
		}
	}
	switch s[0] {
	case '(':
		return tLParen, 1
	case ')':
		return tRParen, 1
	case ',':
		return tComma, 1
	case '.':
		return tDot, 1
	case ';':
		return tSemi, 1
	case '=':
		return tEq, 1
	case '<':
		return tLt, 1
	case '>':
		return tGt, 1
	case '+':
		return tPlus, 1
	case '-':
		return tMinus, 1
	case '*':
		return tStar, 1
	case '/':
		return tSlash, 1
	case '%':
		return tPercent, 1
	}
	return 0, 0
}

func quoteRune(r rune) string {
	if r == utf8.RuneError {
		return "(invalid UTF-8)"
	}
	return "'" + string(r) + "'"
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func (lx *lexer) ident() string {
	start := lx.off
	for lx.off < len(lx.src) && isIdentPart(lx.peek()) {
		lx.advance()
	}
	return lx.src[start:lx.off]
}

// number reads digits [. digits] [e [+-] digits]: without a point or an
// exponent it is an int64, else a double (Service Bus SQL filter doc).
func (lx *lexer) number(at Pos) error {
	kind := tInt
	lx.digits()
	if lx.peekAt(0) == '.' {
		kind = tFloat
		lx.advance()
		lx.digits()
	}
	if c := lx.peekAt(0); c == 'e' || c == 'E' {
		kind = tFloat
		lx.advance()
		if c := lx.peekAt(0); c == '+' || c == '-' {
			lx.advance()
		}
		if !isDigit(lx.peekAt(0)) {
			return &SyntaxError{Pos: at, Msg: "malformed number " + lx.src[at.Offset:lx.off] + ": the exponent has no digits"}
		}
		lx.digits()
	}
	lx.emit(kind, lx.src[at.Offset:lx.off], at)
	return nil
}

func (lx *lexer) digits() {
	for isDigit(lx.peekAt(0)) {
		lx.advance()
	}
}

// quoted reads from an opening quote to the closing one, where a doubled
// closing quote stands for itself.
func (lx *lexer) quoted(closing byte, what string) (string, error) {
	at := lx.pos()
	lx.advance() // the opening quote
	var b strings.Builder
	for {
		if lx.off >= len(lx.src) {
			return "", &SyntaxError{Pos: at, Msg: "unterminated " + what + ": no closing " + string(closing)}
		}
		if lx.src[lx.off] == closing {
			lx.advance()
			if lx.peekAt(0) != closing {
				return b.String(), nil
			}
			lx.advance()
			b.WriteByte(closing)
			continue
		}
		start := lx.off
		lx.advance()
		b.WriteString(lx.src[start:lx.off])
	}
}

func (lx *lexer) delimited(closing byte, at Pos) error {
	open := lx.src[lx.off]
	text, err := lx.quoted(closing, "identifier")
	if err != nil {
		return err
	}
	if text == "" {
		return &SyntaxError{Pos: at, Msg: "empty identifier " + string(open) + string(closing)}
	}
	lx.emit(tDelimited, text, at)
	return nil
}
