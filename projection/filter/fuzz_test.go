package filter

import (
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"
)

// sampleMessage has properties under the names the seeds use, of every kind.
func sampleMessage() *Message {
	m := props(
		"a", IntValue(1), "b", StringValue("y"), "color", StringValue("red"), "quantity", IntValue(5),
		"price", DoubleValue(10.5), "flag", BoolValue(true), "x", NullValue(), "name", StringValue("abc"),
		"MessageProperty", IntValue(1), "StoreId", StringValue("Store2"), "property", StringValue("ABC%"),
		"d", DecimalValue(2), "t", TimeValue(date("2020-01-01T00:00:00Z")), "ttl", DurationTicks(1e7),
		"u", UUIDValue(UUID{1}), "bin", OpaqueValue(), "zero", IntValue(0),
	)
	m.Label = StringValue("order-7")
	m.To = StringValue("Store6")
	m.CorrelationID = StringValue("abc-1")
	m.SequenceNumber = IntValue(42)
	m.EnqueuedTimeUtc = TimeValue(date("2021-01-01T00:00:00Z"))
	m.TimeToLive = DurationTicks(1 << 62)
	n := byte(0)
	m.NewID = func() UUID { n++; return UUID{15: n} }
	return m
}

// relaxed lets canonical text, which can be longer than its source, compile.
var relaxed = limits{length: 1 << 20, nodes: MaxNodes, depth: MaxDepth, statements: MaxActionStatements}

func checkSyntaxError(t *testing.T, src string, err error) {
	var se *SyntaxError
	if !errors.As(err, &se) {
		t.Fatalf("%q: error %T %v is not a *SyntaxError", src, err, err)
	}
	if se.Pos.Offset < 0 || se.Pos.Offset > len(src) || se.Pos.Line < 1 || se.Pos.Column < 1 ||
		se.Pos.Column > utf8.RuneCountInString(src)+1 {
		t.Fatalf("%q: position %+v out of range", src, se.Pos)
	}
}

func checkEvalError(t *testing.T, src string, err error) {
	var ee *EvalError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("%q: error %T %v is not an *EvalError", src, err, err)
	}
}

// FuzzCompileSQL: compiling never panics and refuses only with a
// positioned *SyntaxError; a compiled filter evaluates without panicking;
// its canonical text compiles to the same text and the same verdict.
func FuzzCompileSQL(f *testing.F) {
	for _, c := range sqlCases {
		f.Add(c.filter)
	}
	for _, s := range []string{
		"user.color = 'red' AND sys.Label LIKE 'order%' AND quantity > 10",
		"NOT (a + b * -3 % 2 <> d) OR t - t = ttl", "x IN (1, 'a', NULL, newid())",
		"name LIKE p('b') ESCAPE '!'", "[we]]ird] = \"q\"\"x\"", "-9223372036854775808 = a",
		"a / zero = 1", "EXISTS(sys.To) AND sys.SequenceNumber >= 42", "1e308 * 10 > 1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		flt, err := CompileSQL(src)
		if err != nil {
			checkSyntaxError(t, src, err)
			return
		}
		m := sampleMessage()
		ok, err := flt.Match(m)
		checkEvalError(t, src, err)
		canon := flt.String()
		again, err2 := compileSQL(canon, nil, relaxed)
		if err2 != nil {
			t.Fatalf("%q: canonical %q does not compile: %v", src, canon, err2)
		}
		if again.String() != canon {
			t.Fatalf("%q: canonical %q reads back as %q", src, canon, again.String())
		}
		ok2, err2 := again.Match(sampleMessage())
		if ok2 != ok || (err == nil) != (err2 == nil) {
			t.Fatalf("%q: %v, %v; canonical %q: %v, %v", src, ok, err, canon, ok2, err2)
		}
	})
}

// FuzzLike: the linear matcher and its fast paths agree with the
// quadratic reference on short inputs.
func FuzzLike(f *testing.F) {
	for _, s := range [][3]string{
		{"abc", "a%c", ""}, {"ABC%", `ABC\%`, `\`}, {"mississippi", "%iss%ppi", ""}, {"", "%", ""},
		{"日本語", "_本%", ""}, {"a%", "a%%", "%"}, {"\xff", "_", ""}, {"aaa", "%a%a%a%a", ""},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, s, pattern, escape string) {
		if len(s) > 64 || len(pattern) > 64 {
			return
		}
		p, err := compileLike(pattern, escape)
		if err != nil {
			if escape == "" || checkEscape(escape) == nil && checkPattern(pattern, escape) == nil {
				t.Fatalf("compileLike(%q, %q): %v", pattern, escape, err)
			}
			return
		}
		want := likeReference(s, pattern, escape)
		if got := likeMatch(s, pattern, escape); got != want {
			t.Fatalf("likeMatch(%q, %q, %q) = %v, reference %v", s, pattern, escape, got, want)
		}
		if got := p.match(s); got != want {
			t.Fatalf("compiled (shape %d) %q LIKE %q ESCAPE %q = %v, reference %v", p.shape, s, pattern, escape, got, want)
		}
	})
}

// FuzzCompileAction: compiling never panics; a compiled action applies
// without panicking or touching its input, and its overlay replays to the
// same message; its canonical text reads back as itself.
func FuzzCompileAction(f *testing.F) {
	for _, s := range []string{
		"SET quantity = quantity / 2; REMOVE priority;SET sys.CorrelationId = 'low';",
		"SET sys.SessionId = newid()", "set sys.Label = sys.Label + '!' remove color",
		"SET [a b] = 1 SET a = d * 2 SET t = t + ttl", "SET sys.TimeToLive = ttl; SET sys.To = u",
		"SET a = 1 / zero", "REMOVE sys.ReplyTo;", "SET sys.SequenceNumber = 1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		a, err := CompileAction(src)
		if err != nil {
			checkSyntaxError(t, src, err)
			return
		}
		m, before := sampleMessage(), sampleMessage()
		overlay, err := a.Apply(m)
		checkEvalError(t, src, err)
		if m.NewID, before.NewID = nil, nil; !reflect.DeepEqual(m, before) {
			t.Fatalf("%q: Apply modified its input", src)
		}
		if err == nil {
			once := overlay.ApplyTo(m)
			twice := overlay.ApplyTo(&once)
			if !reflect.DeepEqual(once, twice) {
				t.Fatalf("%q: the overlay is not idempotent", src)
			}
		}
		canon := a.String()
		again, err := compileAction(canon, nil, relaxed)
		if err != nil || again.String() != canon {
			t.Fatalf("%q: canonical %q reads back as %v, %v", src, canon, again, err)
		}
	})
}
