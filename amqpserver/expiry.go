package amqpserver

import (
	"fmt"
	"time"

	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/amqpserver/transport"
)

// When the token that authorised a link expires and no newer token covers
// the link, the link is detached (docs/compatibility.md §3). A connection
// tracks, per link, the claim it needs and when the claim it has ends.

type guard struct {
	path  string
	right sas.Rights
	until time.Time
}

// guard watches l's claim; a claim without expiry (SASL PLAIN) needs no
// watching.
func (cs *connState) guard(l *transport.Link, path string, right sas.Rights, until time.Time) {
	if until.IsZero() {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.guarded == nil {
		cs.guarded = make(map[*transport.Link]guard)
	}
	cs.guarded[l] = guard{path: path, right: right, until: until}
	cs.armExpiry()
}

func (cs *connState) unguard(l *transport.Link) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	delete(cs.guarded, l)
}

// armExpiry sets the timer for the earliest claim end. cs.mu is held.
func (cs *connState) armExpiry() {
	var next time.Time
	for _, g := range cs.guarded {
		if next.IsZero() || g.until.Before(next) {
			next = g.until
		}
	}
	if cs.expiry != nil {
		cs.expiry.Stop()
		cs.expiry = nil
	}
	if next.IsZero() {
		return
	}
	cs.expiry = time.AfterFunc(time.Until(next)+time.Millisecond, cs.checkExpiry)
}

// checkExpiry detaches links whose claims have lapsed and re-arms for the
// rest, which may have been extended by newer tokens.
func (cs *connState) checkExpiry() {
	now := cs.s.cfg.Now()
	var expired []*transport.Link
	cs.mu.Lock()
	for l, g := range cs.guarded {
		ok, until := cs.claims.allows(g.path, g.right, now)
		switch {
		case !ok:
			expired = append(expired, l)
			delete(cs.guarded, l)
		case until.IsZero():
			delete(cs.guarded, l)
		default:
			g.until = until
			cs.guarded[l] = g
		}
	}
	cs.armExpiry()
	cs.mu.Unlock()
	for _, l := range expired {
		l.Close(&frames.Error{Condition: condUnauthorized,
			Description: fmt.Sprintf("the token authorising %s expired", l.Name())})
	}
}

func (cs *connState) stopExpiry() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.expiry != nil {
		cs.expiry.Stop()
		cs.expiry = nil
	}
	cs.guarded = nil
}
