package peer

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"slices"
	"strings"
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
	first, rest := chunkFrames(frameSnapshotChunk, 3, 1, snap, 10)
	app := marshal(t, appendMsg(1, 2, 5, 40))
	appFirst, appRest := chunkFrames(frameMessageChunk, 4, 2, app, 17)
	return [][]byte{
		frame(frameMessages, msgs),
		append(first, rest...),
		frame(frameAck, appendAck(nil, ack{group: 3, transfer: 1})),
		// A large message's chunks with messages between, then a
		// snapshot's.
		slices.Concat(appFirst, frame(frameMessages, msgs), appRest, first, rest),
		// A message chunk inside a snapshot's transfer, a MsgApp sent as
		// a snapshot, and a transfer number that does not rise.
		append(first, appRest...),
		slices.Concat(chunkFrames(frameSnapshotChunk, 4, 2, app, 17)),
		slices.Concat(appFirst, appRest, first, rest),
		frame(frameMessages, nil),
		appendHeader(nil, frameSnapshotChunk, maxPayload+1),
		appendHeader(nil, frameMessages, maxPayload), // a length that lies
		[]byte("GET / HTTP/1.1\r\n\r\n"),
	}
}

// chunkFrames cuts data into the two chunk frames of one transfer, at.
func chunkFrames(kind frameType, group, transfer uint64, data []byte, at int) (first, rest []byte) {
	c := chunk{group: group, transfer: transfer, total: uint64(len(data)), crc: crc32.Checksum(data, castagnoli)}
	c.data = data[:at]
	first = frame(kind, appendChunk(nil, c))
	c.offset, c.data = uint64(at), data[at:]
	return first, frame(kind, appendChunk(nil, c))
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

// TestReassemblerRefuses: what a sender's transfers may not do, each
// after a good start where it needs one.
func TestReassemblerRefuses(t *testing.T) {
	data := []byte("a message of some forty bytes, marshalled")
	crc := crc32.Checksum(data, castagnoli)
	at := func(transfer, offset uint64, n int) chunk {
		return chunk{group: 7, transfer: transfer, total: uint64(len(data)), offset: offset, crc: crc,
			data: data[offset : offset+uint64(n)]}
	}
	type step struct {
		kind frameType
		c    chunk
	}
	for name, steps := range map[string][]step{
		"no transfer begun":    {{frameMessageChunk, at(1, 10, 5)}},
		"over the limit":       {{frameMessageChunk, chunk{group: 7, transfer: 1, total: 1 << 20, data: []byte("x")}}},
		"another kind":         {{frameMessageChunk, at(1, 0, 10)}, {frameSnapshotChunk, at(1, 10, 5)}},
		"another transfer":     {{frameMessageChunk, at(1, 0, 10)}, {frameMessageChunk, at(2, 10, 5)}},
		"begun again":          {{frameMessageChunk, at(1, 0, 10)}, {frameMessageChunk, at(2, 0, 10)}},
		"a gap":                {{frameMessageChunk, at(1, 0, 10)}, {frameMessageChunk, at(1, 11, 5)}},
		"a number not rising":  {{frameMessageChunk, at(2, 0, len(data))}, {frameMessageChunk, at(2, 0, len(data))}},
		"a number going back":  {{frameMessageChunk, at(2, 0, len(data))}, {frameSnapshotChunk, at(1, 0, len(data))}},
		"another CRC midway":   {{frameMessageChunk, at(1, 0, 10)}, {frameMessageChunk, func() chunk { c := at(1, 10, 5); c.crc++; return c }()}},
		"a CRC that is wrong":  {{frameMessageChunk, func() chunk { c := at(1, 0, len(data)); c.crc++; return c }()}},
		"another total midway": {{frameMessageChunk, at(1, 0, 10)}, {frameMessageChunk, func() chunk { c := at(1, 10, 5); c.total++; return c }()}},
	} {
		var r reassembler
		var err error
		for i, s := range steps {
			var a *assembly
			a, err = r.add(s.kind, s.c, 100)
			if i < len(steps)-1 && err != nil {
				t.Fatalf("%s: step %d: %v", name, i, err)
			}
			if a != nil && i == len(steps)-1 {
				t.Fatalf("%s: a transfer came out", name)
			}
		}
		if !errors.Is(err, errProtocol) {
			t.Errorf("%s: %v, want a protocol error", name, err)
		}
	}
	var r reassembler
	for i, kind := range []frameType{frameMessageChunk, frameSnapshotChunk, frameMessageChunk} {
		transfer := uint64(3 * (i + 1)) // rising, not by one
		if a, err := r.add(kind, at(transfer, 0, 20), 100); a != nil || err != nil {
			t.Fatalf("transfer %d, first chunk: %v, %v", transfer, a, err)
		}
		a, err := r.add(kind, at(transfer, 20, len(data)-20), 100)
		if err != nil || a == nil || !bytes.Equal(a.data, data) || a.kind != kind || cap(a.data) != len(data) {
			t.Fatalf("transfer %d: %+v, %v", transfer, a, err)
		}
	}
}

func TestHelloRoundTrip(t *testing.T) {
	for _, h := range []hello{
		{cluster: "prod-west", from: 1, to: 1<<64 - 1, advertise: "https://10.0.0.5:5300"},
		{from: 2, to: 3},
		{cluster: strings.Repeat("c", maxClusterName), from: 4, to: 5, advertise: strings.Repeat("a", MaxAdvertise)},
	} {
		b := appendHello(nil, h)
		if len(b) != h.size() {
			t.Fatalf("%+v: %d bytes, size says %d", h, len(b), h.size())
		}
		r := bytes.NewReader(append(b, "after"...))
		got, err := readHello(r)
		if err != nil || got != h {
			t.Fatalf("read %+v, %v; want %+v", got, err, h)
		}
		if r.Len() != len("after") {
			t.Fatalf("%+v: read %d bytes past the hello", h, len("after")-r.Len())
		}
	}
	b := appendHello(nil, hello{cluster: "prod-west", from: 1, to: 2, advertise: "http://a"})
	for _, v := range []byte{1, 2} { // without message chunks; without the advertise field
		bad := append([]byte(nil), b...)
		bad[5] = v
		if _, err := readHello(bytes.NewReader(bad)); !errors.Is(err, errProtocol) {
			t.Fatalf("version %d: %v", v, err)
		}
	}
	for _, n := range []int{len(b) - 1, len(b) - len("http://a") - 1, helloFixed + 3} {
		if _, err := readHello(bytes.NewReader(b[:n])); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut short at %d of %d bytes: %v", n, len(b), err)
		}
	}
}

// TestHelloRefusesLongAdvertise: an advertise length over MaxAdvertise is
// refused from the length alone, and New refuses to send one.
func TestHelloRefusesLongAdvertise(t *testing.T) {
	long := appendHello(nil, hello{cluster: "c", from: 1, to: 2, advertise: strings.Repeat("a", MaxAdvertise+1)})
	at := helloFixed + len("c")
	if _, err := readHello(bytes.NewReader(long[:at+advertiseLength])); !errors.Is(err, errProtocol) {
		t.Fatalf("an advertise field of %d bytes: %v, want a protocol error", MaxAdvertise+1, err)
	}
	tr, err := New(Config{ID: 1, Listen: "127.0.0.1:0", Deliver: func(uint64, *pb.Message) {},
		Advertise: strings.Repeat("a", MaxAdvertise+1)})
	if err == nil {
		tr.Close()
		t.Fatal("New took an advertise field over the most")
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
			case frameSnapshotChunk, frameMessageChunk:
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
	f.Add(appendHello(nil, hello{cluster: "c", from: 1, to: 2, advertise: "http://127.0.0.1:5300"}))
	f.Add(appendHello(nil, hello{cluster: "c", from: 1, to: 2, advertise: strings.Repeat("a", MaxAdvertise)}))
	f.Add(appendHello(nil, hello{cluster: "c", from: 1, to: 2, advertise: strings.Repeat("a", MaxAdvertise+1)}))
	f.Add(appendHello(nil, hello{cluster: "c", from: 1, to: 2, advertise: "http://a"})[:helloFixed+3])
	f.Add([]byte("WBRP\x00\x01"))
	f.Add([]byte("WBRP\x00\x02"))
	f.Add([]byte("WBRP\x00\x03"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		h, err := readHello(r)
		if err != nil {
			return
		}
		if len(h.cluster) > maxClusterName || len(h.advertise) > MaxAdvertise {
			t.Fatalf("read a hello of a %d-byte cluster name, %d bytes advertised", len(h.cluster), len(h.advertise))
		}
		if again := appendHello(nil, h); !bytes.Equal(again, data[:len(data)-r.Len()]) {
			t.Fatalf("hello encodes as %x, read from %x", again, data)
		}
	})
}

// FuzzInbound runs what a connection carries after its handshake through
// the receiver: frames, message decoding, reassembly of transfers.
// Nothing panics, memory stays within the transfer bound, and what comes
// in chunks is delivered as the kind of chunk it came in says.
func FuzzInbound(f *testing.F) {
	for _, s := range wireSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr := &Transport{cfg: Config{MaxTransfer: 1 << 20, Deliver: func(group uint64, m *pb.Message) {
			if m == nil {
				t.Fatal("nil message delivered")
			}
		}}}
		in := &inbound{t: tr, conn: discardConn{}}
		err := in.loop(&frameReader{r: bytes.NewReader(data)})
		if err == nil {
			t.Fatal("loop ended without an error")
		}
		if a := in.transfers.cur; a != nil && uint64(cap(a.data)) > a.total {
			t.Fatalf("a transfer of %d bytes holds %d", a.total, cap(a.data))
		}
	})
}

// FuzzReassemble feeds the chunk frames among arbitrary bytes to a
// reassembler, checked against a model that keeps each transfer's chunks
// as they were accepted: a transfer comes out once, when its last chunk
// comes, equal to its chunks end to end, its CRC good, its numbers rising,
// its buffer no bigger than its total.
func FuzzReassemble(f *testing.F) {
	for _, s := range wireSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1 << 20
		var r reassembler
		var model []byte // the transfer under way, as accepted so far
		var last uint64
		fr := frameReader{r: bytes.NewReader(data)}
		for {
			typ, payload, err := fr.next()
			if err != nil {
				return
			}
			if typ != frameSnapshotChunk && typ != frameMessageChunk {
				continue
			}
			c, err := decodeChunk(payload)
			if err != nil {
				continue
			}
			a, err := r.add(typ, c, limit)
			if err != nil {
				return // the connection closes
			}
			if c.offset == 0 {
				model = nil
			}
			model = append(model, c.data...)
			if a == nil {
				if cur := r.cur; cur == nil || uint64(cap(cur.data)) > cur.total || !bytes.Equal(cur.data, model) {
					t.Fatal("the transfer under way is not what came")
				}
				continue
			}
			switch {
			case r.cur != nil:
				t.Fatal("a transfer came out and stays under way")
			case !bytes.Equal(a.data, model) || uint64(len(a.data)) != a.total || uint64(cap(a.data)) != a.total:
				t.Fatalf("transfer %d: %d bytes of %d (capacity %d), not what came", a.transfer, len(a.data), a.total, cap(a.data))
			case crc32.Checksum(a.data, castagnoli) != a.crc:
				t.Fatalf("transfer %d came out with a bad CRC", a.transfer)
			case a.transfer <= last || a.kind != typ || a.total > limit:
				t.Fatalf("transfer %d (%s, %d bytes) after %d", a.transfer, a.kind, a.total, last)
			}
			last, model = a.transfer, nil
		}
	})
}

// discardConn takes the acks a receiver writes.
type discardConn struct{ net.Conn }

func (discardConn) Write(b []byte) (int, error)      { return len(b), nil }
func (discardConn) SetWriteDeadline(time.Time) error { return nil }
func (discardConn) Close() error                     { return nil }
