package sas

import "testing"

func TestCovers(t *testing.T) {
	for _, tc := range []struct {
		granted, requested string
		want               bool
	}{
		// Same audience, every scheme pairing.
		{"amqp://localhost/q1", "amqp://localhost/q1", true},
		{"sb://localhost/q1", "amqp://localhost/q1", true},
		{"amqps://ns.servicebus.windows.net/q1", "sb://ns.servicebus.windows.net/q1", true},
		{"https://localhost/q1", "amqp://localhost/q1", true},
		{"http://localhost/q1", "amqps://localhost/q1", true},
		{"localhost/q1", "amqp://localhost/q1", true},
		{"amqp://localhost/q1", "localhost/q1", true},
		{"SB://LOCALHOST/Q1", "amqp://localhost/q1", true},
		// Case: Go lowercases the whole sr, entity names keep theirs.
		{"amqp://localhost/myqueue", "amqp://localhost/MyQueue", true},
		{"amqp://LocalHost/MyQueue", "AMQP://localhost/myqueue/$management", true},
		// Sub-paths of the granted entity.
		{"amqp://localhost/q1", "amqp://localhost/q1/$management", true},
		{"sb://localhost/t1", "sb://localhost/t1/Subscriptions/s1", true},
		{"sb://localhost/q1/", "sb://localhost/q1/$management", true},
		{"sb://localhost/q1/", "sb://localhost/q1", true},
		{"sb://localhost/q1", "sb://localhost/q1/", true},
		{"sb://localhost/q1/$management", "sb://localhost/q1", false},
		// The prefix must end at a path boundary.
		{"sb://host/q1", "sb://host/q10", false},
		{"sb://host/q1", "sb://host/q1-dlq", false},
		{"sb://host/q1", "sb://host/q1$management", false},
		{"sb://host", "sb://hostile/q1", false},
		{"sb://host", "sb://host.evil.example/q1", false},
		{"sb://host/q10", "sb://host/q1", false},
		{"sb://host/q1", "sb://other/q1", false},
		// Namespace-wide tokens (a SAS from a connection string has sr = host).
		{"localhost:5672", "amqp://localhost:5672/q1/$management", true},
		{"localhost:5672", "localhost:5672", true},
		{"sb://localhost/", "amqp://localhost/q1", true},
		{"sb://localhost", "sb://localhost/", true},
		{"sb://ns.servicebus.windows.net", "amqps://ns.servicebus.windows.net/t1/subscriptions/s1", true},
		// Ports are compared exactly.
		{"localhost", "amqp://localhost:5672/q1", false},
		{"localhost:5672", "amqp://localhost/q1", false},
		{"localhost:5672", "amqp://localhost:56720/q1", false},
		{"sb://localhost:5672/q1", "amqp://localhost:5672/q1", true},
		// Nothing granted covers nothing.
		{"", "amqp://localhost/q1", false},
		{"sb://", "amqp://localhost/q1", false},
		{"/", "/q1", false},
		{"sb:///", "sb://localhost/q1", false},
		// Dot segments are never covered.
		{"sb://host/q1", "sb://host/q1/../q2", false},
		{"sb://host", "sb://host/./q1", false},
		{"sb://host/q1", "sb://host/q1/..", false},
		{"sb://host/q1", "sb://host/q1/.hidden", true},
		// Only the listed schemes are stripped, and only once.
		{"ftp://host", "amqp://host/q1", false},
		{"sb://host", "sb://sb://host/q1", false},
		// Case folding is ASCII only.
		{"sb://host/\u212a", "sb://host/k", false},
		{"sb://host/\xff", "sb://host/\xfe/x", false},
		{"sb://host/é", "sb://host/É", false},
		{"sb://host/é", "sb://host/é/x", true},
	} {
		if got := Covers(Token{Audience: tc.granted}, tc.requested); got != tc.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", tc.granted, tc.requested, got, tc.want)
		}
	}
}

// The audience a client signs is the one it then requests, for both styles.
func TestCoversSignedAudience(t *testing.T) {
	key := Key{Name: "k", Value: "secret"}
	keys := mustKeys(t, key)
	for _, audience := range []string{
		"amqp://localhost:5672/MyQueue",
		"amqp://localhost/q1/$management",
		"sb://localhost/t1/Subscriptions/S1",
		"localhost:5672",
	} {
		for _, style := range []Style{GoStyle, JSStyle} {
			tok, _, err := Verify(Sign(audience, key, vectorExpiry, style), keys, beforeExpiry)
			if err != nil {
				t.Fatal(err)
			}
			if !Covers(tok, audience) {
				t.Errorf("style %d: token for %q does not cover it", style, audience)
			}
		}
	}
}
