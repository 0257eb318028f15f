package filter

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// LIKE patterns: % matches any run of characters, _ exactly one, and a
// character after the ESCAPE character stands for itself (Service Bus SQL
// filter doc, "like_expression"). Matching is ordinal and case-sensitive.
//
// likeMatch never backtracks more than one level: on a mismatch it resumes
// after the last % one character further into the input, which is enough
// because a later % can absorb anything an earlier one could. Its worst
// case is O(len(pattern) × len(input)) with no allocation; patterns that
// are a valid UTF-8 literal with % only at the ends take a strings fast
// path.
//
// A "character" is a UTF-8 sequence; an invalid byte is one character.

var (
	errEscapeLength = errors.New("the LIKE escape must be exactly one character")
	errEscapeType   = errors.New("the LIKE escape must be a string")
	errTrailingEsc  = errors.New("the LIKE pattern ends with its escape character")
	errPatternType  = errors.New("the LIKE pattern must be a string")
)

type likeShape uint8

const (
	likeGeneral  likeShape = iota
	likeExact              // abc
	likePrefix             // abc%
	likeSuffix             // %abc
	likeContains           // %abc%
	likeAny                // % (or %%…)
)

// likePattern is a LIKE pattern compiled when the rule is created.
type likePattern struct {
	pattern string
	escape  string // "" when there is no ESCAPE
	shape   likeShape
	literal string // the unescaped text for the non-general shapes
}

// checkEscape validates an ESCAPE value.
func checkEscape(escape string) error {
	if utf8.RuneCountInString(escape) != 1 {
		return errEscapeLength
	}
	return nil
}

// checkPattern rejects a pattern whose last character is a lone escape.
func checkPattern(pattern, escape string) error {
	if escape == "" {
		return nil
	}
	for i := 0; i < len(pattern); {
		c, w := charAt(pattern, i)
		i += w
		if c == escape {
			if i >= len(pattern) {
				return errTrailingEsc
			}
			_, w = charAt(pattern, i)
			i += w
		}
	}
	return nil
}

// compileLike validates pattern and escape and picks a fast path.
func compileLike(pattern, escape string) (*likePattern, error) {
	if escape != "" {
		if err := checkEscape(escape); err != nil {
			return nil, err
		}
	}
	if err := checkPattern(pattern, escape); err != nil {
		return nil, err
	}
	p := &likePattern{pattern: pattern, escape: escape}
	p.shape, p.literal = classify(pattern, escape)
	return p, nil
}

// classify finds patterns that are one literal with % runs only at its ends.
func classify(pattern, escape string) (likeShape, string) {
	var lit strings.Builder
	leading, trailing, inner := false, false, false
	for i := 0; i < len(pattern); {
		c, w := charAt(pattern, i)
		i += w
		switch {
		case c == escape:
			c, w = charAt(pattern, i)
			i += w
		case c == "_":
			return likeGeneral, ""
		case c == "%":
			if lit.Len() == 0 {
				leading = true
			} else {
				trailing = true
			}
			continue
		}
		if trailing {
			inner = true // a % between literal characters
		}
		lit.WriteString(c)
	}
	switch {
	case inner:
		return likeGeneral, ""
	case (leading || trailing) && !utf8.ValidString(lit.String()):
		// Byte search could match part of a character: "本" ends in \xac.
		return likeGeneral, ""
	case lit.Len() == 0 && leading:
		return likeAny, ""
	case leading && trailing:
		return likeContains, lit.String()
	case leading:
		return likeSuffix, lit.String()
	case trailing:
		return likePrefix, lit.String()
	}
	return likeExact, lit.String()
}

func (p *likePattern) match(s string) bool {
	switch p.shape {
	case likeExact:
		return s == p.literal
	case likePrefix:
		return strings.HasPrefix(s, p.literal)
	case likeSuffix:
		return strings.HasSuffix(s, p.literal)
	case likeContains:
		return strings.Contains(s, p.literal)
	case likeAny:
		return true
	}
	return likeMatch(s, p.pattern, p.escape)
}

// charAt returns the character starting at s[i] and its width in bytes.
func charAt(s string, i int) (string, int) {
	if i >= len(s) {
		return "", 0
	}
	_, w := utf8.DecodeRuneInString(s[i:])
	return s[i : i+w], w
}

// likeMatch reports whether s matches pattern. The pattern must have
// passed checkPattern with the same escape ("" for none).
func likeMatch(s, pattern, escape string) bool {
	p, i := 0, 0
	starP, starI := -1, 0 // where to resume after the last %
	for i < len(s) {
		if p < len(pattern) {
			c, w := charAt(pattern, p)
			sc, sw := charAt(s, i)
			switch {
			case c == escape:
				lit, lw := charAt(pattern, p+w)
				if lit == sc {
					p, i = p+w+lw, i+sw
					continue
				}
			case c == "%":
				p += w
				starP, starI = p, i
				continue
			case c == "_" || c == sc:
				p, i = p+w, i+sw
				continue
			}
		}
		if starP < 0 {
			return false
		}
		_, sw := charAt(s, starI)
		starI += sw
		p, i = starP, starI
	}
	for p < len(pattern) {
		c, w := charAt(pattern, p)
		if c != "%" || c == escape {
			return false
		}
		p += w
	}
	return true
}

// test is LIKE: unknown when any operand is null or the input or pattern
// is not a string; an escape that is not one character, or a pattern that
// ends with it, is an evaluation error.
func (n *likeNode) test(m *Message) (tri, error) {
	x, err := n.x.eval(m)
	if err != nil {
		return triUnknown, err
	}
	if n.compiled != nil {
		if x.kind != KindString {
			return triUnknown, nil
		}
		return triOf(n.compiled.match(x.str) != n.not), nil
	}
	pat, err := n.pat.eval(m)
	if err != nil {
		return triUnknown, err
	}
	var esc Value
	if n.esc != nil {
		if esc, err = n.esc.eval(m); err != nil {
			return triUnknown, err
		}
		if esc.kind == KindNull {
			return triUnknown, nil
		}
		if esc.kind != KindString {
			return triUnknown, evalErr(n.esc.position(), errEscapeType)
		}
		if err := checkEscape(esc.str); err != nil {
			return triUnknown, evalErr(n.esc.position(), err)
		}
	}
	if x.kind != KindString || pat.kind != KindString {
		return triUnknown, nil
	}
	if err := checkPattern(pat.str, esc.str); err != nil {
		return triUnknown, evalErr(n.pat.position(), err)
	}
	return triOf(likeMatch(x.str, pat.str, esc.str) != n.not), nil
}
