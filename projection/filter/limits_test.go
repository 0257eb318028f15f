package filter

import (
	"errors"
	"strings"
	"testing"
)

func TestLimits(t *testing.T) {
	ok := func(expr string) {
		t.Helper()
		if _, err := CompileSQL(expr); err != nil {
			t.Errorf("CompileSQL(%d chars): %v", len(expr), err)
		}
	}
	refused := func(expr, msg string, column int) {
		t.Helper()
		_, err := CompileSQL(expr)
		var se *SyntaxError
		if !errors.As(err, &se) || !strings.Contains(se.Msg, msg) || se.Pos.Column != column {
			t.Errorf("CompileSQL(%d chars) = %v, want %q at column %d", len(expr), err, msg, column)
		}
	}

	// Length: Service Bus's 1,024 characters, counted as characters.
	pad := func(n int) string { return "a = '" + strings.Repeat("x", n-6) + "'" }
	ok(pad(MaxExpressionLength))
	refused(pad(MaxExpressionLength+1), "at most 1024", 1025)
	ok("a = '" + strings.Repeat("é", MaxExpressionLength-6) + "'") // 2 bytes each, one character

	// Nesting: parentheses, NOT and signs each count a level.
	nest := func(n int) string { return strings.Repeat("(", n) + "a = 1" + strings.Repeat(")", n) }
	ok(nest(MaxDepth))
	refused(nest(MaxDepth+1), "more than 64 levels", MaxDepth+1)
	ok(strings.Repeat("NOT ", MaxDepth) + "a = 1")
	refused(strings.Repeat("NOT ", MaxDepth+1)+"a = 1", "more than 64 levels", 4*MaxDepth+1)
	ok("a = " + strings.Repeat("-", MaxDepth) + "a")
	refused("a = "+strings.Repeat("-", MaxDepth+1)+"a", "more than 64 levels", 5+MaxDepth)

	// Long flat chains are fine: AND and OR are n-ary, + is a loop.
	ok(strings.Repeat("a = 1 OR ", 100) + "a = 1")
	ok("a = " + strings.Repeat("1+", 500) + "1")
	ok("a IN (" + strings.Repeat("1,", 500) + "1)")

	// Nodes: only reachable past the length limit, so test with it raised.
	lim := defaultLimits
	lim.length = 1 << 20
	expr := "a = " + strings.Repeat("1+", MaxNodes) + "1"
	if _, err := compileSQL(expr, nil, lim); err == nil || !strings.Contains(err.Error(), "more than 1024 elements") {
		t.Errorf("%d nodes: %v", MaxNodes+2, err)
	}
}

func TestActionLimits(t *testing.T) {
	long := "SET a = '" + strings.Repeat("x", MaxExpressionLength) + "'"
	if _, err := CompileAction(long); err == nil {
		t.Error("an action over 1024 characters compiled")
	}
}
