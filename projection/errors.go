package projection

import "errors"

// Decide's errors. Each maps to one AMQP condition the SDKs classify; the
// comment names it.
var (
	// ErrLockLost: the lock token is unknown or its lock expired.
	// com.microsoft:message-lock-lost
	ErrLockLost = errors.New("the lock supplied is invalid: it expired or the message was already settled")
	// ErrSessionLockLost: the receiver no longer holds the session.
	// com.microsoft:session-lock-lost
	ErrSessionLockLost = errors.New("the session lock has expired or was lost")
	// ErrSessionCannotBeLocked: another receiver holds the named session.
	// com.microsoft:session-cannot-be-locked
	ErrSessionCannotBeLocked = errors.New("the requested session is locked by another receiver")
	// ErrNoSession: no session is free with messages; an accept-next waits.
	// com.microsoft:timeout once the client's wait runs out
	ErrNoSession = errors.New("no session is available")
	// ErrMessageNotFound: no deferred message with that SequenceNumber.
	// com.microsoft:message-not-found
	ErrMessageNotFound = errors.New("the message was not found")
	// ErrMessageTooLarge: over the entity's maximum message size.
	// amqp:link:message-size-exceeded
	ErrMessageTooLarge = errors.New("the message is larger than the entity allows")
	// ErrSessionIDRequired: a session-enabled entity got a message without
	// a SessionId. amqp:not-allowed
	ErrSessionIDRequired = errors.New("entities that require sessions accept only messages with a SessionId")
	// ErrTooManyHops: a dead-letter forward would take a message past
	// MaxHops. Only the dead-letter forwarder meets it, never a client.
	ErrTooManyHops = errors.New("the message has been auto-forwarded as many times as Service Bus allows")
	// ErrNotAllowed: the operation does not apply to this entity or queue.
	// amqp:not-allowed
	ErrNotAllowed = errors.New("the operation is not allowed on this entity")
	// ErrEntityDisabled: the entity's Status refuses the operation
	// (Disabled, SendDisabled, ReceiveDisabled). com.microsoft:entity-disabled
	ErrEntityDisabled = errors.New("the messaging entity is disabled")
	// ErrExists: a subscription or rule of that name exists.
	// com.microsoft:entity-already-exists
	ErrExists = errors.New("the messaging entity already exists")
	// ErrNotFound: no subscription or rule of that name.
	// amqp:not-found
	ErrNotFound = errors.New("the messaging entity could not be found")
	// ErrQuotaExceeded: a topic's limit on subscriptions or rules.
	// amqp:resource-limit-exceeded
	ErrQuotaExceeded = errors.New("the quota of the entity was exceeded")
	// ErrInvalid: a malformed command. amqp:invalid-field
	ErrInvalid = errors.New("invalid request")
)
