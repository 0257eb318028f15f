package transport

import (
	"bytes"
	"errors"
	"unicode/utf8"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/frames"
)

// maxPlainField bounds each PLAIN field (RFC 4616 §2 allows 255 octets).
const maxPlainField = 255

var errBadPlain = errors.New("malformed PLAIN response")

// parsePlain splits a PLAIN initial-response, [authzid] NUL authcid NUL
// passwd (RFC 4616 §2), rejecting a missing separator, an empty authcid
// or password, a field over 255 octets, and invalid UTF-8.
func parsePlain(resp []byte) (authzid, authcid, passwd string, err error) {
	first := bytes.IndexByte(resp, 0)
	if first < 0 {
		return "", "", "", errBadPlain
	}
	rest := resp[first+1:]
	second := bytes.IndexByte(rest, 0)
	if second < 0 {
		return "", "", "", errBadPlain
	}
	fields := [3][]byte{resp[:first], rest[:second], rest[second+1:]}
	for i, f := range fields {
		if len(f) > maxPlainField || !utf8.Valid(f) || (i > 0 && len(f) == 0) || (i == 2 && bytes.IndexByte(f, 0) >= 0) {
			return "", "", "", errBadPlain
		}
	}
	return string(fields[0]), string(fields[1]), string(fields[2]), nil
}

// credentials turns a sasl-init into what the handler sees, or reports
// that it cannot succeed (an unoffered mechanism or a malformed PLAIN).
func (c *Conn) credentials(init *frames.SASLInit) (Credentials, bool) {
	mech := string(init.Mechanism)
	if !c.cfg.offers(mech) {
		return Credentials{}, false
	}
	cred := Credentials{
		Mechanism: mech,
		Response:  bytes.Clone(init.InitialResponse),
		Hostname:  init.Hostname,
	}
	if mech == MechanismPlain {
		var err error
		cred.AuthzID, cred.Username, cred.Password, err = parsePlain(init.InitialResponse)
		if err != nil {
			return Credentials{}, false
		}
	}
	return cred, true
}

// mechanisms is the sasl-mechanisms field, most preferred first (§5.3.3.1).
func (c *Conn) mechanisms() []encoding.Symbol {
	out := make([]encoding.Symbol, len(c.cfg.SASLMechanisms))
	for i, m := range c.cfg.SASLMechanisms {
		out[i] = encoding.Symbol(m)
	}
	return out
}
