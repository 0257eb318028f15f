package frames

import (
	"bytes"
	"testing"

	"github.com/walbus/walbus/amqpserver/internal/hexbytes"
)

// FuzzParseFrame feeds arbitrary bytes through the frame header and
// performative decoders. Nothing may panic, and any performative that
// decodes must re-encode to bytes that decode to the same value.
func FuzzParseFrame(f *testing.F) {
	for _, ex := range appendix {
		f.Add(hexbytes.Parse(f, ex.hex))
	}
	for _, p := range full() {
		f.Add(AppendFrame(nil, TypeAMQP, 0, p, []byte{1, 2}))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_, body, err := ParseFrame(data)
		if err != nil {
			body = data // still exercise the body decoders
		}
		p, _, err := ParseBody(body)
		if err != nil {
			return
		}
		enc := p.AppendTo(nil)
		p2, rest, err := ParseBody(enc)
		if err != nil || len(rest) != 0 {
			t.Fatalf("%T re-encoded to undecodable bytes: %v\n% x", p, err, enc)
		}
		if enc2 := p2.AppendTo(nil); !bytes.Equal(enc, enc2) {
			t.Fatalf("%T encoding unstable:\n% x\n% x", p, enc, enc2)
		}
	})
}
