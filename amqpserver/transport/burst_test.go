package transport

import (
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/walbus/walbus/amqpserver/frames"
)

// A burst of output far larger than the socket takes, produced on the
// reader's goroutine (credit arrives, the handler sends at once), to a
// client that reads only later: every transfer arrives whole and in order.
func TestBurstLargerThanTheSocketArrivesInOrder(t *testing.T) {
	const n, size = 300, 32 << 10
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	if tc, ok := r.nc.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(32 << 10) // a small window: the server's writes back up
	}
	r.open(frames.Open{})
	r.begin(0)
	r.attachReceiver(0, 0, "r", frames.ReceiverSettleFirst)
	o := ts.h.nextOut(t)
	o.settled = true
	payloads := make([][]byte, n)
	for i := range payloads {
		p := make([]byte, size)
		for j := range p {
			p[j] = byte(i + j)
		}
		binary.BigEndian.PutUint32(p, uint32(i))
		payloads[i] = p
	}
	o.push(payloads...) // no credit yet: they wait

	r.send(0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 5000, OutgoingWindow: 100,
		Handle: frames.Some[uint32](0), DeliveryCount: frames.Some[uint32](0), LinkCredit: frames.Some[uint32](n)}, nil)
	time.Sleep(200 * time.Millisecond) // not reading: let the socket fill up
	for i := range n {
		f := r.next()
		if _, ok := f.p.(*frames.Transfer); !ok {
			t.Fatalf("frame %d is %T, want a transfer", i, f.p)
		}
		if got := binary.BigEndian.Uint32(f.payload); got != uint32(i) || len(f.payload) != size {
			t.Fatalf("transfer %d carries message %d (%d bytes)", i, got, len(f.payload))
		}
		for j := 4; j < size; j++ {
			if f.payload[j] != byte(i+j) {
				t.Fatalf("transfer %d corrupted at byte %d", i, j)
			}
		}
	}
}
