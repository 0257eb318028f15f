package peer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// The wire format, as the package comment describes it. Everything here is
// pure: it encodes to and decodes from bytes, and the connections' code
// does the IO.

const (
	magic = "WBRP" // walbus Raft peer
	// version 3 added the hello's advertise field, version 2 message
	// chunks (type 4). A node refuses a hello of another version, so
	// nodes of different versions do not talk.
	version = 3

	// helloFixed is a hello's size before the cluster name: magic,
	// version, sender, receiver, the name's length.
	helloFixed     = 4 + 2 + 8 + 8 + 1
	maxClusterName = 255
	// advertiseLength is the size of the advertise field's length,
	// after the cluster name; MaxAdvertise bounds the field.
	advertiseLength = 2

	headerSize = 4 + 1 // payload length, frame type
	// maxPayload bounds every frame: a reader allocates no more than
	// this for one, whatever a length claims.
	maxPayload = 4 << 20

	runHeader   = 8 + 4 // group, count
	msgHeader   = 4     // a message's length
	chunkHeader = 8 + 8 + 8 + 8 + 4
	ackSize     = 8 + 8

	// maxMessage is the largest marshalled message a messages frame
	// holds alone.
	maxMessage = maxPayload - runHeader - msgHeader

	// chunkSize is how much of a transfer goes in one frame: small enough
	// that a heartbeat queued behind a chunk waits little.
	chunkSize = 256 << 10

	// readStep is how far a frame's buffer grows at a time while its
	// payload arrives, so that a length that lies costs only the bytes
	// that really came.
	readStep = 64 << 10
)

// frameType is a frame's second field.
type frameType uint8

const (
	frameMessages      frameType = 1 // sender to receiver: runs of Raft messages
	frameSnapshotChunk frameType = 2 // sender to receiver: a piece of a MsgSnap
	frameAck           frameType = 3 // receiver to sender: a MsgSnap arrived whole
	frameMessageChunk  frameType = 4 // sender to receiver: a piece of another message too big for a frame
)

func (t frameType) String() string {
	switch t {
	case frameMessages:
		return "messages"
	case frameSnapshotChunk:
		return "snapshot chunk"
	case frameAck:
		return "snapshot ack"
	case frameMessageChunk:
		return "message chunk"
	}
	return fmt.Sprintf("frame type %d", uint8(t))
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errProtocol is wrapped by every decoding failure: the connection that
// sent it is closed.
var errProtocol = errors.New("peer protocol")

func protocolErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errProtocol, fmt.Sprintf(format, args...))
}

// hello opens a connection, one from each end: the dialler's names itself
// and the node it means to reach; the acceptor's answer names the same two
// the other way round. Each carries what its sender advertises of itself
// (Config.Advertise).
type hello struct {
	cluster   string
	from, to  uint64
	advertise string
}

// size is the hello's length on the wire.
func (h hello) size() int {
	return helloFixed + len(h.cluster) + advertiseLength + len(h.advertise)
}

// appendHello appends h. Its cluster name and advertise field must be
// within maxClusterName and MaxAdvertise (New checks them).
func appendHello(dst []byte, h hello) []byte {
	dst = append(dst, magic...)
	dst = binary.BigEndian.AppendUint16(dst, version)
	dst = binary.BigEndian.AppendUint64(dst, h.from)
	dst = binary.BigEndian.AppendUint64(dst, h.to)
	dst = append(dst, byte(len(h.cluster)))
	dst = append(dst, h.cluster...)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(h.advertise)))
	return append(dst, h.advertise...)
}

// readHello reads a hello. It reads the fixed part first and checks the
// magic and version before anything else, so that a stray client (an HTTP
// request, a port scanner) is refused after a few bytes, and it refuses
// an advertise length over MaxAdvertise before reading the field.
func readHello(r io.Reader) (hello, error) {
	var b [helloFixed + maxClusterName + advertiseLength + MaxAdvertise]byte
	if _, err := io.ReadFull(r, b[:helloFixed]); err != nil {
		return hello{}, fmt.Errorf("read hello: %w", err)
	}
	if string(b[:4]) != magic {
		return hello{}, protocolErr("not a peer connection (magic %q)", b[:4])
	}
	if v := binary.BigEndian.Uint16(b[4:6]); v != version {
		return hello{}, protocolErr("protocol version %d, want %d", v, version)
	}
	h := hello{from: binary.BigEndian.Uint64(b[6:14]), to: binary.BigEndian.Uint64(b[14:22])}
	end := helloFixed + int(b[22]) + advertiseLength
	if _, err := io.ReadFull(r, b[helloFixed:end]); err != nil {
		return hello{}, fmt.Errorf("read hello: %w", err)
	}
	h.cluster = string(b[helloFixed : end-advertiseLength])
	n := int(binary.BigEndian.Uint16(b[end-advertiseLength : end]))
	if n > MaxAdvertise {
		return hello{}, protocolErr("node %d advertises %d bytes, the most is %d", h.from, n, MaxAdvertise)
	}
	if _, err := io.ReadFull(r, b[end:end+n]); err != nil {
		return hello{}, fmt.Errorf("read hello: %w", err)
	}
	h.advertise = string(b[end : end+n])
	return h, nil
}

func appendHeader(dst []byte, t frameType, n int) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(n))
	return append(dst, byte(t))
}

// frameReader reads frames from a connection, reusing one buffer: a
// payload it returns is valid until the next call.
type frameReader struct {
	r   io.Reader
	buf []byte
}

// next reads one frame. A length over maxPayload or an unknown type is
// refused before any of the payload is read.
func (fr *frameReader) next() (frameType, []byte, error) {
	var h [headerSize]byte
	if _, err := io.ReadFull(fr.r, h[:]); err != nil {
		return 0, nil, err
	}
	n, t := binary.BigEndian.Uint32(h[:4]), frameType(h[4])
	if n > maxPayload {
		return 0, nil, protocolErr("%s frame of %d bytes, the most is %d", t, n, maxPayload)
	}
	if t < frameMessages || t > frameMessageChunk {
		return 0, nil, protocolErr("unknown %s", t)
	}
	buf := fr.buf[:0]
	for len(buf) < int(n) {
		step := min(int(n)-len(buf), readStep)
		if cap(buf)-len(buf) < step {
			grown := make([]byte, len(buf), min(len(buf)+max(step, len(buf)), int(n)))
			copy(grown, buf)
			buf = grown
		}
		m, err := io.ReadFull(fr.r, buf[len(buf):len(buf)+step])
		buf = buf[:len(buf)+m]
		if err != nil {
			fr.buf = buf
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, nil, fmt.Errorf("%s frame cut short: %w", t, err)
		}
	}
	fr.buf = buf
	return t, buf, nil
}

// item is one marshalled Raft message and the group it belongs to.
type item struct {
	group uint64
	data  []byte
}

// appendMessages appends a messages frame's payload: items in order, each
// run of one group's consecutive items under one run header.
func appendMessages(dst []byte, items []item) []byte {
	for i := 0; i < len(items); {
		j := i + 1
		for j < len(items) && items[j].group == items[i].group {
			j++
		}
		dst = appendRunHeader(dst, items[i].group, j-i)
		for _, it := range items[i:j] {
			dst = appendMsgHeader(dst, len(it.data))
			dst = append(dst, it.data...)
		}
		i = j
	}
	return dst
}

func appendRunHeader(dst []byte, group uint64, count int) []byte {
	dst = binary.BigEndian.AppendUint64(dst, group)
	return binary.BigEndian.AppendUint32(dst, uint32(count))
}

func appendMsgHeader(dst []byte, n int) []byte {
	return binary.BigEndian.AppendUint32(dst, uint32(n))
}

// decodeMessages reads a messages frame's payload into items (appended to
// dst; their data alias p). It holds the payload to the one form
// appendMessages writes: at least one run, no empty run, and no two runs
// in a row of the same group.
func decodeMessages(dst []item, p []byte) ([]item, error) {
	if len(p) == 0 {
		return dst, protocolErr("empty messages frame")
	}
	var last uint64
	for first := true; len(p) > 0; first = false {
		if len(p) < runHeader {
			return dst, protocolErr("run header cut short")
		}
		group, count := binary.BigEndian.Uint64(p), binary.BigEndian.Uint32(p[8:])
		p = p[runHeader:]
		if count == 0 {
			return dst, protocolErr("empty run of group %d", group)
		}
		if !first && group == last {
			return dst, protocolErr("two runs of group %d in a row", group)
		}
		last = group
		for range count {
			if len(p) < msgHeader {
				return dst, protocolErr("message header cut short in group %d", group)
			}
			n := binary.BigEndian.Uint32(p)
			p = p[msgHeader:]
			if uint64(n) > uint64(len(p)) {
				return dst, protocolErr("message of %d bytes in group %d, %d left", n, group, len(p))
			}
			dst = append(dst, item{group: group, data: p[:n:n]})
			p = p[n:]
		}
	}
	return dst, nil
}

// chunk is a piece of a transfer: one message (a MsgSnap, or another too
// big for a frame), marshalled, sent in order from offset 0 to total.
type chunk struct {
	group    uint64
	transfer uint64 // the sender's number for the transfer
	total    uint64 // the marshalled message's length
	offset   uint64
	crc      uint32 // CRC32-C of the whole marshalled message
	data     []byte
}

func appendChunk(dst []byte, c chunk) []byte {
	return append(appendChunkHeader(dst, c), c.data...)
}

// appendChunkHeader appends a chunk's fields before its data.
func appendChunkHeader(dst []byte, c chunk) []byte {
	dst = binary.BigEndian.AppendUint64(dst, c.group)
	dst = binary.BigEndian.AppendUint64(dst, c.transfer)
	dst = binary.BigEndian.AppendUint64(dst, c.total)
	dst = binary.BigEndian.AppendUint64(dst, c.offset)
	return binary.BigEndian.AppendUint32(dst, c.crc)
}

// decodeChunk reads the payload of a chunk frame of either kind; its data
// alias p.
func decodeChunk(p []byte) (chunk, error) {
	if len(p) <= chunkHeader {
		return chunk{}, protocolErr("chunk of %d bytes", len(p))
	}
	c := chunk{
		group:    binary.BigEndian.Uint64(p),
		transfer: binary.BigEndian.Uint64(p[8:]),
		total:    binary.BigEndian.Uint64(p[16:]),
		offset:   binary.BigEndian.Uint64(p[24:]),
		crc:      binary.BigEndian.Uint32(p[32:]),
		data:     p[chunkHeader:],
	}
	if c.offset > c.total || uint64(len(c.data)) > c.total-c.offset {
		return chunk{}, protocolErr("chunk of %d bytes at %d runs past its end %d", len(c.data), c.offset, c.total)
	}
	return c, nil
}

// ack says that a MsgSnap's transfer arrived whole and was delivered.
type ack struct {
	group, transfer uint64
}

func appendAck(dst []byte, a ack) []byte {
	dst = binary.BigEndian.AppendUint64(dst, a.group)
	return binary.BigEndian.AppendUint64(dst, a.transfer)
}

func decodeAck(p []byte) (ack, error) {
	if len(p) != ackSize {
		return ack{}, protocolErr("snapshot ack of %d bytes", len(p))
	}
	return ack{group: binary.BigEndian.Uint64(p), transfer: binary.BigEndian.Uint64(p[8:])}, nil
}
