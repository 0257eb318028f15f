package sas

import (
	"encoding/base64"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Style selects how Sign encodes the token, mimicking one SDK.
type Style uint8

const (
	// GoStyle is azservicebus: sr = lower(url.QueryEscape(audience)) (hex
	// escapes lowercased too), sig query-escaped, skn written verbatim. A key
	// name containing '&', '=', '%', '+' or whitespace therefore yields a token
	// that does not parse, as it would from the SDK.
	GoStyle Style = iota
	// JSStyle is @azure/core-amqp: encodeURIComponent on sr, sig and skn, with
	// no lowercasing.
	JSStyle
)

// Sign makes a token for audience, valid until expiry (truncated to whole
// seconds), in the field order both SDKs use: sr, sig, se, skn. An expiry
// before 1970 gives a negative se, which Parse rejects.
func Sign(audience string, key Key, expiry time.Time, style Style) string {
	var resource, keyName string
	escapeSig := url.QueryEscape
	if style == JSStyle {
		resource, keyName = encodeURIComponent(audience), encodeURIComponent(key.Name)
		escapeSig = encodeURIComponent
	} else {
		resource, keyName = strings.ToLower(url.QueryEscape(audience)), key.Name
	}
	se := strconv.FormatInt(expiry.Unix(), 10)
	sig := base64.StdEncoding.EncodeToString(signature(key.Value, resource, se))
	return tokenPrefix + " sr=" + resource + "&sig=" + escapeSig(sig) + "&se=" + se + "&skn=" + keyName
}

// encodeURIComponent escapes like JavaScript's function of that name: every
// byte except ASCII letters, digits and -_.!~*'() becomes %XX, uppercase hex.
// (JavaScript throws on lone surrogates; Go strings have no such thing, and
// invalid UTF-8 bytes are simply escaped.)
func encodeURIComponent(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) * 3)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if jsUnreserved(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&0xf])
	}
	return b.String()
}

func jsUnreserved(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-_.!~*'()", c) >= 0
}
