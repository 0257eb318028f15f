package sas

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Vectors from docs/compatibility.md §3, computed by the Go and JS SDKs.
const (
	vectorKeyName = "RootManageSharedAccessKey"
	vectorKey     = "SAS_KEY_VALUE"
	vectorGo      = "SharedAccessSignature sr=amqp%3a%2f%2flocalhost%2fq1&sig=XzuSVglS5jansW50PC66B0%2FXqp97%2F39feQeYstfmMMM%3D&se=1900000000&skn=RootManageSharedAccessKey"
	vectorJS      = "SharedAccessSignature sr=sb%3A%2F%2Flocalhost%2Fq1&sig=IkE2uRAChvy4%2FNBBJObLNK760V2bFPEHTvDEisp3BFs%3D&se=1900000000&skn=RootManageSharedAccessKey"
)

var (
	vectorExpiry = time.Unix(1900000000, 0)
	beforeExpiry = vectorExpiry.Add(-time.Second)
)

func vectorKeys(t testing.TB) Keys {
	t.Helper()
	keys, err := NewKeys(
		Key{Name: vectorKeyName, Value: vectorKey, Rights: Manage},
		Key{Name: "listener", Value: "other-secret", Rights: Listen},
	)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func TestVectorsVerify(t *testing.T) {
	keys := vectorKeys(t)
	for _, tc := range []struct {
		name, token, audience, raw string
	}{
		{"go", vectorGo, "amqp://localhost/q1", "amqp%3a%2f%2flocalhost%2fq1"},
		{"js", vectorJS, "sb://localhost/q1", "sb%3A%2F%2Flocalhost%2Fq1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, key, err := Verify(tc.token, keys, beforeExpiry)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if key.Name != vectorKeyName || key.Rights != Manage {
				t.Errorf("key = %+v", key)
			}
			if tok.Audience != tc.audience || tok.RawResource != tc.raw || tok.KeyName != vectorKeyName ||
				tok.RawExpiry != "1900000000" || !tok.Expiry.Equal(vectorExpiry) || len(tok.Signature) != 32 {
				t.Errorf("token = %+v", tok)
			}
		})
	}
}

func TestSignReproducesVectors(t *testing.T) {
	key := Key{Name: vectorKeyName, Value: vectorKey}
	if got := Sign("amqp://localhost/q1", key, vectorExpiry, GoStyle); got != vectorGo {
		t.Errorf("GoStyle:\n got %s\nwant %s", got, vectorGo)
	}
	if got := Sign("sb://localhost/q1", key, vectorExpiry, JSStyle); got != vectorJS {
		t.Errorf("JSStyle:\n got %s\nwant %s", got, vectorJS)
	}
	// Sub-second parts of the expiry are dropped, not rounded up.
	if got := Sign("sb://localhost/q1", key, vectorExpiry.Add(999*time.Millisecond), JSStyle); got != vectorJS {
		t.Errorf("JSStyle with fractional expiry: %s", got)
	}
}

func TestSignStyles(t *testing.T) {
	key := Key{Name: "my key&co", Value: "k"}
	audience := "sb://Host:5672/Queue One/$management"
	js := Sign(audience, key, vectorExpiry, JSStyle)
	if !strings.Contains(js, "sr=sb%3A%2F%2FHost%3A5672%2FQueue%20One%2F%24management&") ||
		!strings.HasSuffix(js, "&skn=my%20key%26co") {
		t.Errorf("JSStyle encoding: %s", js)
	}
	tok, _, err := Verify(js, mustKeys(t, key), beforeExpiry)
	if err != nil || tok.Audience != audience || tok.KeyName != key.Name {
		t.Errorf("JSStyle round trip: %+v, %v", tok, err)
	}

	goKey := Key{Name: "my-key", Value: "k"}
	gs := Sign(audience, goKey, vectorExpiry, GoStyle)
	if !strings.Contains(gs, "sr=sb%3a%2f%2fhost%3a5672%2fqueue+one%2f%24management&") {
		t.Errorf("GoStyle encoding: %s", gs)
	}
	tok, _, err = Verify(gs, mustKeys(t, goKey), beforeExpiry)
	if err != nil || tok.Audience != strings.ToLower(audience) {
		t.Errorf("GoStyle round trip: %+v, %v", tok, err)
	}
}

func mustKeys(t testing.TB, keys ...Key) Keys {
	t.Helper()
	ks, err := NewKeys(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// splitVector returns the token's four "k=v" pairs.
func splitVector(token string) []string {
	return strings.Split(strings.TrimPrefix(token, "SharedAccessSignature "), "&")
}

// isHexCaseFlip reports whether flipping bit 0x20 of token[i] only changes the
// case of a hex digit inside a %XX escape: the decoded value is the same.
func isHexCaseFlip(token string, i int, bit byte) bool {
	if bit != 0x20 || !strings.ContainsRune("abcdefABCDEF", rune(token[i])) {
		return false
	}
	return (i >= 1 && token[i-1] == '%') || (i >= 2 && token[i-2] == '%')
}

// A one-bit change anywhere in a field value must make verification fail.
// The one exception is the case of a hex digit in a %XX escape inside sig or
// skn: those values are compared after decoding, so the token is the same
// token. In sr the same flip must fail, because sr is signed as written.
func TestOneBitChangeFails(t *testing.T) {
	keys := vectorKeys(t)
	for _, vector := range []string{vectorGo, vectorJS} {
		prefixLen := len("SharedAccessSignature ")
		offset := prefixLen
		for _, pair := range splitVector(vector) {
			name, value, _ := strings.Cut(pair, "=")
			start := offset + len(name) + 1
			for i := start; i < start+len(value); i++ {
				for bit := byte(1); bit != 0; bit <<= 1 {
					mutated := []byte(vector)
					mutated[i] ^= bit
					_, _, err := Verify(string(mutated), keys, beforeExpiry)
					if name != "sr" && isHexCaseFlip(vector, i, bit) {
						if err != nil {
							t.Errorf("%s: equivalent escape %q rejected: %v", name, mutated, err)
						}
						continue
					}
					if err == nil {
						t.Errorf("%s byte %d bit %#x: mutated token verified: %s", name, i-start, bit, mutated)
					}
				}
			}
			offset += len(pair) + 1
		}
	}
}

func permutations(items []string) [][]string {
	if len(items) <= 1 {
		return [][]string{append([]string(nil), items...)}
	}
	var out [][]string
	for i := range items {
		rest := append(append([]string(nil), items[:i]...), items[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]string{items[i]}, p...))
		}
	}
	return out
}

func TestFieldOrderAndPrefixVariants(t *testing.T) {
	keys := vectorKeys(t)
	prefixes := []string{"SharedAccessSignature ", "sharedaccesssignature ", "SHAREDACCESSSIGNATURE\t ", ""}
	for _, vector := range []string{vectorGo, vectorJS} {
		perms := permutations(splitVector(vector))
		if len(perms) != 24 {
			t.Fatalf("%d permutations", len(perms))
		}
		for _, p := range perms {
			for _, prefix := range prefixes {
				token := "  " + prefix + strings.Join(p, "&") + "\n"
				if _, _, err := Verify(token, keys, beforeExpiry); err != nil {
					t.Errorf("%q: %v", token, err)
				}
			}
		}
	}
	// Field names are case-insensitive, stray '&' and unknown fields ignored.
	lenient := "SharedAccessSignature &SR=amqp%3a%2f%2flocalhost%2fq1&&Sig=XzuSVglS5jansW50PC66B0%2FXqp97%2F39feQeYstfmMMM%3D&SE=1900000000&extra=1&sKn=RootManageSharedAccessKey&"
	if _, _, err := Verify(lenient, keys, beforeExpiry); err != nil {
		t.Errorf("lenient form: %v", err)
	}
	// Only ASCII whitespace pads a token: the Go SDK writes skn verbatim,
	// so a key name may end in a Unicode space (a fuzz find: U+2028 was
	// trimmed off and the key name came out empty).
	for _, name := range []string{"k\u2028", "\u00a0", "k\u0085"} {
		key := Key{Name: name, Value: "v"}
		tok, _, err := Verify(Sign("sb://h/q", key, time.Unix(1900000000, 0), GoStyle), mustKeys(t, key), beforeExpiry)
		if err != nil || tok.KeyName != name {
			t.Errorf("key name %q: verified as %q, %v", name, tok.KeyName, err)
		}
	}
	// A '+' left unescaped in sig is kept as '+', not read as a space.
	key := Key{Name: "k", Value: "v"}
	for se := int64(1900000000); ; se++ {
		token := Sign("sb://h/q", key, time.Unix(se, 0), JSStyle)
		if !strings.Contains(token, "%2B") {
			continue
		}
		raw := strings.ReplaceAll(token, "%2B", "+")
		if _, _, err := Verify(raw, mustKeys(t, key), beforeExpiry); err != nil {
			t.Errorf("unescaped '+' in sig: %v", err)
		}
		break
	}
}

func TestExpiry(t *testing.T) {
	keys := vectorKeys(t)
	for _, now := range []time.Time{vectorExpiry, vectorExpiry.Add(time.Nanosecond), vectorExpiry.Add(24 * time.Hour)} {
		tok, key, err := Verify(vectorGo, keys, now)
		var expired *ExpiredError
		if !errors.As(err, &expired) || !errors.Is(err, ErrExpired) {
			t.Fatalf("now=%v: err = %v, want *ExpiredError", now, err)
		}
		if !expired.Expiry.Equal(vectorExpiry) || tok.Audience != "amqp://localhost/q1" || key != (Key{}) {
			t.Errorf("now=%v: expiry %v token %+v key %+v", now, expired.Expiry, tok, key)
		}
		const want = "ExpiredToken: The token is expired. Expiration time: '2030-03-17 17:46:40Z'"
		if got := Description(err); got != want {
			t.Errorf("Description = %q, want %q", got, want)
		}
	}
	if _, _, err := Verify(vectorGo, keys, vectorExpiry.Add(-time.Nanosecond)); err != nil {
		t.Errorf("one nanosecond before se: %v", err)
	}
}

func TestWrongKeyAndUnknownName(t *testing.T) {
	wrong := mustKeys(t, Key{Name: vectorKeyName, Value: "SAS_KEY_VALUE2", Rights: Manage})
	_, key, err := Verify(vectorGo, wrong, beforeExpiry)
	if !errors.Is(err, ErrBadSignature) || key != (Key{}) {
		t.Errorf("wrong key: %v %+v", err, key)
	}
	if got := Description(err); got != "InvalidSignature: The token has an invalid signature." {
		t.Errorf("Description = %q", got)
	}
	// The key is the string's bytes, not its base64 decoding: a key whose
	// decoding happens to be the same bytes is still a different key.
	b64 := mustKeys(t, Key{Name: vectorKeyName, Value: "U0FTX0tFWV9WQUxVRQ=="})
	if _, _, err := Verify(vectorGo, b64, beforeExpiry); !errors.Is(err, ErrBadSignature) {
		t.Errorf("base64 of key: %v", err)
	}
	// An expired token with a bad signature is a bad signature.
	if _, _, err := Verify(vectorGo, wrong, vectorExpiry.Add(time.Hour)); !errors.Is(err, ErrBadSignature) {
		t.Errorf("expired and wrong key: %v", err)
	}

	// Names are case-sensitive.
	lower := mustKeys(t, Key{Name: strings.ToLower(vectorKeyName), Value: vectorKey})
	for _, keys := range []Keys{lower, {}} {
		tok, _, err := Verify(vectorJS, keys, beforeExpiry)
		if !errors.Is(err, ErrUnknownKey) || tok.KeyName != vectorKeyName {
			t.Errorf("unknown key: %v %+v", err, tok)
		}
		if got := Description(err); got != "InvalidSignature: The token has an invalid signature." {
			t.Errorf("Description = %q", got)
		}
	}
}

func TestMalformed(t *testing.T) {
	const (
		sr  = "sr=amqp%3a%2f%2flocalhost%2fq1"
		sig = "sig=XzuSVglS5jansW50PC66B0%2FXqp97%2F39feQeYstfmMMM%3D"
		se  = "se=1900000000"
		skn = "skn=RootManageSharedAccessKey"
	)
	join := func(pairs ...string) string { return "SharedAccessSignature " + strings.Join(pairs, "&") }
	for _, tc := range []struct {
		name, token, want string
	}{
		{"empty", "", "empty token"},
		{"prefix only", "SharedAccessSignature", "empty token"},
		{"prefix and spaces", "SharedAccessSignature   ", "empty token"},
		{"prefix glued", "SharedAccessSignaturesr=x&" + sig + "&" + se + "&" + skn, "missing field \"sr\""},
		{"missing sr", join(sig, se, skn), "missing field \"sr\""},
		{"missing sig", join(sr, se, skn), "missing field \"sig\""},
		{"missing se", join(sr, sig, skn), "missing field \"se\""},
		{"missing skn", join(sr, sig, se), "missing field \"skn\""},
		{"duplicate sr", join(sr, sig, se, skn, sr), "duplicate field \"sr\""},
		{"duplicate se other case", join(sr, sig, se, skn, "SE=1900000000"), "duplicate field \"se\""},
		{"duplicate sig", join(sig, sr, sig, se, skn), "duplicate field \"sig\""},
		{"duplicate skn", join(sr, sig, se, skn, "skn=x"), "duplicate field \"skn\""},
		{"empty sr", join("sr=", sig, se, skn), "field \"sr\" is empty"},
		{"empty skn", join(sr, sig, se, "skn="), "field \"skn\" is empty"},
		{"pair without =", join(sr, sig, se, skn, "junk"), "has no '='"},
		{"space inside", join(sr, sig, se, "skn=Root Manage"), "whitespace"},
		{"two prefixes", "SharedAccessSignature " + join(sr, sig, se, skn), "whitespace"},
		{"bad escape in sr", join("sr=amqp%3", sig, se, skn), "sr:"},
		{"bad escape in sr 2", join("sr=a%zzb", sig, se, skn), "sr:"},
		{"bad escape in skn", join(sr, sig, se, "skn=%G1"), "skn:"},
		{"bad escape in sig", join(sr, "sig=abc%", se, skn), "sig:"},
		{"sig not base64", join(sr, "sig=!!!!", se, skn), "not base64"},
		{"sig short", join(sr, "sig=AAAA", se, skn), "want 32"},
		{"sig long", join(sr, "sig="+strings.Repeat("A", 44)+"AAAA", se, skn), "want 32"},
		{"sig unpadded", join(sr, "sig=XzuSVglS5jansW50PC66B0%2FXqp97%2F39feQeYstfmMMM", se, skn), "not base64"},
		{"sig with newline", join(sr, "sig=XzuSVglS5jansW50PC66B0%2FXqp97%2F39feQ%0AeYstfmMMM%3D", se, skn), "not canonical"},
		{"sig non-canonical padding bits", join(sr, "sig=XzuSVglS5jansW50PC66B0%2FXqp97%2F39feQeYstfmMMN%3D", se, skn), "not canonical"},
		{"se negative", join(sr, sig, "se=-1", skn), "not a decimal"},
		{"se plus", join(sr, sig, "se=+1900000000", skn), "not a decimal"},
		{"se float", join(sr, sig, "se=1900000000.5", skn), "not a decimal"},
		{"se hex", join(sr, sig, "se=0x71", skn), "not a decimal"},
		{"se escaped", join(sr, sig, "se=%31900000000", skn), "not a decimal"},
		{"se overflow", join(sr, sig, "se=99999999999999999999", skn), "out of range"},
		{"se empty", join(sr, sig, "se=", skn), "field \"se\" is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.token)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) = %v, want ErrMalformed containing %q", tc.token, err, tc.want)
			}
			_, _, verr := Verify(tc.token, vectorKeys(t), beforeExpiry)
			if !errors.Is(verr, ErrMalformed) {
				t.Errorf("Verify = %v", verr)
			}
			if got := Description(verr); !strings.HasPrefix(got, "InvalidToken:") {
				t.Errorf("Description = %q", got)
			}
		})
	}
}

func TestDescriptionNil(t *testing.T) {
	if Description(nil) != "" {
		t.Error("Description(nil) not empty")
	}
}
