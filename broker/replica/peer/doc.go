// Package peer carries Raft messages between the nodes of a cluster
// (docs/cluster.md): the messages of every group, over one connection to
// each peer, batched, with snapshots and messages too big for a frame
// streamed in chunks beside them.
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
// wait; so are the transfers waiting for their turn (below).
//
// # Handshake
//
// The dialler opens with a hello, and the acceptor answers with its own
// if it takes the connection; if not, it closes it without a word. A
// hello is, in order (integers big-endian):
//
//	magic      4 bytes   "WBRP"
//	version    uint16    3 (2 had no advertise field, 1 no message chunks)
//	from       uint64    the sender's node id
//	to         uint64    the node id it means to reach
//	length     uint8     of the cluster name
//	cluster    length bytes
//	length     uint16    of the advertise field, at most 1024
//	advertise  length bytes
//
// The acceptor refuses a wrong magic or version, another cluster's name,
// a hello meant for another node, an advertise field over 1024 bytes, and
// a sender that is not one of its peers. The dialler checks the answer
// the same way, so that a node at a peer's old address is not taken for
// that peer.
//
// The advertise field is what the sender tells its peers of itself
// (Config.Advertise; walbus serve sends the URL of its administration
// API, for the others to pass requests on to it). The transport does not
// read it, and keeps the last each peer sent, in a hello of either
// direction, for Transport.Advertised.
//
// # Frames
//
// After the hellos, each way carries frames:
//
//	length     uint32    of the payload, at most 4 MiB
//	type       uint8     1 messages, 2 snapshot chunk, 3 snapshot ack,
//	                     4 message chunk
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
// # Transfers
//
// A MsgSnap carries a whole snapshot, which may be tens of megabytes; a
// MsgApp may carry a single entry bigger than a frame (Raft cuts appends
// at MaxSizePerMsg but sends a larger entry alone: a 100 MiB message, a
// transaction). Such a message, a MsgSnap or any other whose marshalled
// form does not fit a messages frame by itself (4 MiB less 16 bytes) or
// the whole queue, is sent as a transfer: in chunks of up to 256 KiB, one
// chunk between each batch of messages, so heartbeats keep flowing
// during it. A MsgSnap's chunks are type 2, any other message's type 4,
// and both read:
//
//	group      uint64
//	transfer   uint64    the sender's number for this transfer
//	total      uint64    the marshalled message's length
//	offset     uint64    of this chunk's data
//	crc        uint32    CRC32-C of the whole marshalled message
//	data       the rest of the payload, at least 1 byte
//
// A sender has one transfer on a connection at a time, its chunks in
// order, each transfer numbered above the last; every chunk repeats the
// transfer's fields and type, and the receiver refuses one that does not
// follow. Once the receiver has total bytes and their CRC matches, it
// delivers the message. It answers a MsgSnap with an ack (type 3, on the
// same connection):
//
//	group      uint64
//	transfer   uint64
//
// The sender reports the snapshot done on the ack, and failed if the
// connection ends first, the ack takes more than 10 s, or the MsgSnap
// never left (the peer down, too many waiting). Another message is not
// acknowledged: if it is lost, Raft sends its entries again, as it does
// for any MsgApp lost. The sender drops a MsgApp whose entries (the same
// term, index and count) wait or are being written already: a follower
// Raft probes gets the same MsgApp again at every heartbeat, sooner than
// a large one arrives.
//
// A transfer reaches the receiver after messages the sender sent behind
// it, which Raft tolerates as it would a reordering network; transfers to
// one peer go in the order sent, but for a MsgSnap, which waits while its
// group's last is not acknowledged. A connection that ends midway ends
// its transfer on both sides: the receiver forgets the chunks it had, and
// the sender does not send it again. So a message arrives once and whole,
// or not at all. Each side holds the whole marshalled message while it
// travels (the receiver, for a moment, its decoded copy too), within
// MaxTransfer for each transfer and for those waiting.
//
// # Bad input
//
// Anything that does not follow this format (a bad header, a truncated
// or undecodable message, a chunk out of order, a wrong CRC, a transfer
// over the receiver's MaxTransfer, a MsgSnap in message chunks or another
// message in snapshot chunks) closes the connection that carried it, with
// the reason logged. The sender dials again if it has something to send.
package peer
