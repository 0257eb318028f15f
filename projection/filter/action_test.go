package filter

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestActionApply(t *testing.T) {
	base := func() *Message {
		m := props("quantity", IntValue(10), "priority", StringValue("high"), "Price", DoubleValue(2.5), "Color", StringValue("red"))
		m.Label = StringValue("order")
		m.SessionID = StringValue("s0")
		return m
	}
	idSource := func() UUID { return UUID{0: 0x12, 15: 0x34} }
	for _, c := range []struct {
		action  string
		params  map[string]Value
		check   func(m Message) bool
		changes int
	}{
		{"SET quantity = quantity / 2; REMOVE priority;SET sys.CorrelationId = 'low';", nil, func(m Message) bool {
			q, _ := m.Property("quantity")
			_, hasPriority := m.Property("priority")
			return q == IntValue(5) && !hasPriority && m.CorrelationID == StringValue("low")
		}, 3},
		{"set sys.Label = 'new' set sys.To = 'x' remove sys.SessionId", nil, func(m Message) bool {
			return m.Label == StringValue("new") && m.To == StringValue("x") && m.SessionID.IsNull()
		}, 3},
		{"SET sys.SessionId = newid()", nil, func(m Message) bool {
			return m.SessionID == StringValue("12000000-0000-0000-0000-000000000034")
		}, 1},
		{"SET color = 'blue'", nil, func(m Message) bool {
			// The existing property keeps its spelling and its place.
			return m.Properties[3] == Property{"Color", StringValue("blue")} && len(m.Properties) == 4
		}, 1},
		{"SET [New Prop] = sys.Label + '!'", nil, func(m Message) bool {
			return m.Properties[4] == Property{"New Prop", StringValue("order!")}
		}, 1},
		{"SET copy = missing", nil, func(m Message) bool {
			v, ok := m.Property("copy")
			return ok && v.IsNull()
		}, 1},
		{"SET price = 3", nil, func(m Message) bool { // converted to the existing double
			v, _ := m.Property("price")
			return v.Kind() == KindDouble && v.Float() == 3
		}, 1},
		{"SET quantity = quantity * 1.5", nil, func(m Message) bool { // 15.0 is an exact int
			v, _ := m.Property("quantity")
			return v == IntValue(15)
		}, 1},
		{"SET quantity = quantity * 1.25", nil, func(m Message) bool { // 12.5 is not
			v, _ := m.Property("quantity")
			return v == DoubleValue(12.5)
		}, 1},
		{"SET quantity = 'many'", nil, func(m Message) bool { // strings do not convert
			v, _ := m.Property("quantity")
			return v == StringValue("many")
		}, 1},
		{"SET a = 1 SET b = a + 1 SET a = b * 10", nil, func(m Message) bool { // statements see earlier ones
			a, _ := m.Property("a")
			b, _ := m.Property("b")
			return a == IntValue(20) && b == IntValue(2)
		}, 3},
		{"REMOVE nothing", nil, func(m Message) bool { return len(m.Properties) == 4 }, 1},
		{"SET MessageID=@stringVar SET MessageID=@intVar", map[string]Value{"@stringVar": StringValue("hello world"), "@intVar": IntValue(100)},
			func(m Message) bool { // a user property called MessageID, not sys.MessageId
				v, _ := m.Property("messageid")
				return v == IntValue(100) && m.MessageID.IsNull()
			}, 2},
		{"SET sys.TimeToLive = @ttl; SET sys.ScheduledEnqueueTimeUtc = @at", map[string]Value{
			"ttl": DurationValue(time.Minute), "at": TimeValue(date("2030-01-01T00:00:00Z"))}, func(m Message) bool {
			return m.TimeToLive.Duration() == time.Minute && m.ScheduledEnqueueTimeUtc.Time().Year() == 2030
		}, 2},
		{"SET sys.Label = NULL", nil, func(m Message) bool { return m.Label.IsNull() }, 1},
		{"SET sys.subject = 'alias'", nil, func(m Message) bool { return m.Label == StringValue("alias") }, 1},
	} {
		t.Run(c.action, func(t *testing.T) {
			a, err := CompileActionParams(c.action, c.params)
			if err != nil {
				t.Fatalf("CompileAction: %v", err)
			}
			m := base()
			m.NewID = idSource
			before := base()
			overlay, err := a.Apply(m)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if len(overlay) != c.changes {
				t.Errorf("overlay has %d changes, want %d: %+v", len(overlay), c.changes, overlay)
			}
			if !reflect.DeepEqual(m.Properties, before.Properties) || m.Label != before.Label {
				t.Fatal("Apply modified its input")
			}
			got := overlay.ApplyTo(m)
			if !c.check(got) {
				t.Fatalf("after %q: %+v", c.action, got)
			}
			if !reflect.DeepEqual(m.Properties, before.Properties) {
				t.Fatal("ApplyTo modified its input")
			}
		})
	}
}

func TestActionRefused(t *testing.T) {
	for _, c := range []struct {
		action string
		column int
		msg    string
	}{
		{"", 1, "expected SET or REMOVE"},
		{";", 1, "expected SET or REMOVE"},
		{"SET a = 1;;", 11, "expected SET or REMOVE"},
		{"SET a 1", 7, "expected '=' after the property"},
		{"SET a = ", 9, "expected a value"},
		{"SET a = b = c", 11, "expected SET or REMOVE, found '='"},
		{"SET a = (b = 1)", 12, "SET needs a value, found a condition"},
		{"SET 1 = 2", 5, "expected a property name"},
		{"SET sys.SequenceNumber = 1", 5, "sys.SequenceNumber is assigned by the broker"},
		{"REMOVE sys.EnqueuedTimeUtc", 8, "sys.EnqueuedTimeUtc is assigned by the broker"},
		{"SET sys.DeliveryCount = 1", 5, "assigned by the broker"},
		{"SET sys.Size = 1", 5, "assigned by the broker"},
		{"SET sys.LockToken = 1", 9, "has no value when rules run"},
		{"SET sys.Nope = 1", 9, "unknown system property"},
		{"SET a = @missing", 9, "not defined"},
		{"UPDATE a = 1", 1, "expected SET or REMOVE, found 'UPDATE'"},
		{strings.Repeat("SET a = 1 ", 33), 321, "more than 32 statements"},
	} {
		_, err := CompileAction(c.action)
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("CompileAction(%q) = %v, want a *SyntaxError", c.action, err)
			continue
		}
		if se.Pos.Column != c.column || !strings.Contains(se.Msg, c.msg) {
			t.Errorf("CompileAction(%q) = %q at %v, want %q at column %d", c.action, se.Msg, se.Pos, c.msg, c.column)
		}
	}
	if _, err := CompileAction(strings.Repeat("SET a = 1 ", 32)); err != nil {
		t.Errorf("32 statements: %v", err)
	}
}

func TestActionEvalErrors(t *testing.T) {
	for _, action := range []string{
		"SET sys.Label = 5",
		"SET sys.TimeToLive = 'x'",
		"SET sys.ScheduledEnqueueTimeUtc = 1",
		"SET a = 1 / 0",
		"SET sys.SessionId = newid()",
	} {
		a, err := CompileAction(action)
		if err != nil {
			t.Fatalf("CompileAction(%q): %v", action, err)
		}
		overlay, err := a.Apply(&Message{}) // no NewID: newid() fails
		var ee *EvalError
		if !errors.As(err, &ee) || overlay != nil {
			t.Errorf("%q: %v, %v; want an *EvalError", action, overlay, err)
		}
	}
}

func TestActionString(t *testing.T) {
	a, err := CompileAction("set Quantity = quantity/2 ; remove [my prop] SET sys.subject='x'")
	if err != nil {
		t.Fatal(err)
	}
	want := "SET user.Quantity = user.quantity / 2; REMOVE user.[my prop]; SET sys.Label = 'x'"
	if a.String() != want {
		t.Fatalf("String() = %q, want %q", a.String(), want)
	}
	if b, err := CompileAction(a.String()); err != nil || b.String() != want {
		t.Fatalf("round trip: %v %q", err, b)
	}
	if a.Expression() != "set Quantity = quantity/2 ; remove [my prop] SET sys.subject='x'" {
		t.Fatal("Expression")
	}
}

func TestSysPropSettable(t *testing.T) {
	settable := map[SysProp]bool{}
	for p := SysMessageID; p < sysCount; p++ {
		settable[p] = p.Settable()
		got, ok := lookupSys(strings.ToUpper(p.String()))
		if !ok || got != p {
			t.Errorf("lookupSys(%q) = %v, %v", p, got, ok)
		}
	}
	for _, p := range []SysProp{SysMessageID, SysCorrelationID, SysTo, SysReplyTo, SysLabel, SysSessionID,
		SysReplyToSessionID, SysContentType, SysTimeToLive, SysScheduledEnqueueTimeUtc} {
		if !settable[p] {
			t.Errorf("%v not settable", p)
		}
		delete(settable, p)
	}
	for p, ok := range settable {
		if ok {
			t.Errorf("%v settable", p)
		}
	}
}
