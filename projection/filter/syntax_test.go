package filter

import (
	"errors"
	"strings"
	"testing"
)

// TestSyntaxErrors checks that a refused filter names the line, column and
// cause, so the broker's 400 says where to look.
func TestSyntaxErrors(t *testing.T) {
	for _, c := range []struct {
		expr         string
		line, column int
		msg          string
	}{
		{"", 1, 1, "expected a value, found the end"},
		{"   ", 1, 4, "expected a value"},
		{"color = = 'x'", 1, 9, "expected a value, found '='"},
		{"color = 'x", 1, 9, "unterminated string"},
		{"[color = 'x'", 1, 1, "unterminated identifier"},
		{`"color = 'x'`, 1, 1, "unterminated identifier"},
		{"[] = 1", 1, 1, "empty identifier"},
		{"color # 1", 1, 7, "unexpected character '#'"},
		{"a = 1 AND\n  b ! 2", 2, 5, "unexpected character '!'"},
		{"a = 1\nAND b = 2\nOR c ==", 3, 7, "expected a value, found '='"},
		{"TRUE", 1, 1, "a filter needs a condition"},
		{"flag", 1, 1, "a filter needs a condition"},
		{"flag AND a = 1", 1, 1, "AND needs a condition"},
		{"a = 1 OR 2", 1, 10, "OR needs a condition"},
		{"NOT flag", 1, 5, "NOT needs a condition"},
		{"a b", 1, 3, "expected a comparison, IN, LIKE or IS after a value, found 'b'"},
		{"a = 1 b", 1, 7, "expected AND, OR or the end of the filter, found 'b'"},
		{"a = 1 = 2", 1, 7, "expected AND, OR or the end"},
		{"(a = 1) = TRUE", 1, 4, "'=' needs a value, found a condition"},
		{"(a = 1) + 1 = 2", 1, 4, "'+' needs a value, found a condition"},
		{"-(a = 1) = 2", 1, 5, "unary - needs a value"},
		{"a IN ()", 1, 7, "expected a value"},
		{"a IN (1, 2", 1, 11, "expected ',' or ')' in the IN list"},
		{"a IN 1", 1, 6, "expected '(' after IN"},
		{"a NOT = 1", 1, 7, "expected IN or LIKE after NOT"},
		{"a IS 1", 1, 6, "expected NULL after IS"},
		{"1 IS NULL", 1, 3, "IS NULL needs a property"},
		{"EXISTS a", 1, 8, "expected '(' after EXISTS"},
		{"EXISTS(1)", 1, 8, "expected a property name"},
		{"a LIKE 5", 1, 8, "the LIKE pattern must be a string"},
		{"a LIKE 'x' ESCAPE 5", 1, 19, "the LIKE escape must be a string"},
		{"a LIKE 'x' ESCAPE 'ab'", 1, 19, "exactly one character"},
		{"a LIKE 'x' ESCAPE ''", 1, 19, "exactly one character"},
		{`a LIKE 'x\' ESCAPE '\'`, 1, 8, "ends with its escape character"},
		{"sys.NoSuchProp = 1", 1, 5, "unknown system property sys.NoSuchProp"},
		{"sys.LockToken = 1", 1, 5, "sys.LockToken has no value when rules run"},
		{"sys.1 = 1", 1, 5, "expected a property name after sys."},
		{"foo.bar = 1", 1, 1, "unknown scope foo"},
		{"nosuch(1) = 1", 1, 1, "unknown function nosuch()"},
		{"newid(1) = 1", 1, 7, "newid() takes no argument"},
		{"@p = 1", 1, 1, "the parameter @p is not defined"},
		{"@ = 1", 1, 1, "expected a parameter name"},
		{"a = 99999999999999999999", 1, 5, "out of range for int64"},
		{"a = 9223372036854775808", 1, 5, "out of range for int64"},
		{"a = 1e999", 1, 5, "out of range for a double"},
		{"a = 1e", 1, 5, "the exponent has no digits"},
		{"(a = 1", 1, 7, "expected ')'"},
		{"a = 1)", 1, 6, "expected AND, OR or the end"},
		{"a = 1;", 1, 6, "expected AND, OR or the end"},
		{"SET a = 1", 1, 1, "expected a value, found 'SET'"},
		{"é = 1 AND ü ==", 1, 14, "expected a value"},
	} {
		_, err := CompileSQL(c.expr)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("CompileSQL(%q) = %v, want a *SyntaxError", c.expr, err)
			continue
		}
		if se.Pos.Line != c.line || se.Pos.Column != c.column || !strings.Contains(se.Msg, c.msg) {
			t.Errorf("CompileSQL(%q) = %q at %v, want %q at line %d, column %d", c.expr, se.Msg, se.Pos, c.msg, c.line, c.column)
		}
		if !strings.HasPrefix(err.Error(), se.Pos.String()+": ") {
			t.Errorf("error text %q does not start with its position", err)
		}
	}
}

// TestGrammar accepts what the Service Bus docs write: case-insensitive
// keywords and names, scopes, delimited names, parameters, functions.
func TestGrammar(t *testing.T) {
	m := props("color", StringValue("red"), "Quantity", IntValue(12), "set", IntValue(1),
		"a.b", IntValue(2), `we"ird]`, IntValue(3), "sys", IntValue(4))
	m.Label = StringValue("order-1")
	m.To = StringValue("x")
	for _, expr := range []string{
		"color = 'red'",
		"COLOR = 'red'",
		"user.color = 'red'",
		"USER.Color = 'red'",
		"user . color = 'red'",
		"sys.Label = 'order-1'",
		"sys.SUBJECT = 'order-1'",
		"SYS.label LIKE 'order%'",
		"color = 'red' and quantity > 10 Or 1 = 0",
		"NOT color <> 'red'",
		"color != 'blue'",
		"quantity >= 12 AND quantity <= 12 AND quantity < 13 AND quantity > 11",
		"[set] = 1",
		"user.set = 1",
		"[a.b] = 2",
		`"a.b" = 2`,
		`[we"ird]]] = 3`,
		`"we""ird]" = 3`,
		"sys = 4",
		"user.sys = 4",
		"property('color') = 'red'",
		"P('COLOR') = 'red'",
		"Property('col' + 'or') = 'red'",
		"1=1 OR NewId() = 1",
		"@Color = color",
		"@quantity < quantity",
		"sys.To IN ('x')",
		"color NOT LIKE 'b%'",
		"color LIKE 'r' + '%'",
		"color LIKE '%' ESCAPE '!'",
		"((color = 'red'))",
		"(quantity + 1) * 2 = 26",
		"((quantity)) = 12",
		"color = 'red' -- not a comment, a minus\n - 0 = 0 OR 1=1",
	} {
		if strings.Contains(expr, "--") {
			// SQL comments are not in the Service Bus grammar: -- is two minus signs.
			if _, err := CompileSQL(expr); err == nil {
				t.Errorf("%q compiled", expr)
			}
			continue
		}
		f, err := CompileSQLParams(expr, map[string]Value{"color": StringValue("red"), "@Quantity": IntValue(11)})
		if err != nil {
			t.Errorf("CompileSQL(%q): %v", expr, err)
			continue
		}
		if ok, err := f.Match(m); !ok || err != nil {
			t.Errorf("%q = %v, %v; want true", expr, ok, err)
		}
		if f.Expression() != expr {
			t.Errorf("Expression() = %q", f.Expression())
		}
	}
	if _, err := CompileSQLParams("@x = 1", map[string]Value{"x": IntValue(1), "@X": IntValue(2)}); err == nil {
		t.Error("an ambiguous parameter compiled")
	}
}

// TestCanonicalString checks String's form and that it compiles back to
// itself.
func TestCanonicalString(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"1=1", "1 = 1"},
		{"color='red' and Quantity>10", "user.color = 'red' AND user.Quantity > 10"},
		{"sys.subject like 'a\\%' escape '\\'", `sys.Label LIKE 'a\%' ESCAPE '\'`},
		{"a = 1 OR b = 2 AND c = 3", "user.a = 1 OR user.b = 2 AND user.c = 3"},
		{"(a = 1 OR b = 2) AND c = 3", "(user.a = 1 OR user.b = 2) AND user.c = 3"},
		{"NOT (a = 1 AND b = 2)", "NOT (user.a = 1 AND user.b = 2)"},
		{"NOT a = 1", "NOT user.a = 1"},
		{"((a = 1 OR b = 1) OR c = 1)", "(user.a = 1 OR user.b = 1) OR user.c = 1"},
		{"a - (b - c) = 1", "user.a - (user.b - user.c) = 1"},
		{"(a - b) - c = 1", "user.a - user.b - user.c = 1"},
		{"a * (b + c) = -5", "user.a * (user.b + user.c) = -5"},
		{"-(5) = - -5", "- +5 = - -5"},
		{"-(-5) = +(5) + -(a)", "- -5 = + +5 + -user.a"},
		{"- - - a = -(a + 1) * 2", "- - -user.a = -(user.a + 1) * 2"},
		{"x = 2.0", "user.x = 2.0"},
		{"x = 1e21", "user.x = 1e+21"},
		{"[in] = 'it''s'", "user.[in] = 'it''s'"},
		{"[a b] IS NOT NULL", "user.[a b] IS NOT NULL"},
		{"exists([x])", "EXISTS(user.x)"},
		{"a not in (1,2)", "user.a NOT IN (1, 2)"},
		{"p('x') = newid()", "property('x') = newid()"},
		{"@p = 1", "@p = 1"},
	} {
		f, err := CompileSQLParams(c.in, map[string]Value{"p": IntValue(1)})
		if err != nil {
			t.Fatalf("CompileSQL(%q): %v", c.in, err)
		}
		if got := f.String(); got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
		g, err := CompileSQLParams(f.String(), map[string]Value{"p": IntValue(1)})
		if err != nil || g.String() != f.String() {
			t.Errorf("round trip of %q: %v, %q", f.String(), err, g)
		}
	}
}
