package amqpserver

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/broker"
)

// The <entity>/$management node: the operations of docs/compatibility.md §6,
// with the AMQP types each SDK asserts.

// receiverLookup finds the broker receiver behind a client's receive link,
// for operations that act as that receiver (sessions, receive by number).
type receiverLookup interface {
	receiverForLink(name string) *broker.Receiver
	receiverForSession(e *broker.Entity, queue uint32, session string) *broker.Receiver
}

// mgmtTarget is the entity and queue a management link addresses.
type mgmtTarget struct {
	e     *broker.Entity
	queue uint32
	path  string // the node's address, "q/$management", for claims
	links receiverLookup
	// owner names lock owners for messages received through management
	// without an associated receive link.
	owner string
}

const maxPeek = 250

// handle runs one request and calls reply exactly once, possibly from a
// broker goroutine.
func (t *mgmtTarget) handle(req *rpcRequest, reply func(rpcResponse)) {
	body := req.bodyMap()
	switch op := req.prop("operation"); op {
	case "com.microsoft:renew-lock":
		tokens, err := uuids(body, "lock-tokens")
		if err != nil {
			reply(failure(err))
			return
		}
		t.e.Renew(t.queue, tokens, func(until []int64, err error) {
			if err != nil {
				reply(failure(err))
				return
			}
			reply(ok(200, encoding.Map{{Key: "expirations", Value: timestampArray(until)}}))
		})
	case "com.microsoft:peek-message":
		from, _ := number(body, "from-sequence-number")
		count, _ := number(body, "message-count")
		count = max(1, min(count, maxPeek))
		omitBody, _ := body.Get("omit-message-body") // JS peekMessages' omitMessageBody
		ds, err := t.e.Peek(t.queue, uint64(max(from, 1)), int(count), t.session(req))
		if err != nil {
			reply(failure(err))
			return
		}
		if len(ds) == 0 {
			reply(rpcResponse{status: 204, description: "No messages"})
			return
		}
		list := make(encoding.List, 0, len(ds))
		for i := range ds {
			d := &ds[i]
			d.Token = broker.LockToken{} // a peek does not hand out locks
			b, err := outbound(nil, d)
			if err == nil && omitBody == true {
				b, err = withoutBody(b)
			}
			if err != nil {
				reply(failure(err))
				return
			}
			list = append(list, encoding.Map{{Key: "message", Value: b}})
		}
		reply(ok(200, encoding.Map{{Key: "messages", Value: list}}))
	case "com.microsoft:receive-by-sequence-number":
		seqs, err := longs(body, "sequence-numbers")
		if err != nil {
			reply(failure(err))
			return
		}
		mode := broker.PeekLock
		if m, found := number(body, "receiver-settle-mode"); found && m == 0 {
			mode = broker.ReceiveAndDelete
		}
		owner := t.owner
		session := t.session(req)
		if r := t.links.receiverForLink(req.prop("associated-link-name")); r != nil {
			owner, session = r.ID(), r.Session()
		}
		t.e.ReceiveDeferred(t.queue, owner, session, seqs, mode, func(ds []broker.Delivery, err error) {
			if err != nil {
				reply(failure(err))
				return
			}
			list := make(encoding.List, 0, len(ds))
			for i := range ds {
				b, err := outbound(nil, &ds[i])
				if err != nil {
					reply(failure(err))
					return
				}
				entry := encoding.Map{{Key: "message", Value: b}}
				if ds[i].Token != (broker.LockToken{}) {
					entry = append(entry, encoding.MapEntry{Key: "lock-token", Value: encoding.UUID(ds[i].Token)})
				}
				list = append(list, entry)
			}
			reply(ok(200, encoding.Map{{Key: "messages", Value: list}}))
		})
	case "com.microsoft:update-disposition":
		t.updateDisposition(body, reply)
	case "com.microsoft:schedule-message":
		t.schedule(body, reply)
	case "com.microsoft:cancel-scheduled-message":
		seqs, err := longs(body, "sequence-numbers")
		if err != nil {
			reply(failure(err))
			return
		}
		t.e.Cancel(t.queue, seqs, func(err error) {
			if err != nil {
				reply(failure(err))
				return
			}
			reply(ok(200, nil))
		})
	case "com.microsoft:batch-delete-messages":
		t.batchDelete(req, body, reply)
	case "com.microsoft:renew-session-lock", "com.microsoft:get-session-state", "com.microsoft:set-session-state":
		t.sessionOp(op, req, body, reply)
	case "com.microsoft:get-message-sessions":
		updated := int64(broker.SessionListAll)
		if v, found := body.Get("last-updated-time"); found {
			if ts, isTime := v.(encoding.Timestamp); isTime {
				updated = int64(ts)
			}
		}
		skip, _ := number(body, "skip")
		top, found := number(body, "top")
		if !found || top <= 0 {
			top = 100
		}
		ids, err := t.e.ListSessions(t.queue, updated, int(max(skip, 0)), int(top))
		if err != nil {
			reply(failure(err))
			return
		}
		if len(ids) == 0 {
			reply(rpcResponse{status: 204, description: "No sessions"})
			return
		}
		arr := encoding.Array{Code: encoding.CodeStr8}
		for _, id := range ids {
			arr.Elements = append(arr.Elements, broker.ClientSessionID(id))
		}
		reply(ok(200, encoding.Map{{Key: "skip", Value: int32(skip) + int32(len(ids))}, {Key: "sessions-ids", Value: arr}}))
	case "com.microsoft:add-rule", "com.microsoft:remove-rule", "com.microsoft:enumerate-rules":
		t.ruleOp(op, body, reply) // rules.go
	default:
		reply(rpcResponse{status: 501, description: fmt.Sprintf("operation %q is not supported", op), condition: condNotImplemented})
	}
}

// session is the session a request is about: named in the body (JS), or the
// one held by the receive link it is associated with (Go never names it).
func (t *mgmtTarget) session(req *rpcRequest) string {
	if id, found := req.bodyMap().Get("session-id"); found {
		if s, isStr := id.(string); isStr {
			return broker.SessionIDOf(s)
		}
	}
	if r := t.links.receiverForLink(req.prop("associated-link-name")); r != nil {
		return r.Session()
	}
	return ""
}

func (t *mgmtTarget) sessionReceiver(req *rpcRequest) *broker.Receiver {
	if r := t.links.receiverForLink(req.prop("associated-link-name")); r != nil && r.Session() != "" {
		return r
	}
	if id := t.session(req); id != "" {
		return t.links.receiverForSession(t.e, t.queue, id)
	}
	return nil
}

func (t *mgmtTarget) sessionOp(op string, req *rpcRequest, body encoding.Map, reply func(rpcResponse)) {
	r := t.sessionReceiver(req)
	if r == nil {
		reply(failure(broker.ErrSessionLockLost))
		return
	}
	switch op {
	case "com.microsoft:renew-session-lock":
		r.RenewSession(func(until int64, err error) {
			if err != nil {
				reply(failure(err))
				return
			}
			reply(ok(200, encoding.Map{{Key: "expiration", Value: timestamp(until)}}))
		})
	case "com.microsoft:get-session-state":
		state, err := r.SessionState()
		if err != nil {
			reply(failure(err))
			return
		}
		var v any
		if state != nil {
			v = state
		}
		reply(ok(200, encoding.Map{{Key: "session-state", Value: v}}))
	case "com.microsoft:set-session-state":
		v, _ := body.Get("session-state")
		state, _ := v.([]byte)
		r.SetSessionState(state, func(err error) {
			if err != nil {
				reply(failure(err))
				return
			}
			reply(ok(200, nil))
		})
	}
}

// updateDisposition settles messages by lock token (deferred messages, and
// settlement after the receive link is gone).
func (t *mgmtTarget) updateDisposition(body encoding.Map, reply func(rpcResponse)) {
	tokens, s, err := dispositionRequest(body)
	if err != nil {
		reply(failure(err))
		return
	}
	var mu sync.Mutex
	left, first := len(tokens), error(nil)
	if left == 0 {
		reply(ok(200, nil))
		return
	}
	for _, tok := range tokens {
		s.Token = tok
		t.e.Settle(t.queue, s, func(err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			if left--; left == 0 {
				if first != nil {
					reply(failure(first))
				} else {
					reply(ok(200, nil))
				}
			}
		})
	}
}

// dispositionRequest reads an update-disposition request: the lock tokens
// and the settlement for each.
func dispositionRequest(body encoding.Map) ([]broker.LockToken, broker.Settlement, error) {
	s := broker.Settlement{}
	tokens, err := uuids(body, "lock-tokens")
	if err != nil {
		return nil, s, err
	}
	v, _ := body.Get("disposition-status")
	status, _ := v.(string)
	switch status {
	case "completed":
		s.Outcome = broker.Complete
	case "abandoned":
		s.Outcome = broker.Abandon
	case "suspended":
		s.Outcome = broker.DeadLetter
	case "defered", "deferred":
		s.Outcome = broker.Defer
	default:
		return nil, s, fmt.Errorf("%w: disposition-status %q", broker.ErrInvalid, status)
	}
	s.Reason = stringOf(body, "deadletter-reason")
	s.Description = stringOf(body, "deadletter-description")
	if props, found := body.Get("properties-to-modify"); found && props != nil {
		if s.Props, err = encoding.AppendAny(nil, props); err != nil {
			return nil, s, fmt.Errorf("%w: properties-to-modify: %v", broker.ErrInvalid, err)
		}
	}
	return tokens, s, nil
}

// batchDelete removes up to message-count messages enqueued before
// enqueued-time-utc, oldest first, leaving locked ones (the JS SDK's
// deleteMessages, which its purgeMessages repeats until a call deletes
// fewer than it asked). The reply counts them, or is 204 with
// com.microsoft:message-not-found when none went: 7.10.0-beta.2 reads a
// 204 without that condition as a failure.
func (t *mgmtTarget) batchDelete(req *rpcRequest, body encoding.Map, reply func(rpcResponse)) {
	count, found := number(body, "message-count")
	if !found || count < 1 || count > broker.MaxDelete {
		reply(rpcResponse{status: 400, condition: condArgumentOutOfRange,
			description: fmt.Sprintf("message-count must be an integer from 1 to %d", broker.MaxDelete)})
		return
	}
	before := int64(math.MaxInt64) // no cut-off: everything enqueued so far
	if v, found := body.Get("enqueued-time-utc"); found && v != nil {
		ts, isTime := v.(encoding.Timestamp)
		if !isTime {
			reply(failure(fmt.Errorf("%w: enqueued-time-utc holds a %T, not a timestamp", broker.ErrInvalid, v)))
			return
		}
		before = nanos(ts)
	}
	t.e.Delete(t.queue, int(count), before, t.session(req), func(n int, err error) {
		switch {
		case err != nil:
			reply(failure(err))
		case n == 0:
			reply(rpcResponse{status: 204, description: "No messages to delete", condition: condMessageNotFound})
		default:
			reply(ok(200, encoding.Map{{Key: "message-count", Value: int32(n)}}))
		}
	})
}

// schedule stores messages that carry x-opt-scheduled-enqueue-time.
func (t *mgmtTarget) schedule(body encoding.Map, reply func(rpcResponse)) {
	msgs, err := scheduleRequest(body)
	if err != nil {
		reply(failure(err))
		return
	}
	t.e.Schedule(t.queue, msgs, func(seqs []uint64, err error) {
		if err != nil {
			reply(failure(err))
			return
		}
		reply(scheduled(seqs))
	})
}

// scheduleRequest reads the messages of a schedule-message request.
func scheduleRequest(body encoding.Map) ([]broker.Message, error) {
	v, _ := body.Get("messages")
	list, _ := v.(encoding.List)
	msgs := make([]broker.Message, 0, len(list))
	for _, item := range list {
		entry, _ := item.(encoding.Map)
		raw, found := entry.Get("message")
		b, isBin := raw.([]byte)
		if !found || !isBin {
			return nil, fmt.Errorf("%w: schedule-message entry without an encoded message", broker.ErrInvalid)
		}
		m, err := inboundOne(b)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", broker.ErrInvalid, err)
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// scheduled is the answer to a schedule-message request.
func scheduled(seqs []uint64) rpcResponse {
	arr := encoding.Array{Code: encoding.CodeLong}
	for _, s := range seqs {
		arr.Elements = append(arr.Elements, int64(s))
	}
	return ok(200, encoding.Map{{Key: "sequence-numbers", Value: arr}})
}

func timestampArray(ns []int64) encoding.Array {
	arr := encoding.Array{Code: encoding.CodeTimestamp}
	for _, v := range ns {
		arr.Elements = append(arr.Elements, timestamp(v))
	}
	return arr
}

// Decoding helpers for request bodies: SDKs send arrays where this says
// array, but a list is accepted too, and any integer width.

var errArgument = errors.New("argument missing or of the wrong type")

func elements(v any) ([]any, bool) {
	switch v := v.(type) {
	case encoding.Array:
		return v.Elements, true
	case encoding.List:
		return v, true
	case []any:
		return v, true
	}
	return nil, false
}

func uuids(body encoding.Map, key string) ([]broker.LockToken, error) {
	v, _ := body.Get(key)
	elems, found := elements(v)
	if !found {
		return nil, fmt.Errorf("%w: %s: %w", broker.ErrInvalid, key, errArgument)
	}
	out := make([]broker.LockToken, 0, len(elems))
	for _, e := range elems {
		u, isUUID := e.(encoding.UUID)
		if !isUUID {
			return nil, fmt.Errorf("%w: %s holds a %T", broker.ErrInvalid, key, e)
		}
		out = append(out, broker.LockToken(u))
	}
	return out, nil
}

func longs(body encoding.Map, key string) ([]uint64, error) {
	v, _ := body.Get(key)
	elems, found := elements(v)
	if !found {
		return nil, fmt.Errorf("%w: %s: %w", broker.ErrInvalid, key, errArgument)
	}
	out := make([]uint64, 0, len(elems))
	for _, e := range elems {
		n, isNum := asInt64(e)
		if !isNum || n < 0 {
			return nil, fmt.Errorf("%w: %s holds %v", broker.ErrInvalid, key, e)
		}
		out = append(out, uint64(n))
	}
	return out, nil
}

func number(body encoding.Map, key string) (int64, bool) {
	v, found := body.Get(key)
	if !found {
		return 0, false
	}
	return asInt64(v)
}

func asInt64(v any) (int64, bool) {
	switch v := v.(type) {
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case int16:
		return int64(v), true
	case int8:
		return int64(v), true
	case uint64:
		return int64(v), v <= 1<<63-1
	case uint32:
		return int64(v), true
	case uint16:
		return int64(v), true
	case uint8:
		return int64(v), true
	}
	return 0, false
}

func stringOf(body encoding.Map, key string) string {
	v, _ := body.Get(key)
	s, _ := v.(string)
	return s
}
