package filter

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// props builds a message with user properties from name, value pairs.
func props(kv ...any) *Message {
	m := &Message{}
	for i := 0; i < len(kv); i += 2 {
		m.Properties = append(m.Properties, Property{Name: kv[i].(string), Value: kv[i+1].(Value)})
	}
	return m
}

func withLabel(m *Message, label string) *Message { m.Label = StringValue(label); return m }

func date(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// sqlCase is one of the 48 SQL filter cases of the walbus topics reference
// (§7), which gathers them from the Service Bus docs, live SDK tests and
// issues. compileErr is the 1-based column of a refused expression.
type sqlCase struct {
	n          int
	filter     string
	params     map[string]Value
	msg        *Message
	want       bool
	compileErr int
}

var sqlCases = []sqlCase{
	{n: 1, filter: `1=1`, msg: props("a", IntValue(1)), want: true},
	{n: 1, filter: `1=1`, msg: &Message{}, want: true},
	{n: 2, filter: `1=0`, msg: props("a", IntValue(1))},
	{n: 3, filter: `color='blue' AND quantity=10`, msg: props("color", StringValue("blue"), "quantity", IntValue(10)), want: true},
	{n: 4, filter: `color='blue' AND quantity=10`, msg: props("color", StringValue("blue"), "quantity", IntValue(5))},
	{n: 5, filter: `Color = 'yellow'`, msg: props("color", StringValue("yellow")), want: true},
	{n: 6, filter: `sys.label ='yellow'`, msg: withLabel(&Message{}, "yellow"), want: true},
	{n: 7, filter: `sys.Label LIKE '%bus%'`, msg: withLabel(&Message{}, "servicebus"), want: true},
	{n: 8, filter: `sys.Label LIKE '%bus%'`, msg: &Message{}},
	{n: 9, filter: `sys.correlationid like 'abc-%'`, msg: &Message{CorrelationID: StringValue("abc-1")}, want: true},
	{n: 10, filter: `user.SuperHero like 'SuperMan%'`, msg: props("SuperHero", StringValue("SuperMan3")), want: true},
	{n: 11, filter: `MessageProperty = 'A'`, msg: &Message{}},
	{n: 12, filter: `MessageProperty IS NULL`, msg: &Message{}, want: true},
	{n: 13, filter: `MessageProperty IS NULL`, msg: props("MessageProperty", NullValue()), want: true},
	{n: 14, filter: `MessageProperty IS NOT NULL`, msg: props("MessageProperty", StringValue("x")), want: true},
	{n: 15, filter: `EXISTS(MessageProperty)`, msg: &Message{}},
	{n: 16, filter: `EXISTS(MessageProperty)`, msg: props("MessageProperty", StringValue("x")), want: true},
	{n: 17, filter: `NOT (MessageProperty = 'A')`, msg: &Message{}},
	{n: 18, filter: `MessageProperty = 'A' OR 1=1`, msg: &Message{}, want: true},
	{n: 19, filter: `MessageProperty = 'A' OR 1=0`, msg: &Message{}},
	{n: 20, filter: `MessageProperty = 'A' AND 1=0`, msg: &Message{}},
	{n: 21, filter: `StoreId IN('Store1', 'Store2', 'Store3')`, msg: props("StoreId", StringValue("Store2")), want: true},
	{n: 22, filter: `StoreId IN ('a','b')`, msg: &Message{}},
	{n: 23, filter: `StoreId NOT IN ('a','b')`, msg: &Message{}},
	{n: 24, filter: `sys.To IN ('Store5','Store6','Store7') OR StoreId = 'Store8'`, msg: &Message{To: StringValue("Store6")}, want: true},
	{n: 25, filter: `sys.To NOT IN ('Store1','Store2') OR StoreId NOT IN ('Store1','Store2')`, msg: &Message{To: StringValue("Store9")}, want: true},
	{n: 26, filter: `property LIKE 'ABC\%' ESCAPE '\'`, msg: props("property", StringValue("ABC%")), want: true},
	{n: 27, filter: `property LIKE 'ABC\%' ESCAPE '\'`, msg: props("property", StringValue("ABCD"))},
	{n: 28, filter: `name LIKE 'a_c'`, msg: props("name", StringValue("abc")), want: true},
	{n: 28, filter: `name LIKE 'a_c'`, msg: props("name", StringValue("abbc"))},
	{n: 29, filter: `name LIKE 'a%'`, msg: props("name", StringValue("A1"))},
	{n: 30, filter: `name = 'O''Brien'`, msg: props("name", StringValue("O'Brien")), want: true},
	{n: 31, filter: `MessageProperty = 1`, msg: props("MessageProperty", IntValue(1)), want: true},
	{n: 32, filter: `MessageProperty > 2.08`, msg: props("MessageProperty", IntValue(3)), want: true},
	{n: 33, filter: `MessageProperty = 1`, msg: props("MessageProperty", DoubleValue(1.0)), want: true},
	{n: 34, filter: `MessageProperty = 1`, msg: props("MessageProperty", UintValue(1)), want: true},
	{n: 35, filter: `Quantity > 10`, msg: props("Quantity", StringValue("15"))},
	{n: 36, filter: `MessageProperty = 1 OR MessageProperty2 = 3`, msg: props("MessageProperty2", IntValue(3)), want: true},
	{n: 37, filter: `quantity / 2 = 2`, msg: props("quantity", IntValue(5)), want: true},
	{n: 38, filter: `a + b = 'xy'`, msg: props("a", StringValue("x"), "b", StringValue("y")), want: true},
	{n: 39, filter: `price > 10`, msg: props("price", DoubleValue(10.5)), want: true},
	{n: 39, filter: `price > 10`, msg: &Message{}},
	{n: 40, filter: `DateTimeMp < @dtParam`, params: map[string]Value{"@dtParam": TimeValue(date("2020-01-01T00:00:00Z"))},
		msg: props("DateTimeMp", TimeValue(date("2019-06-01T00:00:00Z"))), want: true},
	{n: 41, filter: `"http://schemas.microsoft.com/xrm/2011/Claims/EntityLogicalName" = 'account'`,
		msg: props("http://schemas.microsoft.com/xrm/2011/Claims/EntityLogicalName", StringValue("account")), want: true},
	{n: 42, filter: `[Property With Space] = 'x'`, msg: props("Property With Space", StringValue("x")), want: true},
	{n: 43, filter: `flag = TRUE`, msg: props("flag", BoolValue(true)), want: true},
	{n: 44, filter: `x = NULL`, msg: props("x", NullValue())},
	{n: 45, filter: `101.5E5 = 10150000`, msg: &Message{}, want: true},
	{n: 46, filter: `MessageID=rule1`, msg: props("MessageID", StringValue("v"))},
	{n: 47, filter: `sys.NoSuchProp = 1`, compileErr: 5},
	{n: 48, filter: `color = = 'x'`, compileErr: 9},
}

func TestSQLCases(t *testing.T) {
	for i, c := range sqlCases {
		t.Run(fmt.Sprintf("%02d_%d", c.n, i), func(t *testing.T) {
			f, err := CompileSQLParams(c.filter, c.params)
			if c.compileErr != 0 {
				var se *SyntaxError
				if !errors.As(err, &se) {
					t.Fatalf("CompileSQL(%q) = %v, want a *SyntaxError", c.filter, err)
				}
				if se.Pos.Line != 1 || se.Pos.Column != c.compileErr {
					t.Fatalf("CompileSQL(%q): error at %v, want column %d: %v", c.filter, se.Pos, c.compileErr, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("CompileSQL(%q): %v", c.filter, err)
			}
			got, err := f.Match(c.msg)
			if err != nil || got != c.want {
				t.Fatalf("%q on %+v = %v, %v; want %v", c.filter, c.msg.Properties, got, err, c.want)
			}
		})
	}
}

// TestSQLCasesCoverAll keeps the table honest: every case number is there.
func TestSQLCasesCoverAll(t *testing.T) {
	seen := map[int]bool{}
	for _, c := range sqlCases {
		seen[c.n] = true
	}
	for n := 1; n <= 48; n++ {
		if !seen[n] {
			t.Errorf("case %d missing", n)
		}
	}
}
