package filter

import "fmt"

// Pos is a place in an expression: a byte offset and the 1-based line and
// column (counted in characters) a person would look for.
type Pos struct {
	Offset int
	Line   int
	Column int
}

func (p Pos) String() string { return fmt.Sprintf("line %d, column %d", p.Line, p.Column) }

// SyntaxError is why an expression was refused when the rule was created:
// a lexical or grammar error, an unknown system property, a property an
// action may not set, an undefined parameter, or a limit exceeded. The
// broker answers it with 400 and this text.
type SyntaxError struct {
	Pos Pos
	Msg string
}

func (e *SyntaxError) Error() string { return e.Pos.String() + ": " + e.Msg }

// EvalError is why a compiled filter or action failed on one message:
// integer division by zero, a LIKE escape that is not one character,
// timestamp arithmetic out of range, newid() without an ID source, or an
// action giving a system property a value of the wrong type. The broker
// dead-letters the message in that subscription when
// DeadLetteringOnFilterEvaluationExceptions is set, else drops it there.
type EvalError struct {
	Pos Pos
	Msg string
}

func (e *EvalError) Error() string { return e.Pos.String() + ": " + e.Msg }

func evalErr(p Pos, err error) error { return &EvalError{Pos: p, Msg: err.Error()} }
