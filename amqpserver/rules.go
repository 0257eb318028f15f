package amqpserver

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/broker"
)

// Rule management on a subscription's $management node
// ("t1/Subscriptions/s1/$management"): com.microsoft:add-rule, remove-rule
// and enumerate-rules, which the JS ServiceBusRuleManager, .NET and Java
// send (Service Bus doc "AMQP 1.0 in Service Bus: request-response-based
// operations", "Rule operations"). Go and Python manage rules over ATOM
// only. These need the Listen right, like the node's other operations: the
// SDKs document their rule managers as needing only Listen.

// The descriptors of the described lists enumerate-rules answers with. The
// filters' codes have one hex digit fewer than the rest (0x13_7000_0006,
// not 0x137_0000_0006): the SDKs compare them as numbers
// (@azure/core-amqp util/constants.js, descriptorCodes).
const (
	descRuleDescription   uint64 = 0x0000013700000004
	descEmptyRuleAction   uint64 = 0x0000013700000005
	descSQLRuleAction     uint64 = 0x0000013700000006
	descSQLFilter         uint64 = 0x0000001370000006
	descTrueFilter        uint64 = 0x0000001370000007
	descFalseFilter       uint64 = 0x0000001370000008
	descCorrelationFilter uint64 = 0x0000001370000009
)

// Service Bus's described types for .NET values AMQP has no type for
// (application properties of .NET clients).
const (
	ruleDescDateTimeOffset uint64 = 0x0000013700000001 // long: .NET ticks
	ruleDescTimeSpan       uint64 = 0x0000013700000002 // long: ticks
	ruleDescURI            uint64 = 0x0000013700000003 // string
)

// ruleSQLCompatibilityLevel is the second field of the SQL filter and action
// lists, as Service Bus sends it (the .NET SDK reads it; JS ignores it).
const ruleSQLCompatibilityLevel int32 = 20

// condRuleArgument is the condition of a request with bad arguments: a bad
// filter, a missing rule name. The SDKs do not retry it.
const condRuleArgument = "com.microsoft:argument-error"

// .NET ticks (100 ns since 0001-01-01), for datetime-offset values.
const (
	ruleUnixEpochTicks = 621355968000000000 // DateTime(1970-01-01).Ticks
	ruleTicksPerMilli  = 10_000
)

// ruleOp runs add-rule, remove-rule or enumerate-rules. It waits for the
// broker's answer (a rule change, for its fsync) on the connection's
// reader, which keeps one client's rule operations in the order it sent
// them; a reader may wait for an actor (docs/architecture.md, "The
// goroutines").
func (t *mgmtTarget) ruleOp(op string, body encoding.Map, reply func(rpcResponse)) {
	if !t.e.IsTopic() || t.queue == broker.MainQueue {
		reply(rpcResponse{status: 400, condition: condNotAllowed, description: fmt.Sprintf(
			"%s works on a subscription's management node, <topic>/Subscriptions/<subscription>/$management; %s is not one",
			op, t.subscriptionPath())})
		return
	}
	switch op {
	case "com.microsoft:add-rule":
		rule, err := decodeAddRule(body)
		if err != nil {
			reply(t.ruleFailure(err, ""))
			return
		}
		if err := t.e.AddRule(t.queue, rule); err != nil {
			reply(t.ruleFailure(err, rule.Name))
			return
		}
		reply(ok(200, nil))
	case "com.microsoft:remove-rule":
		name, err := ruleName(body)
		if err != nil {
			reply(t.ruleFailure(err, ""))
			return
		}
		if err := t.e.RemoveRule(t.queue, name); err != nil {
			reply(t.ruleFailure(err, name))
			return
		}
		reply(ok(200, nil))
	case "com.microsoft:enumerate-rules":
		skip, top, err := rulePage(body)
		if err != nil {
			reply(t.ruleFailure(err, ""))
			return
		}
		rules, err := t.e.Rules(t.queue)
		if err != nil {
			reply(t.ruleFailure(err, ""))
			return
		}
		page := rulesPage(rules, skip, top)
		if len(page) == 0 {
			reply(rpcResponse{status: 204, description: "No rules"})
			return
		}
		list := make(encoding.List, 0, len(page))
		for i := range page {
			list = append(list, encoding.Map{{Key: "rule-description", Value: encodeRuleDescription(&page[i])}})
		}
		reply(ok(200, encoding.Map{{Key: "rules", Value: list}}))
	}
}

// subscriptionPath is the subscription the node addresses, for error texts.
func (t *mgmtTarget) subscriptionPath() string {
	if t.path != "" {
		return strings.TrimSuffix(t.path, "/$management")
	}
	return t.e.QueuePath(t.queue)
}

// ruleFailure is the response for a rule operation that failed with err,
// about the rule named name ("" for none). Duplicates and missing rules get
// Service Bus's texts, which the SDKs match (JS: "The messaging entity .*
// could not be found" makes MessagingEntityNotFound); bad input is 400
// com.microsoft:argument-error, never a status the SDKs retry.
func (t *mgmtTarget) ruleFailure(err error, name string) rpcResponse {
	entity := t.subscriptionPath()
	if name != "" {
		entity += "|" + name
	}
	switch {
	case errors.Is(err, broker.ErrEntityExists):
		return rpcResponse{status: 409, condition: condEntityExists,
			description: fmt.Sprintf("The messaging entity '%s' already exists.", entity)}
	case errors.Is(err, broker.ErrEntityNotFound):
		return rpcResponse{status: 404, condition: condNotFound,
			description: fmt.Sprintf("The messaging entity '%s' could not be found.", entity)}
	case errors.Is(err, broker.ErrQuotaExceeded):
		return rpcResponse{status: 403, condition: condResourceLimit, description: err.Error()}
	case errors.Is(err, broker.ErrInvalid), errors.Is(err, broker.ErrBadName):
		return rpcResponse{status: 400, condition: condRuleArgument, description: err.Error()}
	}
	return failure(err)
}

// ruleArgumentf is an error of the rule decoders; it wraps
// broker.ErrInvalid, so it maps as the broker's own refusals do.
func ruleArgumentf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", broker.ErrInvalid, fmt.Sprintf(format, args...))
}

// ruleName reads the rule-name of a remove-rule or add-rule body.
func ruleName(body encoding.Map) (string, error) {
	v, found := body.Get("rule-name")
	if !found || v == nil {
		return "", ruleArgumentf("rule-name is missing")
	}
	name, err := ruleString(v, "rule-name")
	if err != nil {
		return "", err
	}
	if name == "" {
		return "", ruleArgumentf("rule-name is empty")
	}
	return name, nil
}

// decodeAddRule reads an add-rule body: rule-name and a rule-description
// map holding one filter (sql-filter {expression} or correlation-filter)
// and an optional sql-rule-action {expression}. A null value counts as
// absent, as JS sends null for what is not set and .NET sends a null
// action. SQL text is kept as sent ("1=1" stays a SQL filter), so that
// enumerate-rules returns it verbatim; the broker checks it.
func decodeAddRule(body encoding.Map) (broker.RuleSpec, error) {
	var r broker.RuleSpec
	if body == nil {
		return r, ruleArgumentf("the add-rule body must be a map with rule-name and rule-description")
	}
	v, _ := body.Get("rule-description")
	desc, isMap := v.(encoding.Map)
	if !isMap {
		if v == nil {
			return r, ruleArgumentf("rule-description is missing")
		}
		return r, ruleArgumentf("rule-description holds a %s, not a map", ruleTypeName(v))
	}
	name, err := ruleName(body)
	if err != nil {
		// .NET also puts the name inside the description.
		var inner error
		if name, inner = ruleName(desc); inner != nil {
			return r, err
		}
	}
	r.Name = name

	filters := 0
	if v, _ := desc.Get("sql-filter"); v != nil {
		expr, err := ruleExpression(v, "sql-filter")
		if err != nil {
			return r, err
		}
		r.Filter = broker.FilterSpec{Kind: broker.FilterSQL, SQL: expr}
		filters++
	}
	if v, _ := desc.Get("correlation-filter"); v != nil {
		c, err := decodeRuleCorrelation(v)
		if err != nil {
			return r, err
		}
		r.Filter = broker.FilterSpec{Kind: broker.FilterCorrelation, Correlation: c}
		filters++
	}
	// No SDK sends these (booleans go as sql-filter "1=1" and "1=0"), but
	// they are the names of Service Bus's own filter types.
	for _, f := range []struct {
		key  string
		kind broker.FilterKind
	}{{"true-filter", broker.FilterTrue}, {"false-filter", broker.FilterFalse}} {
		if v, found := desc.Get(f.key); found && v != nil {
			r.Filter = broker.FilterSpec{Kind: f.kind}
			filters++
		}
	}
	switch {
	case filters == 0:
		return r, ruleArgumentf("rule %s: rule-description has no filter: it needs a sql-filter or a correlation-filter", r.Name)
	case filters > 1:
		return r, ruleArgumentf("rule %s: rule-description has more than one filter", r.Name)
	}

	if v, _ := desc.Get("sql-rule-action"); v != nil {
		if r.Action, err = ruleExpression(v, "sql-rule-action"); err != nil {
			return r, err
		}
	}
	return r, nil
}

// ruleExpression reads the {expression: str} map of a SQL filter or action.
func ruleExpression(v any, what string) (string, error) {
	m, isMap := v.(encoding.Map)
	if !isMap {
		return "", ruleArgumentf("%s holds a %s, not a map with an expression", what, ruleTypeName(v))
	}
	e, found := m.Get("expression")
	if !found || e == nil {
		return "", ruleArgumentf("%s has no expression", what)
	}
	return ruleString(e, what+" expression")
}

// ruleCorrelationFields are the system properties a correlation-filter map
// names, in the order of its described list.
var ruleCorrelationFields = [...]struct {
	key   string
	field func(*broker.CorrelationSpec) **string
}{
	{"correlation-id", func(c *broker.CorrelationSpec) **string { return &c.CorrelationID }},
	{"message-id", func(c *broker.CorrelationSpec) **string { return &c.MessageID }},
	{"to", func(c *broker.CorrelationSpec) **string { return &c.To }},
	{"reply-to", func(c *broker.CorrelationSpec) **string { return &c.ReplyTo }},
	{"label", func(c *broker.CorrelationSpec) **string { return &c.Subject }},
	{"session-id", func(c *broker.CorrelationSpec) **string { return &c.SessionID }},
	{"reply-to-session-id", func(c *broker.CorrelationSpec) **string { return &c.ReplyToSessionID }},
	{"content-type", func(c *broker.CorrelationSpec) **string { return &c.ContentType }},
}

// decodeRuleCorrelation reads a correlation-filter map: each field a string or
// null (not set), and properties a map of typed values or null.
func decodeRuleCorrelation(v any) (*broker.CorrelationSpec, error) {
	m, isMap := v.(encoding.Map)
	if !isMap {
		return nil, ruleArgumentf("correlation-filter holds a %s, not a map", ruleTypeName(v))
	}
	c := &broker.CorrelationSpec{}
	for _, f := range ruleCorrelationFields {
		v, _ := m.Get(f.key)
		if v == nil {
			continue
		}
		s, err := ruleString(v, "correlation-filter "+f.key)
		if err != nil {
			return nil, err
		}
		*f.field(c) = &s
	}
	props, _ := m.Get("properties")
	if props == nil {
		return c, nil
	}
	pm, isMap := props.(encoding.Map)
	if !isMap {
		return nil, ruleArgumentf("correlation-filter properties holds a %s, not a map", ruleTypeName(props))
	}
	seen := make(map[string]bool, len(pm))
	for _, e := range pm {
		name, err := ruleString(e.Key, "a correlation-filter properties key")
		if err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, ruleArgumentf("correlation-filter properties names %q twice", name)
		}
		seen[name] = true
		val, err := ruleValueOf(e.Value)
		if err != nil {
			return nil, ruleArgumentf("correlation-filter property %q: %v", name, err)
		}
		c.Properties = append(c.Properties, broker.FilterProperty{Name: name, Value: val})
	}
	return c, nil
}

// ruleValueOf is the filter value of an AMQP property value, kept by
// type: every integer width is an Int (a ulong above MaxInt64 a Double),
// float and double a Double, string, symbol and char a String.
func ruleValueOf(v any) (broker.FilterValue, error) {
	switch x := v.(type) {
	case nil:
		return broker.NullValue(), nil
	case bool:
		return broker.BoolValue(x), nil
	case int8, int16, int32, int64:
		n, _ := asInt64(x)
		return broker.IntValue(n), nil
	case uint8:
		return broker.UintValue(uint64(x)), nil
	case uint16:
		return broker.UintValue(uint64(x)), nil
	case uint32:
		return broker.UintValue(uint64(x)), nil
	case uint64:
		return broker.UintValue(x), nil
	case float32:
		return broker.DoubleValue(float64(x)), nil
	case float64:
		return broker.DoubleValue(x), nil
	case string:
		if !utf8.ValidString(x) {
			return broker.FilterValue{}, fmt.Errorf("the string %q is not UTF-8", x)
		}
		return broker.StringValue(x), nil
	case encoding.Symbol:
		if !utf8.ValidString(string(x)) {
			return broker.FilterValue{}, fmt.Errorf("the symbol %q is not UTF-8", x)
		}
		return broker.StringValue(string(x)), nil
	case encoding.Char:
		return broker.StringValue(string(rune(x))), nil
	case encoding.Timestamp:
		return broker.TimestampMillis(int64(x)), nil
	case encoding.UUID:
		return broker.UUIDValue(broker.FilterUUID(x)), nil
	case encoding.Described:
		code, _ := x.Descriptor.(uint64)
		switch {
		case code == ruleDescTimeSpan || x.Descriptor == encoding.Symbol("com.microsoft:timespan"):
			if ticks, isLong := x.Value.(int64); isLong {
				return broker.DurationTicks(ticks), nil
			}
		case code == ruleDescDateTimeOffset || x.Descriptor == encoding.Symbol("com.microsoft:datetime-offset"):
			if ticks, isLong := x.Value.(int64); isLong {
				return broker.TimestampMillis(ruleFloorDiv(ticks-ruleUnixEpochTicks, ruleTicksPerMilli)), nil
			}
		case code == ruleDescURI || x.Descriptor == encoding.Symbol("com.microsoft:uri"):
			if s, isStr := x.Value.(string); isStr && utf8.ValidString(s) {
				return broker.StringValue(s), nil
			}
		}
		return broker.FilterValue{}, fmt.Errorf("a described value (%v) a filter cannot compare", x.Descriptor)
	}
	return broker.FilterValue{}, fmt.Errorf("a %s, which a filter cannot compare", ruleTypeName(v))
}

func ruleFloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// ruleValueAMQP is the AMQP value enumerate-rules writes for a stored
// property value: as a rule action writes it (amqpValue), but an Int as an
// int when it fits (the broker keeps one integer kind, not the width it
// was sent with) and a duration as .NET's described timespan, the type it
// came in (add-rule takes no other).
func ruleValueAMQP(v broker.FilterValue) any {
	switch v.Kind() {
	case broker.KindInt:
		if n := v.Int(); n >= math.MinInt32 && n <= math.MaxInt32 {
			return int32(n)
		}
	case broker.KindDuration:
		return encoding.Described{Descriptor: ruleDescTimeSpan, Value: v.Ticks()}
	}
	return amqpValue(v) // null, and opaque values, which add-rule never stores, as null
}

// encodeRuleDescription is a rule as enumerate-rules lists it: the
// described list [filter, action, name, created-at]. The JS SDK reads the
// action's descriptor unguarded, so a rule without one has the described
// empty-rule-action, never null; and it reads a correlation filter's
// properties only as a map, so they are an empty map when there are none
// (managementClient.js, getRules).
func encodeRuleDescription(r *broker.RuleSpec) encoding.Described {
	var filter encoding.Described
	switch r.Filter.Kind {
	case broker.FilterTrue:
		filter = encoding.Described{Descriptor: descTrueFilter, Value: encoding.List{}}
	case broker.FilterFalse:
		filter = encoding.Described{Descriptor: descFalseFilter, Value: encoding.List{}}
	case broker.FilterCorrelation:
		filter = encoding.Described{Descriptor: descCorrelationFilter, Value: ruleCorrelationList(r.Filter.Correlation)}
	default:
		filter = encoding.Described{Descriptor: descSQLFilter, Value: encoding.List{r.Filter.SQL, ruleSQLCompatibilityLevel}}
	}
	action := encoding.Described{Descriptor: descEmptyRuleAction, Value: encoding.List{}}
	if r.Action != "" {
		action = encoding.Described{Descriptor: descSQLRuleAction, Value: encoding.List{r.Action, ruleSQLCompatibilityLevel}}
	}
	created := encoding.Timestamp(ruleFloorDiv(r.Created, 1_000_000))
	return encoding.Described{Descriptor: descRuleDescription, Value: encoding.List{filter, action, r.Name, created}}
}

// ruleCorrelationList is a correlation filter's described-list fields: the
// eight system properties (null when not set) and the properties map.
func ruleCorrelationList(c *broker.CorrelationSpec) encoding.List {
	if c == nil {
		c = &broker.CorrelationSpec{}
	}
	list := make(encoding.List, 0, len(ruleCorrelationFields)+1)
	for _, f := range ruleCorrelationFields {
		if s := *f.field(c); s != nil {
			list = append(list, *s)
		} else {
			list = append(list, nil)
		}
	}
	props := make(encoding.Map, 0, len(c.Properties))
	for _, p := range c.Properties {
		props = append(props, encoding.MapEntry{Key: p.Name, Value: ruleValueAMQP(p.Value)})
	}
	return append(list, props)
}

// rulePage reads enumerate-rules' skip and top: integers, top 0 or absent
// meaning all.
func rulePage(body encoding.Map) (skip, top int, err error) {
	read := func(key string) (int64, error) {
		v, found := body.Get(key)
		if !found || v == nil {
			return 0, nil
		}
		n, isInt := asInt64(v)
		if !isInt {
			return 0, ruleArgumentf("%s holds a %s, not an integer", key, ruleTypeName(v))
		}
		return n, nil
	}
	s, err := read("skip")
	if err != nil {
		return 0, 0, err
	}
	n, err := read("top")
	if err != nil {
		return 0, 0, err
	}
	if s < 0 || n < 0 {
		return 0, 0, ruleArgumentf("skip and top must not be negative (skip %d, top %d)", s, n)
	}
	if n == 0 || n > math.MaxInt32 {
		n = math.MaxInt32
	}
	return int(min(s, math.MaxInt32)), int(n), nil
}

// rulesPage is rules[skip:skip+top], clipped.
func rulesPage(rules []broker.RuleSpec, skip, top int) []broker.RuleSpec {
	if skip >= len(rules) {
		return nil
	}
	rules = rules[skip:]
	return rules[:min(top, len(rules))]
}

// ruleString is the text of a string or symbol, what names it for errors.
// Text that is not UTF-8 is refused (AMQP 1.0 §1.6.20): the broker keeps
// rules as JSON, which would change it, so that a rule would not be found
// by the name it was added with.
func ruleString(v any, what string) (string, error) {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case encoding.Symbol:
		s = string(v)
	default:
		return "", ruleArgumentf("%s holds a %s, not a string", what, ruleTypeName(v))
	}
	if !utf8.ValidString(s) {
		return "", ruleArgumentf("%s %q is not UTF-8", what, s)
	}
	return s, nil
}

// ruleTypeName names v's AMQP type for error texts.
func ruleTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case int8:
		return "byte"
	case int16:
		return "short"
	case int32:
		return "int"
	case int64:
		return "long"
	case uint8:
		return "ubyte"
	case uint16:
		return "ushort"
	case uint32:
		return "uint"
	case uint64:
		return "ulong"
	case float32:
		return "float"
	case float64:
		return "double"
	case encoding.Decimal32, encoding.Decimal64, encoding.Decimal128:
		return "decimal"
	case encoding.Char:
		return "char"
	case encoding.Timestamp:
		return "timestamp"
	case encoding.UUID:
		return "uuid"
	case []byte:
		return "binary"
	case string:
		return "string"
	case encoding.Symbol:
		return "symbol"
	case encoding.List:
		return "list"
	case encoding.Map:
		return "map"
	case encoding.Array:
		return "array"
	case encoding.Described:
		return "described value"
	}
	return fmt.Sprintf("%T", v)
}
