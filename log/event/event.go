// Package event is walbus's event schema: the types of event an entity's log
// holds, the fields each carries, and the checksummed record envelope they
// are stored in. It is pure data and encoding, with no IO, so the
// projection, the indexes and any log that stores records (the segmented
// WAL in package log today, a replicated one later) share one vocabulary.
//
// The log index of the event that enqueues a message is that message's
// SequenceNumber.
package event

import "fmt"

// Type identifies an event. The numbers are stored on disk: never renumber.
type Type uint8

// Event types of the namespace log.
const (
	EntityCreated Type = 1
	EntityUpdated Type = 2
	EntityDeleted Type = 3
	// ClockAdvanced: walbus serve --test-clock moved the broker's clock TTL
	// (a duration) ahead; the sum of these is how far it runs ahead of the
	// real clock, after a restart too.
	ClockAdvanced Type = 4
	// NodeAddress: a cluster's node (Source, its id) listens for the
	// other nodes at Name (host:port), or, when Name is "", left the
	// cluster (walbus cluster add and remove). It is a record of the
	// metadata group, so that a node down at the time learns it too.
	NodeAddress Type = 5
)

// Event types of an entity log: the life of a message.
const (
	Enqueued          Type = 10 // a message became part of a queue; its index is its SequenceNumber
	Scheduled         Type = 11 // a message waits for its activation time; its index is its SequenceNumber
	ScheduleCancelled Type = 12 // a scheduled message was withdrawn before activation
	Activated         Type = 13 // a scheduled message went live with a new SequenceNumber (this index)
	// Forwarded: a message arrived from another entity's dead-letter queue
	// by auto-forwarding; its index is its SequenceNumber here. It carries
	// where it came from (Name, Source, Seq) and how it was dead-lettered
	// there (Reason, Description, Props), and is its own overlay.
	Forwarded Type = 14
	// Restored: a message a receive-and-delete receiver took but never
	// delivered (its link closed before the message could leave) is back,
	// under a new SequenceNumber (this index) at the end of its queue. It
	// carries what the message had: Seq (its number before), Until
	// (expiry), Deliveries, and its property changes folded into one
	// overlay, as Forwarded carries them (Name: dead-letter source; Reason
	// and Description: dead-letter reason, in a dead-letter queue; Props).
	Restored Type = 15
	// Remembered: an entity on the ForwardTo chain of a send that ended
	// here (Name) accepted MessageID under its duplicate detection, which
	// remembers it until Until. The entity stores nothing itself, so its
	// memory of MessageIds lives in the log that holds what it forwarded.
	// It comes in the send's atomic group, before the message's own event,
	// and has no queue.
	Remembered Type = 16
	// Published: a message sent to a topic (or a topic's scheduled
	// message Seq, activated) reached its subscriptions: its index is its
	// SequenceNumber in each of them. It holds the message once, and in
	// Props the routing outcome (AppendRoutes): the subscription queues
	// that got the message as it was sent. Until is its expiry by the
	// topic's default; a subscription's own default may cut it shorter.
	// Replay never evaluates a filter.
	Published Type = 17
	// Copied: a rule with an action matched the message of the Published
	// record Seq records back (Index-Seq; the same atomic group) and made
	// this copy of it in queue Queue, under this index. Name is the rule,
	// Props the action's changes (projection encodes them), SessionID the
	// copy's session. A copy that went to a dead-letter queue on arrival (a
	// filter that failed, a session subscription given a message without
	// a SessionId) carries Reason and Description instead.
	Copied Type = 18
	// RestoredCopy: a rule action's copy restored, as Restored restores a
	// message (the same fields), with State holding what made it a copy:
	// the rule's name and the action's changes (projection encodes them),
	// which Restored's folded property maps cannot express.
	RestoredCopy Type = 19

	Locked      Type = 20 // a message was locked for a receiver (peek-lock)
	LockRenewed Type = 21 // the lock's owner extended it
	LockExpired Type = 22 // the lock ran out; counts as a failed delivery, like abandon

	Completed          Type = 30 // removed after successful processing
	Abandoned          Type = 31 // unlocked; delivery count +1
	Released           Type = 32 // unlocked without counting a delivery
	Deferred           Type = 33 // set aside; reachable only by SequenceNumber
	DeadLettered       Type = 34 // moved to the dead-letter subqueue
	Expired            Type = 35 // time to live ran out; dropped
	ReceivedAndDeleted Type = 36 // consumed by a receive-and-delete receiver

	// TransferDeadLettered: a message of a dead-letter queue that its
	// ForwardDeadLetteredMessagesTo target refused for good moved to the
	// transfer dead-letter subqueue (Queue is the dead-letter queue it
	// left). Reason and Description say why; it is an overlay of the
	// message, like DeadLettered.
	TransferDeadLettered Type = 37

	// Deleted: removed unread by a batch delete ($management
	// batch-delete-messages, which an SDK's purge repeats), from any state
	// but locked.
	Deleted Type = 38

	SessionLocked      Type = 40 // a session was locked for a receiver
	SessionLockRenewed Type = 41
	SessionUnlocked    Type = 42 // the session's receiver let it go, or its lock ran out
	SessionStateSet    Type = 43 // the session's opaque state blob was replaced

	// Checkpoint: nothing happened. An idle entity writes it so that a
	// snapshot can be taken at an index past its last event, which lets
	// the log before it go (two snapshots are kept, and the log is kept
	// back to the older one). It carries only its time.
	Checkpoint Type = 50

	// A topic's subscriptions and rules live in its log, ordered against
	// its sends. Queue names the subscription by its first queue number
	// (see QueueGroup); numbers are never reused.
	SubscriptionCreated Type = 51 // Name, Props: its config
	SubscriptionUpdated Type = 52 // Props: its new config
	SubscriptionDeleted Type = 53
	RuleAdded           Type = 54 // Name, Props: the rule as given
	RuleRemoved         Type = 55 // Name

	// Committed closes the atomic group of a transaction's work: the events
	// before it in its group are what the commit did. State holds the
	// transaction's id.
	Committed Type = 60
	// Transfer: a message sent through this entity for another, Name, its
	// destination (send-via), waits in the transfer queue (Queue is
	// TransferQueue) until it reaches it; its index is its SequenceNumber
	// here. Until is when it is to be enqueued there (its
	// ScheduledEnqueueTime; 0: at once) and TTL its time to live there: it
	// neither activates nor expires here.
	Transfer Type = 61
	// Arrived: the messages of a send in this event's atomic group came
	// from another entity's transfer queue, which sends under the key
	// Source, its last one numbered Seq there. Sends from one source
	// arrive in SequenceNumber order, so one that repeats an arrival
	// after a crash is known by a Seq no greater than the last one's, and
	// dropped. It has no queue.
	Arrived Type = 62
	// ScheduledHeld: a message scheduled inside a transaction, as
	// Scheduled (its index is its SequenceNumber, the one the schedule
	// answered with), but held: it neither activates nor counts as
	// duplicate-detected until a Confirmed event for it, which the
	// transaction's commit writes. A roll back cancels it
	// (ScheduleCancelled), and so does the next start for one whose
	// transaction never committed.
	ScheduledHeld Type = 63
	// Confirmed: held message Seq of queue Queue is scheduled for good;
	// MessageID is what duplicate detection remembers of it from now on.
	Confirmed Type = 64

	// Marker is a Raft entry with no events in a replicated entity log: a
	// new leader's empty entry, or a change of the group's membership.
	// Queue holds the entry's Raft type, State its data. It changes no
	// state; it is there so that every Raft entry has a record.
	Marker Type = 70
)

// LockToken identifies one lock on one message. It is a GUID on the wire.
type LockToken [16]byte

// Position locates a record's envelope inside the segment file that holds its
// index: Offset is the byte offset of the envelope, Size its length.
type Position struct {
	Offset uint32
	Size   uint32
}

// Ref points at a record of a log: its index and where it sits.
type Ref struct {
	Index uint64
	Pos   Position
}

// Event is one entry of a log. It is a flat union: each Type uses the fields
// its layout lists (see layouts) and leaves the others zero.
//
// Byte slices (Message, Props, State) returned by decoding alias the buffer
// they were decoded from; callers that keep them must copy.
type Event struct {
	Type  Type
	Flags uint8  // envelope flags, see FlagContinued
	Index uint64 // log index; the SequenceNumber for Enqueued, Scheduled and Activated
	Time  int64  // unix nanoseconds, the broker clock when the event was decided

	Queue       uint32    // which queue of the entity (MainQueue, DeadLetterQueue, ...)
	Seq         uint64    // the message the event is about
	Token       LockToken // lock token of a Locked event
	Until       int64     // unix ns: locked-until, activation time, or expiry (0 = never)
	TTL         int64     // ns: a scheduled message's time to live, counted from activation
	MessageID   string
	SessionID   string
	Receiver    string // which receiver link took a lock or a message
	Reason      string // dead-letter reason
	Description string // dead-letter error description
	Name        string // entity name (namespace events; the source of a Forwarded message)
	Source      uint64 // the id of the entity a Forwarded message came from
	Deliveries  uint32 // a Restored message's failed delivery attempts
	Hops        uint32 // auto-forwards that brought a message here, on the events that create one (see tails)
	Props       []byte // encoded AMQP map of properties to modify, or entity properties
	Message     []byte // the bare AMQP message exactly as the client sent it
	State       []byte // session state

	// Term, Entry and Tag mark the first record of a Raft entry in a
	// replicated entity log (envelope version 2, docs/cluster.md): the
	// entry's Raft term and Raft index, and the tag its proposer gave it to
	// know it again. All zero on every other record.
	Term, Entry, Tag uint64

	// Pos is where the record sits in its segment. It is not part of the
	// record: Append and the scanners fill it in.
	Pos Position
}

// FlagContinued marks a record whose atomic group continues in the next
// record. Append sets it on every record but the last of one call, so a batch
// of messages becomes durable as a whole or not at all: recovery drops a
// group whose last record never reached the disk.
const FlagContinued uint8 = 1

var typeNames = map[Type]string{
	EntityCreated: "entity-created", EntityUpdated: "entity-updated", EntityDeleted: "entity-deleted",
	ClockAdvanced: "clock-advanced", NodeAddress: "node-address",
	Enqueued: "enqueued", Scheduled: "scheduled", ScheduleCancelled: "schedule-cancelled", Activated: "activated",
	Forwarded: "forwarded", Restored: "restored", RestoredCopy: "restored-copy", Remembered: "remembered",
	Published: "published", Copied: "copied",
	SubscriptionCreated: "subscription-created", SubscriptionUpdated: "subscription-updated",
	SubscriptionDeleted: "subscription-deleted", RuleAdded: "rule-added", RuleRemoved: "rule-removed",
	Locked: "locked", LockRenewed: "lock-renewed", LockExpired: "lock-expired",
	Completed: "completed", Abandoned: "abandoned", Released: "released", Deferred: "deferred",
	DeadLettered: "dead-lettered", Expired: "expired", ReceivedAndDeleted: "received-and-deleted",
	SessionLocked: "session-locked", SessionLockRenewed: "session-lock-renewed",
	SessionUnlocked: "session-unlocked", SessionStateSet: "session-state-set",
	Checkpoint: "checkpoint", Committed: "committed", Transfer: "transfer", Arrived: "arrived",
	ScheduledHeld: "scheduled-held", Confirmed: "confirmed", Marker: "marker",

	TransferDeadLettered: "transfer-dead-lettered", Deleted: "deleted",
}

func (t Type) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// CreatesMessage reports whether events of type t create a message, whose
// SequenceNumber is the event's index.
func (t Type) CreatesMessage() bool {
	switch t {
	case Enqueued, Scheduled, Activated, Forwarded, Restored, RestoredCopy, Published, Copied, Transfer, ScheduledHeld:
		return true
	}
	return false
}

// Valid reports whether t is a known event type.
func (t Type) Valid() bool {
	_, ok := layouts[t]
	return ok
}

// ParseType maps a name printed by Type.String back to its Type.
func ParseType(name string) (Type, bool) {
	for t, s := range typeNames {
		if s == name {
			return t, true
		}
	}
	return 0, false
}

// Types lists every known event type in numeric order.
func Types() []Type {
	out := make([]Type, 0, len(typeNames))
	for t := Type(0); t < 255; t++ {
		if t.Valid() {
			out = append(out, t)
		}
	}
	return out
}
