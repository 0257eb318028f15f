package emuconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/broker"
)

// FuzzParse: Parse never panics; an error is an *Error inside the file;
// a file it accepts is JSON and holds only valid, distinct entities.
func FuzzParse(f *testing.F) {
	sample, err := os.ReadFile(filepath.Join("testdata", "Config.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(sample)
	f.Add([]byte(`{"UserConfig": {"Namespaces": []}}`))
	f.Add([]byte("\xEF\xBB\xBF// c\n{/* c */\"userconfig\": {\"namespaces\": [{\"name\": \"ns\", \"queues\": [{\"name\": \"q\", \"properties\": {\"lockduration\": \"00:01:00\", \"forwardto\": \"q\"}}]}]}}"))
	f.Add([]byte(rulesDoc(`{"Name": "r", "Properties": {"FilterType": "Correlation", "CorrelationFilter": {"Label": "a // b", "Properties": {"p": 1.5e3, "q": "\u00e9"}}}}`)))
	f.Add([]byte(queuesDoc(`{"Name": "a", "Properties": {"MaxMessageSizeInKilobytes": 1024, "DefaultMessageTimeToLive": "P10675199DT2H48M5.4775807S"}}`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("f.json", data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || file != nil {
				t.Fatalf("error %T %v with file %v", err, err, file)
			}
			if e.Line < 1 || e.Col < 1 || e.Line > bytes.Count(data, []byte("\n"))+1 || !strings.HasPrefix(err.Error(), "f.json:") {
				t.Fatalf("error outside the file: %v", err)
			}
			return
		}
		// Without a '/' there can be no comment, so the file is plain JSON.
		if plain := bytes.TrimPrefix(data, utf8BOM); !bytes.Contains(plain, []byte("/")) && !json.Valid(plain) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		for _, ns := range file.Namespaces {
			if err := validateNamespaceName(ns.Name); err != nil {
				t.Fatal(err)
			}
			entities := map[string]bool{}
			check := func(name string, validate func(string) error, seen map[string]bool) {
				if err := validate(name); err != nil {
					t.Fatal(err)
				}
				if seen[strings.ToLower(name)] {
					t.Fatalf("duplicate name %q accepted", name)
				}
				seen[strings.ToLower(name)] = true
			}
			for _, q := range ns.Queues {
				check(q.Name, broker.ValidateName, entities)
				if err := q.Config().Validate(); err != nil {
					t.Fatalf("queue %s: %v", q.Name, err)
				}
			}
			for _, topic := range ns.Topics {
				check(topic.Name, broker.ValidateName, entities)
				if err := topic.Config().Validate(); err != nil {
					t.Fatalf("topic %s: %v", topic.Name, err)
				}
				subs := map[string]bool{}
				for _, s := range topic.Subscriptions {
					check(s.Name, validateSubscriptionName, subs)
					if err := s.Config().Validate(); err != nil {
						t.Fatalf("subscription %s: %v", s.Name, err)
					}
					rules := map[string]bool{}
					for _, r := range s.Rules {
						check(r.Name, validateRuleName, rules)
						if r.FilterType == FilterSQL && r.SQLFilter == nil || r.FilterType == FilterCorrelation && r.CorrelationFilter == nil {
							t.Fatalf("rule %s without its filter", r.Name)
						}
					}
				}
			}
		}
	})
}

// FuzzParseDuration: ParseDuration never panics, returns whole ticks, and
// reads back what FormatDuration writes.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"PT1M", "P1DT2H3M4.5S", "-PT0.0000001S", "P10675199DT2H48M5.4775807S", "P1Y13M", "PT.5S", "00:01:00", "-1.23:59:59.9999999", "10675199.02:48:05.4775807", "P2147483647D"} {
		f.Add(s, int64(0))
	}
	f.Add("", int64(math.MaxInt64))
	f.Add("", int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, s string, n int64) {
		d := time.Duration(n)
		if got, err := ParseDuration(FormatDuration(d)); err != nil || got != d.Truncate(tickNanos) {
			t.Fatalf("ParseDuration(FormatDuration(%d)) = %d, %v", n, int64(got), err)
		}
		d, err := ParseDuration(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "invalid duration ") {
				t.Fatalf("error %q", err)
			}
			return
		}
		if d == math.MaxInt64 || d == math.MinInt64 {
			return // saturated: beyond time.Duration
		}
		if d%tickNanos != 0 {
			t.Fatalf("ParseDuration(%q) = %d, not whole ticks", s, int64(d))
		}
		if got, err := ParseDuration(FormatDuration(d)); err != nil || got != d {
			t.Fatalf("ParseDuration(%q) = %d, but %q reads back as %d, %v", s, int64(d), FormatDuration(d), int64(got), err)
		}
	})
}
