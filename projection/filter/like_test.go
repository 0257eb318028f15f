package filter

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// chars splits s into LIKE characters: UTF-8 sequences, invalid bytes alone.
func chars(s string) []string {
	var out []string
	for len(s) > 0 {
		_, w := utf8.DecodeRuneInString(s)
		out = append(out, s[:w])
		s = s[w:]
	}
	return out
}

// likeReference is the obvious dynamic-programming matcher, quadratic in
// time and space, against which the linear one is checked.
func likeReference(s, pattern, escape string) bool {
	type tok struct {
		kind byte // 'l' literal, '_' one, '%' any run
		lit  string
	}
	var toks []tok
	pc := chars(pattern)
	for i := 0; i < len(pc); i++ {
		switch {
		case escape != "" && pc[i] == escape:
			i++
			toks = append(toks, tok{'l', pc[i]})
		case pc[i] == "%":
			toks = append(toks, tok{kind: '%'})
		case pc[i] == "_":
			toks = append(toks, tok{kind: '_'})
		default:
			toks = append(toks, tok{'l', pc[i]})
		}
	}
	sc := chars(s)
	// can[i][j]: the first i tokens match the first j characters.
	can := make([][]bool, len(toks)+1)
	for i := range can {
		can[i] = make([]bool, len(sc)+1)
	}
	can[0][0] = true
	for i, tk := range toks {
		for j := 0; j <= len(sc); j++ {
			switch tk.kind {
			case '%':
				can[i+1][j] = can[i][j] || (j > 0 && can[i+1][j-1])
			case '_':
				can[i+1][j] = j > 0 && can[i][j-1]
			default:
				can[i+1][j] = j > 0 && can[i][j-1] && sc[j-1] == tk.lit
			}
		}
	}
	return can[len(toks)][len(sc)]
}

func TestLike(t *testing.T) {
	for _, c := range []struct {
		s, pattern, escape string
		want               bool
	}{
		{"", "", "", true},
		{"a", "", "", false},
		{"", "%", "", true},
		{"", "%%%", "", true},
		{"", "_", "", false},
		{"abc", "abc", "", true},
		{"abc", "ABC", "", false},
		{"abc", "a%", "", true},
		{"abc", "%c", "", true},
		{"abc", "%b%", "", true},
		{"abc", "%%b%%", "", true},
		{"abc", "a%%c", "", true},
		{"ac", "a%c", "", true},
		{"abc", "a%b%c", "", true},
		{"abc", "a%c%b", "", false},
		{"abc", "___", "", true},
		{"abc", "__", "", false},
		{"abc", "_%_", "", true},
		{"ab", "_%_%_", "", false},
		{"aaaa", "%a%a%a%a%", "", true},
		{"aaa", "%a%a%a%a%", "", false},
		{"mississippi", "%iss%ppi", "", true},
		{"mississippi", "m%ss%ss%", "", true},
		{"mississippi", "m%ss%ss%ss%", "", false},
		{"日本語", "_本_", "", true},
		{"日本語", "日%", "", true},
		{"日本語", "___", "", true},
		{"日本語", "_________", "", false},
		{"\xff\xfe", "__", "", true},
		{"\xff", "\xfe", "", false},
		{"ABC%", `ABC\%`, `\`, true},
		{"ABCD", `ABC\%`, `\`, false},
		{"a_b", `a\_b`, `\`, true},
		{"axb", `a\_b`, `\`, false},
		{`a\b`, `a\\b`, `\`, true},
		{"a%", "a%%", "%", true},
		{"ab", "a%%", "%", false},
		{"a_", "a__", "_", true},
		{"ab", "a__", "_", false},
		{"a!b", "a!!b", "!", true},
		{"100%", "%!%", "!", true},
		{"100", "%!%", "!", false},
		{"x%y", "x|%y", "|", true},
		{"x日y", "x日%", "日", false},
		{"x%", "x日%", "日", true},
		{"本", "%\xac", "", false}, // found by FuzzLike: a byte suffix is not a character suffix
		{"本", "\xe6%", "", false},
		{"x本y", "%\x9c%", "", false},
		{"\xac", "%\xac", "", true},
	} {
		if got := likeReference(c.s, c.pattern, c.escape); got != c.want {
			t.Errorf("reference: %q LIKE %q ESCAPE %q = %v, want %v", c.s, c.pattern, c.escape, got, c.want)
		}
		p, err := compileLike(c.pattern, c.escape)
		if err != nil {
			t.Errorf("compileLike(%q, %q): %v", c.pattern, c.escape, err)
			continue
		}
		if got := p.match(c.s); got != c.want {
			t.Errorf("%q LIKE %q ESCAPE %q = %v, want %v (shape %d)", c.s, c.pattern, c.escape, got, c.want, p.shape)
		}
		if got := likeMatch(c.s, c.pattern, c.escape); got != c.want {
			t.Errorf("likeMatch(%q, %q, %q) = %v, want %v", c.s, c.pattern, c.escape, got, c.want)
		}
	}
}

func TestLikeShapes(t *testing.T) {
	for _, c := range []struct {
		pattern, escape string
		shape           likeShape
		literal         string
	}{
		{"order%", "", likePrefix, "order"},
		{"%bus", "", likeSuffix, "bus"},
		{"%bus%", "", likeContains, "bus"},
		{"%%bus%%", "", likeContains, "bus"},
		{"bus", "", likeExact, "bus"},
		{"", "", likeExact, ""},
		{"%", "", likeAny, ""},
		{"%%", "", likeAny, ""},
		{"a%b", "", likeGeneral, ""},
		{"a_", "", likeGeneral, ""},
		{`a\%`, `\`, likeExact, "a%"},
		{`a\%%`, `\`, likePrefix, "a%"},
		{`%\_%`, `\`, likeContains, "_"},
		{"%\xac", "", likeGeneral, ""},
		{"\xac", "", likeExact, "\xac"},
	} {
		p, err := compileLike(c.pattern, c.escape)
		if err != nil {
			t.Fatal(err)
		}
		if p.shape != c.shape || p.literal != c.literal {
			t.Errorf("%q ESCAPE %q: shape %d literal %q, want %d %q", c.pattern, c.escape, p.shape, p.literal, c.shape, c.literal)
		}
	}
}

// TestLikeDynamic covers patterns and escapes that come from the message,
// checked at evaluation rather than at creation.
func TestLikeDynamic(t *testing.T) {
	m := props("s", StringValue("ABC%"), "pat", StringValue(`ABC\%`), "esc", StringValue(`\`),
		"bad", StringValue(`ABC\`), "n", IntValue(1))
	for _, c := range []struct {
		expr string
		want tri
	}{
		{`s LIKE pat ESCAPE esc`, triTrue},
		{`s LIKE pat ESCAPE '\'`, triTrue},
		{`s LIKE 'ABC\%' ESCAPE esc`, triTrue},
		{`s NOT LIKE pat ESCAPE esc`, triFalse},
		{`s LIKE pat`, triFalse},
		{`n LIKE '1'`, triUnknown},
		{`s LIKE n`, triUnknown},
		{`n LIKE pat ESCAPE esc`, triUnknown},
		{`s LIKE NULL`, triUnknown},
		{`s LIKE 'x' ESCAPE NULL`, triUnknown},
		{`s LIKE s`, triTrue},
	} {
		if got := evalTri(t, c.expr, m); got != c.want {
			t.Errorf("%s = %s, want %s", c.expr, triName[got], triName[c.want])
		}
	}
	f, _ := CompileSQL(`s LIKE bad ESCAPE '\'`)
	if _, err := f.Match(m); err == nil {
		t.Error("a pattern ending in its escape evaluated without error")
	}
}

// TestLikeLinear runs a pattern that makes a backtracking matcher take
// exponential time; the two-pointer matcher needs at most
// len(s)×len(pattern) steps, so this returns at once (a regression would
// show as the test timing out, not as a timed assertion).
func TestLikeLinear(t *testing.T) {
	s := strings.Repeat("a", 100_000)
	pattern := strings.Repeat("%a", 30) + "%b"
	if likeMatch(s, pattern, "") || likeReference(s[:200], pattern, "") {
		t.Fatal("matched")
	}
	p, _ := compileLike(strings.Repeat("_", 500)+"%", "")
	if p.match(s[:499]) || !p.match(s) {
		t.Fatal("_ run")
	}
}
