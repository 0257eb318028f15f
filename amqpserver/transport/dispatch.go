package transport

import "github.com/walbus/walbus/amqpserver/frames"

// eventKind names a handler callback the reader owes.
type eventKind uint8

const (
	evAttach eventKind = iota + 1
	evDeliver
	evCredit
	evDisposition
	evDetached
)

// event is a handler callback recorded while mu is held and run by
// dispatch after it is released, so handlers may call back into the
// engine. Only the reader goroutine records and runs them.
type event struct {
	kind     eventKind
	link     *Link
	handler  LinkHandler
	in       InboundHandler
	out      OutboundHandler
	delivery Delivery
	credit   Credit
	id       uint32
	state    frames.DeliveryState
	settled  bool
	err      *frames.Error
}

// dispatch runs the recorded callbacks in order. Reader goroutine only.
func (c *Conn) dispatch() {
	for i := range c.events {
		e := &c.events[i]
		switch e.kind {
		case evAttach:
			c.srv.handler.Attach(e.link)
		case evDeliver:
			e.in.Deliver(e.delivery)
		case evCredit:
			e.out.Credit(e.link, e.credit)
		case evDisposition:
			e.out.Disposition(e.link, e.id, e.state, e.settled)
		case evDetached:
			e.handler.Detached(e.link, e.err)
		}
		*e = event{}
	}
	c.events = c.events[:0]
}
