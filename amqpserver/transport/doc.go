// Package transport is a server-side AMQP 1.0 protocol engine (OASIS AMQP
// 1.0 part 2, transport; part 5, SASL). It owns the sockets, the protocol
// headers, SASL, open/close, sessions and their windows, link attach and
// detach, link credit, multi-frame transfers and dispositions, and knows
// nothing about what the messages mean: a Handler decides.
//
// # Threading contract
//
// This section is the transport's part of the broker's contract, which
// docs/architecture.md#threading-contract writes down whole.
//
// Each connection runs on two goroutines: its reader, the goroutine that
// calls Server.ServeConn (Serve starts one per accepted socket), which
// decodes frames and calls the handler; and its writer, started once the
// opens are exchanged, which writes every frame queued since its last
// write with one call. The package starts no other goroutine, except one
// in Server.Shutdown that waits for the connections while it watches the
// context.
//
// Every Handler callback runs on the connection's reader, one at a time
// per connection (connections run theirs in parallel), in the order of
// the frames that caused them, with no engine lock held:
//
//   - Authenticate, during the handshake, before any link exists. It may
//     block (a token lookup, say); Config.HandshakeTimeout runs on.
//   - ConnectionOpened, once the opens are exchanged. It may call
//     Conn.Close, or return an error to close.
//   - Attach, then Deliver, Credit and Disposition for the links it
//     accepted. They may call any method of Conn, Link, Delivery and
//     Burst: Send, Settle, Drained, Close and the Accept methods only
//     queue frames and never wait for the socket. They must not block
//     for long, since the connection reads nothing meanwhile, and never
//     on anything that needs this connection's reader (the peer's next
//     frame, another callback of the same connection): that deadlocks.
//     Work that waits moves to another goroutine, which answers later
//     with the same methods, safe from any goroutine. Delivery.Payload
//     and Tag are valid only until Deliver returns.
//   - Detached, once per accepted link, and ConnectionClosed, last. When
//     the connection ends, both run after its writer stopped: the
//     methods they call then return ErrLinkClosed or send nothing.
//
// Three goroutines may write a connection's socket, never two at once
// (the unexported writeState decides which): the writer, with blocking
// writes bounded by Config.WriteTimeout; a goroutine closing a Burst, for
// the output of its run; and the reader, for the output caused by the
// input it had buffered, just before it blocks on a read. The last two
// write without blocking and leave what the socket does not take to the
// writer, so a peer that does not read stalls only its own writer, and
// its reader once 4 MiB of output wait.
//
// Goroutines that produce output for many links in runs (a queue's actor,
// its log's writer after each group commit) can bind those links to a
// Burst and open it around each run: Send and Settle then queue without
// waking the writers, and Close writes each touched connection's frames
// itself, with one non-blocking write, leaving only what the socket
// would not take to that connection's writer. The run's frames leave in
// one syscall per connection on the thread that made them, instead of a
// writer wake-up per connection on another. Open and Close may be called
// from any goroutine, callbacks included; runs may overlap. Close takes
// each touched connection's lock briefly and never waits for a socket.
// Every Open needs its Close: the output of bound links made in a run
// left open waits until something else wakes that connection's writer.
//
// # Links
//
// A link the peer attaches is inbound when the peer sends (it attached
// as sender) and outbound when we send.
//
// Inbound: accept with an InboundHandler. The engine grants credit at
// once, reassembles multi-frame transfers up to max-message-size, and
// calls Deliver with each complete message; the handler settles every
// delivery, in any order, from any goroutine:
//
//	func (q *queue) Deliver(d transport.Delivery) {
//		msg := bytes.Clone(d.Payload) // d.Payload is only valid during Deliver
//		q.store(msg, func(err error) {
//			if err != nil {
//				d.Settle(&frames.Rejected{Error: &frames.Error{Condition: "amqp:internal-error"}})
//				return
//			}
//			d.Settle(&frames.Accepted{}) // disposition(settled) and more credit
//		})
//	}
//
// Outbound: accept with an OutboundHandler. Credit reports the peer's
// credit as an absolute 64-bit limit; Send uses one credit per message and
// fails with ErrNoCredit without it; a drain is answered with Drained
// once nothing more is available; Disposition reports the peer's outcome
// and, in rcv-settle-mode second, the handler confirms with Link.Settle:
//
//	func (c *consumer) Credit(l *transport.Link, cr transport.Credit) {
//		for cr.Available() > 0 {
//			m, ok := c.next()
//			if !ok {
//				break
//			}
//			id, err := l.Send(m.tag, 0, m.payload, false)
//			if err != nil {
//				break
//			}
//			c.track(id, m)
//			cr = l.Credit()
//		}
//		if cr.Drain {
//			l.Drained() // flow(drain=true, link-credit=0) goes out now
//		}
//	}
//
//	func (c *consumer) Disposition(l *transport.Link, id uint32, state frames.DeliveryState, settled bool) {
//		c.apply(id, state)
//		if !settled {
//			l.Settle(id, state) // disposition(role=sender, settled=true)
//		}
//	}
//
// Attach decisions may be made later: Handler.Attach may return without
// answering and call Accept or Refuse from another goroutine; Link.Done
// tells it when the peer gave up first. Refuse sends the attach with a null
// terminus followed by detach(closed=true, error), which clients report as
// the attach's error.
//
// The engine follows the habits of the Azure Service Bus SDKs (go-amqp and
// rhea) where the spec leaves room: channel-max is never 0, every flow
// carries next-incoming-id, settle modes are echoed explicitly, detach is
// always closed=true, end implicitly detaches a session's links, credit
// survives between receive calls, and drains are answered at once.
package transport
