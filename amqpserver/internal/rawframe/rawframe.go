// Package rawframe reads AMQP frames one at a time from a stream, for the
// test clients that speak AMQP frame by frame (what go-amqp cannot be made
// to do: malformed input, silence, rhea's habits).
package rawframe

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/walbus/walbus/amqpserver/frames"
)

// Frame is one frame read back; P is nil for an empty frame (a heartbeat).
type Frame struct {
	H       frames.Header
	P       frames.Performative
	Payload []byte
}

// ErrMalformed marks a frame that was read whole but does not parse; any
// other error is the stream's.
var ErrMalformed = errors.New("malformed frame")

// Read reads the next frame from r.
func Read(r io.Reader) (Frame, error) {
	var hdr [frames.HeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return Frame{}, err
	}
	h, err := frames.ParseHeader(hdr[:])
	if err != nil {
		return Frame{}, fmt.Errorf("%w: header: %v", ErrMalformed, err)
	}
	rest := make([]byte, h.Size-frames.HeaderSize)
	if _, err := io.ReadFull(r, rest); err != nil {
		return Frame{}, err
	}
	body := rest[h.BodyOffset()-frames.HeaderSize:]
	if len(body) == 0 {
		return Frame{H: h}, nil
	}
	p, payload, err := frames.ParseBody(body)
	if err != nil {
		return Frame{}, fmt.Errorf("%w: body: %v", ErrMalformed, err)
	}
	return Frame{h, p, payload}, nil
}

// Dial connects a test client to addr, closed when the test ends, with
// every read and write bounded by deadline from now.
func Dial(t testing.TB, addr string, deadline time.Duration) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(deadline))
	return nc, bufio.NewReader(nc)
}
