package amqpserver

import (
	"bytes"
	"errors"
	"fmt"
	"syscall"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/message"
	"github.com/walbus/walbus/broker"
)

// The request/response message exchange of the $cbs and $management nodes
// (docs/compatibility.md §3 and §6).

// rpcRequest is a decoded request message.
type rpcRequest struct {
	messageID message.ID // echoed as the response's correlation-id, same type
	replyTo   string
	props     encoding.Map // application properties
	body      any          // the amqp-value body, nil if none
}

func (r *rpcRequest) prop(name string) string {
	v, _ := r.props.Get(name)
	switch v := v.(type) {
	case string:
		return v
	case encoding.Symbol:
		return string(v)
	}
	return ""
}

// bodyMap returns the body as a map with string keys (management bodies).
func (r *rpcRequest) bodyMap() encoding.Map {
	m, _ := r.body.(encoding.Map)
	return m
}

// rpcLimits bounds the decoded application properties and body of a
// request by the request's size: a schedule-message body carries whole
// messages, up to the link's max-message-size, but the decoded value may
// only be a few times its encoding (an array of nulls is 16 bytes per
// element decoded and none on the wire).
func rpcLimits(payload []byte) encoding.Limits {
	return encoding.Limits{MaxDepth: 16, MaxElements: 1 << 16, MaxBytes: 4<<20 + 2*len(payload)}
}

func parseRequest(payload []byte) (rpcRequest, error) {
	var req rpcRequest
	s, err := message.Parse(payload)
	if err != nil {
		return req, err
	}
	props, err := s.ReadProperties()
	if err != nil {
		return req, err
	}
	// The payload is only valid during Deliver and responses go out later:
	// keep copies.
	req.messageID = props.MessageID
	req.messageID.Bytes = bytes.Clone(props.MessageID.Bytes)
	req.replyTo = string(props.ReplyTo)
	lim := rpcLimits(payload)
	if s.ApplicationProperties.Present() {
		r := encoding.NewReader(s.ValueBytes(s.ApplicationProperties))
		v, err := r.ReadAny(lim)
		if err != nil {
			return req, fmt.Errorf("application properties: %w", err)
		}
		req.props, _ = v.(encoding.Map)
	}
	if s.Body.Present() && s.BodyKind == message.BodyValue {
		r := encoding.NewReader(s.ValueBytes(s.Body))
		if req.body, err = r.ReadAny(lim); err != nil {
			return req, fmt.Errorf("body: %w", err)
		}
	}
	return req, nil
}

// rpcResponse is a response to send back.
type rpcResponse struct {
	status      int32
	description string
	condition   string // error condition, for failures
	body        any    // the amqp-value body, nil for none
}

func ok(status int32, body any) rpcResponse {
	return rpcResponse{status: status, description: "OK", body: body}
}

// encode writes the response message.
func (resp rpcResponse) encode(req *rpcRequest) ([]byte, error) {
	return message.AppendResponse(nil, &message.Response{CorrelationID: req.messageID, Status: resp.status,
		Description: resp.description, Condition: resp.condition, Body: resp.body})
}

// Error conditions of Service Bus and AMQP the SDKs classify
// (docs/compatibility.md §6, "Error statuses").
const (
	condLockLost           = "com.microsoft:message-lock-lost"
	condSessionLockLost    = "com.microsoft:session-lock-lost"
	condSessionCannotLock  = "com.microsoft:session-cannot-be-locked"
	condMessageNotFound    = "com.microsoft:message-not-found"
	condTimeout            = "com.microsoft:timeout"
	condServerBusy         = "com.microsoft:server-busy"
	condDeadLetter         = "com.microsoft:dead-letter"
	condNotFound           = "amqp:not-found"
	condNotAllowed         = "amqp:not-allowed"
	condInvalidField       = "amqp:invalid-field"
	condNotImplemented     = "amqp:not-implemented"
	condUnauthorized       = "amqp:unauthorized-access"
	condMessageTooLarge    = "amqp:link:message-size-exceeded"
	condInternal           = "amqp:internal-error"
	condResourceLimit      = "amqp:resource-limit-exceeded"
	condDecodeError        = "amqp:decode-error"
	condDetachForced       = "amqp:link:detach-forced"
	condConnectionForced   = "amqp:connection:forced"
	condEntityDisabled     = "com.microsoft:entity-disabled"
	condArgumentOutOfRange = "com.microsoft:argument-out-of-range"
	condEntityExists       = "com.microsoft:entity-already-exists"
)

// classify maps a broker error to the AMQP condition and the management
// status code the SDKs expect for it. Go treats most 4xx codes other than
// 401, 404 and 410 as a broken connection, so ordinary conditions avoid them.
func classify(err error) (condition string, status int32) {
	switch {
	case errors.Is(err, broker.ErrLockLost):
		return condLockLost, 410
	case errors.Is(err, broker.ErrSessionLockLost):
		return condSessionLockLost, 410
	case errors.Is(err, broker.ErrSessionCannotBeLocked):
		return condSessionCannotLock, 410
	case errors.Is(err, broker.ErrMessageNotFound):
		return condMessageNotFound, 404
	case errors.Is(err, broker.ErrEntityNotFound):
		return condNotFound, 404
	case errors.Is(err, broker.ErrEntityExists):
		return condEntityExists, 409
	case errors.Is(err, broker.ErrEntityDisabled):
		return condEntityDisabled, 400
	case errors.Is(err, broker.ErrQuotaExceeded):
		return condResourceLimit, 403
	case errors.Is(err, broker.ErrTimeout):
		return condTimeout, 408
	case errors.Is(err, broker.ErrMessageTooLarge):
		return condMessageTooLarge, 413
	case errors.Is(err, broker.ErrNotAllowed), errors.Is(err, broker.ErrSessionIDRequired):
		return condNotAllowed, 400
	case errors.Is(err, broker.ErrInvalid):
		return condInvalidField, 400
	case errors.Is(err, broker.ErrClosed), errors.Is(err, broker.ErrNotLeader):
		// The SDKs retry server-busy: on a cluster's follower, until the
		// front end's proxy takes the operation to the leader.
		return condServerBusy, 503
	case isDiskFull(err):
		return condResourceLimit, 503
	}
	return condInternal, 500
}

func isDiskFull(err error) bool { return errors.Is(err, syscall.ENOSPC) }

// failure is the response for an operation that failed with err.
func failure(err error) rpcResponse {
	cond, status := classify(err)
	return rpcResponse{status: status, description: describe(err), condition: cond}
}

// describe is the error text a client sees. Storage failures are stated
// plainly: their details (paths, devices) are for the server's log.
func describe(err error) string {
	switch {
	case errors.Is(err, broker.ErrDiskLow):
		return "The broker's disk is nearly full: it takes no new messages until space is freed; receives and settlements go on."
	case isDiskFull(err):
		return "The broker cannot store anything: its disk is full. Nothing was stored; try again later."
	case errors.Is(err, broker.ErrLogFailed):
		return "The broker cannot write to its storage right now. Nothing was stored; try again later."
	case errors.Is(err, broker.ErrLockLost):
		// Service Bus's own text, which clients match on (the Go SDK's
		// receiver_test.go TestReceiver_RenewMessageLock).
		return "The lock supplied is invalid. Either the lock expired, or the message has already been removed from the queue."
	}
	return err.Error()
}
