package emuconfig

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
)

func ptr[T any](v T) *T { return &v }

// The emulator's sample config, extended with more queues, parses with
// every field as written.
func TestSampleConfig(t *testing.T) {
	f, err := Load(filepath.Join("testdata", "Config.json"))
	if err != nil {
		t.Fatal(err)
	}
	sampleSubscription := func(name string, forwardTo string, rules ...Rule) Subscription {
		return Subscription{
			Name: name,
			Properties: Properties{
				DeadLetteringOnMessageExpiration: ptr(false),
				DefaultMessageTimeToLive:         ptr(time.Hour),
				LockDuration:                     ptr(time.Minute),
				MaxDeliveryCount:                 ptr(3),
				ForwardDeadLetteredMessagesTo:    ptr(""),
				ForwardTo:                        ptr(forwardTo),
				RequiresSession:                  ptr(false),
			},
			Rules: rules,
		}
	}
	want := &File{Namespaces: []Namespace{{
		Name: "sbemulatorns",
		Queues: []Queue{
			{Name: "queue.1", Properties: Properties{
				DeadLetteringOnMessageExpiration:    ptr(false),
				DefaultMessageTimeToLive:            ptr(time.Hour),
				DuplicateDetectionHistoryTimeWindow: ptr(20 * time.Second),
				ForwardDeadLetteredMessagesTo:       ptr(""),
				ForwardTo:                           ptr(""),
				LockDuration:                        ptr(time.Minute),
				MaxDeliveryCount:                    ptr(3),
				RequiresDuplicateDetection:          ptr(false),
				RequiresSession:                     ptr(false),
			}},
			{Name: "queue.2", Properties: Properties{
				DeadLetteringOnMessageExpiration:    ptr(true),
				DefaultMessageTimeToLive:            ptr(2 * day),
				DuplicateDetectionHistoryTimeWindow: ptr(10 * time.Minute),
				ForwardDeadLetteredMessagesTo:       ptr("queue.3"),
				ForwardTo:                           ptr(""),
				LockDuration:                        ptr(30 * time.Second),
				MaxDeliveryCount:                    ptr(25),
				RequiresDuplicateDetection:          ptr(true),
				RequiresSession:                     ptr(true),
			}},
			{Name: "queue.3"},
		},
		Topics: []Topic{{
			Name: "topic.1",
			Properties: Properties{
				DefaultMessageTimeToLive:            ptr(time.Hour),
				DuplicateDetectionHistoryTimeWindow: ptr(20 * time.Second),
				RequiresDuplicateDetection:          ptr(false),
			},
			Subscriptions: []Subscription{
				sampleSubscription("subscription.1", "", Rule{
					Name:       "app-prop-filter-1",
					FilterType: FilterCorrelation,
					CorrelationFilter: &CorrelationFilter{
						ContentType:      "application/text",
						CorrelationID:    "id1",
						Subject:          "subject1",
						MessageID:        "msgid1",
						ReplyTo:          "someQueue",
						ReplyToSessionID: "sessionId",
						SessionID:        "session1",
						To:               "xyz",
					},
				}),
				sampleSubscription("subscription.2", "", Rule{
					Name:       "user-prop-filter-1",
					FilterType: FilterCorrelation,
					CorrelationFilter: &CorrelationFilter{Properties: map[string]any{
						"prop3": "value3", "count": int64(7), "ratio": 0.5, "flag": true,
					}},
				}),
				sampleSubscription("subscription.3", "queue.1", Rule{
					Name:       "sql-filter-1",
					FilterType: FilterSQL,
					SQLFilter:  &SQLFilter{Expression: "sys.MessageId = '123456' AND userProp1 = 'value1'"},
					Action:     &SQLAction{Expression: "SET sys.To = 'Entity'"},
				}),
			},
		}},
	}}}
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("parsed\n%#v\nwant\n%#v", f, want)
	}

	// And the settings walbus stores for them.
	ns := f.Namespaces[0]
	q1 := broker.DefaultConfig()
	q1.LockDuration, q1.MaxDeliveryCount, q1.DefaultTTL, q1.DuplicateWindow = time.Minute, 3, time.Hour, 20*time.Second
	q2 := broker.DefaultConfig()
	q2.LockDuration, q2.MaxDeliveryCount, q2.DefaultTTL = 30*time.Second, 25, 2*day
	q2.DeadLetterOnExpiry, q2.RequiresSession, q2.RequiresDuplicateDetection = true, true, true
	q2.DuplicateWindow, q2.ForwardDeadLetteredMessagesTo = 10*time.Minute, "queue.3"
	topic := broker.DefaultTopicConfig()
	topic.DefaultTTL, topic.DuplicateWindow = time.Hour, 20*time.Second
	sub3 := broker.DefaultSubscriptionConfig()
	sub3.LockDuration, sub3.MaxDeliveryCount, sub3.DefaultTTL, sub3.ForwardTo = time.Minute, 3, time.Hour, "queue.1"
	for _, c := range []struct {
		name      string
		got, want broker.Config
	}{
		{"queue.1", ns.Queues[0].Config(), q1},
		{"queue.2", ns.Queues[1].Config(), q2},
		{"queue.3", ns.Queues[2].Config(), broker.DefaultConfig()},
		{"topic.1", ns.Topics[0].Config(), topic},
		{"subscription.3", ns.Topics[0].Subscriptions[2].Config(), sub3},
	} {
		if !c.got.Equal(c.want) {
			t.Errorf("%s config\n%+v\nwant\n%+v", c.name, c.got, c.want)
		}
		if err := c.got.Validate(); err != nil {
			t.Errorf("%s config invalid: %v", c.name, err)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "absent.json"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load of a missing file: %v", err)
	}
}

// Comments of both kinds are white space, wherever white space may be, and
// text inside strings that looks like a comment is kept.
func TestComments(t *testing.T) {
	const src = "\xEF\xBB\xBF// Config for tests\r\n" + `/* a block
   over lines, with "quotes" and // inside */
{ // after a brace
  "UserConfig": { /* inline */ "Namespaces": [ {
    "Name": "ns" /* before a comma */ , // after a comma
    "Queues": [ { "Name" /* before a colon */ : "q.1" } ],
    "Topics": [ { "Name": "t.1", "Subscriptions": [ { "Name": "s.1", "Rules": [
      { "Name": "r.1", "Properties": { "FilterType": "Correlation", "CorrelationFilter": {
        "Label": "a // b /* c */ d",
        "To": "http://host/*path*/",
        "Properties": { "//key": "/*value" } } } },
      { "Name": "r.2", "Properties": { "FilterType": "Sql", "SqlFilter": {
        "SqlExpression": "x = '//' OR y = '/* not a comment */'" } } }
    ] } ] } ]
  } ] /**/ } /***/
} // trailing
/* trailing block */`
	f, err := Parse("c.json", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Namespaces[0].Queues[0].Name; got != "q.1" {
		t.Errorf("queue name %q", got)
	}
	rules := f.Namespaces[0].Topics[0].Subscriptions[0].Rules
	cf := rules[0].CorrelationFilter
	if cf.Subject != "a // b /* c */ d" || cf.To != "http://host/*path*/" || !reflect.DeepEqual(cf.Properties, map[string]any{"//key": "/*value"}) {
		t.Errorf("correlation filter lost comment-like text: %+v", cf)
	}
	if got := rules[1].SQLFilter.Expression; got != "x = '//' OR y = '/* not a comment */'" {
		t.Errorf("SQL expression %q", got)
	}

	// Positions count the comments' lines (CRLF too) and not the byte
	// order mark.
	bad := strings.Replace(src, `"q.1"`, `"q 1"`, 1)
	_, err = Parse("c.json", []byte(bad))
	if want := `c.json:7:49: UserConfig.Namespaces[0].Queues[0].Name: invalid entity name "q 1": ' ' is not allowed`; err == nil || err.Error() != want {
		t.Errorf("error\n%v\nwant\n%s", err, want)
	}
	_, err = Parse("c.json", []byte("\xEF\xBB\xBF{x"))
	if want := `c.json:1:2: invalid character 'x', want a key string`; err == nil || err.Error() != want {
		t.Errorf("error\n%v\nwant\n%s", err, want)
	}
}

// A position written by hand, to check the marker arithmetic below.
func TestErrorPositionInSample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "Config.json"))
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(data), `"MaxDeliveryCount": 3,`, `"MaxDeliveryCount": 0,`, 1)
	_, err = Parse("Config.json", []byte(bad))
	want := "Config.json:16:35: UserConfig.Namespaces[0].Queues[0].Properties.MaxDeliveryCount: max delivery count 0 must be at least 1"
	if err == nil || err.Error() != want {
		t.Fatalf("error\n%v\nwant\n%s", err, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.Line != 16 || e.Col != 35 || e.Path != "UserConfig.Namespaces[0].Queues[0].Properties.MaxDeliveryCount" {
		t.Fatalf("error fields %+v", e)
	}
}

// In the error cases, ‸ marks where the error must point and ¹ where an
// earlier occurrence is; the test strips both and computes their line and
// column itself.
const (
	mark      = "‸"
	firstMark = "¹"
)

// queuesDoc is a file whose only namespace has the given queues.
func queuesDoc(queues string) string {
	return fmt.Sprintf(`{
  "UserConfig": {
    "Namespaces": [
      {
        "Name": "ns",
        "Queues": [
          %s
        ]
      }
    ]
  }
}`, queues)
}

// topicDoc is a file whose only namespace has one topic with the given
// subscriptions.
func topicDoc(subscriptions string) string {
	return fmt.Sprintf(`{
  "UserConfig": {
    "Namespaces": [
      {
        "Name": "ns",
        "Topics": [
          {
            "Name": "t",
            "Subscriptions": [
              %s
            ]
          }
        ]
      }
    ]
  }
}`, subscriptions)
}

// rulesDoc is a file with one subscription holding the given rules.
func rulesDoc(rules string) string {
	return topicDoc(`{ "Name": "s", "Rules": [` + rules + `] }`)
}

func lineColOf(s string, off int) string {
	line := 1 + strings.Count(s[:off], "\n")
	col := off - (strings.LastIndex(s[:off], "\n") + 1) + 1
	return fmt.Sprintf("%d:%d", line, col)
}

func TestErrors(t *testing.T) {
	const q = "UserConfig.Namespaces[0].Queues[0]"
	const q1 = "UserConfig.Namespaces[0].Queues[1]"
	const qp = q + ".Properties"
	const sub = "UserConfig.Namespaces[0].Topics[0].Subscriptions[0]"
	const rule = sub + ".Rules[0]"
	deep := strings.Repeat("[", 70) + strings.Repeat("]", 70)
	for _, tc := range []struct {
		name, src, want string
	}{
		// JSON syntax.
		{"missing comma", queuesDoc(`{"Name": "a"} ‸{"Name": "b"}`), "UserConfig.Namespaces[0].Queues: invalid character '{', want ',' or ']'"},
		{"trailing comma", queuesDoc(`{"Name": "a",‸}`), q + ": invalid character '}', want a key string"},
		{"key not a string", queuesDoc(`{‸Name: "a"}`), q + ": invalid character 'N', want a key string"},
		{"missing colon", queuesDoc(`{"Name" ‸"a"}`), q + `: invalid character '"', want ':' after the key`},
		{"raw newline in string", queuesDoc("{\"Name\": \"ab‸\n\"}"), q + ".Name: control character 0x0a in string"},
		{"bad escape", queuesDoc(`{"Name": "a‸\q"}`), q + `.Name: invalid escape 'q'`},
		{"short unicode escape", queuesDoc(`{"Name": "a‸\u12"}`), q + `.Name: invalid \u escape, want 4 hex digits`},
		{"invalid UTF-8", queuesDoc("{\"Name\": \"a‸\xff\"}"), q + ".Name: invalid UTF-8 in string"},
		{"unterminated string", `{"UserConfig": {"Namespaces": [{"Name": ‸"abc`, "UserConfig.Namespaces[0].Name: unterminated string"},
		{"string where an object goes", `{"UserConfig": ‸"abc`, "UserConfig: want an object, not a string"},
		{"unterminated comment", `{"UserConfig": {"Namespaces": []}} ‸/* open`, "unterminated /* comment"},
		{"lone slash", queuesDoc(`‸/ not a comment`), "UserConfig.Namespaces[0].Queues: invalid character '/': a comment starts with // or /*"},
		{"end of file", `{"UserConfig": {"Namespaces": [‸`, "UserConfig.Namespaces[0]: unexpected end of file, want a value"},
		{"empty file", `‸`, "unexpected end of file, want a value"},
		{"trailing data", `{"UserConfig": {"Namespaces": []}} ‸x`, "invalid character 'x' after the top-level object"},
		{"trailing NUL", "{\"UserConfig\": {\"Namespaces\": []}}‸\x00", "invalid character '\\x00' after the top-level object"},
		{"NUL for a value", "{\"UserConfig\": {\"Namespaces\": ‸\x00", "UserConfig.Namespaces: invalid character '\\x00', want a value"},
		{"second top-level value", `{"UserConfig": {"Namespaces": []}} ‸{}`, "invalid character '{' after the top-level object"},
		{"bad literal", queuesDoc(`{"Name": "a", "Properties": {"RequiresSession": ‸ture}}`), qp + ".RequiresSession: invalid literal, want true"},
		{"bad literal in unknown key", queuesDoc(`{"Name": "a", "Extra": [‸nul]}`), q + ".Extra[0]: invalid literal, want null"},
		{"bad number", queuesDoc(`{"Name": "a", "Properties": {"MaxDeliveryCount": -‸x}}`), qp + ".MaxDeliveryCount: invalid character 'x' in number, want a digit"},
		{"leading zero", queuesDoc(`{"Name": "a", "Extra": 0‸1}`), q + ": invalid character '1', want ',' or '}'"},
		{"bad exponent", queuesDoc(`{"Name": "a", "Extra": 1e‸}`), q + ".Extra: invalid character '}' in number, want a digit in the exponent"},
		{"not a value", queuesDoc(`{"Name": "a", "Extra": ‸'x'}`), q + ".Extra: invalid character '\\'', want a value"},
		{"too deep", queuesDoc(`{"Name": "a", "Extra": ` + deep + `}`), ""}, // position checked below

		// Wrong types.
		{"root not an object", `‸[]`, "want an object, not an array"},
		{"name a number", queuesDoc(`{"Name": ‸5}`), q + ".Name: want a string, not a number"},
		{"name null", queuesDoc(`{"Name": ‸null}`), q + ".Name: want a string, not null"},
		{"queues an object", `{"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": ‸{}}]}}`, "UserConfig.Namespaces[0].Queues: want an array, not an object"},
		{"properties an array", queuesDoc(`{"Name": "a", "Properties": ‸[]}`), qp + ": want an object, not an array"},
		{"delivery count a string", queuesDoc(`{"Name": "a", "Properties": {"MaxDeliveryCount": ‸"3"}}`), qp + ".MaxDeliveryCount: want an integer, not a string"},
		{"delivery count a fraction", queuesDoc(`{"Name": "a", "Properties": {"MaxDeliveryCount": ‸3.5}}`), qp + ".MaxDeliveryCount: want an integer, not 3.5"},
		{"delivery count an exponent", queuesDoc(`{"Name": "a", "Properties": {"MaxDeliveryCount": ‸1e1}}`), qp + ".MaxDeliveryCount: want an integer, not 1e1"},
		{"delivery count beyond int", queuesDoc(`{"Name": "a", "Properties": {"MaxDeliveryCount": ‸2147483648}}`), qp + ".MaxDeliveryCount: 2147483648 out of range [-2147483648, 2147483647]"},
		{"lock duration a number", queuesDoc(`{"Name": "a", "Properties": {"LockDuration": ‸60}}`), qp + ".LockDuration: want a string, not a number"},
		{"session a string", queuesDoc(`{"Name": "a", "Properties": {"RequiresSession": ‸"true"}}`), qp + ".RequiresSession: want a boolean, not a string"},
		{"forward a boolean", queuesDoc(`{"Name": "a", "Properties": {"ForwardTo": ‸false}}`), qp + ".ForwardTo: want a string, not a boolean"},
		{"correlation property an object", rulesDoc(`{"Name": "r", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Properties": {"p": ‸{}}}}}`), rule + ".Properties.CorrelationFilter.Properties.p: want a string, number or boolean, not an object"},
		{"correlation property huge", rulesDoc(`{"Name": "r", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Properties": {"p": ‸1e999}}}}`), rule + ".Properties.CorrelationFilter.Properties.p: number 1e999 out of range"},

		// Durations.
		{"bad duration", queuesDoc(`{"Name": "a", "Properties": {"LockDuration": ‸"PT1X"}}`), qp + `.LockDuration: invalid duration "PT1X": unexpected 'X'`},
		{"prose duration", queuesDoc(`{"Name": "a", "Properties": {"DefaultMessageTimeToLive": ‸"1 hour"}}`), qp + `.DefaultMessageTimeToLive: invalid duration "1 hour": want ISO 8601 (PT1M) or TimeSpan (00:01:00) form`},
		{"duration beyond TimeSpan", queuesDoc(`{"Name": "a", "Properties": {"DefaultMessageTimeToLive": ‸"P10675200D"}}`), qp + `.DefaultMessageTimeToLive: invalid duration "P10675200D": beyond the range of a .NET TimeSpan`},

		// Service Bus's limits, through broker.Config.Validate.
		{"delivery count 0", queuesDoc(`{"Name": "a", "Properties": {"MaxDeliveryCount": ‸0}}`), qp + ".MaxDeliveryCount: max delivery count 0 must be at least 1"},
		{"lock too long", queuesDoc(`{"Name": "a", "Properties": {"LockDuration": ‸"PT5M1S"}}`), qp + ".LockDuration: lock duration 5m1s out of range (0, 5m0s]"},
		{"lock zero", queuesDoc(`{"Name": "a", "Properties": {"LockDuration": ‸"00:00:00"}}`), qp + ".LockDuration: lock duration 0s out of range (0, 5m0s]"},
		{"lock TimeSpan.MaxValue", queuesDoc(`{"Name": "a", "Properties": {"LockDuration": ‸"P10675199DT2H48M5.4775807S"}}`), qp + ".LockDuration: lock duration 2562047h47m16.854775807s out of range (0, 5m0s]"},
		{"negative ttl", queuesDoc(`{"Name": "a", "Properties": {"DefaultMessageTimeToLive": ‸"-PT1M"}}`), qp + ".DefaultMessageTimeToLive: time to live -1m0s must be positive"},
		{"zero ttl", queuesDoc(`{"Name": "a", "Properties": {"DefaultMessageTimeToLive": ‸"PT0S"}}`), qp + ".DefaultMessageTimeToLive: time to live 0s must be positive"},
		{"window short, detection off", queuesDoc(`{"Name": "a", "Properties": {"DuplicateDetectionHistoryTimeWindow": ‸"PT19S"}}`), qp + ".DuplicateDetectionHistoryTimeWindow: duplicate detection window 19s out of range [20s, 168h0m0s]"},
		{"window long", queuesDoc(`{"Name": "a", "Properties": {"RequiresDuplicateDetection": true, "DuplicateDetectionHistoryTimeWindow": ‸"P7DT1S"}}`), qp + ".DuplicateDetectionHistoryTimeWindow: duplicate detection window 168h0m1s out of range [20s, 168h0m0s]"},
		{"message size 0", queuesDoc(`{"Name": "a", "Properties": {"MaxMessageSizeInKilobytes": ‸0}}`), qp + ".MaxMessageSizeInKilobytes: max message size 0 out of range [1, 104857600]"},
		{"message size too big", queuesDoc(`{"Name": "a", "Properties": {"MaxMessageSizeInKilobytes": ‸102401}}`), qp + ".MaxMessageSizeInKilobytes: max message size 104858624 out of range [1, 104857600]"},
		{"message size negative", queuesDoc(`{"Name": "a", "Properties": {"MaxMessageSizeInKilobytes": ‸-1}}`), qp + ".MaxMessageSizeInKilobytes: max message size -1 KB out of range"},
		{"message size beyond long", queuesDoc(`{"Name": "a", "Properties": {"MaxMessageSizeInKilobytes": ‸9223372036854775808}}`), qp + ".MaxMessageSizeInKilobytes: 9223372036854775808 out of range [-9223372036854775808, 9223372036854775807]"},
		{"subscription delivery count", topicDoc(`{"Name": "s", "Properties": {"MaxDeliveryCount": ‸-3}}`), sub + ".Properties.MaxDeliveryCount: max delivery count -3 must be at least 1"},
		{"topic window", `{"UserConfig": {"Namespaces": [{"Name": "ns", "Topics": [{"Name": "t", "Properties": {"DuplicateDetectionHistoryTimeWindow": ‸"PT1S"}}]}]}}`, "UserConfig.Namespaces[0].Topics[0].Properties.DuplicateDetectionHistoryTimeWindow: duplicate detection window 1s out of range [20s, 168h0m0s]"},

		// Forwarding.
		{"forward to a bad name", queuesDoc(`{"Name": "a", "Properties": {"ForwardTo": ‸"b c"}}`), qp + `.ForwardTo: invalid entity name "b c": ' ' is not allowed`},
		{"forward to itself", queuesDoc(`{"Name": "a", "Properties": {"ForwardTo": ‸"A"}}`), qp + `.ForwardTo: queue "a" cannot forward to itself`},
		{"forward to itself, name last", queuesDoc(`{"Properties": {"ForwardTo": "b", "ForwardDeadLetteredMessagesTo": ‸"a"}, "Name": "a"}`), qp + `.ForwardDeadLetteredMessagesTo: queue "a" cannot forward to itself`},
		{"session queue that forwards", queuesDoc(`{"Name": "a", "Properties": {"RequiresSession": true, "ForwardTo": ‸"b"}}`), qp + `.ForwardTo: ForwardTo is not supported for session-enabled queues or subscriptions`},
		{"forwarding queue that requires sessions", queuesDoc(`{"Name": "a", "Properties": {"ForwardTo": "b", "RequiresSession": ‸true}}`), qp + `.RequiresSession: ForwardTo is not supported for session-enabled queues or subscriptions`},
		{"session subscription that forwards", topicDoc(`{"Name": "s", "Properties": {"ForwardTo": "q", "RequiresSession": ‸true, "ForwardDeadLetteredMessagesTo": "q"}}`), sub + `.Properties.RequiresSession: ForwardTo is not supported for session-enabled queues or subscriptions`},
		{"forward to itself twice", queuesDoc(`{"Name": "a", "Properties": {"ForwardDeadLetteredMessagesTo": ‸"a", "ForwardTo": "a"}}`), qp + `.ForwardDeadLetteredMessagesTo: queue "a" cannot forward to itself`},

		// Names.
		{"empty queue name", queuesDoc(`{"Name": ‸""}`), q + `.Name: invalid entity name "": length must be 1 to 260`},
		{"queue name with a space", queuesDoc(`{"Name": ‸"my queue"}`), q + `.Name: invalid entity name "my queue": ' ' is not allowed`},
		{"queue name starting with a dot", queuesDoc(`{"Name": ‸".q"}`), q + `.Name: invalid entity name ".q": must start and end with a letter or digit`},
		{"queue name too long", queuesDoc(`{"Name": ‸"` + strings.Repeat("q", 261) + `"}`), q + `.Name: invalid entity name "` + strings.Repeat("q", 261) + `": length must be 1 to 260`},
		{"namespace name", `{"UserConfig": {"Namespaces": [{"Name": ‸"1ns"}]}}`, `UserConfig.Namespaces[0].Name: invalid namespace name "1ns": must start with a letter and end with a letter or digit`},
		{"namespace name dot", `{"UserConfig": {"Namespaces": [{"Name": ‸"ns.1"}]}}`, `UserConfig.Namespaces[0].Name: invalid namespace name "ns.1": '.' is not allowed`},
		{"subscription name with a slash", topicDoc(`{"Name": ‸"a/b"}`), sub + `.Name: invalid entity name "a/b": '/' is not allowed in a subscription name`},
		{"subscription name too long", topicDoc(`{"Name": ‸"` + strings.Repeat("s", 51) + `"}`), sub + `.Name: invalid entity name "` + strings.Repeat("s", 51) + `": a subscription name is at most 50 characters`},
		{"rule name", rulesDoc(`{"Name": ‸"a?b", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}`), rule + `.Name: invalid entity name "a?b": '?' is not allowed in a rule name`},
		{"empty rule name", rulesDoc(`{"Name": ‸"", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}`), rule + `.Name: invalid entity name "": a rule name is 1 to 50 characters`},

		// Duplicates, without regard to case, each in its own scope.
		{"duplicate queue", queuesDoc(`{"Name": ¹"q.a"}, {"Name": ‸"Q.A"}`), q1 + `.Name: duplicate queue or topic name "Q.A" (first at {first})`},
		{"queue and topic", `{"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [{"Name": ¹"x"}], "Topics": [{"Name": ‸"X"}]}]}}`, `UserConfig.Namespaces[0].Topics[0].Name: duplicate queue or topic name "X" (first at {first})`},
		{"queue in two namespaces", `{"UserConfig": {"Namespaces": [{"Name": "ns", "Queues": [{"Name": ¹"orders"}]}, {"Name": "other", "Queues": [{"Name": ‸"Orders"}]}]}}`, `UserConfig.Namespaces[1].Queues[0].Name: duplicate queue or topic name "Orders" (first at {first})`},
		{"duplicate namespace", `{"UserConfig": {"Namespaces": [{"Name": ¹"ns"}, {"Name": ‸"NS"}]}}`, `UserConfig.Namespaces[1].Name: duplicate namespace name "NS" (first at {first})`},
		{"duplicate subscription", topicDoc(`{"Name": ¹"s"}, {"Name": ‸"S"}`), `UserConfig.Namespaces[0].Topics[0].Subscriptions[1].Name: duplicate subscription name "S" (first at {first})`},
		{"duplicate rule", rulesDoc(`{"Name": ¹"r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}, {"Name": ‸"R"}`), sub + `.Rules[1].Name: duplicate rule name "R" (first at {first})`},
		{"duplicate key", queuesDoc(`{"Name": "a", ‸"name": "b"}`), q + `.Name: duplicate key "name"`},
		{"duplicate property key", queuesDoc(`{"Name": "a", "Properties": {"LockDuration": "PT1M", ‸"LockDuration": "PT2M"}}`), qp + `.LockDuration: duplicate key "LockDuration"`},
		{"duplicate application property", rulesDoc(`{"Name": "r", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Properties": {"p": 1, ‸"p": 2}}}}`), rule + `.Properties.CorrelationFilter.Properties.p: duplicate key "p"`},
		{"same name in two topics is fine, in one topic not", `{"UserConfig": {"Namespaces": [{"Name": "ns", "Topics": [
			{"Name": "t1", "Subscriptions": [{"Name": "s"}]},
			{"Name": "t2", "Subscriptions": [{"Name": ¹"s"}, {"Name": ‸"s"}]}]}]}}`, `UserConfig.Namespaces[0].Topics[1].Subscriptions[1].Name: duplicate subscription name "s" (first at {first})`},

		// Missing pieces.
		{"missing UserConfig", `‸{"Other": 1}`, "missing UserConfig"},
		{"missing Namespaces", `{"UserConfig": ‸{"Logging": {}}}`, "UserConfig: missing Namespaces"},
		{"namespace without name", `{"UserConfig": {"Namespaces": [‸{"Queues": []}]}}`, "UserConfig.Namespaces[0]: missing Name"},
		{"queue without name", queuesDoc(`‸{"Properties": {}}`), q + ": missing Name"},
		{"subscription without name", topicDoc(`‸{}`), sub + ": missing Name"},
		{"rule without name", rulesDoc(`‸{"Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}}}`), rule + ": missing Name"},
		{"rule without properties", rulesDoc(`‸{"Name": "r"}`), rule + ": missing Properties"},
		{"missing filter type", rulesDoc(`{"Name": "r", "Properties": ‸{"SqlFilter": {"SqlExpression": "1=1"}}}`), rule + ".Properties: missing FilterType"},
		{"unknown filter type", rulesDoc(`{"Name": "r", "Properties": {"FilterType": ‸"True"}}`), rule + `.Properties.FilterType: unknown filter type "True", want Correlation or Sql`},
		{"sql without filter", rulesDoc(`{"Name": "r", "Properties": ‸{"FilterType": "Sql", "CorrelationFilter": {"To": "x"}}}`), rule + ".Properties: missing SqlFilter for FilterType Sql"},
		{"correlation without filter", rulesDoc(`{"Name": "r", "Properties": ‸{"FilterType": "Correlation", "CorrelationFilter": null}}`), rule + ".Properties: missing CorrelationFilter for FilterType Correlation"},
		{"bad sql filter", rulesDoc(`‸{"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "color = "}}}`), rule + ".Properties: invalid request: rule r: the filter: line 1, column 9: expected a value, found the end of the expression"},
		{"bad action", rulesDoc(`‸{"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}, "Action": {"SqlExpression": "SET sys.SequenceNumber = 1"}}}`), rule + ".Properties: invalid request: rule r: the action: line 1, column 5: sys.SequenceNumber is assigned by the broker; an action cannot change it"},
		{"empty sql", rulesDoc(`{"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": ‸" "}}}`), rule + ".Properties.SqlFilter.SqlExpression: empty SqlExpression"},
		{"sql without expression", rulesDoc(`{"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": ‸{"Expression": "1=1"}}}`), rule + ".Properties.SqlFilter: missing SqlExpression"},
		{"empty action", rulesDoc(`{"Name": "r", "Properties": {"FilterType": "Sql", "SqlFilter": {"SqlExpression": "1=1"}, "Action": {"SqlExpression": ‸""}}}`), rule + ".Properties.Action.SqlExpression: empty SqlExpression"},

		// The first problem in the file wins, whatever its kind.
		{"meaning before syntax", queuesDoc(`{"Name": "a", "Properties": {"MaxDeliveryCount": ‸0}}, {"Name": "b",}`), qp + ".MaxDeliveryCount: max delivery count 0 must be at least 1"},
		{"syntax before meaning", queuesDoc(`{"Name": "a",‸}, {"Name": "b", "Properties": {"MaxDeliveryCount": 0}}`), q + ": invalid character '}', want a key string"},
		{"first of two bad values", queuesDoc(`{"Name": "a", "Properties": {"LockDuration": ‸"PT6M", "MaxDeliveryCount": 0}}`), qp + ".LockDuration: lock duration 6m0s out of range (0, 5m0s]"},
		{"bad value before a duplicate", queuesDoc(`{"Name": "a"}, {"Name": ‸"b c"}, {"Name": "a"}`), q1 + `.Name: invalid entity name "b c": ' ' is not allowed`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(tc.src, firstMark, "", 1)
			firstOff := strings.Index(tc.src, firstMark)
			if firstOff > strings.Index(tc.src, mark) && firstOff >= 0 {
				t.Fatal("test writes ¹ after ‸")
			}
			off := strings.Index(src, mark)
			src = strings.Replace(src, mark, "", 1)
			if tc.name == "too deep" {
				// Six containers are open where Extra starts: the root,
				// UserConfig, Namespaces, the namespace, Queues, the queue.
				off = strings.Index(src, deep) + maxDepth - 6
				tc.want = q + ".Extra" + strings.Repeat("[0]", maxDepth-6) + ": nested deeper than 64"
			}
			if off < 0 {
				t.Fatal("test lacks ‸")
			}
			want := tc.want
			if firstOff >= 0 {
				want = strings.Replace(want, "{first}", lineColOf(src, firstOff), 1)
			}
			want = "t.json:" + lineColOf(src, off) + ": " + want
			f, err := Parse("t.json", []byte(src))
			if err == nil {
				t.Fatalf("parsed %+v, want error\n%s", f, want)
			}
			if f != nil {
				t.Errorf("returned a file with the error")
			}
			if err.Error() != want {
				t.Fatalf("error\n%v\nwant\n%s", err, want)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not an *Error", err)
			}
		})
	}
}

// Errors keep their cause for callers that branch on it.
func TestErrorUnwrap(t *testing.T) {
	_, err := Parse("t.json", []byte(queuesDoc(`{"Name": "bad name"}`)))
	if !errors.Is(err, broker.ErrBadName) {
		t.Fatalf("%v does not wrap broker.ErrBadName", err)
	}
}

// Keys the schema does not know are skipped wherever they are, however
// nested; keys for another kind of entity are unknown there.
func TestUnknownKeysIgnored(t *testing.T) {
	src := `{
  "$schema": "x", "Version": 2,
  "UserConfig": {
    "Namespaces": [ {
      "Name": "ns", "Sku": {"Tier": ["Standard", 1, true, null, {"a": [[]]}]},
      "Queues": [ { "Name": "q", "EnablePartitioning": false,
        "Properties": { "LockDurationX": 5, "MaxSizeInMegabytes": 1024, "Status": {"Active": true}, "LockDuration": "PT2M" } } ],
      "Topics": [ { "Name": "t",
        "Properties": { "LockDuration": "not looked at", "SupportOrdering": true },
        "Subscriptions": [ { "Name": "s",
          "Properties": { "RequiresDuplicateDetection": "not looked at", "MaxMessageSizeInKilobytes": [] },
          "Rules": [ { "Name": "$Default", "Priority": 1,
            "Properties": { "FilterType": "Sql", "SqlFilter": { "SqlExpression": "1=1", "CompatibilityLevel": 20 }, "Extra": {} } } ] } ] } ]
    } ],
    "Logging": { "Type": "File", "Level": ["Debug"] }
  },
  "Trailer": [1.5e3, -0, "\u00e9\n"]
}`
	f, err := Parse("u.json", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	ns := f.Namespaces[0]
	want := Namespace{
		Name:   "ns",
		Queues: []Queue{{Name: "q", Properties: Properties{LockDuration: ptr(2 * time.Minute)}}},
		Topics: []Topic{{Name: "t", Subscriptions: []Subscription{{Name: "s", Rules: []Rule{{
			Name: "$Default", FilterType: FilterSQL, SQLFilter: &SQLFilter{Expression: "1=1"},
		}}}}}},
	}
	if !reflect.DeepEqual(ns, want) {
		t.Fatalf("parsed\n%#v\nwant\n%#v", ns, want)
	}
}

// Keys match without regard to case, as .NET's deserializer does; so does
// FilterType's value. Null is an absent setting.
func TestCaseInsensitiveKeysAndNull(t *testing.T) {
	src := `{"userconfig": {"NAMESPACES": [{"name": "ns",
  "queues": [{"NAME": "q", "properties": {"lockduration": "PT2M", "MAXDELIVERYCOUNT": 4, "requiresSession": true, "ForwardTo": null, "DefaultMessageTimeToLive": null}},
             {"Name": "q2", "Properties": null}],
  "topics": [{"name": "t", "subscriptions": [{"name": "s", "rules": [
    {"name": "r1", "properties": {"filtertype": "sql", "sqlfilter": {"sqlexpression": "a = 1"}, "action": {"SQLEXPRESSION": "SET a = 2"}}},
    {"name": "r2", "properties": {"FILTERTYPE": "CORRELATION", "correlationfilter": {"label": "l", "correlationid": "c", "properties": {"Key": "v", "key2": "w"}}}}
  ]}], "Subscriptions": null}]
}]}}`
	_, err := Parse("c.json", []byte(src))
	// "subscriptions" and "Subscriptions" are the same key.
	if err == nil || !strings.HasSuffix(err.Error(), `UserConfig.Namespaces[0].Topics[0].Subscriptions: duplicate key "Subscriptions"`) {
		t.Fatalf("want a duplicate key error, got %v", err)
	}
	src = strings.Replace(src, `, "Subscriptions": null`, "", 1)
	f, err := Parse("c.json", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := &File{Namespaces: []Namespace{{
		Name: "ns",
		Queues: []Queue{
			{Name: "q", Properties: Properties{LockDuration: ptr(2 * time.Minute), MaxDeliveryCount: ptr(4), RequiresSession: ptr(true)}},
			{Name: "q2"},
		},
		Topics: []Topic{{Name: "t", Subscriptions: []Subscription{{Name: "s", Rules: []Rule{
			{Name: "r1", FilterType: FilterSQL, SQLFilter: &SQLFilter{Expression: "a = 1"}, Action: &SQLAction{Expression: "SET a = 2"}},
			// Application property names keep their case.
			{Name: "r2", FilterType: FilterCorrelation, CorrelationFilter: &CorrelationFilter{Subject: "l", CorrelationID: "c", Properties: map[string]any{"Key": "v", "key2": "w"}}},
		}}}}},
	}}}
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("parsed\n%#v\nwant\n%#v", f, want)
	}
}

func TestEmptyNamespaces(t *testing.T) {
	f, err := Parse("e.json", []byte(`{"UserConfig": {"Namespaces": []}}`))
	if err != nil || len(f.Namespaces) != 0 {
		t.Fatalf("%+v, %v", f, err)
	}
}

// Queue.Config maps each property, and a time to live meant as "no limit"
// becomes walbus's 0.
func TestQueueConfig(t *testing.T) {
	parseQueue := func(t *testing.T, props string) Queue {
		t.Helper()
		f, err := Parse("q.json", []byte(queuesDoc(`{"Name": "q", "Properties": {`+props+`}}`)))
		if err != nil {
			t.Fatal(err)
		}
		return f.Namespaces[0].Queues[0]
	}
	// All but ForwardTo, which a queue requiring sessions cannot have.
	all := parseQueue(t, `
		"LockDuration": "PT4M30S", "MaxDeliveryCount": 1000,
		"DefaultMessageTimeToLive": "P400D", "DeadLetteringOnMessageExpiration": true,
		"RequiresSession": true, "RequiresDuplicateDetection": true,
		"DuplicateDetectionHistoryTimeWindow": "P7D",
		"ForwardDeadLetteredMessagesTo": "graveyard", "MaxMessageSizeInKilobytes": 102400`)
	want := broker.Config{
		LockDuration:                  4*time.Minute + 30*time.Second,
		MaxDeliveryCount:              1000, // beyond the emulator's cap of 10
		DefaultTTL:                    400 * day,
		DeadLetterOnExpiry:            true,
		RequiresSession:               true,
		RequiresDuplicateDetection:    true,
		DuplicateWindow:               7 * day,
		MaxMessageSize:                100 << 20,
		ForwardDeadLetteredMessagesTo: "graveyard",
	}
	if got := all.Config(); !got.Equal(want) {
		t.Errorf("config\n%+v\nwant\n%+v", got, want)
	}
	if got := parseQueue(t, `"ForwardTo": "next"`).Config().ForwardTo; got != "next" {
		t.Errorf("ForwardTo %q", got)
	}
	if got := parseQueue(t, "").Config(); !got.Equal(broker.DefaultConfig()) {
		t.Errorf("config of no properties %+v, want the defaults", got)
	}

	for _, tc := range []struct {
		ttl  string
		want time.Duration
	}{
		{"PT1S", time.Second},
		{"P10675199DT2H48M5.4775807S", 0}, // TimeSpan.MaxValue
		{"10675199.02:48:05.4775807", 0},  // the same, as TimeSpan text
		{"P36500D", 0},                    // 100 years
		{"P36499D", 36499 * day},
		{"P100Y", 0},
	} {
		q := parseQueue(t, `"DefaultMessageTimeToLive": "`+tc.ttl+`"`)
		if got := q.Config().DefaultTTL; got != tc.want {
			t.Errorf("TTL %s: DefaultTTL %v, want %v", tc.ttl, got, tc.want)
		}
		if got := *q.Properties.DefaultMessageTimeToLive; tc.want != 0 && got != tc.want {
			t.Errorf("TTL %s: property %v", tc.ttl, got)
		}
	}
	if got := *parseQueue(t, `"DefaultMessageTimeToLive": "P10675199DT2H48M5.4775807S"`).Properties.DefaultMessageTimeToLive; got != math.MaxInt64 {
		t.Errorf("TimeSpan.MaxValue kept as %v, want the saturated duration", got)
	}
}
