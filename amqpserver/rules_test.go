package amqpserver

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/broker"
)

// ruleTopic opens a broker with topic t1, its subscription s1 (with
// $Default), and returns the management target of t1/Subscriptions/s1 as
// the link resolution will build it.
func ruleTopic(tb testing.TB) (*broker.Broker, *broker.Entity, *mgmtTarget) {
	tb.Helper()
	b, _, err := broker.Open(broker.Options{Dir: tb.TempDir(), Sync: broker.SyncNone})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = b.Close() })
	e, err := b.CreateTopic("t1", broker.DefaultTopicConfig())
	if err != nil {
		tb.Fatal(err)
	}
	return b, e, subscriptionTarget(tb, e, "s1")
}

// subscriptionTarget creates subscription name on topic e and returns its
// management target.
func subscriptionTarget(tb testing.TB, e *broker.Entity, name string) *mgmtTarget {
	tb.Helper()
	if err := e.CreateSubscription(name, broker.DefaultSubscriptionConfig(), nil); err != nil {
		tb.Fatal(err)
	}
	q, err := e.SubscriptionQueue(name)
	if err != nil {
		tb.Fatal(err)
	}
	path := e.Name() + "/Subscriptions/" + name + "/$management"
	return &mgmtTarget{e: e, queue: q, path: path, links: fuzzLinks{}, owner: "mgmt:" + name}
}

// ruleCall sends one request to tgt as the JS SDK does (operation and a
// tracking id, no link) and returns the reply as a client reads it: encoded,
// then decoded, so what is checked is what goes on the wire.
func ruleCall(tb testing.TB, tgt *mgmtTarget, op string, body any) (rpcResponse, any) {
	tb.Helper()
	props := encoding.Map{{Key: "operation", Value: op}, {Key: "com.microsoft:tracking-id", Value: "t-1"}}
	req, err := parseRequest(encodeRequest(props, body))
	if err != nil {
		tb.Fatal(err)
	}
	got := make(chan rpcResponse, 2)
	tgt.handle(&req, func(r rpcResponse) { got <- r })
	var resp rpcResponse
	select {
	case resp = <-got:
	case <-time.After(10 * time.Second):
		tb.Fatalf("no reply to %s", op)
	}
	b, err := resp.encode(&req)
	if err != nil {
		tb.Fatalf("%s: the reply does not encode: %v", op, err)
	}
	var m amqp.Message // and go-amqp can read it
	if err := m.UnmarshalBinary(b); err != nil {
		tb.Fatalf("%s: go-amqp cannot read the reply: %v", op, err)
	}
	back, err := parseRequest(b)
	if err != nil {
		tb.Fatalf("%s: the reply does not decode: %v", op, err)
	}
	if v, _ := back.props.Get("status-code"); v != resp.status {
		tb.Fatalf("%s: status-code reads back as %v, want %d", op, v, resp.status)
	}
	return resp, back.body
}

// jsSQLRule is an add-rule body as the JS SDK sends it for a SQL filter;
// action "" sends none.
func jsSQLRule(name, sql, action string) encoding.Map {
	desc := encoding.Map{{Key: "sql-filter", Value: encoding.Map{{Key: "expression", Value: sql}}}}
	if action != "" {
		desc = append(desc, encoding.MapEntry{Key: "sql-rule-action", Value: encoding.Map{{Key: "expression", Value: action}}})
	}
	return encoding.Map{{Key: "rule-name", Value: name}, {Key: "rule-description", Value: desc}}
}

// jsCorrelationRule is an add-rule body as the JS SDK sends it for a
// correlation filter: all nine keys, null for those fields leaves out.
func jsCorrelationRule(name string, fields map[string]any, action string) encoding.Map {
	c := encoding.Map{}
	for _, key := range []string{"correlation-id", "message-id", "to", "reply-to", "label", "session-id",
		"reply-to-session-id", "content-type", "properties"} {
		c = append(c, encoding.MapEntry{Key: key, Value: fields[key]})
	}
	desc := encoding.Map{{Key: "correlation-filter", Value: c}}
	if action != "" {
		desc = append(desc, encoding.MapEntry{Key: "sql-rule-action", Value: encoding.Map{{Key: "expression", Value: action}}})
	}
	return encoding.Map{{Key: "rule-name", Value: name}, {Key: "rule-description", Value: desc}}
}

// enumerated returns the rule-descriptions of an enumerate-rules reply body.
func enumerated(tb testing.TB, body any) []encoding.Described {
	tb.Helper()
	m, isMap := body.(encoding.Map)
	if !isMap {
		tb.Fatalf("enumerate-rules body is a %T, want a map", body)
	}
	v, _ := m.Get("rules")
	list, isList := v.(encoding.List)
	if !isList {
		tb.Fatalf("rules is a %T, want a list", v)
	}
	var out []encoding.Described
	for _, item := range list {
		entry, _ := item.(encoding.Map)
		d, isDescribed := entryValue(entry, "rule-description").(encoding.Described)
		if !isDescribed {
			tb.Fatalf("a rules entry without a described rule-description: %#v", item)
		}
		out = append(out, d)
	}
	return out
}

func entryValue(m encoding.Map, key string) any {
	v, _ := m.Get(key)
	return v
}

func described(code uint64, items ...any) encoding.Described {
	if items == nil {
		items = []any{}
	}
	return encoding.Described{Descriptor: code, Value: encoding.List(items)}
}

// withoutCreated drops the created-at of a rule-description, after checking
// it is a timestamp near now.
func withoutCreated(tb testing.TB, d encoding.Described) encoding.Described {
	tb.Helper()
	items, _ := d.Value.(encoding.List)
	if len(items) != 4 {
		tb.Fatalf("rule-description has %d items, want 4: %#v", len(items), d)
	}
	ts, isTime := items[3].(encoding.Timestamp)
	if !isTime || time.Since(ts.Time()).Abs() > time.Hour {
		tb.Fatalf("created-at is %#v, want a timestamp of now", items[3])
	}
	return encoding.Described{Descriptor: d.Descriptor, Value: items[:3]}
}

func TestRuleEnumerateDefault(t *testing.T) {
	_, _, tgt := ruleTopic(t)
	resp, body := ruleCall(t, tgt, "com.microsoft:enumerate-rules", encoding.Map{{Key: "top", Value: int32(100)}, {Key: "skip", Value: int32(0)}})
	if resp.status != 200 {
		t.Fatalf("enumerate-rules: %d %s", resp.status, resp.description)
	}
	rules := enumerated(t, body)
	if len(rules) != 1 {
		t.Fatalf("%d rules, want $Default only", len(rules))
	}
	// The true filter and the empty action are described empty lists: JS
	// reads them as {sqlExpression: "1=1"} and {}.
	want := described(descRuleDescription, described(descTrueFilter), described(descEmptyRuleAction), "$Default")
	if got := withoutCreated(t, rules[0]); !reflect.DeepEqual(got, want) {
		t.Fatalf("$Default reads\n%#v\nwant\n%#v", got, want)
	}
}

func TestRuleRoundTripEveryFilterKind(t *testing.T) {
	_, e, tgt := ruleTopic(t)
	uuid := encoding.UUID{0x12, 0x34, 0x56, 0x78, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	y2k := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	dtoTicks := y2k.UnixMilli()*ruleTicksPerMilli + ruleUnixEpochTicks + ruleTicksPerMilli // 2000-01-01 + 1 ms
	props := encoding.Map{
		{Key: "key1", Value: "value1"},
		{Key: "key2", Value: uint32(2)}, // rhea sends a positive number as a uint
		{Key: "key3", Value: true},
		{Key: "key4", Value: encoding.TimestampOf(y2k)},
		{Key: "neg", Value: int32(-3)},
		{Key: "long", Value: int64(1) << 40},
		{Key: "byte", Value: int8(-1)},
		{Key: "ushort", Value: uint16(7)},
		{Key: "huge", Value: uint64(math.MaxUint64)},
		{Key: "double", Value: 1.5},
		{Key: "float", Value: float32(0.25)},
		{Key: "sym", Value: encoding.Symbol("symbol text")},
		{Key: "char", Value: encoding.Char('é')},
		{Key: "id", Value: uuid},
		{Key: "span", Value: encoding.Described{Descriptor: ruleDescTimeSpan, Value: int64(600_000_000)}},
		{Key: "dto", Value: encoding.Described{Descriptor: ruleDescDateTimeOffset, Value: dtoTicks}},
		{Key: "uri", Value: encoding.Described{Descriptor: encoding.Symbol("com.microsoft:uri"), Value: "http://example.com/x"}},
		{Key: "nothing", Value: nil},
	}
	// What enumerate-rules returns for each, by type: every integer width
	// comes back as an int (a long when it does not fit), a float as a
	// double, a symbol or char as a string.
	wantProps := encoding.Map{
		{Key: "key1", Value: "value1"},
		{Key: "key2", Value: int32(2)},
		{Key: "key3", Value: true},
		{Key: "key4", Value: encoding.TimestampOf(y2k)},
		{Key: "neg", Value: int32(-3)},
		{Key: "long", Value: int64(1) << 40},
		{Key: "byte", Value: int32(-1)},
		{Key: "ushort", Value: int32(7)},
		{Key: "huge", Value: float64(math.MaxUint64)},
		{Key: "double", Value: 1.5},
		{Key: "float", Value: 0.25},
		{Key: "sym", Value: "symbol text"},
		{Key: "char", Value: "é"},
		{Key: "id", Value: uuid},
		{Key: "span", Value: encoding.Described{Descriptor: ruleDescTimeSpan, Value: int64(600_000_000)}},
		{Key: "dto", Value: encoding.TimestampOf(y2k.Add(time.Millisecond))},
		{Key: "uri", Value: "http://example.com/x"},
		{Key: "nothing", Value: nil},
	}
	add := []encoding.Map{
		jsSQLRule("sqlRule", "price > 10", ""),
		jsSQLRule("sqlWithAction", "sys.label = 'red'", "SET priority = 'high'; SET sys.Label = 'x'"),
		jsSQLRule("true", "1=1", ""), // kept as sent: a SQL filter
		jsSQLRule("false", "1=0", ""),
		jsCorrelationRule("correlationRule", map[string]any{
			"correlation-id": "correlationId", "message-id": "messageId", "to": "to", "reply-to": "replyTo",
			"label": "label", "session-id": "sessionId", "reply-to-session-id": "replyToSessionId",
			"content-type": "application/json", "properties": props,
		}, "Set CorrelationId = 'newValue'"),
		jsCorrelationRule("subjectOnly", map[string]any{"label": "red"}, ""),
		// .NET's shape: the name inside too, a null action, properties a map.
		{{Key: "rule-name", Value: "dotnet"}, {Key: "rule-description", Value: encoding.Map{
			{Key: "correlation-filter", Value: encoding.Map{{Key: "correlation-id", Value: "c"}, {Key: "properties", Value: encoding.Map{}}}},
			{Key: "sql-rule-action", Value: nil},
			{Key: "rule-name", Value: "dotnet"},
		}}},
		// Service Bus's own filter types, which no SDK sends.
		{{Key: "rule-name", Value: "trueFilter"}, {Key: "rule-description", Value: encoding.Map{{Key: "true-filter", Value: encoding.Map{}}}}},
		{{Key: "rule-name", Value: "falseFilter"}, {Key: "rule-description", Value: encoding.Map{{Key: "false-filter", Value: encoding.Map{}}}}},
	}
	for _, body := range add {
		if resp, _ := ruleCall(t, tgt, "com.microsoft:add-rule", body); resp.status != 200 || resp.body != nil {
			t.Fatalf("add-rule %v: %d %s", entryValue(body, "rule-name"), resp.status, resp.description)
		}
	}
	resp, body := ruleCall(t, tgt, "com.microsoft:enumerate-rules", encoding.Map{{Key: "top", Value: int32(math.MaxInt32)}, {Key: "skip", Value: int32(0)}})
	if resp.status != 200 {
		t.Fatalf("enumerate-rules: %d %s", resp.status, resp.description)
	}
	sql := func(expr string) encoding.Described { return described(descSQLFilter, expr, int32(20)) }
	action := func(expr string) encoding.Described { return described(descSQLRuleAction, expr, int32(20)) }
	empty := described(descEmptyRuleAction)
	want := []encoding.Described{ // sorted by name, ordinal
		described(descRuleDescription, described(descTrueFilter), empty, "$Default"),
		described(descRuleDescription, described(descCorrelationFilter, "correlationId", "messageId", "to", "replyTo",
			"label", "sessionId", "replyToSessionId", "application/json", wantProps), action("Set CorrelationId = 'newValue'"), "correlationRule"),
		described(descRuleDescription, described(descCorrelationFilter, "c", nil, nil, nil, nil, nil, nil, nil, encoding.Map{}), empty, "dotnet"),
		described(descRuleDescription, sql("1=0"), empty, "false"),
		described(descRuleDescription, described(descFalseFilter), empty, "falseFilter"),
		described(descRuleDescription, sql("price > 10"), empty, "sqlRule"),
		described(descRuleDescription, sql("sys.label = 'red'"), action("SET priority = 'high'; SET sys.Label = 'x'"), "sqlWithAction"),
		described(descRuleDescription, described(descCorrelationFilter, nil, nil, nil, nil, "red", nil, nil, nil, encoding.Map{}), empty, "subjectOnly"),
		described(descRuleDescription, sql("1=1"), empty, "true"),
		described(descRuleDescription, described(descTrueFilter), empty, "trueFilter"),
	}
	got := enumerated(t, body)
	if len(got) != len(want) {
		t.Fatalf("%d rules, want %d", len(got), len(want))
	}
	for i := range want {
		if g := withoutCreated(t, got[i]); !reflect.DeepEqual(g, want[i]) {
			t.Errorf("rule %d reads\n%#v\nwant\n%#v", i, g, want[i])
		}
	}

	// The broker holds the typed values, in the order sent.
	rules, err := e.Rules(tgt.queue)
	if err != nil {
		t.Fatal(err)
	}
	c := rules[1].Filter.Correlation
	if rules[1].Name != "correlationRule" || c == nil || len(c.Properties) != len(props) {
		t.Fatalf("correlationRule is stored as %+v", rules[1])
	}
	kinds := map[string]broker.FilterKindOf{"key1": broker.KindString, "key2": broker.KindInt, "key3": broker.KindBool,
		"key4": broker.KindTimestamp, "huge": broker.KindDouble, "float": broker.KindDouble, "id": broker.KindUUID,
		"span": broker.KindDuration, "dto": broker.KindTimestamp, "nothing": broker.KindNull}
	for i, p := range c.Properties {
		if p.Name != props[i].Key {
			t.Errorf("property %d is %q, want %q", i, p.Name, props[i].Key)
		}
		if k, listed := kinds[p.Name]; listed && p.Value.Kind() != k {
			t.Errorf("property %s is stored as a %v, want a %v", p.Name, p.Value.Kind(), k)
		}
	}

	// Each rule, read back into an add-rule body, decodes to what the
	// broker stored.
	for i, d := range got {
		rule, err := decodeAddRule(addRuleBodyOf(t, d))
		if err != nil {
			t.Fatalf("rule %d does not read back: %v", i, err)
		}
		stored := rules[i]
		stored.Created = 0
		if !reflect.DeepEqual(rule, stored) {
			t.Errorf("rule %d reads back as\n%+v\nwant\n%+v", i, rule, stored)
		}
	}
}

// addRuleBodyOf is the add-rule body that makes the rule an enumerated
// rule-description describes.
func addRuleBodyOf(tb testing.TB, d encoding.Described) encoding.Map {
	tb.Helper()
	items, _ := d.Value.(encoding.List)
	if d.Descriptor != descRuleDescription || len(items) < 3 {
		tb.Fatalf("not a rule-description: %#v", d)
	}
	filter, _ := items[0].(encoding.Described)
	fields, _ := filter.Value.(encoding.List)
	desc := encoding.Map{}
	switch filter.Descriptor {
	case descSQLFilter:
		desc = append(desc, encoding.MapEntry{Key: "sql-filter", Value: encoding.Map{{Key: "expression", Value: fields[0]}}})
	case descTrueFilter:
		desc = append(desc, encoding.MapEntry{Key: "true-filter", Value: encoding.Map{}})
	case descFalseFilter:
		desc = append(desc, encoding.MapEntry{Key: "false-filter", Value: encoding.Map{}})
	case descCorrelationFilter:
		if len(fields) != 9 {
			tb.Fatalf("a correlation filter of %d items, want 9: %#v", len(fields), fields)
		}
		c := encoding.Map{}
		for i, f := range ruleCorrelationFields {
			c = append(c, encoding.MapEntry{Key: f.key, Value: fields[i]})
		}
		if _, isMap := fields[8].(encoding.Map); !isMap {
			tb.Fatalf("correlation properties are a %T, want a map", fields[8])
		}
		desc = append(desc, encoding.MapEntry{Key: "correlation-filter", Value: append(c, encoding.MapEntry{Key: "properties", Value: fields[8]})})
	default:
		tb.Fatalf("unknown filter descriptor %#v", filter.Descriptor)
	}
	action, isDescribed := items[1].(encoding.Described)
	switch {
	case !isDescribed:
		tb.Fatalf("the action is a %T, want a described value", items[1])
	case action.Descriptor == descSQLRuleAction:
		expr := action.Value.(encoding.List)[0]
		desc = append(desc, encoding.MapEntry{Key: "sql-rule-action", Value: encoding.Map{{Key: "expression", Value: expr}}})
	case action.Descriptor != descEmptyRuleAction:
		tb.Fatalf("unknown action descriptor %#v", action.Descriptor)
	}
	return encoding.Map{{Key: "rule-name", Value: items[2]}, {Key: "rule-description", Value: desc}}
}

func TestRulePagesSortedByName(t *testing.T) {
	_, _, tgt := ruleTopic(t)
	for _, name := range []string{"sqlRule", "correlationRule", "b", "A"} {
		if resp, _ := ruleCall(t, tgt, "com.microsoft:add-rule", jsSQLRule(name, "a = 1", "")); resp.status != 200 {
			t.Fatalf("add %s: %d %s", name, resp.status, resp.description)
		}
	}
	page := func(skip, top any) (int32, []string) {
		body := encoding.Map{}
		if skip != nil {
			body = append(body, encoding.MapEntry{Key: "skip", Value: skip})
		}
		if top != nil {
			body = append(body, encoding.MapEntry{Key: "top", Value: top})
		}
		resp, reply := ruleCall(t, tgt, "com.microsoft:enumerate-rules", body)
		if resp.status == 204 {
			if reply != nil || resp.condition != "" {
				t.Fatalf("a 204 with body %#v, condition %q", reply, resp.condition)
			}
			return 204, nil
		}
		if resp.status != 200 {
			return resp.status, nil
		}
		var names []string
		for _, d := range enumerated(t, reply) {
			names = append(names, d.Value.(encoding.List)[2].(string))
		}
		return resp.status, names
	}
	all := []string{"$Default", "A", "b", "correlationRule", "sqlRule"}
	for _, c := range []struct {
		skip, top any
		status    int32
		want      []string
	}{
		{int32(0), int32(100), 200, all},
		{nil, nil, 200, all},
		{int32(0), int32(math.MaxInt32), 200, all},
		{uint32(0), int64(0), 200, all},
		{int32(0), int32(1), 200, all[:1]},
		{int32(1), int32(2), 200, all[1:3]},
		{int64(3), uint8(2), 200, all[3:5]},
		{int32(4), int32(100), 200, all[4:]},
		{int32(5), int32(100), 204, nil},
		{int32(math.MaxInt32), int32(1), 204, nil},
		{uint64(math.MaxUint64), int32(1), 400, nil},
		{int32(-1), int32(1), 400, nil},
		{int32(0), "ten", 400, nil},
	} {
		status, names := page(c.skip, c.top)
		if status != c.status || !reflect.DeepEqual(names, c.want) {
			t.Errorf("skip %v top %v: %d %v, want %d %v", c.skip, c.top, status, names, c.status, c.want)
		}
	}
	// JS's listRules pages: maxPageSize 1, skip by what came, until empty.
	var pages []string
	for skip := int32(0); ; skip++ {
		status, names := page(skip, int32(1))
		if status == 204 {
			break
		}
		pages = append(pages, names...)
	}
	if !reflect.DeepEqual(pages, all) {
		t.Fatalf("pages %v, want %v", pages, all)
	}
}

func TestRuleRemove(t *testing.T) {
	_, e, tgt := ruleTopic(t)
	if resp, _ := ruleCall(t, tgt, "com.microsoft:add-rule", jsSQLRule("r", "a = 1", "")); resp.status != 200 {
		t.Fatalf("add: %d %s", resp.status, resp.description)
	}
	for _, name := range []string{"$Default", "r"} {
		if resp, _ := ruleCall(t, tgt, "com.microsoft:remove-rule", encoding.Map{{Key: "rule-name", Value: name}}); resp.status != 200 {
			t.Fatalf("remove %s: %d %s", name, resp.status, resp.description)
		}
	}
	if rules, err := e.Rules(tgt.queue); err != nil || len(rules) != 0 {
		t.Fatalf("rules after removing both: %v, %v", rules, err)
	}
	if resp, _ := ruleCall(t, tgt, "com.microsoft:enumerate-rules", encoding.Map{{Key: "top", Value: int32(100)}, {Key: "skip", Value: int32(0)}}); resp.status != 204 {
		t.Fatalf("enumerate with no rules: %d, want 204", resp.status)
	}
}

func TestRuleErrorStatuses(t *testing.T) {
	b, e, tgt := ruleTopic(t)
	if resp, _ := ruleCall(t, tgt, "com.microsoft:add-rule", jsSQLRule("ruleName", "a = 1", "")); resp.status != 200 {
		t.Fatalf("add: %d %s", resp.status, resp.description)
	}
	gone := subscriptionTarget(t, e, "gone")
	if err := e.DeleteSubscription("gone"); err != nil {
		t.Fatal(err)
	}
	q, err := b.CreateQueue("q", broker.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	queueNode := &mgmtTarget{e: q, queue: broker.MainQueue, path: "q/$management", links: fuzzLinks{}}
	topicNode := &mgmtTarget{e: e, queue: broker.MainQueue, path: "t1/$management", links: fuzzLinks{}}

	long := strings.Repeat("x", 51)
	add := "com.microsoft:add-rule"
	remove := "com.microsoft:remove-rule"
	enumerate := "com.microsoft:enumerate-rules"
	for _, c := range []struct {
		name      string
		tgt       *mgmtTarget
		op        string
		body      any
		status    int32
		condition string
		text      string // a regexp the description matches
	}{
		// JS-live: /The messaging entity '.*ruleName' already exists./
		{"duplicate", tgt, add, jsSQLRule("ruleName", "b = 2", ""), 409, condEntityExists,
			`^The messaging entity 't1/Subscriptions/s1\|ruleName' already exists\.$`},
		{"remove missing", tgt, remove, encoding.Map{{Key: "rule-name", Value: "nope"}}, 404, condNotFound,
			`^The messaging entity 't1/Subscriptions/s1\|nope' could not be found\.$`},
		{"remove is case-sensitive", tgt, remove, encoding.Map{{Key: "rule-name", Value: "RULENAME"}}, 404, condNotFound, `could not be found`},
		{"bad sql", tgt, add, jsSQLRule("bad", "a = = 1", ""), 400, condRuleArgument, `rule bad: the filter: .*[0-9]`},
		{"bad action", tgt, add, jsSQLRule("bad", "a = 1", "SET"), 400, condRuleArgument, `rule bad: the action`},
		{"unknown sys property", tgt, add, jsSQLRule("bad", "sys.nope = 1", ""), 400, condRuleArgument, `rule bad`},
		{"name over 50", tgt, add, jsSQLRule(long, "a = 1", ""), 400, condRuleArgument, `length must be 1 to 50`},
		{"name with a slash", tgt, add, jsSQLRule("a/b", "a = 1", ""), 400, condRuleArgument, `not allowed`},
		{"empty correlation", tgt, add, jsCorrelationRule("empty", nil, ""), 400, condRuleArgument, `at least one`},
		{"no rule-name", tgt, add, encoding.Map{{Key: "rule-description", Value: encoding.Map{{Key: "sql-filter", Value: encoding.Map{{Key: "expression", Value: "1=1"}}}}}},
			400, condRuleArgument, `rule-name is missing`},
		{"rule-name a number", tgt, remove, encoding.Map{{Key: "rule-name", Value: int32(5)}}, 400, condRuleArgument, `rule-name holds a int`},
		{"empty rule-name", tgt, remove, encoding.Map{{Key: "rule-name", Value: ""}}, 400, condRuleArgument, `rule-name is empty`},
		{"no body", tgt, add, nil, 400, condRuleArgument, `must be a map`},
		{"body a list", tgt, add, encoding.List{"x"}, 400, condRuleArgument, `must be a map`},
		{"no description", tgt, add, encoding.Map{{Key: "rule-name", Value: "r"}}, 400, condRuleArgument, `rule-description is missing`},
		{"description a string", tgt, add, encoding.Map{{Key: "rule-name", Value: "r"}, {Key: "rule-description", Value: "1=1"}}, 400, condRuleArgument, `rule-description holds a string`},
		{"no filter", tgt, add, encoding.Map{{Key: "rule-name", Value: "r"}, {Key: "rule-description", Value: encoding.Map{{Key: "sql-filter", Value: nil}}}}, 400, condRuleArgument, `has no filter`},
		{"two filters", tgt, add, encoding.Map{{Key: "rule-name", Value: "r"}, {Key: "rule-description", Value: encoding.Map{
			{Key: "sql-filter", Value: encoding.Map{{Key: "expression", Value: "1=1"}}},
			{Key: "correlation-filter", Value: encoding.Map{{Key: "label", Value: "x"}}}}}}, 400, condRuleArgument, `more than one filter`},
		{"sql-filter a string", tgt, add, encoding.Map{{Key: "rule-name", Value: "r"}, {Key: "rule-description", Value: encoding.Map{{Key: "sql-filter", Value: "1=1"}}}}, 400, condRuleArgument, `sql-filter holds a string`},
		{"no expression", tgt, add, encoding.Map{{Key: "rule-name", Value: "r"}, {Key: "rule-description", Value: encoding.Map{{Key: "sql-filter", Value: encoding.Map{}}}}}, 400, condRuleArgument, `sql-filter has no expression`},
		{"expression binary", tgt, add, encoding.Map{{Key: "rule-name", Value: "r"}, {Key: "rule-description", Value: encoding.Map{{Key: "sql-filter", Value: encoding.Map{{Key: "expression", Value: []byte("1=1")}}}}}}, 400, condRuleArgument, `holds a binary`},
		{"action a list", tgt, add, encoding.Map{{Key: "rule-name", Value: "r"}, {Key: "rule-description", Value: encoding.Map{
			{Key: "sql-filter", Value: encoding.Map{{Key: "expression", Value: "1=1"}}}, {Key: "sql-rule-action", Value: encoding.List{}}}}}, 400, condRuleArgument, `sql-rule-action holds a list`},
		{"correlation field a number", tgt, add, jsCorrelationRule("r", map[string]any{"label": int64(3)}, ""), 400, condRuleArgument, `label holds a long`},
		{"correlation properties a list", tgt, add, jsCorrelationRule("r", map[string]any{"properties": encoding.List{}}, ""), 400, condRuleArgument, `properties holds a list`},
		{"binary property", tgt, add, jsCorrelationRule("r", map[string]any{"properties": encoding.Map{{Key: "k", Value: []byte{1}}}}, ""), 400, condRuleArgument, `property "k": a binary`},
		{"decimal property", tgt, add, jsCorrelationRule("r", map[string]any{"properties": encoding.Map{{Key: "k", Value: encoding.Decimal64{}}}}, ""), 400, condRuleArgument, `a decimal`},
		{"property key a number", tgt, add, jsCorrelationRule("r", map[string]any{"properties": encoding.Map{{Key: int32(1), Value: "v"}}}, ""), 400, condRuleArgument, `properties key holds a int`},
		{"property twice", tgt, add, jsCorrelationRule("r", map[string]any{"properties": encoding.Map{{Key: "k", Value: "a"}, {Key: "k", Value: "b"}}}, ""), 400, condRuleArgument, `"k" twice`},
		{"properties differing in case", tgt, add, jsCorrelationRule("r", map[string]any{"properties": encoding.Map{{Key: "k", Value: "a"}, {Key: "K", Value: "b"}}}, ""), 400, condRuleArgument, `differ only in case`},
		{"unknown described property", tgt, add, jsCorrelationRule("r", map[string]any{"properties": encoding.Map{{Key: "k", Value: encoding.Described{Descriptor: uint64(7), Value: "v"}}}}, ""), 400, condRuleArgument, `described value`},
		// Not UTF-8: the broker would store it changed (its JSON), and the
		// rule would not be found by its name.
		{"name not UTF-8", tgt, add, jsSQLRule("r\x80x", "a = 1", ""), 400, condRuleArgument, `rule-name "r\\x80x" is not UTF-8`},
		{"remove a name not UTF-8", tgt, remove, encoding.Map{{Key: "rule-name", Value: "r\xff"}}, 400, condRuleArgument, `not UTF-8`},
		{"expression not UTF-8", tgt, add, jsSQLRule("r", "a = '\xc3'", ""), 400, condRuleArgument, `sql-filter expression .* is not UTF-8`},
		{"correlation field not UTF-8", tgt, add, jsCorrelationRule("r", map[string]any{"to": encoding.Symbol("\xc0")}, ""), 400, condRuleArgument, `correlation-filter to .* is not UTF-8`},
		{"property name not UTF-8", tgt, add, jsCorrelationRule("r", map[string]any{"properties": encoding.Map{{Key: "k\xfe", Value: "v"}}}, ""), 400, condRuleArgument, `properties key .* is not UTF-8`},
		{"property value not UTF-8", tgt, add, jsCorrelationRule("r", map[string]any{"properties": encoding.Map{{Key: "k", Value: "v\xfe"}}}, ""), 400, condRuleArgument, `property "k": the string .* is not UTF-8`},
		{"skip a string", tgt, enumerate, encoding.Map{{Key: "skip", Value: "0"}}, 400, condRuleArgument, `skip holds a string`},

		{"add on a deleted subscription", gone, add, jsSQLRule("r", "1=1", ""), 404, condNotFound, `^The messaging entity 't1/Subscriptions/gone\|r' could not be found\.$`},
		{"remove on a deleted subscription", gone, remove, encoding.Map{{Key: "rule-name", Value: "$Default"}}, 404, condNotFound, `could not be found`},
		{"enumerate on a deleted subscription", gone, enumerate, encoding.Map{}, 404, condNotFound, `^The messaging entity 't1/Subscriptions/gone' could not be found\.$`},

		{"add on a queue", queueNode, add, jsSQLRule("r", "1=1", ""), 400, condNotAllowed, `subscription's management node.*q is not one`},
		{"enumerate on a queue", queueNode, enumerate, encoding.Map{}, 400, condNotAllowed, `q is not one`},
		{"remove on a topic", topicNode, remove, encoding.Map{{Key: "rule-name", Value: "r"}}, 400, condNotAllowed, `t1 is not one`},
	} {
		resp, _ := ruleCall(t, c.tgt, c.op, c.body)
		if resp.status != c.status || resp.condition != c.condition || !regexp.MustCompile(c.text).MatchString(resp.description) {
			t.Errorf("%s: %d %s %q, want %d %s matching %s", c.name, resp.status, resp.condition, resp.description, c.status, c.condition, c.text)
		}
	}
	// Nothing refused was added.
	rules, err := e.Rules(tgt.queue)
	if err != nil || len(rules) != 2 {
		t.Fatalf("rules after the refusals: %+v, %v", rules, err)
	}
}

func TestRuleFailureOfBrokerErrors(t *testing.T) {
	tgt := &mgmtTarget{path: "t1/Subscriptions/s1/$management"}
	for _, c := range []struct {
		err       error
		status    int32
		condition string
	}{
		{fmt.Errorf("%w: a subscription has at most 2000 rules", broker.ErrQuotaExceeded), 403, condResourceLimit},
		{fmt.Errorf("%w: x", broker.ErrInvalid), 400, condRuleArgument},
		{fmt.Errorf("%w: x", broker.ErrBadName), 400, condRuleArgument},
		{broker.ErrClosed, 503, condServerBusy},
		{errors.New("something else"), 500, condInternal},
	} {
		if resp := tgt.ruleFailure(c.err, "r"); resp.status != c.status || resp.condition != c.condition {
			t.Errorf("%v: %d %s, want %d %s", c.err, resp.status, resp.condition, c.status, c.condition)
		}
	}
}

// FuzzRuleAddBody feeds add-rule bodies to the decoder and, when it takes
// one, to a real subscription. A body is refused with a 400
// com.microsoft:argument-error, or becomes a rule whose enumerated form
// encodes, decodes and reads back as an add-rule body to the same rule; the
// broker answers anything it is given with 200 or a 4xx, and a rule it
// added is listed as it was decoded. Nothing panics.
func FuzzRuleAddBody(f *testing.F) {
	y2k := encoding.TimestampOf(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	for _, body := range []encoding.Map{
		jsSQLRule("sqlRule", "price > 10", ""),
		jsSQLRule("withAction", "color = 'blue'", "SET priority = 'high'"),
		jsSQLRule("true", "1=1", ""),
		jsCorrelationRule("correlationRule", map[string]any{"correlation-id": "c", "label": "l", "properties": encoding.Map{
			{Key: "key1", Value: "value1"}, {Key: "key2", Value: uint32(2)}, {Key: "key3", Value: true}, {Key: "key4", Value: y2k},
			{Key: "d", Value: 0.5}, {Key: "id", Value: encoding.UUID{1}}, {Key: "span", Value: encoding.Described{Descriptor: ruleDescTimeSpan, Value: int64(10)}},
		}}, "SET sys.Label = 'x'"),
		jsCorrelationRule("empty", nil, ""),
		{{Key: "rule-name", Value: "t"}, {Key: "rule-description", Value: encoding.Map{{Key: "true-filter", Value: encoding.Map{}}, {Key: "sql-rule-action", Value: nil}}}},
		{{Key: "rule-name", Value: 1}, {Key: "rule-description", Value: "x"}},
		// Found by this target: a name that is not UTF-8 was stored changed
		// by the broker's JSON, and a second add of it broke the topic.
		jsSQLRule("000000\x8000000000", "1=1", ""),
	} {
		b, err := encoding.AppendAny(nil, body)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	_, e, tgt := ruleTopic(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		r := encoding.NewReader(data)
		v, err := r.ReadAny(rpcLimits(data))
		if err != nil {
			return // refused with amqp:decode-error before any operation
		}
		body, _ := v.(encoding.Map)
		rule, err := decodeAddRule(body)
		if err != nil {
			if resp := tgt.ruleFailure(err, ""); resp.status != 400 || resp.condition != condRuleArgument {
				t.Fatalf("refused with %d %s: %v", resp.status, resp.condition, err)
			}
			return
		}
		enc, err := encoding.AppendAny(nil, encodeRuleDescription(&rule))
		if err != nil {
			t.Fatalf("the rule-description of %+v does not encode: %v", rule, err)
		}
		rd := encoding.NewReader(enc)
		back, err := rd.ReadAny(encoding.Limits{})
		if err != nil {
			t.Fatalf("the rule-description of %+v does not decode: %v", rule, err)
		}
		d, _ := back.(encoding.Described)
		again, err := decodeAddRule(addRuleBodyOf(t, d))
		if err != nil {
			t.Fatalf("the enumerated %+v does not read back: %v", rule, err)
		}
		if !reflect.DeepEqual(again, rule) {
			t.Fatalf("%+v reads back as %+v", rule, again)
		}

		err = e.AddRule(tgt.queue, rule)
		if err != nil {
			if resp := tgt.ruleFailure(err, rule.Name); resp.status < 400 || resp.status >= 500 {
				t.Fatalf("the broker refused %+v with %d %s: %v", rule, resp.status, resp.condition, err)
			}
			return
		}
		defer func() {
			if err := e.RemoveRule(tgt.queue, rule.Name); err != nil {
				t.Fatalf("remove %q: %v", rule.Name, err)
			}
		}()
		rules, err := e.Rules(tgt.queue)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rules {
			if r.Name == rule.Name {
				r.Created = 0
				if !reflect.DeepEqual(r, rule) {
					t.Fatalf("added %+v, listed as %+v", rule, r)
				}
				return
			}
		}
		t.Fatalf("added %q, not listed", rule.Name)
	})
}
