package amqpserver

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/broker"
)

func TestPutToken(t *testing.T) {
	b, _, err := broker.Open(broker.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.CreateQueue("q1", broker.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	root := sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE", Rights: sas.Manage}
	listen := sas.Key{Name: "ListenOnly", Value: "listen-secret", Rights: sas.Listen}
	keys, err := sas.NewKeys(root, listen)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tokenFor := func(aud string, k sas.Key, exp time.Time, style sas.Style) *rpcRequest {
		return &rpcRequest{body: sas.Sign(aud, k, exp, style),
			props: mapOf("operation", "put-token", "type", sasTokenType, "name", aud)}
	}
	cases := []struct {
		name   string
		req    *rpcRequest
		status int32
		desc   string
	}{
		{"go entity token", tokenFor("amqp://localhost:5672/q1", root, now.Add(time.Hour), sas.GoStyle), 202, "Accepted"},
		{"js entity token", tokenFor("sb://localhost/q1", root, now.Add(time.Hour), sas.JSStyle), 202, "Accepted"},
		{"management audience", tokenFor("amqp://localhost:5672/q1/$management", root, now.Add(time.Hour), sas.GoStyle), 202, "Accepted"},
		{"namespace token", tokenFor("sb://localhost", root, now.Add(time.Hour), sas.JSStyle), 202, "Accepted"},
		{"missing entity", tokenFor("amqp://localhost:5672/nope", root, now.Add(time.Hour), sas.GoStyle), 404,
			"The messaging entity 'amqp://localhost:5672/nope' could not be found."},
		{"expired", tokenFor("amqp://localhost:5672/q1", root, now.Add(-time.Second), sas.GoStyle), 401,
			"ExpiredToken: The token is expired. Expiration time:"},
		{"wrong key", tokenFor("amqp://localhost:5672/q1", sas.Key{Name: root.Name, Value: "other"}, now.Add(time.Hour), sas.GoStyle), 401, "InvalidSignature"},
		{"jwt", &rpcRequest{body: "ey...", props: mapOf("type", "jwt", "name", "sb://localhost/q1")}, 401, "token type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var cs claims
			resp := putToken(c.req, keys, b, &cs, now)
			if resp.status != c.status || !strings.HasPrefix(resp.description, c.desc) {
				t.Fatalf("got %d %q, want %d %q", resp.status, resp.description, c.status, c.desc)
			}
			if (resp.status == 202) != cs.any(now) {
				t.Fatalf("claims recorded: %v", cs.all)
			}
		})
	}

	// Rights: a Listen key may receive from q1 but not send; a claim covers
	// the entity and its subqueues, and ends at its expiry.
	var cs claims
	if r := putToken(tokenFor("amqp://localhost:5672/q1", listen, now.Add(time.Hour), sas.GoStyle), keys, b, &cs, now); r.status != 202 {
		t.Fatalf("listen token: %+v", r)
	}
	for _, c := range []struct {
		path  string
		right sas.Rights
		at    time.Time
		want  bool
	}{
		{"q1", sas.Listen, now, true},
		{"Q1/$DeadLetterQueue", sas.Listen, now, true},
		{"q1", sas.Send, now, false},
		{"q10", sas.Listen, now, false},
		{"q1", sas.Listen, now.Add(2 * time.Hour), false},
	} {
		if got, _ := cs.allows(c.path, c.right, c.at); got != c.want {
			t.Errorf("allows(%s, %v, %v) = %v", c.path, c.right, c.at, got)
		}
	}
}

func mapOf(kv ...string) encoding.Map {
	var m encoding.Map
	for i := 0; i+1 < len(kv); i += 2 {
		m = append(m, encoding.MapEntry{Key: kv[i], Value: kv[i+1]})
	}
	return m
}

func TestAudiencePathAndEntity(t *testing.T) {
	for aud, want := range map[string]string{
		"amqp://localhost:5672/q1":                           "q1",
		"amqp://localhost:5672/q1/$management":               "q1/$management",
		"sb://localhost/":                                    "",
		"localhost:5672":                                     "",
		"sb://ns.servicebus.windows.net/t1/Subscriptions/s1": "t1/Subscriptions/s1",
		"sb%3a": "",
	} {
		if got := audiencePath(aud); got != want {
			t.Errorf("audiencePath(%q) = %q, want %q", aud, got, want)
		}
	}
	for path, want := range map[string]string{"q1": "q1", "q1/$DeadLetterQueue": "q1", "q1/$management": "q1",
		"t1/Subscriptions/s1": "t1", "t1/subscriptions/s1/$DeadLetterQueue": "t1", "a/b": "a/b"} {
		if got := entityOf(path); got != want {
			t.Errorf("entityOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// A connection's claims drop those that expired whenever a new one comes,
// and are bounded: a client putting tokens for ever new paths gets a
// refusal past maxClaims, while replacing a claim it holds still works.
func TestClaimsDropExpiredAndAreBounded(t *testing.T) {
	var cs claims
	now := time.Unix(1_800_000_000, 0)
	for i := range 10 {
		if err := cs.put(claim{path: fmt.Sprint("old", i), rights: sas.Listen, expiry: now.Add(time.Second)}, now); err != nil {
			t.Fatal(err)
		}
	}
	later := now.Add(2 * time.Second)
	if err := cs.put(claim{path: "q1", rights: sas.Listen, expiry: later.Add(time.Hour)}, later); err != nil {
		t.Fatal(err)
	}
	if len(cs.all) != 1 {
		t.Fatalf("%d claims held after ten expired, want 1", len(cs.all))
	}
	for i := 1; i < maxClaims; i++ {
		if err := cs.put(claim{path: fmt.Sprint("q", i+1), rights: sas.Listen, expiry: later.Add(time.Hour)}, later); err != nil {
			t.Fatalf("claim %d: %v", i+1, err)
		}
	}
	if err := cs.put(claim{path: "one-too-many", rights: sas.Listen, expiry: later.Add(time.Hour)}, later); !errors.Is(err, errTooManyClaims) {
		t.Fatalf("claim %d: %v", maxClaims+1, err)
	}
	if err := cs.put(claim{path: "q1", rights: sas.Manage, expiry: later.Add(2 * time.Hour)}, later); err != nil {
		t.Fatalf("replacing a held claim at the limit: %v", err)
	}
	if ok, _ := cs.allows("q1", sas.Send, later); !ok {
		t.Fatal("the replaced claim does not grant its new rights")
	}
}
