package peer

import (
	"hash/crc32"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
)

// Transfers: a message sent in chunks (the package comment's "Transfers").
// This file holds what both sides keep of one; peer.go writes the chunks
// and inbound.go reads them.

// outTransfer is a message on its way in chunks: a MsgSnap, or another
// message too big for a frame. Its key fields are set before it is queued
// and never change, so Send may read them under the peer's mu; the rest
// is run's.
type outTransfer struct {
	kind  frameType // frameSnapshotChunk or frameMessageChunk
	group uint64
	key   appendKey // a MsgApp's, so that Send drops a copy of it
	keyed bool

	transfer uint64 // the sender's number, given when its turn comes
	data     []byte // the marshalled message
	crc      uint32
	sent     int       // bytes written so far
	deadline time.Time // a MsgSnap's, for the ack, once all is written
}

func newTransfer(kind frameType, group uint64, m *pb.Message, data []byte) *outTransfer {
	s := &outTransfer{kind: kind, group: group, data: data, crc: crc32.Checksum(data, castagnoli)}
	s.key, s.keyed = keyOf(group, m)
	return s
}

// appendKey names the entries a MsgApp carries: the leader's term and the
// indexes after which they go and of the last. A leader never rewrites its
// own log within its term, so two MsgApps with one key carry the same
// entries; only their commit index may differ, which the next heartbeat
// carries anyway.
//
// A follower in Raft's probe state gets the MsgApp at its next index again
// at every heartbeat's answer until one arrives; a large one takes longer
// than a heartbeat to travel, and without the key its copies would queue
// up behind it.
type appendKey struct {
	group, term, index, last uint64
}

func keyOf(group uint64, m *pb.Message) (appendKey, bool) {
	if m.GetType() != pb.MessageType_MsgApp || len(m.GetEntries()) == 0 {
		return appendKey{}, false
	}
	return appendKey{group: group, term: m.GetTerm(), index: m.GetIndex(),
		last: m.GetIndex() + uint64(len(m.GetEntries()))}, true
}

// assembly is a message being put together from its chunks.
type assembly struct {
	kind                   frameType
	group, transfer, total uint64
	crc                    uint32
	data                   []byte
}

// reassembler is the receiving side of a connection's transfers: one at a
// time, its chunks in order, each transfer numbered above the last. It
// decides and does no IO; it dies with its connection, and what it held
// of a transfer with it.
type reassembler struct {
	cur  *assembly
	last uint64 // the last transfer's number; 0 before the first
}

// add takes a chunk of kind (frameSnapshotChunk or frameMessageChunk)
// from a sender whose transfers may be up to limit bytes. It returns the
// transfer, whole and its CRC checked, when c is its last chunk, and nil
// before. An error is the sender's fault: the connection closes.
//
// The buffer grows with the bytes that arrive, never past the total, so a
// total that lies costs only what was sent, and a message that arrives
// whole is held once.
func (r *reassembler) add(kind frameType, c chunk, limit uint64) (*assembly, error) {
	if c.offset == 0 {
		if a := r.cur; a != nil {
			return nil, protocolErr("transfer %d of group %d began before transfer %d of group %d ended",
				c.transfer, c.group, a.transfer, a.group)
		}
		if c.transfer <= r.last {
			return nil, protocolErr("transfer %d of group %d after transfer %d", c.transfer, c.group, r.last)
		}
		if c.total > limit {
			return nil, protocolErr("a %s transfer of %d bytes in group %d, the most is %d", kind, c.total, c.group, limit)
		}
		r.cur = &assembly{kind: kind, group: c.group, transfer: c.transfer, total: c.total, crc: c.crc,
			data: make([]byte, 0, min(c.total, 8<<20))}
		r.last = c.transfer
	}
	a := r.cur
	switch {
	case a == nil:
		return nil, protocolErr("%s at %d of group %d with no transfer begun", kind, c.offset, c.group)
	case kind != a.kind:
		return nil, protocolErr("%s inside a %s transfer", kind, a.kind)
	case c.group != a.group || c.transfer != a.transfer || c.total != a.total || c.crc != a.crc:
		return nil, protocolErr("%s of transfer %d (group %d) inside transfer %d (group %d)",
			kind, c.transfer, c.group, a.transfer, a.group)
	case c.offset != uint64(len(a.data)):
		return nil, protocolErr("%s at %d, expected %d", kind, c.offset, len(a.data))
	}
	if need := len(a.data) + len(c.data); need > cap(a.data) {
		grown := make([]byte, len(a.data), min(a.total, uint64(max(2*cap(a.data), need))))
		copy(grown, a.data)
		a.data = grown
	}
	a.data = append(a.data, c.data...)
	if uint64(len(a.data)) < a.total {
		return nil, nil
	}
	r.cur = nil
	if got := crc32.Checksum(a.data, castagnoli); got != a.crc {
		return nil, protocolErr("transfer %d of group %d has CRC %08x, sent with %08x", a.transfer, a.group, got, a.crc)
	}
	return a, nil
}
