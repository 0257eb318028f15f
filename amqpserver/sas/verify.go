package sas

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"
)

var (
	// ErrUnknownKey: skn names no configured key.
	ErrUnknownKey = errors.New("sas: unknown key name")
	// ErrBadSignature: sig does not match the named key.
	ErrBadSignature = errors.New("sas: invalid signature")
	// ErrExpired is matched by *ExpiredError, which carries the expiry.
	ErrExpired = errors.New("sas: token expired")
)

// ExpiredError is returned for a correctly signed token whose se is not after
// the verification time.
type ExpiredError struct {
	Expiry time.Time
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("sas: token expired at %s", e.Expiry.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrExpired) hold.
func (e *ExpiredError) Is(target error) bool { return target == ErrExpired }

// Verify parses a token, finds its key by skn, checks the signature and then
// that se is strictly after now. The checks run in that order, so an expired
// token with a bad signature is reported as a bad signature: nothing about a
// token is trusted before its signature is.
//
// On success it returns the token and the key that signed it; the caller
// still has to check Covers for the requested audience and the key's Rights
// at attach time. On failure after a successful parse the token is returned
// for logging, with a zero Key. Errors wrap ErrMalformed, ErrUnknownKey or
// ErrBadSignature, or are an *ExpiredError; Description turns them into the
// text for a CBS 401 response.
func Verify(token string, keys Keys, now time.Time) (Token, Key, error) {
	tok, err := Parse(token)
	if err != nil {
		return Token{}, Key{}, err
	}
	key, ok := keys.Lookup(tok.KeyName)
	if !ok {
		return tok, Key{}, fmt.Errorf("%w %q", ErrUnknownKey, truncate(tok.KeyName))
	}
	if !hmac.Equal(signature(key.Value, tok.RawResource, tok.RawExpiry), tok.Signature) {
		return tok, Key{}, fmt.Errorf("%w for key %q", ErrBadSignature, key.Name)
	}
	if !tok.Expiry.After(now) {
		return tok, Key{}, &ExpiredError{Expiry: tok.Expiry}
	}
	return tok, key, nil
}

// signature is HMAC-SHA256 keyed with the key string's bytes (not
// base64-decoded, although Azure keys look like base64) over the encoded
// resource, a newline and the expiry.
func signature(keyValue, rawResource, rawExpiry string) []byte {
	mac := hmac.New(sha256.New, []byte(keyValue))
	mac.Write([]byte(rawResource))
	mac.Write([]byte{'\n'})
	mac.Write([]byte(rawExpiry))
	return mac.Sum(nil)
}

// Description is the status-description for a CBS put-token that Verify
// rejected (status 401). The expired form begins with the text the Go SDK's
// tests match on ("ExpiredToken: The token is expired. Expiration time: ");
// the time follows quoted in .NET's "u" format, as Microsoft's relay listener
// writes it: '2030-03-17 17:46:40Z'. The other texts are ours. An unknown key
// name reads like a bad signature (the relay listener does the same), so the
// reply does not reveal which key names exist.
func Description(err error) string {
	var expired *ExpiredError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &expired):
		return fmt.Sprintf("ExpiredToken: The token is expired. Expiration time: '%s'",
			expired.Expiry.UTC().Format("2006-01-02 15:04:05Z"))
	case errors.Is(err, ErrMalformed):
		return "InvalidToken: The token is not a valid SharedAccessSignature."
	default:
		return "InvalidSignature: The token has an invalid signature."
	}
}
