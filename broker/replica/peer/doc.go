// Package peer carries Raft messages between the nodes of a cluster
// (docs/cluster.md): the messages of every group, over one connection to
// each peer, batched, with snapshots streamed in chunks beside them.
//
// # Connections
//
// A node dials each peer it has something to send to, and keeps that
// connection while it works; the peer dials back for its own messages.
// So between two nodes there are two TCP connections, one each way, and
// each carries one sender's messages for all groups (the acks of its
// snapshots come back on it). A peer that cannot be reached is dialled
// again after a backoff of 50 ms, doubling to 2 s; what was queued for it
// is dropped, as Raft expects of a network. Each peer's queue is bounded
// in messages and bytes, and Send drops what does not fit rather than
// wait.
//
// # Handshake
//
// The dialler opens with a hello, and the acceptor answers with its own
// if it takes the connection; if not, it closes it without a word. A
// hello is, in order (integers big-endian):
//
//	magic      4 bytes   "WBRP"
//	version    uint16    1
//	from       uint64    the sender's node id
//	to         uint64    the node id it means to reach
//	length     uint8     of the cluster name
//	cluster    length bytes
//
// The acceptor refuses a wrong magic or version, another cluster's name,
// a hello meant for another node, and a sender that is not one of its
// peers. The dialler checks the answer the same way, so that a node at a
// peer's old address is not taken for that peer.
//
// # Frames
//
// After the hellos, each way carries frames:
//
//	length     uint32    of the payload, at most 4 MiB
//	type       uint8     1 messages, 2 snapshot chunk, 3 snapshot ack
//	payload    length bytes
//
// A reader refuses a longer frame or an unknown type from the header
// alone, and grows its buffer as the payload arrives, so a lying length
// costs only what was really sent.
//
// A messages frame (type 1) is one or more runs, each one group's messages
// in the order they were sent:
//
//	group      uint64
//	count      uint32    at least 1
//	count times:
//	  length   uint32
//	  message  length bytes: a raftpb.Message, protobuf
//
// Two runs in a row never have the same group. The sender puts everything
// that waits in its queue into as few frames as fit, and flushes once the
// queue is empty: a thousand busy groups cost one write per flush.
//
// # Snapshots
//
// A MsgSnap carries a whole snapshot, which may be tens of megabytes. It
// is marshalled, and sent in chunks (type 2) of up to 256 KiB, one chunk
// between each batch of messages, so heartbeats keep flowing during the
// transfer:
//
//	group      uint64
//	transfer   uint64    the sender's number for this transfer
//	total      uint64    the marshalled message's length
//	offset     uint64    of this chunk's data
//	crc        uint32    CRC32-C of the whole marshalled message
//	data       the rest of the payload, at least 1 byte
//
// A sender has one transfer on a connection at a time, its chunks in
// order; every chunk repeats the transfer's fields, and the receiver
// refuses one that does not follow. Once the receiver has total bytes and
// their CRC matches, it delivers the MsgSnap and answers with an ack
// (type 3, on the same connection):
//
//	group      uint64
//	transfer   uint64
//
// The sender reports the snapshot done on the ack, and failed if the
// connection ends first, the ack takes more than 10 s, or the MsgSnap
// never left (the peer down, too many waiting). A MsgSnap
// reaches the receiver after messages the sender sent behind it, which
// Raft tolerates as it would a reordering network.
//
// # Bad input
//
// Anything that does not follow this format (a bad header, a truncated
// or undecodable message, a chunk out of order, a wrong CRC) closes the
// connection that carried it, with the reason logged. The sender dials
// again if it has something to send.
package peer
