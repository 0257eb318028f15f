package broker

import (
	"github.com/walbus/walbus/index"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// The names below are the broker's API: the values its callers (the
// protocol layer, the admin API) exchange with it, so that they import
// broker and nothing below it. Each is the type the projection, the index
// or the log itself uses, named here rather than copied, so nothing is
// converted between the layers on a message's path.

// Config is an entity's settings, the Service Bus entity properties.
type Config = projection.Config

// DefaultConfig is Service Bus's default queue.
func DefaultConfig() Config { return projection.DefaultConfig() }

// Message is one message as a sender hands it to an entity.
type Message = projection.Message

// HeldMessage is a message a schedule in a transaction holds until its
// commit (Entity.ScheduleHeld).
type HeldMessage = projection.HeldMessage

// EmptySessionID is how the broker holds the session id "" (a group-id
// present and empty), as "" means no session: SessionIDOf maps a client's
// session id in, ClientSessionID maps it back.
const EmptySessionID = projection.EmptySessionID

// SessionIDOf is the session id a client's text names.
func SessionIDOf(text string) string { return projection.SessionIDOf(text) }

// ClientSessionID is the text a client sees for a session id.
func ClientSessionID(id string) string { return projection.ClientSessionID(id) }

// Counts are an entity's message counts by state and subqueue.
type Counts = projection.Counts

// LockToken identifies one lock on one message; a GUID on the wire.
type LockToken = event.LockToken

// Subqueues of an entity, as Entity's operations and Delivery.Queue number
// them.
const (
	MainQueue               = event.MainQueue
	DeadLetterQueue         = event.DeadLetterQueue
	TransferDeadLetterQueue = event.TransferDeadLetterQueue
)

// Outcome is how a receiver settles a locked message.
type Outcome = projection.Outcome

// The outcomes a Settlement can carry.
const (
	Complete   = projection.Complete
	Abandon    = projection.Abandon
	Release    = projection.Release
	Defer      = projection.Defer
	DeadLetter = projection.DeadLetter
)

// ReasonMaxDeliveryCount is the dead-letter reason of a message whose
// deliveries ran out.
const ReasonMaxDeliveryCount = projection.ReasonMaxDeliveryCount

// MessageState is where a peeked or delivered message stands in its queue.
type MessageState = index.State

// The states of Delivery.State.
const (
	Available = index.Available
	Locked    = index.Locked
	Deferred  = index.Deferred
	Scheduled = index.Scheduled
)

// EventType names what last changed a message; Overlay.Type is one.
type EventType = event.Type

// The event types an overlay can come from.
const (
	Abandoned            = event.Abandoned
	DeadLettered         = event.DeadLettered
	Forwarded            = event.Forwarded
	TransferDeadLettered = event.TransferDeadLettered
)

// Bracket is a run of work whose output is released together (a
// transport Burst); see Options.Bracket.
type Bracket = log.Bracket

// SyncPolicy says when appended events count as durable.
type SyncPolicy = log.SyncPolicy

// The sync policies of Options.Sync.
const (
	SyncAlways   = log.SyncAlways
	SyncInterval = log.SyncInterval
	SyncNone     = log.SyncNone
)

// CommitStats are an entity log's group-commit counters.
type CommitStats = log.CommitStats

// Errors an operation returns, each matched with errors.Is; the protocol
// layer maps them to AMQP conditions.
var (
	ErrLockLost              = projection.ErrLockLost
	ErrSessionLockLost       = projection.ErrSessionLockLost
	ErrSessionCannotBeLocked = projection.ErrSessionCannotBeLocked
	ErrMessageNotFound       = projection.ErrMessageNotFound
	ErrMessageTooLarge       = projection.ErrMessageTooLarge
	ErrSessionIDRequired     = projection.ErrSessionIDRequired
	ErrNotAllowed            = projection.ErrNotAllowed
	ErrInvalid               = projection.ErrInvalid
	ErrQuotaExceeded         = projection.ErrQuotaExceeded
	ErrEntityDisabled        = projection.ErrEntityDisabled
	// ErrLogFailed: the entity's log could not write; nothing more is
	// accepted until walbus restarts.
	ErrLogFailed = log.ErrFailed
)
