package peer

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

func marshal(t testing.TB, m *pb.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func heartbeat(from, to, commit uint64) *pb.Message {
	return &pb.Message{Type: pb.MessageType_MsgHeartbeat.Enum(), From: proto.Uint64(from), To: proto.Uint64(to),
		Term: proto.Uint64(3), Commit: proto.Uint64(commit)}
}

func frame(t frameType, payload []byte) []byte {
	return append(appendHeader(nil, t, len(payload)), payload...)
}

// wireSeeds are one of each frame, well formed.
func wireSeeds(t testing.TB) [][]byte {
	msgs := appendMessages(nil, []item{
		{group: 7, data: marshal(t, heartbeat(1, 2, 5))},
		{group: 7, data: marshal(t, heartbeat(1, 2, 6))},
		{group: 9, data: nil},
		{group: 7, data: marshal(t, heartbeat(1, 2, 7))},
	})
	snap := marshal(t, &pb.Message{Type: pb.MessageType_MsgSnap.Enum(), To: proto.Uint64(2),
		Snapshot: &pb.Snapshot{Data: []byte("state"), Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(4), Term: proto.Uint64(2)}}})
	crc := crc32.Checksum(snap, castagnoli)
	first := appendChunk(nil, chunk{group: 3, transfer: 1, total: uint64(len(snap)), offset: 0, crc: crc, data: snap[:10]})
	rest := appendChunk(nil, chunk{group: 3, transfer: 1, total: uint64(len(snap)), offset: 10, crc: crc, data: snap[10:]})
	return [][]byte{
		frame(frameMessages, msgs),
		append(frame(frameChunk, first), frame(frameChunk, rest)...),
		frame(frameAck, appendAck(nil, ack{group: 3, transfer: 1})),
		frame(frameMessages, nil),
		appendHeader(nil, frameChunk, maxPayload+1),
		appendHeader(nil, frameMessages, maxPayload), // a length that lies
		[]byte("GET / HTTP/1.1\r\n\r\n"),
	}
}

func TestMessagesRoundTrip(t *testing.T) {
	items := []item{{1, []byte("a")}, {1, []byte("bc")}, {2, nil}, {1, []byte("d")}}
	p := appendMessages(nil, items)
	got, err := decodeMessages(nil, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(items) {
		t.Fatalf("%d items, want %d", len(got), len(items))
	}
	for i := range items {
		if got[i].group != items[i].group || !bytes.Equal(got[i].data, items[i].data) {
			t.Fatalf("item %d is %v, want %v", i, got[i], items[i])
		}
	}
	// Three runs: 1 (two messages), 2, 1.
	if want := 3*runHeader + 4*msgHeader + 4; len(p) != want {
		t.Fatalf("payload of %d bytes, want %d", len(p), want)
	}
}

func TestDecodeRefuses(t *testing.T) {
	two := appendMessages(appendMessages(nil, []item{{5, []byte("x")}}), []item{{5, []byte("y")}})
	for name, p := range map[string][]byte{
		"empty":          nil,
		"short run":      make([]byte, runHeader-1),
		"empty run":      make([]byte, runHeader),
		"same group":     two,
		"message past":   append(appendMessages(nil, []item{{1, []byte("abc")}})[:runHeader+msgHeader], 'a'),
		"header cut":     appendMessages(nil, []item{{1, []byte("abc")}})[:runHeader+2],
		"trailing bytes": append(appendMessages(nil, []item{{1, []byte("abc")}}), 1),
	} {
		if _, err := decodeMessages(nil, p); !errors.Is(err, errProtocol) {
			t.Errorf("%s: %v, want a protocol error", name, err)
		}
	}
	for name, c := range map[string]chunk{
		"past the end": {total: 5, offset: 3, data: []byte("abc")},
		"offset past":  {total: 5, offset: 6, data: []byte("a")},
		"no data":      {total: 5},
		"wraps":        {total: 1<<64 - 1, offset: 1<<64 - 2, data: []byte("abc")},
	} {
		if _, err := decodeChunk(appendChunk(nil, c)); !errors.Is(err, errProtocol) {
			t.Errorf("chunk %s: %v, want a protocol error", name, err)
		}
	}
	if _, err := decodeAck(make([]byte, ackSize+1)); !errors.Is(err, errProtocol) {
		t.Errorf("long ack: %v", err)
	}
}

func TestHelloRoundTrip(t *testing.T) {
	h := hello{cluster: "prod-west", from: 1, to: 1<<64 - 1}
	b := appendHello(nil, h)
	got, err := readHello(bytes.NewReader(b))
	if err != nil || got != h {
		t.Fatalf("read %+v, %v; want %+v", got, err, h)
	}
	bad := append([]byte(nil), b...)
	bad[5] = 2 // version 2
	if _, err := readHello(bytes.NewReader(bad)); !errors.Is(err, errProtocol) {
		t.Fatalf("version 2: %v", err)
	}
	if _, err := readHello(bytes.NewReader(b[:len(b)-1])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut short: %v", err)
	}
}

// FuzzReadFrame reads frames from arbitrary bytes and decodes their
// payloads: nothing panics, the buffer grows only with the bytes that
// came, and a frame that decodes encodes back to the same bytes (the
// format has one form).
func FuzzReadFrame(f *testing.F) {
	for _, s := range wireSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		fr := frameReader{r: r}
		for {
			before := len(data) - r.Len()
			typ, payload, err := fr.next()
			if limit := 2*len(data) + readStep; cap(fr.buf) > limit {
				t.Fatalf("buffer of %d bytes from %d bytes of input", cap(fr.buf), len(data))
			}
			if err != nil {
				return
			}
			raw := data[before : len(data)-r.Len()]
			if again := frame(typ, payload); !bytes.Equal(again, raw) {
				t.Fatalf("frame encodes as %x, read from %x", again, raw)
			}
			switch typ {
			case frameMessages:
				items, err := decodeMessages(nil, payload)
				if err != nil {
					continue
				}
				if again := appendMessages(nil, items); !bytes.Equal(again, payload) {
					t.Fatalf("messages encode as %x, read from %x", again, payload)
				}
				for _, it := range items {
					var m pb.Message
					_ = proto.Unmarshal(it.data, &m)
				}
			case frameChunk:
				c, err := decodeChunk(payload)
				if err != nil {
					continue
				}
				if again := appendChunk(nil, c); !bytes.Equal(again, payload) {
					t.Fatalf("chunk encodes as %x, read from %x", again, payload)
				}
			case frameAck:
				a, err := decodeAck(payload)
				if err != nil {
					continue
				}
				if again := appendAck(nil, a); !bytes.Equal(again, payload) {
					t.Fatalf("ack encodes as %x, read from %x", again, payload)
				}
			default:
				t.Fatalf("next returned %s", typ)
			}
		}
	})
}

// FuzzReadHello: a hello that reads encodes back to the bytes it was
// read from.
func FuzzReadHello(f *testing.F) {
	f.Add(appendHello(nil, hello{cluster: "c", from: 1, to: 2}))
	f.Add(appendHello(nil, hello{}))
	f.Add([]byte("WBRP\x00\x01"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		h, err := readHello(r)
		if err != nil {
			return
		}
		if again := appendHello(nil, h); !bytes.Equal(again, data[:len(data)-r.Len()]) {
			t.Fatalf("hello encodes as %x, read from %x", again, data)
		}
	})
}

// FuzzInbound runs what a connection carries after its handshake through
// the receiver: frames, message decoding, snapshot reassembly. Nothing
// panics, and memory stays within the snapshot bound.
func FuzzInbound(f *testing.F) {
	for _, s := range wireSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr := &Transport{cfg: Config{MaxSnapshot: 1 << 20, Deliver: func(group uint64, m *pb.Message) {
			if m == nil {
				t.Fatal("nil message delivered")
			}
		}}}
		in := &inbound{t: tr, conn: discardConn{}}
		err := in.loop(&frameReader{r: bytes.NewReader(data)})
		if err == nil {
			t.Fatal("loop ended without an error")
		}
		if in.snap != nil && cap(in.snap.data) > 2<<20 {
			t.Fatalf("a transfer holds %d bytes", cap(in.snap.data))
		}
	})
}

// discardConn takes the acks a receiver writes.
type discardConn struct{ net.Conn }

func (discardConn) Write(b []byte) (int, error)      { return len(b), nil }
func (discardConn) SetWriteDeadline(time.Time) error { return nil }
func (discardConn) Close() error                     { return nil }
