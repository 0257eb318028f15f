// Package filter implements Service Bus subscription rules: SQL filters,
// correlation filters, TrueFilter and FalseFilter, and SQL rule actions. It
// is pure and deterministic: it reads nothing but the Message it is given
// (no clock, no randomness; newid() asks Message.NewID), so a topic's
// projection can run it and replay gives the same answers.
//
// A rule is compiled once, when it is created: CompileSQL, CompileAction
// and CompileCorrelation refuse a bad rule with a *SyntaxError naming the
// line and column, which the broker answers with 400. Evaluating a compiled
// filter allocates nothing on the common path; an *EvalError from Match or
// Apply makes the broker dead-letter the message in that subscription (with
// DeadLetteringOnFilterEvaluationExceptions) or drop it there.
//
// # Grammar
//
// The language of the Service Bus doc "SQL filter syntax", with SQL-92
// precedence (the doc gives none), loosest first:
//
//	filter   = or
//	or       = and { OR and }
//	and      = not { AND not }
//	not      = NOT not | pred
//	pred     = expr ( cmp expr | [NOT] IN "(" expr {"," expr} ")"
//	                | [NOT] LIKE expr [ESCAPE expr] )
//	         | prop IS [NOT] NULL | EXISTS "(" prop ")" | "(" or ")"
//	cmp      = "=" | "<>" | "!=" | "<" | "<=" | ">" | ">="
//	expr     = term { ("+" | "-") term }
//	term     = unary { ("*" | "/" | "%") unary }
//	unary    = ("+" | "-") unary | primary
//	primary  = literal | @param | newid() | property(expr) | p(expr) | prop | "(" expr ")"
//	prop     = [ sys. | user. ] name
//	name     = letter {letter | digit | _} | "[" … "]" | '"' … '"'
//	literal  = int64 | double | 'string' | TRUE | FALSE | NULL
//	action   = stmt { [";"] stmt } [";"]
//	stmt     = SET prop "=" expr | REMOVE prop
//
// Keywords and property names are case-insensitive; string comparisons and
// LIKE are not. An unscoped name is a user (application) property. The
// closing character of a [name], "name" or 'string' is doubled to stand
// for itself. Digits alone are an int64; a point or an exponent makes a
// double. A filter must be a condition: TRUE or a property alone is
// refused (1=1 is the idiom). SET and REMOVE are reserved words as well.
//
// System properties (sys.) are the Message fields; an unknown one, and the
// lock fields that have no value while rules run, are refused at creation.
// sys.Subject is accepted for sys.Label. property(name) reads user
// properties only.
//
// # Values and operators
//
// Numbers promote to each other as in C# (int to decimal to double);
// integer arithmetic wraps, / truncates and % is the C# remainder; + on two
// strings concatenates; timestamp - timestamp is a duration. Comparing
// mismatched types (the string "15" with 10) is unknown, not an error.
// Integer or decimal division by zero, a LIKE escape that is not one
// character, and timestamps leaving DateTime's range are evaluation errors.
//
// # Three-valued logic
//
// A missing user property, and any null, is unknown (U), and so is every
// comparison, arithmetic, LIKE or IN it reaches. U AND F is F, U OR T is T,
// NOT U is U, anything else with U is U. IS NULL is true for a missing or
// null property, EXISTS for a present one even if null. A filter matches
// only when it is true: unknown is no match. AND and OR evaluate left to
// right and stop once decided, so an error after the deciding operand is
// never raised.
//
// # Limits
//
// An expression has at most MaxExpressionLength (1,024) characters, the
// Service Bus limit for filters and actions; an action at most
// MaxActionStatements (32) statements, the Service Bus limit on its
// expressions. walbus adds MaxDepth (64) levels of nesting (parentheses,
// NOT, signs, function arguments) and MaxNodes (1,024) elements, so
// evaluation recurses at most that deep and visits each element once per
// message. LIKE uses a two-pointer matcher that never backtracks past the
// last %: at worst O(len(pattern) × len(input)), never exponential, and
// plain prefix, suffix, contains and exact patterns use strings functions.
package filter
