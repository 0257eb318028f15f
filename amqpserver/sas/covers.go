package sas

import "strings"

// Schemes stripped before comparing audiences. Go clients sign amqp:// or
// amqps:// audiences, JS clients sb://, a SAS placed in a connection string
// has no scheme at all (sr is the namespace host), and management tools use
// http(s)://.
var audienceSchemes = [...]string{"sb://", "amqp://", "amqps://", "https://", "http://"}

// Covers reports whether the token's audience authorises the requested
// audience (the put-token "name", or an entity address built the same way).
//
// Both sides lose their scheme; then the token's audience, without trailing
// slashes, must be a case-insensitive prefix of the requested one that ends
// at a path boundary: "host/q1" covers "host/q1" and "host/q1/$management"
// but not "host/q10", and a namespace-wide "host" covers every entity on that
// host. Case is folded over ASCII only, which is exactly what a Go client's
// lowercasing of the encoded sr changes.
//
// The host is compared with its port, exactly: a client signs and requests
// with audiences built from the same endpoint, so they agree on the port
// (Go keeps the endpoint's port in both, JS in both if the connection string
// had one). Treating "host" and "host:5672" as equal would need a per-scheme
// default port and gains nothing for a token used as intended.
//
// A requested audience with a "." or ".." path segment is never covered, so
// a later path clean-up cannot turn "host/q1/../q2" into a queue the token
// does not name. Callers must not unescape or otherwise normalise the
// requested audience after this check.
func Covers(tok Token, requested string) bool {
	granted := strings.TrimRight(stripScheme(tok.Audience), "/")
	requested = stripScheme(requested)
	if granted == "" || len(requested) < len(granted) {
		return false
	}
	if !asciiEqualFold(requested[:len(granted)], granted) {
		return false
	}
	if len(requested) > len(granted) && requested[len(granted)] != '/' {
		return false
	}
	return !hasDotSegment(requested)
}

// StripScheme drops the scheme Covers ignores from the front of an
// audience; one anywhere else stays part of the path.
func StripScheme(audience string) string { return stripScheme(audience) }

func stripScheme(audience string) string {
	for _, scheme := range audienceSchemes {
		if len(audience) >= len(scheme) && asciiEqualFold(audience[:len(scheme)], scheme) {
			return audience[len(scheme):]
		}
	}
	return audience
}

func hasDotSegment(path string) bool {
	for segment := range strings.SplitSeq(path, "/") {
		if segment == "." || segment == ".." {
			return true
		}
	}
	return false
}
