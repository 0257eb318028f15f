package atom

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/projection"
	"github.com/walbus/walbus/projection/filter"
)

// Request bodies as Go's admin client sends them: a queue, a subscription
// with a default rule, a correlation rule with an action.
const (
	refQueueBody = `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"><LockDuration>PT30S</LockDuration><RequiresSession>true</RequiresSession><MaxDeliveryCount>5</MaxDeliveryCount><AuthorizationRules></AuthorizationRules><ForwardTo>q2</ForwardTo></QueueDescription></content></entry>`

	refSubscriptionBody = `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><SubscriptionDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"><DefaultRuleDescription><Filter xmlns:_XMLSchema-instance="http://www.w3.org/2001/XMLSchema-instance" _XMLSchema-instance:type="SqlFilter"><SqlExpression>color = &#39;red&#39;</SqlExpression></Filter><Name>r0</Name></DefaultRuleDescription></SubscriptionDescription></content></entry>`

	refRuleBody = `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><RuleDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><Filter xmlns:_XMLSchema-instance="http://www.w3.org/2001/XMLSchema-instance" _XMLSchema-instance:type="CorrelationFilter"><CorrelationId>cid</CorrelationId><Properties><KeyValueOfstringanyType><Key>k</Key><Value _XMLSchema-instance:type="l28:string" xmlns:l28="http://www.w3.org/2001/XMLSchema">v</Value></KeyValueOfstringanyType></Properties></Filter><Action xmlns:_XMLSchema-instance="http://www.w3.org/2001/XMLSchema-instance" _XMLSchema-instance:type="SqlRuleAction"><SqlExpression>SET a = 1</SqlExpression></Action><Name>r1</Name></RuleDescription></content></entry>`
)

// Responses of the real service, which a client's update may send back
// whole: Go's internal/atom/testdata/queue.xml (authorization rule keys
// left out) and a captured 2024-05 topic (admin_client_topic_filtercount_test.go).
const (
	serviceQueue = `<entry xmlns="http://www.w3.org/2005/Atom">
    <id>https://someservicebus.servicebus.windows.net/amqptesting?api-version=2017-04</id>
    <title type="text">test-queue-name</title>
    <content type="application/xml">
        <QueueDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance">
            <LockDuration>PT30S</LockDuration>
            <MaxSizeInMegabytes>1024</MaxSizeInMegabytes>
            <RequiresDuplicateDetection>false</RequiresDuplicateDetection>
            <RequiresSession>false</RequiresSession>
            <DefaultMessageTimeToLive>P14D</DefaultMessageTimeToLive>
            <DeadLetteringOnMessageExpiration>false</DeadLetteringOnMessageExpiration>
            <DuplicateDetectionHistoryTimeWindow>PT10M</DuplicateDetectionHistoryTimeWindow>
            <MaxDeliveryCount>11</MaxDeliveryCount>
            <EnableBatchedOperations>true</EnableBatchedOperations>
            <SizeInBytes>542</SizeInBytes>
            <MessageCount>3</MessageCount>
            <IsAnonymousAccessible>false</IsAnonymousAccessible>
            <AuthorizationRules>
                <AuthorizationRule i:type="SharedAccessAuthorizationRule">
                    <ClaimType>SharedAccessKey</ClaimType>
                    <Rights><AccessRights>Manage</AccessRights></Rights>
                </AuthorizationRule>
            </AuthorizationRules>
            <Status>Active</Status>
            <CreatedAt>2022-02-03T19:34:05.4983039Z</CreatedAt>
            <UpdatedAt>2022-04-12T01:28:26.7163324Z</UpdatedAt>
            <AccessedAt>2022-04-06T20:37:28.447Z</AccessedAt>
            <SupportOrdering>true</SupportOrdering>
            <CountDetails xmlns:d2p1="http://schemas.microsoft.com/netservices/2011/06/servicebus">
                <d2p1:ActiveMessageCount>3</d2p1:ActiveMessageCount>
                <d2p1:DeadLetterMessageCount>0</d2p1:DeadLetterMessageCount>
            </CountDetails>
            <AutoDeleteOnIdle>P10675199DT2H48M5.4775807S</AutoDeleteOnIdle>
            <EnablePartitioning>false</EnablePartitioning>
            <EntityAvailabilityStatus>Available</EntityAvailabilityStatus>
            <EnableExpress>false</EnableExpress>
        </QueueDescription>
    </content>
</entry>`

	serviceTopic = `<entry xmlns="http://www.w3.org/2005/Atom"><id>https://CONTOSO.servicebus.windows.net/my-topic?api-version=2024-05</id><title type="text">my-topic</title><published>2026-08-14T00:46:28Z</published><updated>2026-08-14T00:46:28Z</updated><author><name>CONTOSO</name></author><link rel="self" href="https://CONTOSO.servicebus.windows.net/my-topic?api-version=2024-05"/><content type="application/xml"><TopicDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><DefaultMessageTimeToLive>P10675199DT2H48M5.4775807S</DefaultMessageTimeToLive><MaxSizeInMegabytes>1024</MaxSizeInMegabytes><RequiresDuplicateDetection>false</RequiresDuplicateDetection><DuplicateDetectionHistoryTimeWindow>PT10M</DuplicateDetectionHistoryTimeWindow><EnableBatchedOperations>true</EnableBatchedOperations><SizeInBytes>0</SizeInBytes><FilteringMessagesBeforePublishing>false</FilteringMessagesBeforePublishing><IsAnonymousAccessible>false</IsAnonymousAccessible><AuthorizationRules></AuthorizationRules><Status>Active</Status><CreatedAt>2026-08-14T00:46:28.4314346Z</CreatedAt><UpdatedAt>2026-08-14T00:46:28.4314346Z</UpdatedAt><AccessedAt>2026-08-14T00:46:32.9628806Z</AccessedAt><SupportOrdering>true</SupportOrdering><CountDetails xmlns:d2p1="http://schemas.microsoft.com/netservices/2011/06/servicebus"><d2p1:ActiveMessageCount>0</d2p1:ActiveMessageCount><d2p1:DeadLetterMessageCount>0</d2p1:DeadLetterMessageCount><d2p1:ScheduledMessageCount>0</d2p1:ScheduledMessageCount><d2p1:TransferMessageCount>0</d2p1:TransferMessageCount><d2p1:TransferDeadLetterMessageCount>0</d2p1:TransferDeadLetterMessageCount></CountDetails><SubscriptionCount>1</SubscriptionCount><AutoDeleteOnIdle>P10675199DT2H48M5.4775807S</AutoDeleteOnIdle><EnablePartitioning>false</EnablePartitioning><EntityAvailabilityStatus>Available</EntityAvailabilityStatus><EnableSubscriptionPartitioning>false</EnableSubscriptionPartitioning><EnableExpress>false</EnableExpress><MaxMessageSizeInKilobytes>256</MaxMessageSizeInKilobytes><SqlFilterCount>2</SqlFilterCount><CorrelationFilterCount>1</CorrelationFilterCount></TopicDescription></content></entry>`

	// The $Default rule as the service wrote it (captured by the old
	// Azure/azure-service-bus-go tests).
	serviceRule = `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><RuleDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
                 xmlns:i="http://www.w3.org/2001/XMLSchema-instance">
  <Filter i:type="TrueFilter"><SqlExpression>1=1</SqlExpression><CompatibilityLevel>20</CompatibilityLevel></Filter>
  <Action i:type="EmptyRuleAction"/>
  <CreatedAt>2018-12-19T19:37:23.9128676Z</CreatedAt>
  <Name>$Default</Name>
</RuleDescription></content></entry>`

	// A correlation rule from a service feed (Go's admin/testdata/rulefeed.json),
	// whose value type prefix is d5p1.
	serviceCorrelationRule = `<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"><RuleDescription xmlns="http://schemas.microsoft.com/netservices/2010/10/servicebus/connect" xmlns:i="http://www.w3.org/2001/XMLSchema-instance"><Filter i:type="CorrelationFilter"><CorrelationId>11</CorrelationId><Properties><KeyValueOfstringanyType><Key>hello</Key><Value i:type="d5p1:string" xmlns:d5p1="http://www.w3.org/2001/XMLSchema">world</Value></KeyValueOfstringanyType></Properties></Filter><Action i:type="EmptyRuleAction"/><CreatedAt>2022-08-08T22:23:20.3432504Z</CreatedAt><Name>CorrelationFilter1</Name></RuleDescription></content></entry>`
)

func str(s string) *string { return &s }

// wrap puts a description into an entry, as Go's client writes one.
func wrap(desc string) []byte {
	return []byte(`<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml">` + desc + `</content></entry>`)
}

// queueDesc, topicDesc, subDesc and ruleDesc wrap elements in a description.
func queueDesc(elems string) []byte {
	return wrap(`<QueueDescription xmlns="` + nsConnect + `">` + elems + `</QueueDescription>`)
}

func topicDesc(elems string) []byte {
	return wrap(`<TopicDescription xmlns="` + nsConnect + `">` + elems + `</TopicDescription>`)
}

func subDesc(elems string) []byte {
	return wrap(`<SubscriptionDescription xmlns="` + nsConnect + `">` + elems + `</SubscriptionDescription>`)
}

func ruleDesc(elems string) []byte {
	return wrap(`<RuleDescription xmlns="` + nsConnect + `" xmlns:i="` + nsInstance + `">` + elems + `</RuleDescription>`)
}

func mustQueue(t *testing.T, body []byte) projection.Config {
	t.Helper()
	cfg := projection.DefaultConfig()
	if err := ParseQueue(body, &cfg); err != nil {
		t.Fatalf("ParseQueue: %v\n%s", err, body)
	}
	return cfg
}

func mustRule(t *testing.T, body []byte) projection.RuleSpec {
	t.Helper()
	r, err := ParseRule(body)
	if err != nil {
		t.Fatalf("ParseRule: %v\n%s", err, body)
	}
	return r
}

func checkEqual(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func TestParseReferenceBodies(t *testing.T) {
	want := projection.DefaultConfig()
	want.LockDuration = 30 * time.Second
	want.RequiresSession = true
	want.MaxDeliveryCount = 5
	want.ForwardTo = "q2"
	checkEqual(t, "queue", mustQueue(t, []byte(refQueueBody)), want)

	cfg := projection.DefaultSubscriptionConfig()
	rule, err := ParseSubscription([]byte(refSubscriptionBody), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "subscription config", cfg, projection.DefaultSubscriptionConfig())
	checkEqual(t, "default rule", rule, &projection.RuleSpec{Name: "r0",
		Filter: projection.FilterSpec{Kind: projection.FilterSQL, SQL: "color = 'red'"}})

	checkEqual(t, "rule", mustRule(t, []byte(refRuleBody)), projection.RuleSpec{Name: "r1",
		Filter: projection.FilterSpec{Kind: projection.FilterCorrelation, Correlation: &projection.CorrelationSpec{
			CorrelationID: str("cid"), Properties: []filter.Property{{Name: "k", Value: filter.StringValue("v")}}}},
		Action: "SET a = 1"})
}

// TestParseServiceResponses: what the service answers is also a valid
// update; read-only elements are skipped.
func TestParseServiceResponses(t *testing.T) {
	want := projection.DefaultConfig()
	want.LockDuration = 30 * time.Second
	want.DefaultTTL = 14 * 24 * time.Hour
	want.MaxDeliveryCount = 11
	checkEqual(t, "queue", mustQueue(t, []byte(serviceQueue)), want)

	topic := projection.DefaultTopicConfig()
	if err := ParseTopic([]byte(serviceTopic), &topic); err != nil {
		t.Fatal(err)
	}
	want = projection.DefaultTopicConfig()
	want.MaxMessageSize = 256 << 10
	checkEqual(t, "topic", topic, want)

	checkEqual(t, "$Default", mustRule(t, []byte(serviceRule)), projection.DefaultRule())
	checkEqual(t, "correlation", mustRule(t, []byte(serviceCorrelationRule)), projection.RuleSpec{
		Name: "CorrelationFilter1", Filter: projection.FilterSpec{Kind: projection.FilterCorrelation,
			Correlation: &projection.CorrelationSpec{CorrelationID: str("11"),
				Properties: []filter.Property{{Name: "hello", Value: filter.StringValue("world")}}}}})
}

func readRequest(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "requests", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestParseSDKRequests reads bodies the SDKs sent (testdata/requests,
// captured from Go azservicebus v1.11.0, JS @azure/service-bus 7.9.5 and
// Python azure-servicebus 7.8.2 admin clients): Go's invented
// _XMLSchema-instance prefix, JS's p4 and l28:double for every number,
// Python's ns0-prefixed entry, xsi, long and duration values, and the
// sb:// URL form of ForwardTo that JS and Python send.
func TestParseSDKRequests(t *testing.T) {
	day := 24 * time.Hour
	queue := func(edit func(*projection.Config)) projection.Config {
		c := projection.DefaultConfig()
		edit(&c)
		return c
	}
	for _, c := range []struct {
		file string
		want projection.Config
	}{
		{"go-queue-create.xml", queue(func(c *projection.Config) {
			c.LockDuration, c.MaxSizeMB, c.RequiresDuplicateDetection, c.RequiresSession = 30*time.Second, 2048, true, true
			c.DefaultTTL, c.DuplicateWindow, c.MaxDeliveryCount, c.NoBatchedOperations = 14*day, 90*time.Second, 5, true
			c.Status, c.AutoDeleteOnIdle, c.ForwardTo = projection.StatusSendDisabled, 10*time.Minute, "q2"
			c.UserMetadata, c.MaxMessageSize = "a <b> & 'c'", 256<<10
		})},
		{"go-queue-update.xml", queue(func(c *projection.Config) {
			c.LockDuration, c.MaxSizeMB, c.RequiresDuplicateDetection, c.RequiresSession = 2*time.Minute, 2048, true, true
			c.DefaultTTL, c.DuplicateWindow, c.MaxDeliveryCount, c.NoBatchedOperations = 14*day, 90*time.Second, 5, true
			c.AutoDeleteOnIdle, c.ForwardTo = 10*time.Minute, "q2"
			c.UserMetadata, c.MaxMessageSize = "a <b> & 'c'", 256<<10
		})},
		{"js-queue-create.xml", queue(func(c *projection.Config) {
			c.LockDuration, c.MaxSizeMB, c.RequiresSession, c.MaxDeliveryCount = 30*time.Second, 2048, true, 5
			c.DefaultTTL = day + 2*time.Hour + 3*time.Minute + 4500*time.Millisecond
			c.NoBatchedOperations, c.Status, c.ForwardTo = true, projection.StatusReceiveDisabled, "q2"
			c.UserMetadata, c.AutoDeleteOnIdle = "m & <x>", time.Hour
			c.ForwardToAddress = "sb://127.0.0.1:42719/q2"
		})},
		{"js-queue-update.xml", queue(func(c *projection.Config) {
			c.LockDuration, c.MaxSizeMB, c.RequiresSession, c.MaxDeliveryCount = 2*time.Minute, 2048, true, 5
			c.DefaultTTL = day + 2*time.Hour + 3*time.Minute + 4500*time.Millisecond
			c.NoBatchedOperations, c.Status, c.ForwardTo = true, projection.StatusReceiveDisabled, "q2"
			c.UserMetadata, c.AutoDeleteOnIdle = "m & <x>", time.Hour
			c.ForwardToAddress = "sb://127.0.0.1:42719/q2"
		})},
		{"py-queue-create.xml", queue(func(c *projection.Config) {
			c.LockDuration, c.MaxSizeMB, c.RequiresDuplicateDetection, c.RequiresSession = 30*time.Second, 3072, true, true
			c.DefaultTTL, c.DuplicateWindow, c.MaxDeliveryCount = day+500*time.Microsecond, 20*time.Second, 5
			c.Status, c.AutoDeleteOnIdle, c.UserMetadata = projection.StatusDisabled, 7*time.Minute, "py <meta>"
		})},
		{"py-queue-update.xml", queue(func(c *projection.Config) {
			c.LockDuration, c.MaxSizeMB, c.RequiresDuplicateDetection, c.RequiresSession = 2*time.Minute, 3072, true, true
			c.DefaultTTL, c.DuplicateWindow, c.MaxDeliveryCount = day+500*time.Microsecond, 20*time.Second, 5
			c.Status, c.AutoDeleteOnIdle, c.UserMetadata = projection.StatusDisabled, 7*time.Minute, "py <meta>"
			c.ForwardTo, c.ForwardToAddress = "q2", "sb://127.0.0.1:35591/q2"
		})},
	} {
		checkEqual(t, c.file, mustQueue(t, readRequest(t, c.file)), c.want)
	}

	for _, c := range []struct {
		file string
		edit func(*projection.Config)
	}{
		{"go-topic-create.xml", func(c *projection.Config) {
			c.DefaultTTL, c.NoSupportOrdering, c.EnablePartitioning = time.Hour, true, true
		}},
		{"js-topic-create.xml", func(c *projection.Config) { c.UserMetadata, c.NoSupportOrdering = "topic meta", true }},
		{"py-topic-create.xml", func(c *projection.Config) { c.NoSupportOrdering, c.MaxMessageSize = true, 512<<10 }},
	} {
		got, want := projection.DefaultTopicConfig(), projection.DefaultTopicConfig()
		c.edit(&want)
		if err := ParseTopic(readRequest(t, c.file), &got); err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		checkEqual(t, c.file, got, want)
	}

	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	sqlRule := projection.RuleSpec{Name: "r0", Filter: projection.FilterSpec{Kind: projection.FilterSQL,
		SQL: "color = @c AND n > @n", Parameters: []filter.Property{{Name: "@c", Value: filter.StringValue("red")},
			{Name: "@n", Value: filter.IntValue(5)}}},
		Action: "SET seen = @t", ActionParameters: []filter.Property{{Name: "@t", Value: filter.TimeValue(at)}}}
	jsRule := sqlRule
	jsRule.Filter.Parameters = []filter.Property{sqlRule.Filter.Parameters[0], {Name: "@n", Value: filter.DoubleValue(5)}}
	jsRule.ActionParameters = []filter.Property{{Name: "@d", Value: filter.TimeValue(at)}}
	jsRule.Action = "SET seen = @d"
	for _, c := range []struct {
		file string
		edit func(*projection.Config)
		rule *projection.RuleSpec
	}{
		{"go-subscription-create.xml", func(c *projection.Config) {
			c.LockDuration, c.DeadLetterOnFilterError, c.MaxDeliveryCount = 45*time.Second, false, 7
		}, &sqlRule},
		{"js-subscription-create.xml", func(c *projection.Config) { c.LockDuration = 45 * time.Second }, &jsRule},
		{"py-subscription-create.xml", func(c *projection.Config) {
			c.LockDuration, c.DeadLetterOnFilterError, c.ForwardTo = 45*time.Second, false, "q2"
			c.ForwardToAddress = "sb://127.0.0.1:35591/q2"
		}, nil},
	} {
		got, want := projection.DefaultSubscriptionConfig(), projection.DefaultSubscriptionConfig()
		c.edit(&want)
		rule, err := ParseSubscription(readRequest(t, c.file), &got)
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		checkEqual(t, c.file, got, want)
		checkEqual(t, c.file+" rule", rule, c.rule)
	}

	props := func(kv ...any) []filter.Property {
		var out []filter.Property
		for i := 0; i < len(kv); i += 2 {
			out = append(out, filter.Property{Name: kv[i].(string), Value: kv[i+1].(filter.Value)})
		}
		return out
	}
	correlation := func(name string, p []filter.Property, action string, params []filter.Property) projection.RuleSpec {
		return projection.RuleSpec{Name: name, Filter: projection.FilterSpec{Kind: projection.FilterCorrelation,
			Correlation: &projection.CorrelationSpec{CorrelationID: str("cid"), Subject: str("lbl"), Properties: p}},
			Action: action, ActionParameters: params}
	}
	for _, c := range []struct {
		file string
		want projection.RuleSpec
	}{
		{"go-rule-correlation.xml", correlation("r1", props("k", filter.StringValue("v"), "n", filter.IntValue(1),
			"f", filter.DoubleValue(2.5), "b", filter.BoolValue(true), "d", filter.TimeValue(at)), "SET a = 1", nil)},
		{"js-rule-correlation.xml", correlation("r1", props("k", filter.StringValue("v"), "n", filter.DoubleValue(1),
			"f", filter.DoubleValue(2.5), "b", filter.BoolValue(true), "d", filter.TimeValue(at)), "SET a = 1", nil)},
		{"py-rule-correlation.xml", correlation("r1", props("k", filter.StringValue("v"), "n", filter.IntValue(1),
			"big", filter.IntValue(1<<40), "f", filter.DoubleValue(2.5), "b", filter.BoolValue(true),
			"d", filter.TimeValue(at), "ts", filter.DurationValue(90*time.Second)),
			"SET a = @x", props("@x", filter.StringValue("y")))},
		{"go-rule-true.xml", projection.RuleSpec{Name: "r2", Filter: projection.FilterSpec{Kind: projection.FilterTrue}}},
		{"go-rule-false.xml", projection.RuleSpec{Name: "r3", Filter: projection.FilterSpec{Kind: projection.FilterFalse}}},
		{"js-rule-sql.xml", projection.RuleSpec{Name: "r2", Filter: projection.FilterSpec{Kind: projection.FilterSQL, SQL: "1=1"}}},
		{"py-rule-sql.xml", projection.RuleSpec{Name: "r2", Filter: projection.FilterSpec{Kind: projection.FilterSQL,
			SQL: "a = @p", Parameters: props("@p", filter.IntValue(5))}}},
		{"py-rule-true.xml", projection.RuleSpec{Name: "r3", Filter: projection.FilterSpec{Kind: projection.FilterTrue}}},
		{"py-rule-false.xml", projection.RuleSpec{Name: "r4", Filter: projection.FilterSpec{Kind: projection.FilterFalse}}},
	} {
		got := mustRule(t, readRequest(t, c.file))
		checkEqual(t, c.file, got, c.want)
		if err := got.Compile(); err != nil {
			t.Errorf("%s: the broker refuses the rule: %v", c.file, err)
		}
	}
}

func TestKindOf(t *testing.T) {
	for file, want := range map[string]Kind{"go-queue-create.xml": Queue, "py-topic-create.xml": Topic,
		"js-subscription-create.xml": Subscription, "py-rule-sql.xml": Rule} {
		if got, err := KindOf(readRequest(t, file)); err != nil || got != want {
			t.Errorf("KindOf(%s) = %v, %v; want %v", file, got, err, want)
		}
	}
	for _, body := range []string{"", "<feed/>", `<entry><content/></entry>`, string(wrap("<Nonsense/>")), "<entry"} {
		if k, err := KindOf([]byte(body)); err == nil {
			t.Errorf("KindOf(%q) = %v, want an error", body, k)
		}
	}
}

// TestParseAnyOrder: the service writes elements in .NET's order, but
// they are read in any.
func TestParseAnyOrder(t *testing.T) {
	elems := []string{"<LockDuration>PT45S</LockDuration>", "<MaxDeliveryCount>3</MaxDeliveryCount>",
		"<Status>Disabled</Status>", "<UserMetadata>x</UserMetadata>", "<RequiresSession>true</RequiresSession>",
		"<AutoDeleteOnIdle>PT6M</AutoDeleteOnIdle>", "<Unknown><Nested>1</Nested></Unknown>"}
	want := mustQueue(t, queueDesc(strings.Join(elems, "")))
	for i := range elems {
		rotated := append(append([]string{}, elems[i:]...), elems[:i]...)
		checkEqual(t, "rotated", mustQueue(t, queueDesc(strings.Join(rotated, ""))), want)
	}
	if want.LockDuration != 45*time.Second || want.Status != projection.StatusDisabled || want.AutoDeleteOnIdle != 6*time.Minute {
		t.Errorf("parsed %+v", want)
	}
}

// TestParseKeepsAbsent: absent elements keep the caller's values (an
// update starts from the current config).
func TestParseKeepsAbsent(t *testing.T) {
	cfg := projection.DefaultConfig()
	cfg.ForwardTo, cfg.UserMetadata, cfg.Status, cfg.MaxSizeMB = "elsewhere", "meta", projection.StatusDisabled, 2048
	want := cfg
	want.MaxDeliveryCount = 4
	if err := ParseQueue(queueDesc("<MaxDeliveryCount>4</MaxDeliveryCount>"), &cfg); err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "config", cfg, want)

	// And the canonical forms of defaults.
	if err := ParseQueue(queueDesc(`<MaxSizeInMegabytes>1024</MaxSizeInMegabytes><Status>Active</Status>
		<DefaultMessageTimeToLive>P10675199DT2H48M5.4775807S</DefaultMessageTimeToLive><AutoDeleteOnIdle>P10675199DT2H48M5.4775807S</AutoDeleteOnIdle>
		<ForwardTo></ForwardTo><UserMetadata/>`), &cfg); err != nil {
		t.Fatal(err)
	}
	want = projection.DefaultConfig()
	want.MaxDeliveryCount = 4
	checkEqual(t, "defaults", cfg, want)
}

func TestParseForwardTo(t *testing.T) {
	for in, want := range map[string]string{
		"q2": "q2", " q2\n": "q2", "sb://ns.servicebus.windows.net/q2": "q2", "sb://127.0.0.1:5672/q2/": "q2",
		"https://host/a/b": "a/b", "sb://host/": "", "": "", "sb://": "sb://",
	} {
		cfg := projection.DefaultConfig()
		if err := ParseQueue(queueDesc("<ForwardTo>"+in+"</ForwardTo>"), &cfg); err != nil || cfg.ForwardTo != want {
			t.Errorf("ForwardTo %q: got %q, %v; want %q", in, cfg.ForwardTo, err, want)
		}
		// A URL is kept as written, to be reported so.
		wantAddress := strings.TrimSpace(in)
		if want == "" || want == wantAddress {
			wantAddress = ""
		}
		if cfg.ForwardToAddress != wantAddress {
			t.Errorf("ForwardTo %q: address %q, want %q", in, cfg.ForwardToAddress, wantAddress)
		}
	}
}

// TestParseIgnoresOtherKinds: elements of other descriptions, and
// read-only ones, change nothing.
func TestParseIgnoresOtherKinds(t *testing.T) {
	cfg := projection.DefaultTopicConfig()
	if err := ParseTopic(topicDesc(`<LockDuration>PT5M</LockDuration><MaxDeliveryCount>2</MaxDeliveryCount>
		<RequiresSession>true</RequiresSession><ForwardTo>x</ForwardTo><SubscriptionCount>7</SubscriptionCount>
		<SizeInBytes>nonsense</SizeInBytes><CreatedAt>yesterday</CreatedAt>`), &cfg); err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "topic", cfg, projection.DefaultTopicConfig())

	sub := projection.DefaultSubscriptionConfig()
	if _, err := ParseSubscription(subDesc(`<MaxSizeInMegabytes>5</MaxSizeInMegabytes><SupportOrdering>false</SupportOrdering>
		<MessageCount>x</MessageCount><CountDetails><d2p1:ActiveMessageCount xmlns:d2p1="`+nsCounts+`">x</d2p1:ActiveMessageCount></CountDetails>`), &sub); err != nil {
		t.Fatal(err)
	}
	checkEqual(t, "subscription", sub, projection.DefaultSubscriptionConfig())
}

// TestParseRequiresSessionAndDuplicateDetection: create-time settings are
// read like any other; the HTTP layer refuses to change them.
func TestParseRequiresSessionAndDuplicateDetection(t *testing.T) {
	cfg := projection.DefaultConfig()
	cfg.RequiresSession, cfg.RequiresDuplicateDetection = true, true
	if err := ParseQueue(queueDesc(`<RequiresSession>false</RequiresSession><RequiresDuplicateDetection>0</RequiresDuplicateDetection>`), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.RequiresSession || cfg.RequiresDuplicateDetection {
		t.Errorf("got %+v", cfg)
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		body     []byte
		property string
	}{
		{queueDesc("<MaxDeliveryCount>five</MaxDeliveryCount>"), "MaxDeliveryCount"},
		{queueDesc("<MaxDeliveryCount>0</MaxDeliveryCount>"), "MaxDeliveryCount"},
		{queueDesc("<MaxDeliveryCount>2147483648</MaxDeliveryCount>"), "MaxDeliveryCount"},
		{queueDesc("<LockDuration>PT5X</LockDuration>"), "LockDuration"},
		{queueDesc("<LockDuration>PT0S</LockDuration>"), "LockDuration"},
		{queueDesc("<LockDuration>PT5M0.1S</LockDuration>"), "LockDuration"},
		{queueDesc("<LockDuration>-PT1M</LockDuration>"), "LockDuration"},
		{queueDesc("<DuplicateDetectionHistoryTimeWindow>PT19S</DuplicateDetectionHistoryTimeWindow>"), "DuplicateDetectionHistoryTimeWindow"},
		{queueDesc("<DuplicateDetectionHistoryTimeWindow>P7DT1S</DuplicateDetectionHistoryTimeWindow>"), "DuplicateDetectionHistoryTimeWindow"},
		{queueDesc("<Status>Paused</Status>"), "Status"},
		{queueDesc("<Status>active</Status>"), "Status"},
		{queueDesc("<Status>Creating</Status>"), "Status"},
		{queueDesc("<UserMetadata>" + strings.Repeat("m", 1025) + "</UserMetadata>"), "UserMetadata"},
		{queueDesc("<RequiresSession>yes</RequiresSession>"), "RequiresSession"},
		{queueDesc("<DefaultMessageTimeToLive>PT0S</DefaultMessageTimeToLive>"), "DefaultMessageTimeToLive"},
		{queueDesc("<DefaultMessageTimeToLive>1 day</DefaultMessageTimeToLive>"), "DefaultMessageTimeToLive"},
		{queueDesc("<AutoDeleteOnIdle>PT4M59S</AutoDeleteOnIdle>"), "AutoDeleteOnIdle"},
		{queueDesc("<MaxSizeInMegabytes>0</MaxSizeInMegabytes>"), "MaxSizeInMegabytes"},
		{queueDesc("<MaxMessageSizeInKilobytes>102401</MaxMessageSizeInKilobytes>"), "MaxMessageSizeInKilobytes"},
		{queueDesc("<MaxMessageSizeInKilobytes>0</MaxMessageSizeInKilobytes>"), "MaxMessageSizeInKilobytes"},
		{topicDesc("<SupportOrdering>maybe</SupportOrdering>"), "QueueDescription"},
		{[]byte("<entry><content><QueueDescription><LockDuration>PT1M</LockDuration></content></entry>"), "entry"},
		{[]byte("not xml"), "entry"},
		{[]byte(`<feed xmlns="http://www.w3.org/2005/Atom"/>`), "entry"},
		{[]byte(`<entry xmlns="http://www.w3.org/2005/Atom"><content type="application/xml"></content></entry>`), "content"},
		{[]byte(`<entry><content><QueueDescription/></content></entry><entry/>`), "entry"},
		{[]byte(`<!DOCTYPE x [<!ENTITY e "boom">]><entry><content><QueueDescription><UserMetadata>&e;</UserMetadata></QueueDescription></content></entry>`), "entry"},
	} {
		before := projection.DefaultConfig()
		cfg := before
		err := ParseQueue(c.body, &cfg)
		var pe *PropertyError
		if !errors.As(err, &pe) || pe.Property != c.property {
			t.Errorf("ParseQueue(%s) = %v, want a *PropertyError naming %s", c.body, err, c.property)
			continue
		}
		if !strings.Contains(err.Error(), c.property) {
			t.Errorf("%q does not name %s", err, c.property)
		}
		checkEqual(t, "config after an error", cfg, before)
	}

	for _, c := range []struct {
		body     []byte
		property string
	}{
		{topicDesc("<SupportOrdering>maybe</SupportOrdering>"), "SupportOrdering"},
		{topicDesc("<MaxSizeInMegabytes>-1</MaxSizeInMegabytes>"), "MaxSizeInMegabytes"},
		{queueDesc(""), "TopicDescription"},
	} {
		cfg := projection.DefaultTopicConfig()
		var pe *PropertyError
		if err := ParseTopic(c.body, &cfg); !errors.As(err, &pe) || pe.Property != c.property {
			t.Errorf("ParseTopic(%s) = %v, want a *PropertyError naming %s", c.body, err, c.property)
		}
	}

	for _, c := range []struct {
		body     []byte
		property string
	}{
		{subDesc("<DeadLetteringOnFilterEvaluationExceptions>2</DeadLetteringOnFilterEvaluationExceptions>"), "DeadLetteringOnFilterEvaluationExceptions"},
		{subDesc("<DefaultRuleDescription><Filter i:type=\"SqlFilter\" xmlns:i=\"" + nsInstance + "\"><SqlExpression>a =</SqlExpression></Filter></DefaultRuleDescription>"), "Filter"},
		{subDesc("<DefaultRuleDescription><Name>a/b</Name></DefaultRuleDescription>"), "Name"},
	} {
		cfg := projection.DefaultSubscriptionConfig()
		var pe *PropertyError
		if _, err := ParseSubscription(c.body, &cfg); !errors.As(err, &pe) || pe.Property != c.property {
			t.Errorf("ParseSubscription(%s) = %v, want a *PropertyError naming %s", c.body, err, c.property)
		}
	}
}

func TestParseSubscriptionDefaultRule(t *testing.T) {
	for _, c := range []struct {
		elems string
		want  *projection.RuleSpec
	}{
		{"", nil},
		{`<DefaultRuleDescription i:nil="true" xmlns:i="` + nsInstance + `"/>`, nil},
		{"<DefaultRuleDescription/>", &projection.RuleSpec{Name: "$Default", Filter: projection.FilterSpec{Kind: projection.FilterTrue}}},
		{`<DefaultRuleDescription><Filter xmlns:p4="` + nsInstance + `" p4:type="FalseFilter"><SqlExpression>1=0</SqlExpression></Filter><Name>none</Name></DefaultRuleDescription>`,
			&projection.RuleSpec{Name: "none", Filter: projection.FilterSpec{Kind: projection.FilterFalse}}},
	} {
		cfg := projection.DefaultSubscriptionConfig()
		rule, err := ParseSubscription(subDesc(c.elems), &cfg)
		if err != nil {
			t.Fatal(err)
		}
		checkEqual(t, c.elems, rule, c.want)
	}
}

// TestParseRuleTypes: the type attribute is found by its namespace,
// whatever the prefix, and values take the kind their XML Schema type says.
func TestParseRuleTypes(t *testing.T) {
	at := time.Date(2020, 1, 2, 3, 4, 5, 600, time.UTC)
	bad := filter.OpaqueValue() // stands for "refused"
	for _, c := range []struct {
		value string
		want  filter.Value
	}{
		{`<Value i:type="d6p1:string" xmlns:d6p1="` + nsSchema + `"> spaced </Value>`, filter.StringValue(" spaced ")},
		{`<Value i:type="d6p1:string" xmlns:d6p1="` + nsSchema + `"/>`, filter.StringValue("")},
		{`<Value i:type="d6p1:int" xmlns:d6p1="` + nsSchema + `"> -7 </Value>`, filter.IntValue(-7)},
		{`<Value i:type="d6p1:long" xmlns:d6p1="` + nsSchema + `">9223372036854775807</Value>`, filter.IntValue(1<<63 - 1)},
		{`<Value i:type="d6p1:unsignedLong" xmlns:d6p1="` + nsSchema + `">18446744073709551615</Value>`, filter.DoubleValue(1 << 64)},
		{`<Value i:type="d6p1:double" xmlns:d6p1="` + nsSchema + `">2.500000</Value>`, filter.DoubleValue(2.5)},
		{`<Value i:type="d6p1:double" xmlns:d6p1="` + nsSchema + `">-INF</Value>`, filter.DoubleValue(math.Inf(-1))},
		{`<Value i:type="d6p1:decimal" xmlns:d6p1="` + nsSchema + `">1.25</Value>`, filter.DecimalValue(1.25)},
		{`<Value i:type="d6p1:boolean" xmlns:d6p1="` + nsSchema + `">1</Value>`, filter.BoolValue(true)},
		{`<Value i:type="d6p1:boolean" xmlns:d6p1="` + nsSchema + `">False</Value>`, filter.BoolValue(false)},
		{`<Value i:type="d6p1:dateTime" xmlns:d6p1="` + nsSchema + `">2020-01-02T03:04:05.0000006Z</Value>`, filter.TimeValue(at)},
		{`<Value i:type="d6p1:dateTime" xmlns:d6p1="` + nsSchema + `">2020-01-02T04:04:05.0000006+01:00</Value>`, filter.TimeValue(at)},
		{`<Value i:type="d6p1:dateTime" xmlns:d6p1="` + nsSchema + `">2020-01-02T03:04:05.0000006</Value>`, filter.TimeValue(at)},
		{`<Value i:type="d6p1:duration" xmlns:d6p1="` + nsSchema + `">-PT1.5S</Value>`, filter.DurationValue(-1500 * time.Millisecond)},
		{`<Value i:type="d6p1:duration" xmlns:d6p1="` + nsSchema + `">` + timeSpanMax + `</Value>`, filter.DurationTicks(1<<63 - 1)},
		{`<Value i:type="ser:guid" xmlns:ser="` + nsSerialization + `">0102030405060708090A0B0C0D0E0F10</Value>`, bad},
		{`<Value i:type="ser:guid" xmlns:ser="` + nsSerialization + `">01020304-0506-0708-090a-0B0C0D0E0F10</Value>`,
			filter.UUIDValue(filter.UUID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})},
		{`<Value i:nil="true"/>`, filter.NullValue()},
		{`<Value q:type="l28:int" xmlns:q="` + nsInstance + `" xmlns:l28="` + nsSchema + `">3</Value>`, filter.IntValue(3)},
		{`<Value xsi:type="int">4</Value>`, filter.IntValue(4)}, // undeclared prefixes, leniently
		{`<Value i:type="d6p1:int">5</Value>`, filter.IntValue(5)},
		{`<Value i:type="x:int" xmlns:x="urn:elsewhere">5</Value>`, bad},
		{`<Value i:type="d6p1:base64Binary" xmlns:d6p1="` + nsSchema + `">AA==</Value>`, bad},
		{`<Value i:type="d6p1:int" xmlns:d6p1="` + nsSchema + `">1.5</Value>`, bad},
		{`<Value i:type="d6p1:boolean" xmlns:d6p1="` + nsSchema + `">yes</Value>`, bad},
		{`<Value i:type="d6p1:dateTime" xmlns:d6p1="` + nsSchema + `">today</Value>`, bad},
		{`<Value>untyped</Value>`, bad},
	} {
		body := ruleDesc(`<Filter i:type="CorrelationFilter"><Properties><KeyValueOfstringanyType><Key>p</Key>` + c.value +
			`</KeyValueOfstringanyType></Properties></Filter>`)
		r, err := ParseRule(body)
		if c.want == bad {
			var pe *PropertyError
			if !errors.As(err, &pe) || pe.Property != "Filter" {
				t.Errorf("%s: got %v, %v; want a *PropertyError naming Filter", c.value, r, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.value, err)
			continue
		}
		checkEqual(t, c.value, r.Filter.Correlation.Properties, []filter.Property{{Name: "p", Value: c.want}})
	}
}

func TestParseRuleFilters(t *testing.T) {
	for _, c := range []struct {
		elems string
		want  projection.RuleSpec
	}{
		{"", projection.RuleSpec{Filter: projection.FilterSpec{Kind: projection.FilterTrue}}},
		{`<Filter i:type="FalseFilter"><SqlExpression>1&gt;1</SqlExpression></Filter><Action i:nil="true"/>`,
			projection.RuleSpec{Filter: projection.FilterSpec{Kind: projection.FilterFalse}}},
		{`<Filter><SqlExpression>a = 1</SqlExpression></Filter><Action><SqlExpression>SET b = 2</SqlExpression></Action>`,
			projection.RuleSpec{Filter: projection.FilterSpec{Kind: projection.FilterSQL, SQL: "a = 1"}, Action: "SET b = 2"}},
		{`<Filter><To/><ContentType i:nil="true"/><MessageId>m</MessageId></Filter><Action/>`,
			projection.RuleSpec{Filter: projection.FilterSpec{Kind: projection.FilterCorrelation,
				Correlation: &projection.CorrelationSpec{To: str(""), MessageID: str("m")}}}},
		{`<Filter i:type="CorrelationFilter"><CorrelationId>c</CorrelationId><MessageId>m</MessageId><To>t</To><ReplyTo>r</ReplyTo>
			<Label>l</Label><SessionId>s</SessionId><ReplyToSessionId>rs</ReplyToSessionId><ContentType>ct</ContentType></Filter>
			<Action i:type="EmptyRuleAction"/><Name> n1 </Name>`,
			projection.RuleSpec{Name: "n1", Filter: projection.FilterSpec{Kind: projection.FilterCorrelation,
				Correlation: &projection.CorrelationSpec{CorrelationID: str("c"), MessageID: str("m"), To: str("t"),
					ReplyTo: str("r"), Subject: str("l"), SessionID: str("s"), ReplyToSessionID: str("rs"), ContentType: str("ct")}}}},
		{`<Filter i:type="SqlFilter"><SqlExpression>user.n &gt; @min</SqlExpression><Parameters><KeyValueOfstringanyType><Key>min</Key>
			<Value i:type="d6p1:int" xmlns:d6p1="` + nsSchema + `">5</Value></KeyValueOfstringanyType></Parameters></Filter>`,
			projection.RuleSpec{Filter: projection.FilterSpec{Kind: projection.FilterSQL, SQL: "user.n > @min",
				Parameters: []filter.Property{{Name: "min", Value: filter.IntValue(5)}}}}},
	} {
		checkEqual(t, c.elems, mustRule(t, ruleDesc(c.elems)), c.want)
	}
}

func TestParseRuleErrors(t *testing.T) {
	kv := func(k, v string) string {
		return `<KeyValueOfstringanyType><Key>` + k + `</Key><Value i:type="d6p1:int" xmlns:d6p1="` + nsSchema + `">` + v +
			`</Value></KeyValueOfstringanyType>`
	}
	for _, c := range []struct {
		elems    string
		property string
	}{
		{`<Filter i:type="SqlFilter"><SqlExpression>color =</SqlExpression></Filter>`, "Filter"},
		{`<Filter i:type="SqlFilter"/>`, "Filter"},
		{`<Filter i:type="SqlFilter"><SqlExpression>a = @p</SqlExpression></Filter>`, "Filter"},
		{`<Filter i:type="SqlFilter"><SqlExpression>a = @p</SqlExpression><Parameters>` + kv("@p", "1") + kv("@p", "2") + `</Parameters></Filter>`, "Filter"},
		{`<Filter i:type="SqlFilter"><SqlExpression>a = @p</SqlExpression><Parameters>` + kv("@p", "1") + kv("P", "2") + `</Parameters></Filter>`, "Filter"},
		{`<Filter i:type="CorrelationFilter"/>`, "Filter"},
		{`<Filter i:type="CorrelationFilter"><Properties>` + kv("a", "1") + kv("A", "2") + `</Properties></Filter>`, "Filter"},
		{`<Filter i:type="CorrelationFilter"><Properties><KeyValueOfstringanyType><Key>a</Key></KeyValueOfstringanyType></Properties></Filter>`, "Filter"},
		{`<Filter i:type="BloomFilter"/>`, "Filter"},
		{`<Action i:type="SqlRuleAction"><SqlExpression>SET</SqlExpression></Action>`, "Action"},
		{`<Action i:type="SqlRuleAction"><SqlExpression> </SqlExpression></Action>`, "Action"},
		{`<Action i:type="SqlRuleAction"/>`, "Action"},
		{`<Action i:type="SqlRuleAction"><SqlExpression>SET a = @v</SqlExpression></Action>`, "Action"},
		{`<Action i:type="SqlRuleAction"><SqlExpression>SET sys.SequenceNumber = 1</SqlExpression></Action>`, "Action"},
		{`<Action i:type="CompositeAction"/>`, "Action"},
		{`<Name>a*b</Name>`, "Name"},
		{`<Name>` + strings.Repeat("n", 51) + `</Name>`, "Name"},
	} {
		var pe *PropertyError
		if r, err := ParseRule(ruleDesc(c.elems)); !errors.As(err, &pe) || pe.Property != c.property {
			t.Errorf("ParseRule(%s) = %+v, %v; want a *PropertyError naming %s", c.elems, r, err, c.property)
		}
	}
	// Action parameters make an action valid.
	r := mustRule(t, ruleDesc(`<Action i:type="SqlRuleAction"><SqlExpression>SET a = @v</SqlExpression><Parameters>`+
		kv("@v", "3")+`</Parameters></Action>`))
	checkEqual(t, "action parameters", r.ActionParameters, []filter.Property{{Name: "@v", Value: filter.IntValue(3)}})
	if err := r.Compile(); err == nil {
		t.Errorf("a rule without a name compiled") // the HTTP layer names it from the URL
	}
	r.Name = "r"
	if err := r.Compile(); err != nil {
		t.Errorf("the broker refuses %+v: %v", r, err)
	}
}
