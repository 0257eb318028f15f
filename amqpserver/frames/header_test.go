package frames

import (
	"errors"
	"testing"

	"github.com/walbus/walbus/amqpserver/internal/hexbytes"
)

func TestParseHeader(t *testing.T) {
	h, err := ParseHeader(hexbytes.Parse(t, "00 00 01 00 02 00 00 07"))
	if err != nil || h != (Header{Size: 256, DataOffset: 2, Type: TypeAMQP, Channel: 7}) {
		t.Fatalf("%+v %v", h, err)
	}
	if h.BodyOffset() != 8 || h.BodySize() != 248 || h.IsEmpty() {
		t.Fatalf("body %d %d", h.BodyOffset(), h.BodySize())
	}
	for _, bad := range []string{
		"00 00 00 07 02 00 00 00", // size below 8
		"00 00 00 08 01 00 00 00", // data offset below 2
		"00 00 00 08 03 00 00 00", // body would start past the frame
		"00 00 00 08 02 02 00 00", // frame type 2 is undefined
		"00 00 00 08 02 00 00",    // short
	} {
		if _, err := ParseHeader(hexbytes.Parse(t, bad)); !errors.Is(err, ErrMalformedFrame) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func TestExtendedHeaderIsSkipped(t *testing.T) {
	// DOFF 3: four bytes of extended header before the close body.
	frame := hexbytes.Parse(t, "00 00 00 10 03 00 00 00 | DE AD BE EF | 00 53 18 45")
	h, body, err := ParseFrame(frame)
	if err != nil || h.BodyOffset() != 12 {
		t.Fatalf("%+v %v", h, err)
	}
	p, _, err := ParseBody(body)
	if _, ok := p.(*Close); err != nil || !ok {
		t.Fatalf("%#v %v", p, err)
	}
}

func TestParseFrameNeedsWholeFrame(t *testing.T) {
	if _, _, err := ParseFrame(hexbytes.Parse(t, "00 00 00 0C 02 00 00 00 00 53")); !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("got %v", err)
	}
}

func TestProtocolHeaders(t *testing.T) {
	for _, c := range []struct {
		id   ProtocolID
		want string
	}{{ProtocolAMQP, "41 4D 51 50 00 01 00 00"}, {ProtocolTLS, "41 4D 51 50 02 01 00 00"}, {ProtocolSASL, "41 4D 51 50 03 01 00 00"}} {
		b := AppendProtocolHeader(nil, c.id)
		if hexbytes.Spaced(b) != c.want {
			t.Errorf("%d: %s", c.id, hexbytes.Spaced(b))
		}
		p, err := ParseProtocolHeader(b)
		if err != nil || p.ID != c.id || !p.Supported() {
			t.Errorf("%d: %+v %v", c.id, p, err)
		}
	}
	p, err := ParseProtocolHeader([]byte("AMQP\x00\x02\x00\x00"))
	if err != nil || p.Supported() {
		t.Fatalf("version 2.0.0 should parse but be unsupported: %+v %v", p, err)
	}
	if _, err := ParseProtocolHeader([]byte("HTTP/1.1")); !errors.Is(err, ErrProtocolHeader) {
		t.Fatalf("HTTP accepted: %v", err)
	}
}
