// Package sas parses, verifies and signs Service Bus shared access signature
// (SAS) tokens, the credential carried by a CBS put-token request.
//
// A token is
//
//	SharedAccessSignature sr=<resource>&sig=<signature>&se=<expiry>&skn=<key name>
//
// where sig is base64(HMAC-SHA256(key, sr + "\n" + se)), computed over sr as it
// appears in the token (still percent-encoded) and keyed with the UTF-8 bytes
// of the key string. See docs/compatibility.md §3, "SAS tokens".
//
// Everything here is pure: the current time is a parameter.
package sas

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Token is a parsed SAS token. Parse checks its syntax only; Verify checks the
// signature and expiry.
type Token struct {
	// Audience is sr percent-decoded, e.g. "amqp://localhost/q1". Go clients
	// lowercase the whole encoded sr, so the audience may differ in case from
	// the entity name.
	Audience string
	// RawResource is sr exactly as it appears in the token; the signature
	// covers these bytes, not the decoded audience.
	RawResource string
	// Signature is the decoded HMAC-SHA256 (32 bytes).
	Signature []byte
	// Expiry is se as a UTC time; RawExpiry is se as it appears in the token,
	// which is what the signature covers.
	Expiry    time.Time
	RawExpiry string
	// KeyName is skn percent-decoded.
	KeyName string
}

const tokenPrefix = "SharedAccessSignature"

// ErrMalformed is wrapped by every syntax error Parse returns.
var ErrMalformed = errors.New("sas: malformed token")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// The four fields; names are matched case-insensitively, as Microsoft's own
// parsers do.
const (
	fieldSR = iota
	fieldSig
	fieldSE
	fieldSKN
	numFields
)

var fieldNames = [numFields]string{"sr", "sig", "se", "skn"}

// Parse reads a token. The "SharedAccessSignature" prefix is optional and
// case-insensitive; the k=v pairs may come in any order, empty pairs (a
// stray "&") and unknown fields are ignored, and each of sr, sig, se and skn
// must appear exactly once with a non-empty value.
//
// Decoding: sr and skn are query-unescaped ('+' is a space, as Go's
// url.QueryEscape writes it); sig is percent-decoded but a literal '+' is kept,
// because base64 uses '+' and never contains a space. se must be plain decimal
// digits.
func Parse(s string) (Token, error) {
	// Only ASCII whitespace: the Go SDK writes skn verbatim, and a key
	// name may end in any other character.
	s = strings.Trim(s, asciiSpace)
	if len(s) >= len(tokenPrefix) && asciiEqualFold(s[:len(tokenPrefix)], tokenPrefix) &&
		(len(s) == len(tokenPrefix) || isSpace(s[len(tokenPrefix)])) {
		s = strings.TrimLeft(s[len(tokenPrefix):], " \t")
	}
	if s == "" {
		return Token{}, malformed("empty token")
	}
	if strings.ContainsAny(s, asciiSpace) {
		return Token{}, malformed("whitespace inside the token")
	}

	var tok Token
	var seen [numFields]bool
	for pair := range strings.SplitSeq(s, "&") {
		if pair == "" {
			continue
		}
		name, value, ok := strings.Cut(pair, "=")
		if !ok {
			return Token{}, malformed("field %q has no '='", truncate(pair))
		}
		field := fieldIndex(name)
		if field < 0 {
			continue
		}
		if seen[field] {
			return Token{}, malformed("duplicate field %q", fieldNames[field])
		}
		seen[field] = true
		if value == "" {
			return Token{}, malformed("field %q is empty", fieldNames[field])
		}
		if err := tok.setField(field, value); err != nil {
			return Token{}, err
		}
	}
	for field, ok := range seen {
		if !ok {
			return Token{}, malformed("missing field %q", fieldNames[field])
		}
	}
	return tok, nil
}

func (tok *Token) setField(field int, value string) error {
	switch field {
	case fieldSR:
		audience, err := url.QueryUnescape(value)
		if err != nil {
			return malformed("sr: %v", err)
		}
		tok.RawResource, tok.Audience = value, audience
	case fieldSig:
		sig, err := decodeSignature(value)
		if err != nil {
			return err
		}
		tok.Signature = sig
	case fieldSE:
		expiry, err := parseExpiry(value)
		if err != nil {
			return err
		}
		tok.RawExpiry, tok.Expiry = value, expiry
	case fieldSKN:
		name, err := url.QueryUnescape(value)
		if err != nil {
			return malformed("skn: %v", err)
		}
		tok.KeyName = name
	}
	return nil
}

func decodeSignature(value string) ([]byte, error) {
	text, err := url.PathUnescape(value)
	if err != nil {
		return nil, malformed("sig: %v", err)
	}
	sig, err := base64.StdEncoding.DecodeString(text)
	if err != nil {
		return nil, malformed("sig is not base64: %v", err)
	}
	// The decoder skips CR/LF and tolerates stray padding bits; insisting on
	// the canonical form keeps one signature to one spelling.
	if base64.StdEncoding.EncodeToString(sig) != text {
		return nil, malformed("sig is not canonical base64")
	}
	if len(sig) != 32 {
		return nil, malformed("sig is %d bytes, want 32 (HMAC-SHA256)", len(sig))
	}
	return sig, nil
}

// parseExpiry reads se, unix seconds. Only digits: ParseInt alone would also
// take a sign, and the signed text must be the number itself.
func parseExpiry(value string) (time.Time, error) {
	for i := 0; i < len(value); i++ {
		if value[i] < '0' || value[i] > '9' {
			return time.Time{}, malformed("se %q is not a decimal number of seconds", truncate(value))
		}
	}
	secs, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return time.Time{}, malformed("se %q is out of range", truncate(value))
	}
	return time.Unix(secs, 0).UTC(), nil
}

func fieldIndex(name string) int {
	for i, n := range fieldNames {
		if asciiEqualFold(name, n) {
			return i
		}
	}
	return -1
}

// asciiSpace is the whitespace a token may be padded with.
const asciiSpace = " \t\n\r\v\f"

func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}

// asciiEqualFold compares case-insensitively over ASCII letters only. Unicode
// folding is deliberately avoided: it maps some multi-byte runes onto ASCII
// (the Kelvin sign onto 'k') and treats every invalid byte as the same rune.
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lowerASCII(a[i]) != lowerASCII(b[i]) {
			return false
		}
	}
	return true
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + ('a' - 'A')
	}
	return c
}

// truncate keeps attacker-supplied text in error messages short.
func truncate(s string) string {
	const limit = 64
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}
