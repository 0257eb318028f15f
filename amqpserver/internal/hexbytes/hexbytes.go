// Package hexbytes writes and reads bytes as spaced hex, the way the AMQP
// specification and our wire notes show frames; for tests.
package hexbytes

import (
	"encoding/hex"
	"strings"
	"testing"
)

// Parse turns "00 53 10" into bytes; spaces, '|', newlines and tabs are
// ignored. Bad hex fails the test.
func Parse(t testing.TB, s string) []byte {
	t.Helper()
	s = strings.NewReplacer(" ", "", "|", "", "\n", "", "\t", "").Replace(s)
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad hex %q: %v", s, err)
	}
	return b
}

// Spaced writes b as upper-case hex bytes separated by spaces: "00 53 10".
func Spaced(b []byte) string {
	var sb strings.Builder
	for i, c := range b {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(strings.ToUpper(hex.EncodeToString([]byte{c})))
	}
	return sb.String()
}
