package amqpserver

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"sync"

	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/amqpserver/transport"
	"github.com/walbus/walbus/broker"
)

// The request/response nodes, $cbs and <entity>/$management. Clients attach
// a sender for requests and a receiver for responses; requests name their
// reply address in reply-to, which is the receiver's target address (Go)
// or its link name (JS).

// attachNode attaches one half of a request/response pair. mgmt is nil for
// $cbs.
func (cs *connState) attachNode(l *transport.Link, mgmt *mgmtTarget) {
	if l.Inbound() {
		if mgmt == nil && cs.s.cfg.Keys.Len() == 0 {
			l.Refuse(&frames.Error{Condition: condNotAllowed, Description: "no keys are configured"})
			return
		}
		var reply *transport.Reply
		if mgmt != nil {
			// Requests carry whole messages (schedule-message): a client
			// told the entity's limit refuses an oversize one itself, as
			// its sender does, instead of getting a status the Go SDK
			// takes for a broken connection (413).
			if cfg, err := mgmt.e.Config(); err == nil {
				reply = &transport.Reply{MaxMessageSize: uint64(cfg.MaxMessageSize) + requestEnvelope}
			}
		}
		if err := l.AcceptInbound(reply, &requestLink{cs: cs, mgmt: mgmt}); err != nil {
			return
		}
		return
	}
	// Responses go pre-settled, unless the client asked for unsettled
	// deliveries (uAMQP's $cbs-receiver does): the mode is echoed, so
	// they go unsettled and its dispositions settle them.
	rl := &replyLink{cs: cs, l: l, settled: l.SndSettleMode() != frames.SenderSettleUnsettled}
	if err := l.AcceptOutbound(nil, rl); err != nil {
		return
	}
	cs.mu.Lock()
	if cs.replies == nil {
		cs.replies = make(map[string]*replyLink)
	}
	if a := l.PeerAttach(); a.Target != nil && a.Target.Address != "" {
		cs.replies[a.Target.Address] = rl
	}
	cs.replies[l.Name()] = rl
	cs.mu.Unlock()
}

// managementTarget resolves a management address ("q/$management"); a nil
// result with the link refused. Claims are checked against the whole
// address, for which the JS SDK puts its token.
func (cs *connState) managementTarget(l *transport.Link, address string) *mgmtTarget {
	e, queue, err := cs.resolve(strings.TrimSuffix(address, "/$management"))
	if err != nil {
		l.Refuse(linkError(err))
		return nil
	}
	if ok, _ := cs.claims.allows(address, 0, cs.s.cfg.Now()); !ok {
		l.Refuse(&frames.Error{Condition: condUnauthorized, Description: "Unauthorized access: no token covers " + address})
		return nil
	}
	return &mgmtTarget{e: e, queue: queue, path: address, links: cs, owner: "mgmt:" + l.Name()}
}

// requestEnvelope is the room a management request takes around one
// message of the entity's maximum size (the request's properties and the
// map holding the message, its id, session id and partition key).
const requestEnvelope = 1 << 10

// requestLink receives requests for a node.
type requestLink struct {
	cs   *connState
	mgmt *mgmtTarget // nil for $cbs
	// relay passes requests on to the entity's leader when another node
	// leads it; nil until one is. Only the connection's reader uses it.
	relay *mgmtRelay
}

func (rl *requestLink) Detached(*transport.Link, *frames.Error) {
	if rl.relay != nil {
		rl.relay.end()
	}
}

func (rl *requestLink) Deliver(d transport.Delivery) {
	req, err := parseRequest(d.Payload) // copies what it keeps
	if err != nil {
		d.Settle(&frames.Rejected{Error: &frames.Error{Condition: condDecodeError, Description: err.Error()}})
		return
	}
	ts, inTxn := isTxn(d.State)
	if inTxn && rl.mgmt != nil {
		// A management request in a transaction (AMQP 1.0 §4.4.1): its
		// transfer gets the provisional outcome, its work waits for the
		// commit.
		d.Settle(&frames.TransactionalState{TxnID: bytes.Clone(ts.TxnID), Outcome: &frames.Accepted{}})
	} else {
		d.Settle(&frames.Accepted{})
	}
	reply := func(resp rpcResponse) { rl.cs.respond(d.Link, &req, resp) }
	if rl.mgmt == nil {
		if op := req.prop("operation"); op != "put-token" {
			reply(rpcResponse{status: 501, condition: condNotImplemented, description: fmt.Sprintf("operation %q is not supported", op)})
			return
		}
		resp := putToken(&req, rl.cs.s.cfg.Keys, rl.cs.s.b, &rl.cs.claims, rl.cs.s.cfg.Now())
		if resp.status == 202 {
			// The new claim may end sooner, or grant less, than the one it
			// replaced: the links it covers are checked again now.
			rl.cs.checkExpiry()
			if rl.cs.conn != nil {
				rl.cs.conn.Authorized() // no longer pending (transport.Admission)
			}
		}
		reply(resp)
		return
	}
	rl.cs.s.countOp(req.prop("operation"))
	if need := opRights(req.prop("operation")); need != 0 {
		if ok, _ := rl.cs.claims.allows(rl.mgmt.path, need, rl.cs.s.cfg.Now()); !ok {
			reply(rpcResponse{status: 401, condition: condUnauthorized,
				description: fmt.Sprintf("Unauthorized access. '%s' claim(s) are required to perform this operation.", need)})
			return
		}
	}
	if node, ferr := rl.cs.route(rl.mgmt.e); node != 0 || ferr != nil {
		switch {
		case ferr != nil:
			reply(rpcResponse{status: 503, condition: string(ferr.Condition), description: ferr.Description})
		case inTxn:
			reply(rpcResponse{status: 501, condition: condNotImplemented, description: notPassedOn(node).Description})
		default:
			rl.relayRequest(node, d, &req)
		}
		return
	}
	if inTxn {
		rl.cs.txnRequest(rl.mgmt, ts.TxnID, &req, reply)
		return
	}
	rl.mgmt.handle(&req, reply)
}

// relayRequest sends a request on to node, which leads the entity,
// through the link's relay there, made anew if it went to another node or
// failed.
func (rl *requestLink) relayRequest(node uint64, d transport.Delivery, req *rpcRequest) {
	if rl.relay == nil || rl.relay.node != node || rl.relay.broken() {
		if rl.relay != nil {
			rl.relay.end()
		}
		rl.relay = newMgmtRelay(rl.cs, node, rl.mgmt.path)
	}
	mr, payload, r := rl.relay, bytes.Clone(d.Payload), *req
	mr.order.do(func() { mr.pass(d.Link, &r, payload) })
}

// opRights is the right a management operation needs.
func opRights(op string) sas.Rights {
	switch op {
	case "com.microsoft:schedule-message", "com.microsoft:cancel-scheduled-message":
		return sas.Send
	}
	return sas.Listen
}

// respond sends a response on the reply link the request names: by target
// address, then by link name, then the one reply link in the request's
// session attached to the same node.
func (cs *connState) respond(requestLink *transport.Link, req *rpcRequest, resp rpcResponse) {
	payload, err := resp.encode(req)
	if err != nil {
		cs.s.logger.Error("cannot encode a response", "err", err)
		return
	}
	if rl := cs.replyLinkFor(requestLink, req.replyTo); rl != nil {
		rl.send(payload)
	}
}

// replyLinkFor is the reply link a request names in replyTo (respond), or
// nil, logged.
func (cs *connState) replyLinkFor(requestLink *transport.Link, replyTo string) *replyLink {
	cs.mu.Lock()
	rl := cs.replies[replyTo]
	if rl == nil {
		for _, r := range cs.replies {
			if r.l.Session() == requestLink.Session() && sameNode(r.l, requestLink) {
				rl = r
				break
			}
		}
	}
	cs.mu.Unlock()
	if rl == nil {
		cs.s.logger.Warn("no reply link for a response", "reply_to", replyTo)
	}
	return rl
}

func sameNode(reply, request *transport.Link) bool {
	ra, qa := reply.PeerAttach(), request.PeerAttach()
	return ra.Source != nil && qa.Target != nil && ra.Source.Address == qa.Target.Address
}

// replyLink sends responses, as credit allows.
type replyLink struct {
	cs      *connState
	l       *transport.Link
	settled bool // send them pre-settled

	mu           sync.Mutex
	pending      [][]byte
	pendingBytes int
	tag          uint64
}

// maxPendingReplies bounds the responses a reply link holds for a client
// that gives it no credit: requests are accepted (and their credit
// renewed) as they come, so without a bound a client that sends requests
// and reads no responses could make the server keep them all.
// A single response may be larger (a peek of big messages).
var maxPendingReplies = 4 << 20

func (rl *replyLink) send(payload []byte) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if len(rl.pending) > 0 && rl.pendingBytes+len(payload) > maxPendingReplies {
		rl.pending, rl.pendingBytes = nil, 0
		rl.l.Close(&frames.Error{Condition: condResourceLimit,
			Description: fmt.Sprintf("more than %d bytes of responses are waiting for credit on this link", maxPendingReplies)})
		return
	}
	rl.pending = append(rl.pending, payload)
	rl.pendingBytes += len(payload)
	rl.flush()
}

// flush sends pending responses while there is credit. rl.mu is held.
func (rl *replyLink) flush() {
	for len(rl.pending) > 0 {
		rl.tag++
		tag := binary.BigEndian.AppendUint64(nil, rl.tag)
		if _, err := rl.l.Send(tag, 0, rl.pending[0], rl.settled); err != nil {
			return // no credit: wait for the next flow
		}
		rl.pendingBytes -= len(rl.pending[0])
		rl.pending[0] = nil
		rl.pending = rl.pending[1:]
	}
}

func (rl *replyLink) Credit(l *transport.Link, c transport.Credit) {
	rl.mu.Lock()
	rl.flush()
	rl.mu.Unlock()
	if c.Drain {
		l.Drained()
	}
}

func (rl *replyLink) Disposition(l *transport.Link, id uint32, state frames.DeliveryState, settled bool) {
	if !settled {
		l.Settle(id, state)
	}
}

func (rl *replyLink) Detached(l *transport.Link, _ *frames.Error) {
	rl.cs.mu.Lock()
	for k, v := range rl.cs.replies {
		if v == rl {
			delete(rl.cs.replies, k)
		}
	}
	rl.cs.mu.Unlock()
}

// receiverLookup, for management operations that act as a receive link.
func (cs *connState) receiverForLink(name string) *broker.Receiver {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if rl := cs.receivers[name]; rl != nil {
		return rl.r
	}
	return nil
}

func (cs *connState) receiverForSession(e *broker.Entity, queue uint32, session string) *broker.Receiver {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, rl := range cs.receivers {
		if rl.e == e && rl.queue == queue && rl.r != nil && rl.r.Session() == session && session != "" {
			return rl.r
		}
	}
	return nil
}
