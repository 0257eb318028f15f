package amqpserver

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/transport"
)

// mgmtRelay passes the requests of a client's $management link on to the
// entity's leader: a request link and a reply link there, in a session of
// their own. A request goes as it came, its message-id included (the
// leader's response carries it back as its correlation-id), but for its
// reply-to, which names the reply link at the leader, and an
// associated-link-name that names a receive link passed on, which becomes
// that link's name there. The response goes back as it came.
type mgmtRelay struct {
	cs      *connState
	node    uint64
	address string // the node's address, "q/$management"
	reply   string // the reply link's address at the leader
	order   serial // requests go in the order they came

	// sess and out are set by open, on order's goroutine.
	sess  *amqp.Session
	out   *amqp.Sender
	ctx   context.Context
	stop  context.CancelFunc
	ended sync.Once

	mu      sync.Mutex
	waiting map[string]relayedRequest // by message-id (idKey)
	failed  bool
}

// relayedRequest is a request waiting for the leader's response.
type relayedRequest struct {
	link *transport.Link // the client's request link
	req  rpcRequest
}

// relayReplies numbers the reply links at the leaders.
var relayReplies atomic.Uint64

func newMgmtRelay(cs *connState, node uint64, address string) *mgmtRelay {
	mr := &mgmtRelay{cs: cs, node: node, address: address, waiting: make(map[string]relayedRequest),
		reply: fmt.Sprintf("$walbus-relay-reply-%d", relayReplies.Add(1))}
	mr.ctx, mr.stop = context.WithCancel(context.Background())
	return mr
}

// broken reports a relay that failed: the next request opens another.
func (mr *mgmtRelay) broken() bool {
	mr.mu.Lock()
	defer mr.mu.Unlock()
	return mr.failed
}

// pass sends one request (payload, as the client sent it, and req, as it
// was parsed here) on to the leader, opening the links there first if
// they are not.
func (mr *mgmtRelay) pass(link *transport.Link, req *rpcRequest, payload []byte) {
	w := relayedRequest{link: link, req: *req}
	if mr.broken() {
		mr.fail(nil, w)
		return
	}
	if mr.out == nil {
		if err := mr.open(); err != nil {
			mr.fail(err, w)
			return
		}
	}
	msg := new(amqp.Message)
	if err := msg.UnmarshalBinary(payload); err != nil {
		mr.cs.respond(link, req, rpcResponse{status: 400, condition: condDecodeError, description: err.Error()})
		return
	}
	if msg.Properties == nil {
		msg.Properties = &amqp.MessageProperties{}
	}
	msg.Properties.ReplyTo = &mr.reply
	if name, isStr := msg.ApplicationProperties["associated-link-name"].(string); isStr {
		if relayed, found := mr.cs.relayedName(name); found {
			msg.ApplicationProperties["associated-link-name"] = relayed
		}
	}
	mr.mu.Lock()
	if mr.failed {
		mr.mu.Unlock()
		mr.fail(nil, w)
		return
	}
	mr.waiting[idKey(msg.Properties.MessageID)] = w
	mr.mu.Unlock()
	ctx, cancel := context.WithTimeout(mr.ctx, relayOpTimeout)
	defer cancel()
	if err := mr.out.Send(ctx, msg, nil); err != nil {
		mr.fail(err)
	}
}

// open attaches the request and reply links at the leader and starts
// reading the responses.
func (mr *mgmtRelay) open() error {
	ctx, cancel := context.WithTimeout(mr.ctx, relayAttachTimeout)
	defer cancel()
	sess, err := mr.cs.s.relays.session(ctx, mr.node)
	if err != nil {
		return err
	}
	out, err := sess.NewSender(ctx, mr.address, nil)
	var in *amqp.Receiver
	if err == nil {
		in, err = sess.NewReceiver(ctx, mr.address, &amqp.ReceiverOptions{TargetAddress: mr.reply, Credit: 64,
			RequestedSenderSettleMode: amqp.SenderSettleModeSettled.Ptr(), SettlementMode: amqp.ReceiverSettleModeFirst.Ptr()})
	}
	if err != nil {
		closeSession(sess)
		return err
	}
	mr.sess, mr.out = sess, out
	go mr.responses(in)
	return nil
}

// responses hands each response from the leader to the client's reply
// link that its request named.
func (mr *mgmtRelay) responses(in *amqp.Receiver) {
	for {
		msg, err := in.Receive(mr.ctx, nil)
		if err != nil {
			mr.fail(err)
			return
		}
		var key string
		if msg.Properties != nil {
			key = idKey(msg.Properties.CorrelationID)
		}
		mr.mu.Lock()
		w, found := mr.waiting[key]
		delete(mr.waiting, key)
		mr.mu.Unlock()
		if !found {
			mr.cs.s.logger.Warn("a response from the leader answers no request passed on", "node", mr.node, "correlation_id", key)
			continue
		}
		payload, err := encodeResponse(msg)
		if err != nil {
			mr.cs.respond(w.link, &w.req, rpcResponse{status: 500, condition: condInternal,
				description: "cannot encode the leader's response: " + err.Error()})
			continue
		}
		if rl := mr.cs.replyLinkFor(w.link, w.req.replyTo); rl != nil {
			rl.send(payload)
		}
	}
}

// fail answers the requests still waiting, and those given, with
// server-busy (the SDKs send them again) and closes the links at the
// leader. err nil: they were closed already.
func (mr *mgmtRelay) fail(err error, more ...relayedRequest) {
	mr.mu.Lock()
	first := !mr.failed
	mr.failed = true
	waiting := mr.waiting
	mr.waiting = make(map[string]relayedRequest)
	mr.mu.Unlock()
	description := fmt.Sprintf("the request could not be passed on to node %d, which leads the entity; try again", mr.node)
	if err != nil {
		description = fmt.Sprintf("the request could not be passed on to node %d, which leads the entity (%v); try again", mr.node, err)
	}
	busy := rpcResponse{status: 503, condition: condServerBusy, description: description}
	for _, w := range waiting {
		mr.cs.respond(w.link, &w.req, busy)
	}
	for _, w := range more {
		mr.cs.respond(w.link, &w.req, busy)
	}
	if first {
		mr.end()
	}
}

// end closes the links at the leader; requests still queued fail.
func (mr *mgmtRelay) end() {
	mr.ended.Do(func() {
		mr.stop()
		mr.order.do(func() {
			if mr.sess != nil {
				closeSession(mr.sess)
			}
		})
	})
}

// encodeResponse is a response from the leader as it goes to the client:
// go-amqp's encoding of it, with its error condition a symbol again, which
// go-amqp reads as a string (the .NET SDK reads it as a symbol).
func encodeResponse(msg *amqp.Message) ([]byte, error) {
	for _, key := range []string{"errorCondition", "error-condition"} {
		if s, isStr := msg.ApplicationProperties[key].(string); isStr {
			msg.ApplicationProperties[key] = amqp.Symbol(s)
		}
	}
	return msg.MarshalBinary()
}

// idKey is a message-id or correlation-id as a map key: its type and value.
func idKey(id any) string { return fmt.Sprintf("%T %v", id, id) }
