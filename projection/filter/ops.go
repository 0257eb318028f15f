package filter

import (
	"errors"
	"math"
	"strings"
)

// tri is a truth value of SQL's three-valued logic. The zero tri is unknown.
type tri uint8

const (
	triUnknown tri = iota
	triFalse
	triTrue
)

func triOf(b bool) tri {
	if b {
		return triTrue
	}
	return triFalse
}

// not is NOT in three-valued logic: NOT unknown is unknown.
func (t tri) not() tri {
	switch t {
	case triTrue:
		return triFalse
	case triFalse:
		return triTrue
	}
	return triUnknown
}

type cmpOp uint8

const (
	opEq cmpOp = iota
	opNe
	opLt
	opLe
	opGt
	opGe
)

var cmpOpText = [...]string{"=", "<>", "<", "<=", ">", ">="}

type arithOp uint8

const (
	opAdd arithOp = iota
	opSub
	opMul
	opDiv
	opMod
)

var arithOpText = [...]string{"+", "-", "*", "/", "%"}

var (
	errDivideByZero     = errors.New("division by zero")
	errTimestampRange   = errors.New("timestamp arithmetic leaves DateTime's range")
	errDurationOverflow = errors.New("duration arithmetic overflows TimeSpan")
)

func isNumeric(k Kind) bool { return k == KindInt || k == KindDouble || k == KindDecimal }

// compareValues applies a comparison. Numbers promote to each other as in
// C# (int to double); strings compare ordinally and case-sensitively;
// timestamps and durations compare among themselves; bools and uuids only
// for equality. Anything else (a null, mismatched types such as a string
// against a number) is unknown, never an error.
func compareValues(op cmpOp, a, b Value) tri {
	switch {
	case a.kind == KindInt && b.kind == KindInt:
		return triOf(ordered(op, cmpInt(a.Int(), b.Int())))
	case isNumeric(a.kind) && isNumeric(b.kind):
		return triOf(cmpFloat(op, a.Float(), b.Float()))
	case a.kind != b.kind:
		return triUnknown
	}
	switch a.kind {
	case KindString:
		return triOf(ordered(op, strings.Compare(a.str, b.str)))
	case KindTimestamp, KindDuration:
		return triOf(ordered(op, cmpInt(int64(a.bits), int64(b.bits))))
	case KindBool, KindUUID:
		eq := a.bits == b.bits && a.lo == b.lo
		switch op {
		case opEq:
			return triOf(eq)
		case opNe:
			return triOf(!eq)
		}
	}
	return triUnknown
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func ordered(op cmpOp, c int) bool {
	switch op {
	case opEq:
		return c == 0
	case opNe:
		return c != 0
	case opLt:
		return c < 0
	case opLe:
		return c <= 0
	case opGt:
		return c > 0
	}
	return c >= 0
}

// cmpFloat follows IEEE 754 as C# does: NaN is unequal to everything.
func cmpFloat(op cmpOp, a, b float64) bool {
	switch op {
	case opEq:
		return a == b
	case opNe:
		return a != b
	case opLt:
		return a < b
	case opLe:
		return a <= b
	case opGt:
		return a > b
	}
	return a >= b
}

// arith applies an arithmetic operator with C#'s promotions: int op int is
// int (wrapping, / truncating, % the C# remainder), decimal beats int,
// double beats both. + on two strings concatenates. Timestamp - timestamp
// is a duration; timestamp ± duration a timestamp; duration ± duration a
// duration. A null operand or a mismatch gives null (unknown); integer or
// decimal division by zero and leaving DateTime's or TimeSpan's range are
// errors, as the C# operators throw.
func arith(op arithOp, a, b Value) (Value, error) {
	switch {
	case a.kind == KindInt && b.kind == KindInt:
		return arithInt(op, a.Int(), b.Int())
	case isNumeric(a.kind) && isNumeric(b.kind):
		if a.kind == KindDouble || b.kind == KindDouble {
			return DoubleValue(arithFloat(op, a.Float(), b.Float())), nil
		}
		if (op == opDiv || op == opMod) && b.Float() == 0 {
			return Value{}, errDivideByZero
		}
		return DecimalValue(arithFloat(op, a.Float(), b.Float())), nil
	case a.kind == KindString && b.kind == KindString && op == opAdd:
		return StringValue(a.str + b.str), nil
	case a.kind == KindDuration && b.kind == KindTimestamp && op == opAdd:
		return arithTime(op, b, a)
	case a.kind == KindTimestamp || a.kind == KindDuration:
		return arithTime(op, a, b)
	}
	return Value{}, nil
}

func arithInt(op arithOp, a, b int64) (Value, error) {
	switch op {
	case opAdd:
		return IntValue(a + b), nil
	case opSub:
		return IntValue(a - b), nil
	case opMul:
		return IntValue(a * b), nil
	}
	if b == 0 {
		return Value{}, errDivideByZero
	}
	if op == opDiv {
		return IntValue(a / b), nil
	}
	return IntValue(a % b), nil
}

func arithFloat(op arithOp, a, b float64) float64 {
	switch op {
	case opAdd:
		return a + b
	case opSub:
		return a - b
	case opMul:
		return a * b
	case opDiv:
		return a / b
	}
	return math.Mod(a, b)
}

func arithTime(op arithOp, a, b Value) (Value, error) {
	x, y := int64(a.bits), int64(b.bits)
	switch {
	case a.kind == KindTimestamp && b.kind == KindTimestamp && op == opSub:
		return DurationTicks(x - y), nil // both in [0, maxDateTicks]: no overflow
	case a.kind == KindTimestamp && b.kind == KindDuration && (op == opAdd || op == opSub):
		if op == opSub {
			if y == math.MinInt64 {
				return Value{}, errTimestampRange
			}
			y = -y
		}
		if y > maxDateTicks || y < -maxDateTicks || x+y < 0 || x+y > maxDateTicks {
			return Value{}, errTimestampRange
		}
		return TicksValue(x + y), nil
	case a.kind == KindDuration && b.kind == KindDuration && (op == opAdd || op == opSub):
		r := x + y
		overflow := (y > 0 && r < x) || (y < 0 && r > x)
		if op == opSub {
			r = x - y
			overflow = (y > 0 && r > x) || (y < 0 && r < x)
		}
		if overflow {
			return Value{}, errDurationOverflow
		}
		return DurationTicks(r), nil
	}
	return Value{}, nil
}

// negate is unary minus: numbers and durations; anything else is unknown.
func negate(v Value) (Value, error) {
	switch v.kind {
	case KindInt:
		return IntValue(-v.Int()), nil
	case KindDouble:
		return DoubleValue(-v.Float()), nil
	case KindDecimal:
		return DecimalValue(-v.Float()), nil
	case KindDuration:
		if int64(v.bits) == math.MinInt64 {
			return Value{}, errDurationOverflow
		}
		return DurationTicks(-int64(v.bits)), nil
	}
	return Value{}, nil
}

// identity is unary plus: numbers and durations pass; anything else is unknown.
func identity(v Value) Value {
	if isNumeric(v.kind) || v.kind == KindDuration {
		return v
	}
	return Value{}
}
