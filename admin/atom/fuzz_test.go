package atom

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/projection"
)

// seedRequests adds the captured SDK requests whose name contains kind,
// and bodies, to f's corpus.
func seedRequests(f *testing.F, kind string, bodies ...[]byte) {
	files, err := filepath.Glob(filepath.Join("testdata", "requests", "*"+kind+"*.xml"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, b := range bodies {
		f.Add(b)
	}
}

// checkParseError: every refusal is a *PropertyError.
func checkParseError(t *testing.T, body []byte, err error) {
	var pe *PropertyError
	if !errors.As(err, &pe) {
		t.Fatalf("error %T %v is not a *PropertyError\n%q", err, err, body)
	}
}

// FuzzParseQueue: parsing never panics and refuses only with a
// *PropertyError; a config it gives passes Validate, and its entry parses
// back to the same config, as a queue and (for its topic elements) as a
// topic.
func FuzzParseQueue(f *testing.F) {
	seedRequests(f, "queue", []byte(refQueueBody), []byte(serviceQueue), []byte(serviceTopic),
		Entry(base, Info{Kind: Queue, Path: "q", Config: fullQueue()}), Entry(base, Info{Kind: Topic, Path: "t", Config: fullTopic()}))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, kind := range []Kind{Queue, Topic} {
			start := projection.DefaultConfig()
			parse := ParseQueue
			if kind == Topic {
				start, parse = projection.DefaultTopicConfig(), ParseTopic
			}
			cfg := start
			if err := parse(body, &cfg); err != nil {
				checkParseError(t, body, err)
				if !reflect.DeepEqual(cfg, start) {
					t.Fatalf("a refused %v changed the config to %+v", kind, cfg)
				}
				continue
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("%v %+v does not validate: %v\n%q", kind, cfg, err, body)
			}
			entry := Entry(base, Info{Kind: kind, Path: "e", Config: cfg})
			again := start
			if err := parse(entry, &again); err != nil || !reflect.DeepEqual(again, cfg) {
				t.Fatalf("%v %+v\nreads back as %+v, %v\n%s", kind, cfg, again, err, entry)
			}
		}
	})
}

// FuzzParseSubscription: as FuzzParseQueue, and the default rule, if any,
// compiles (named) and reads back the same from a rule entry.
func FuzzParseSubscription(f *testing.F) {
	seedRequests(f, "subscription", []byte(refSubscriptionBody),
		Entry(base, Info{Kind: Subscription, Path: "t/Subscriptions/s", Config: fullSubscription()}))
	f.Fuzz(func(t *testing.T, body []byte) {
		start := projection.DefaultSubscriptionConfig()
		cfg := start
		rule, err := ParseSubscription(body, &cfg)
		if err != nil {
			checkParseError(t, body, err)
			if !reflect.DeepEqual(cfg, start) {
				t.Fatalf("a refused subscription changed the config to %+v", cfg)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%+v does not validate: %v\n%q", cfg, err, body)
		}
		entry := Entry(base, Info{Kind: Subscription, Path: "t/Subscriptions/s", Config: cfg})
		again := start
		if r, err := ParseSubscription(entry, &again); err != nil || r != nil || !reflect.DeepEqual(again, cfg) {
			t.Fatalf("%+v\nreads back as %+v, %v, %v\n%s", cfg, again, r, err, entry)
		}
		if rule != nil {
			if rule.Name == "" {
				t.Fatalf("a default rule without a name")
			}
			checkRuleRoundTrip(t, body, *rule)
		}
	})
}

// FuzzParseRule: parsing never panics, refuses only with a
// *PropertyError, gives a rule the broker compiles once named, and the
// rule's entry reads back the same.
func FuzzParseRule(f *testing.F) {
	seedRequests(f, "rule", []byte(refRuleBody), []byte(serviceRule), []byte(serviceCorrelationRule))
	for _, r := range sampleRules() {
		f.Add(Entry(base, Info{Kind: Rule, Path: "t/Subscriptions/s/Rules/" + r.Name, Rule: r}))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rule, err := ParseRule(body)
		if err != nil {
			checkParseError(t, body, err)
			return
		}
		checkRuleRoundTrip(t, body, rule)
	})
}

func checkRuleRoundTrip(t *testing.T, body []byte, rule projection.RuleSpec) {
	named := rule
	if named.Name == "" {
		named.Name = "r"
	}
	if err := named.Compile(); err != nil {
		t.Fatalf("the broker refuses %+v: %v\n%q", rule, err, body)
	}
	entry := Entry(base, Info{Kind: Rule, Path: "t/Subscriptions/s/Rules/" + rule.Name, Rule: rule})
	again, err := ParseRule(entry)
	if err != nil || !reflect.DeepEqual(again, rule) {
		t.Fatalf("%+v\nreads back as %+v, %v\n%s", rule, again, err, entry)
	}
}

// FuzzParseDuration: parsing never panics; what parses is written and read
// back the same; any time.Duration is written as text that reads back as
// it (truncated to a tick).
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"PT1M", "P14D", timeSpanMax, "PT0.5S", "P1DT0.0005S", "-PT1.23456789S", "P1Y2M3DT4H5M6.7S",
		"P200000D", "PT0S", "", "P", "PT", "P1D1D"} {
		f.Add(s, int64(0))
	}
	f.Add("", int64(-1<<63))
	f.Add("", int64(1<<63-1))
	f.Fuzz(func(t *testing.T, s string, n int64) {
		if d, err := ParseDuration(s); err == nil {
			text := FormatDuration(d)
			if again, err := ParseDuration(text); err != nil || again != d {
				t.Fatalf("%q: %d is written %q, which reads as %d, %v", s, d, text, again, err)
			}
			if strings.ContainsAny(text, " \t\n") {
				t.Fatalf("%q written with spaces", text)
			}
		}
		if ticks, err := parseTicks(s); err == nil {
			if again, err := parseTicks(formatTicks(ticks)); err != nil || again != ticks {
				t.Fatalf("%q: %d ticks read back as %d, %v", s, ticks, again, err)
			}
		}
		d := time.Duration(n)
		want := d / tickNs * tickNs
		if d == Forever {
			want = Forever
		}
		if got, err := ParseDuration(FormatDuration(d)); err != nil || got != want {
			t.Fatalf("%d is written %q, which reads as %d, %v", d, FormatDuration(d), got, err)
		}
	})
}
