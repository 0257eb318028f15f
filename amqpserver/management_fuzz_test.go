package amqpserver

import (
	"testing"
	"time"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/message"
	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/broker"
)

// FuzzManagementRequest feeds request messages to the $management nodes
// of a real broker (a plain queue, and a session queue with a session
// held) and to $cbs. Whatever the bytes, the request is refused at
// decoding or gets a reply within 10 s, and no second one while the
// other nodes are asked, of the kind the SDKs read (a failure carries a
// condition, a success none but a batch delete's 204, which says
// com.microsoft:message-not-found), which encodes and reads back; nothing
// panics or hangs. The seeds are well-formed requests for every
// operation, so `make test` runs each of them once.
func FuzzManagementRequest(f *testing.F) {
	for _, seed := range managementSeeds() {
		f.Add(seed)
	}
	for _, seed := range putTokenSeeds() {
		f.Add(seed)
	}
	b, targets := fuzzTargets(f)
	keys, err := sas.NewKeys(fuzzKey)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		req, err := parseRequest(payload)
		if err != nil {
			return // refused with amqp:decode-error, as Deliver does
		}
		replies := make([]chan rpcResponse, len(targets))
		for i, tgt := range targets {
			replies[i] = make(chan rpcResponse, 2)
			tgt.handle(&req, func(r rpcResponse) { replies[i] <- r })
			select {
			case resp := <-replies[i]:
				checkReply(t, tgt.path, &req, resp)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no reply to %q", tgt.path, req.prop("operation"))
			}
		}
		var cs claims
		checkReply(t, "$cbs", &req, putToken(&req, keys, b, &cs, time.Now()))
		for i, ch := range replies {
			select {
			case r := <-ch:
				t.Fatalf("%s: a second reply to %q: %d %s", targets[i].path, req.prop("operation"), r.status, r.description)
			default:
			}
		}
	})
}

// checkReply fails t unless resp is a reply the SDKs can read.
func checkReply(t *testing.T, node string, req *rpcRequest, resp rpcResponse) {
	t.Helper()
	op := req.prop("operation")
	notFound := resp.status == 204 && resp.condition == condMessageNotFound && op == "com.microsoft:batch-delete-messages"
	if resp.status < 200 || resp.status > 599 || (resp.status >= 400) != (resp.condition != "") && !notFound {
		t.Fatalf("%s: %q: status %d with condition %q", node, op, resp.status, resp.condition)
	}
	b, err := resp.encode(req)
	if err != nil {
		t.Fatalf("%s: %q: reply does not encode: %v", node, op, err)
	}
	back, err := parseRequest(b)
	if err != nil {
		t.Fatalf("%s: %q: reply does not decode: %v", node, op, err)
	}
	if v, _ := back.props.Get("status-code"); v != resp.status {
		t.Fatalf("%s: %q: reply reads back with status-code %v, want %d", node, op, v, resp.status)
	}
}

// fuzzLinks finds the session receiver a fuzz target holds, if any.
type fuzzLinks struct{ r *broker.Receiver }

func (l fuzzLinks) receiverForLink(name string) *broker.Receiver {
	if l.r != nil && name == "session-link" {
		return l.r
	}
	return nil
}

func (l fuzzLinks) receiverForSession(_ *broker.Entity, _ uint32, session string) *broker.Receiver {
	if l.r != nil && session != "" && session == l.r.Session() {
		return l.r
	}
	return nil
}

// fuzzTargets opens a broker with a queue "q" holding a few messages and a
// session queue "s" whose session "s1" is held, and returns the
// management targets of both.
func fuzzTargets(f *testing.F) (*broker.Broker, []*mgmtTarget) {
	b, _, err := broker.Open(broker.Options{Dir: f.TempDir(), Sync: broker.SyncNone})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = b.Close() })
	q, err := b.CreateQueue("q", broker.DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	scfg := broker.DefaultConfig()
	scfg.RequiresSession = true
	s, err := b.CreateQueue("s", scfg)
	if err != nil {
		f.Fatal(err)
	}
	send := func(e *broker.Entity, session string) {
		done := make(chan error, 1)
		e.Send(broker.MainQueue, []broker.Message{{Body: fuzzMessage("m"), MessageID: "m", SessionID: session}}, func(err error) { done <- err })
		if err := <-done; err != nil {
			f.Fatal(err)
		}
	}
	for range 3 {
		send(q, "")
		send(s, "s1")
	}
	r, err := s.Attach(broker.ReceiverOptions{Queue: broker.MainQueue, Name: "session-link", Sessions: true, Deliver: func(broker.Delivery) {}})
	if err != nil {
		f.Fatal(err)
	}
	accepted := make(chan error, 1)
	r.AcceptSession("s1", 0, func(_ broker.SessionLock, err error) { accepted <- err })
	if err := <-accepted; err != nil {
		f.Fatal(err)
	}
	return b, []*mgmtTarget{
		{e: q, queue: broker.MainQueue, path: "q/$management", links: fuzzLinks{}, owner: "mgmt:q"},
		{e: s, queue: broker.MainQueue, path: "s/$management", links: fuzzLinks{r}, owner: "mgmt:s"},
	}
}

var fuzzKey = sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE", Rights: sas.Manage}

// putTokenSeeds are CBS requests as both SDKs send them, and an expired one.
func putTokenSeeds() [][]byte {
	req := func(aud string, exp time.Time, style sas.Style) []byte {
		props := encoding.Map{{Key: "operation", Value: "put-token"}, {Key: "type", Value: sasTokenType}, {Key: "name", Value: aud}}
		return encodeRequest(props, sas.Sign(aud, fuzzKey, exp, style))
	}
	far := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	return [][]byte{
		req("amqp://localhost:5672/q", far, sas.GoStyle),
		req("sb://localhost/s/$management", far, sas.JSStyle),
		req("amqp://localhost:5672/missing", far, sas.GoStyle),
		req("amqp://localhost:5672/q", time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC), sas.GoStyle),
	}
}

// fuzzMessage is a bare message: a message-id and a data section.
func fuzzMessage(id string) []byte {
	b := message.AppendProperties(nil, &message.Properties{MessageID: message.StringID(id)})
	b = encoding.AppendDescriptor(b, message.CodeData)
	return encoding.AppendBinary(b, []byte("body"))
}

// encodeRequest is a request as the SDKs send it: message-id, reply-to,
// the operation (and link) in application properties, and the body, if
// not nil, as an amqp-value.
func encodeRequest(props encoding.Map, body any) []byte {
	b := message.AppendProperties(nil, &message.Properties{MessageID: message.StringID("req-1"), ReplyTo: []byte("replies")})
	b = encoding.AppendDescriptor(b, message.CodeApplicationProperties)
	b, err := encoding.AppendAny(b, props)
	if err != nil {
		panic(err)
	}
	if body == nil {
		return b
	}
	b = encoding.AppendDescriptor(b, message.CodeAMQPValue)
	if b, err = encoding.AppendAny(b, body); err != nil {
		panic(err)
	}
	return b
}

func managementSeeds() [][]byte {
	op := func(name string) encoding.Map {
		return encoding.Map{{Key: "operation", Value: name}, {Key: "associated-link-name", Value: "session-link"}}
	}
	token := encoding.UUID{1, 2, 3}
	longs := encoding.Array{Code: encoding.CodeLong, Elements: []any{int64(1), int64(2), int64(99)}}
	tokens := encoding.Array{Code: encoding.CodeUUID, Elements: []any{token}}
	return [][]byte{
		encodeRequest(op("com.microsoft:renew-lock"), encoding.Map{{Key: "lock-tokens", Value: tokens}}),
		encodeRequest(op("com.microsoft:peek-message"), encoding.Map{{Key: "from-sequence-number", Value: int64(1)}, {Key: "message-count", Value: int32(10)}}),
		encodeRequest(op("com.microsoft:peek-message"), encoding.Map{{Key: "from-sequence-number", Value: int64(1)}, {Key: "message-count", Value: int32(10)}, {Key: "session-id", Value: "s1"}}),
		encodeRequest(op("com.microsoft:peek-message"), encoding.Map{{Key: "from-sequence-number", Value: int64(1)}, {Key: "message-count", Value: int32(10)}, {Key: "omit-message-body", Value: true}}),
		encodeRequest(op("com.microsoft:receive-by-sequence-number"), encoding.Map{{Key: "sequence-numbers", Value: longs}, {Key: "receiver-settle-mode", Value: uint32(1)}}),
		encodeRequest(op("com.microsoft:receive-by-sequence-number"), encoding.Map{{Key: "sequence-numbers", Value: encoding.List{int64(2)}}, {Key: "receiver-settle-mode", Value: uint32(0)}}),
		encodeRequest(op("com.microsoft:update-disposition"), encoding.Map{{Key: "lock-tokens", Value: tokens}, {Key: "disposition-status", Value: "suspended"},
			{Key: "deadletter-reason", Value: "r"}, {Key: "deadletter-description", Value: "d"}, {Key: "properties-to-modify", Value: encoding.Map{{Key: "k", Value: int32(1)}}}}),
		encodeRequest(op("com.microsoft:update-disposition"), encoding.Map{{Key: "lock-tokens", Value: encoding.Array{Code: encoding.CodeUUID}}, {Key: "disposition-status", Value: "completed"}}),
		encodeRequest(op("com.microsoft:schedule-message"), encoding.Map{{Key: "messages", Value: encoding.List{
			encoding.Map{{Key: "message-id", Value: "m1"}, {Key: "message", Value: fuzzMessage("m1")}},
		}}}),
		encodeRequest(op("com.microsoft:cancel-scheduled-message"), encoding.Map{{Key: "sequence-numbers", Value: longs}}),
		encodeRequest(op("com.microsoft:renew-session-lock"), encoding.Map{{Key: "session-id", Value: "s1"}}),
		encodeRequest(op("com.microsoft:get-session-state"), encoding.Map{{Key: "session-id", Value: "s1"}}),
		encodeRequest(op("com.microsoft:set-session-state"), encoding.Map{{Key: "session-id", Value: "s1"}, {Key: "session-state", Value: []byte("state")}}),
		encodeRequest(op("com.microsoft:get-message-sessions"), encoding.Map{{Key: "last-updated-time", Value: encoding.Timestamp(0)}, {Key: "skip", Value: int32(0)}, {Key: "top", Value: int32(5)}}),
		encodeRequest(op("com.microsoft:get-message-sessions"), encoding.Map{{Key: "skip", Value: int32(1)}, {Key: "top", Value: int32(-1)}}),
		encodeRequest(op("com.microsoft:batch-delete-messages"), encoding.Map{{Key: "message-count", Value: int32(2)}, {Key: "enqueued-time-utc", Value: encoding.Timestamp(1 << 62)}}),
		encodeRequest(op("com.microsoft:batch-delete-messages"), encoding.Map{{Key: "message-count", Value: int32(500)}, {Key: "session-id", Value: "s1"}}),
		encodeRequest(op("com.microsoft:batch-delete-messages"), encoding.Map{{Key: "message-count", Value: int32(4001)}}),
		encodeRequest(op("com.microsoft:no-such-operation"), nil),
		encodeRequest(encoding.Map{}, encoding.Map{{Key: "lock-tokens", Value: "not an array"}}),
	}
}
