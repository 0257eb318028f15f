package amqpserver

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/broker"
)

// Claims-based security: clients put SAS tokens on the $cbs node for an
// audience (an entity, its management node, or the whole namespace); links
// to an entity need a live claim with the right (docs/compatibility.md §3).

const sasTokenType = "servicebus.windows.net:sastoken"

// claim is what a verified token grants on one connection.
type claim struct {
	path   string // lower-case entity path, "" for the whole namespace
	rights sas.Rights
	expiry time.Time // zero: never (SASL PLAIN)
}

// claims are a connection's claims. Safe for concurrent use.
type claims struct {
	mu  sync.Mutex
	all []claim
}

// maxClaims bounds the claims one connection holds: a client puts a
// token per entity it uses, and expired ones are dropped as new ones come.
const maxClaims = 4096

// errTooManyClaims refuses a claim beyond maxClaims.
var errTooManyClaims = fmt.Errorf("a connection may hold claims for at most %d paths at once", maxClaims)

// put adds or replaces the claim for c.path, dropping claims that expired
// before now.
func (cs *claims) put(c claim, now time.Time) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	live := cs.all[:0]
	for _, old := range cs.all {
		if old.expiry.IsZero() || old.expiry.After(now) {
			live = append(live, old)
		}
	}
	clear(cs.all[len(live):])
	cs.all = live
	for i := range cs.all {
		if cs.all[i].path == c.path {
			cs.all[i] = c
			return nil
		}
	}
	if len(cs.all) >= maxClaims {
		return errTooManyClaims
	}
	cs.all = append(cs.all, c)
	return nil
}

// allows reports whether a live claim covers entity path with rights want,
// and until when.
func (cs *claims) allows(path string, want sas.Rights, now time.Time) (bool, time.Time) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	path = strings.ToLower(path)
	granted, until := false, time.Time{}
	for _, c := range cs.all {
		if !covers(c.path, path) || !c.rights.Has(want) || !c.expiry.IsZero() && !c.expiry.After(now) {
			continue
		}
		if !granted || c.expiry.IsZero() || !until.IsZero() && c.expiry.After(until) {
			until = c.expiry
		}
		granted = true
	}
	return granted, until
}

// any reports whether the connection holds any live claim.
func (cs *claims) any(now time.Time) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, c := range cs.all {
		if c.expiry.IsZero() || c.expiry.After(now) {
			return true
		}
	}
	return false
}

// covers: a claim on "q1" covers "q1" and everything under "q1/"; a claim on
// "" covers every entity.
func covers(claimPath, path string) bool {
	return claimPath == "" || path == claimPath || strings.HasPrefix(path, claimPath+"/")
}

// audiencePath returns the entity path of a token audience:
// "amqp://host:5672/q1/$management" gives "q1/$management", a namespace
// audience "sb://host/" or "host" gives "".
func audiencePath(audience string) string {
	rest := sas.StripScheme(audience)
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return ""
	}
	path := strings.Trim(rest[i+1:], "/")
	if unescaped, err := url.PathUnescape(path); err == nil {
		path = unescaped
	}
	return path
}

// entityOf returns the entity name a link address or audience path names:
// "q1", "q1/$DeadLetterQueue", "q1/$management" all name q1; a
// subscription path "t1/Subscriptions/s1" names topic t1.
func entityOf(path string) string {
	if i := strings.Index(path, "/$"); i >= 0 {
		path = path[:i]
	}
	topic, _, _ := broker.SplitSubscription(path)
	return topic
}

// audienceExists reports whether the entity an audience path names exists;
// below a topic, whatever the path names: a subscription (which must exist)
// or its dead-letter queues, not a dead-letter queue of the topic. The Go
// SDK reports a missing entity as not found only when put-token says so
// (docs/compatibility.md §3).
func audienceExists(b *broker.Broker, path string) bool {
	name := entityOf(path)
	if name == "" {
		return true // the namespace
	}
	e, err := b.Entity(name)
	if errors.Is(err, broker.ErrEntityNotFound) {
		return false
	}
	if err != nil {
		return true // not a missing entity: the link attach reports it
	}
	if !e.IsTopic() {
		_, _, below := broker.SplitSubscription(path) // a queue has no subscriptions
		return !below
	}
	if n := len(path) - len("/$management"); n >= 0 && strings.EqualFold(path[n:], "/$management") {
		path = path[:n]
	}
	_, _, err = b.Resolve(path)
	return !errors.Is(err, broker.ErrEntityNotFound)
}

// putToken answers a CBS put-token request: verify the token, check that its
// audience names an existing entity, and record the claim.
func putToken(req *rpcRequest, keys sas.Keys, b *broker.Broker, cs *claims, now time.Time) rpcResponse {
	if typ := req.prop("type"); typ != sasTokenType {
		return rpcResponse{status: 401, condition: condUnauthorized,
			description: fmt.Sprintf("token type %q is not supported; use a shared access signature", clip(typ, 64))}
	}
	token, isString := req.body.(string)
	if !isString {
		return rpcResponse{status: 400, condition: condDecodeError, description: "the put-token body must be the token string"}
	}
	audience := req.prop("name")
	tok, key, err := sas.Verify(token, keys, now)
	if errors.Is(err, sas.ErrUnknownKey) {
		tok, key, err = verifyEntityKey(token, tok, b, now)
	}
	if err != nil {
		return rpcResponse{status: 401, condition: condUnauthorized, description: sas.Description(err)}
	}
	if !sas.Covers(tok, audience) {
		return rpcResponse{status: 401, condition: condUnauthorized,
			description: fmt.Sprintf("InvalidAudience: the token's audience does not cover %s", audience)}
	}
	path := audiencePath(audience)
	if !covers(strings.ToLower(audiencePath(tok.Audience)), strings.ToLower(path)) {
		// Whatever the requested name looks like, the claim never reaches
		// beyond what the token itself names.
		return rpcResponse{status: 401, condition: condUnauthorized,
			description: fmt.Sprintf("InvalidAudience: the token's audience does not cover %s", audience)}
	}
	if !audienceExists(b, path) {
		// The text is what the SDKs match for "not found".
		return rpcResponse{status: 404, condition: condNotFound,
			description: fmt.Sprintf("The messaging entity '%s' could not be found.", audience)}
	}
	if err := cs.put(claim{path: strings.ToLower(path), rights: key.Rights, expiry: tok.Expiry}, now); err != nil {
		return rpcResponse{status: 403, condition: condResourceLimit, description: err.Error()}
	}
	return rpcResponse{status: 202, description: "Accepted"}
}

// verifyEntityKey verifies a token signed by one of an entity's own
// authorization rules (the administration API's AuthorizationRules), with
// its primary or its secondary key. The token's audience must lie within
// that entity, so the claim it makes does too. err is the namespace's
// ErrUnknownKey when no rule of that name exists there.
func verifyEntityKey(token string, tok sas.Token, b *broker.Broker, now time.Time) (sas.Token, sas.Key, error) {
	unknown := fmt.Errorf("%w %q", sas.ErrUnknownKey, clip(tok.KeyName, 64))
	path := audiencePath(tok.Audience)
	name := entityOf(path)
	e, err := b.Entity(name)
	if err != nil || name == "" || !covers(strings.ToLower(name), strings.ToLower(path)) {
		return tok, sas.Key{}, unknown
	}
	cfg, err := e.Config()
	if err != nil {
		return tok, sas.Key{}, unknown
	}
	for _, rule := range cfg.AuthorizationRules {
		if rule.KeyName != tok.KeyName {
			continue
		}
		rights, err := sas.ParseRights(strings.Join(rule.Rights, ","))
		if err != nil {
			return tok, sas.Key{}, unknown
		}
		for _, value := range []string{rule.PrimaryKey, rule.SecondaryKey} {
			ks, err := sas.NewKeys(sas.Key{Name: rule.KeyName, Value: value, Rights: rights})
			if err != nil {
				continue // no secondary key
			}
			if t, k, err := sas.Verify(token, ks, now); !errors.Is(err, sas.ErrBadSignature) {
				return t, k, err
			}
		}
		return tok, sas.Key{}, fmt.Errorf("%w for key %q", sas.ErrBadSignature, rule.KeyName)
	}
	return tok, sas.Key{}, unknown
}

// clip shortens a client's string for an error description.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
