package sas

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func addTokenSeeds(f *testing.F) {
	for _, s := range []string{
		vectorGo, vectorJS, "", "SharedAccessSignature", "sr=&sig=&se=&skn=",
		"SharedAccessSignature sr=a&sr=b", "se=99999999999999999999", "sig=%zz", "a=b=c&&&",
		"SharedAccessSignature sig=IkE2uRAChvy4%2FNBBJObLNK760V2bFPEHTvDEisp3BFs%3D&se=1900000000&skn=RootManageSharedAccessKey&sr=sb%3A%2F%2Flocalhost%2Fq1",
	} {
		f.Add(s)
	}
}

// FuzzParse: Parse never panics, and a token it accepts satisfies the
// invariants Verify and Covers rely on.
func FuzzParse(f *testing.F) {
	addTokenSeeds(f)
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := Parse(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if tok.RawResource == "" || tok.KeyName == "" || tok.RawExpiry == "" || len(tok.Signature) != 32 {
			t.Fatalf("accepted incomplete token %+v", tok)
		}
		if !strings.Contains(s, tok.RawResource) || !strings.Contains(s, tok.RawExpiry) {
			t.Fatalf("raw fields not taken from the input: %+v", tok)
		}
		if tok.Expiry.Unix() < 0 {
			t.Fatalf("negative expiry %v", tok.Expiry)
		}
		Covers(tok, tok.Audience)
		Covers(tok, s)
	})
}

// FuzzVerify: for any token, key and clock Verify never panics, returns one
// of its documented errors, and succeeds only when the signature is the HMAC
// of the raw fields under the named key.
func FuzzVerify(f *testing.F) {
	addTokenSeeds(f)
	f.Fuzz(func(t *testing.T, s string) {
		keys := mustKeys(t, Key{Name: vectorKeyName, Value: vectorKey, Rights: Manage})
		now := beforeExpiry
		tok, key, err := Verify(s, keys, now)
		var expired *ExpiredError
		switch {
		case err == nil:
			if key.Name != tok.KeyName || !tok.Expiry.After(now) ||
				!bytes.Equal(signature(key.Value, tok.RawResource, tok.RawExpiry), tok.Signature) {
				t.Fatalf("accepted %q: %+v %+v", s, tok, key)
			}
		case errors.As(err, &expired):
			if expired.Expiry.After(now) {
				t.Fatalf("expired error with future expiry %v", expired.Expiry)
			}
		case errors.Is(err, ErrMalformed), errors.Is(err, ErrUnknownKey), errors.Is(err, ErrBadSignature):
		default:
			t.Fatalf("undocumented error %v", err)
		}
		if Description(err) == "" && err != nil {
			t.Fatal("empty description")
		}
	})
}

// FuzzSignVerify: whatever the audience (but none), key and expiry, a
// JS-style token verifies and covers its own audience; a Go-style one does too when the key
// name needs no escaping (the Go SDK writes skn verbatim).
func FuzzSignVerify(f *testing.F) {
	f.Add("amqp://localhost/q1", vectorKeyName, vectorKey, int64(1900000000))
	f.Add("sb://Host:5672/A B/$management", "a&b=c", "k", int64(0))
	f.Add("localhost", "k", "\x00\xff", int64(1<<40))
	f.Fuzz(func(t *testing.T, audience, keyName, keyValue string, se int64) {
		if keyName == "" || keyValue == "" || se <= 0 {
			return
		}
		key := Key{Name: keyName, Value: keyValue}
		keys := mustKeys(t, key)
		expiry := time.Unix(se, 0)
		for _, style := range []Style{GoStyle, JSStyle} {
			if style == GoStyle && strings.ContainsAny(keyName, "&=%+ \t\n\r\v\f") {
				continue
			}
			token := Sign(audience, key, expiry, style)
			tok, _, err := Verify(token, keys, expiry.Add(-time.Nanosecond))
			if audience == "" {
				// A token for no resource grants nothing; no SDK signs one.
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("style %d: Verify(%q) with an empty sr: %v", style, token, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("style %d: Verify(%q): %v", style, token, err)
			}
			if tok.KeyName != keyName {
				t.Fatalf("style %d: key name %q, want %q", style, tok.KeyName, keyName)
			}
			if style == JSStyle && tok.Audience != audience {
				t.Fatalf("audience %q, want %q", tok.Audience, audience)
			}
			stripped := strings.TrimRight(stripScheme(audience), "/")
			if stripped != "" && !hasDotSegment(stripScheme(audience)) && !Covers(tok, audience) {
				t.Fatalf("style %d: token for %q does not cover it", style, audience)
			}
			if _, _, err := Verify(token, keys, expiry); !errors.Is(err, ErrExpired) {
				t.Fatalf("style %d: at expiry: %v", style, err)
			}
		}
	})
}
