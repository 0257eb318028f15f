package bench

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/Azure/go-amqp"
)

// amqpDriver drives the broker as a plain AMQP 1.0 peer with go-amqp: no
// CBS, no management node, nothing Service Bus specific, so the same run
// works against other brokers. It does not reconnect: a lost connection
// ends the senders and receivers on it, with an error.
type amqpDriver struct {
	url      string
	address  string // where senders send; receivers get theirs from newReceiver
	settled  bool   // receive-and-delete: the broker sends pre-settled (AMQP 1.0 §2.7.3 snd-settle-mode)
	inFlight int
	run      string
	payload  []byte

	mu    sync.Mutex
	conns []*amqp.Conn
}

func newAMQPDriver(cfg Config, run string, payload []byte) *amqpDriver {
	return &amqpDriver{url: cfg.amqpURL(), address: cfg.address(),
		settled: cfg.Mode == ModeReceiveAndDelete, inFlight: cfg.InFlight, run: run, payload: payload}
}

// session dials a connection of its own and begins one session on it.
func (d *amqpDriver) session(ctx context.Context) (*amqp.Session, error) {
	opts := &amqp.ConnOptions{}
	// go-amqp uses SASL PLAIN when the URL carries a user; otherwise ask
	// for ANONYMOUS rather than skip SASL, which most brokers require.
	if u, err := url.Parse(d.url); err == nil && u.User == nil {
		opts.SASLType = amqp.SASLTypeAnonymous()
	}
	conn, err := amqp.Dial(ctx, d.url, opts)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.conns = append(d.conns, conn)
	d.mu.Unlock()
	return conn.NewSession(ctx, nil)
}

func (d *amqpDriver) close(context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = nil
}

// amqpFailure marks the errors after which the link is gone.
func amqpFailure(err error) error {
	var connErr *amqp.ConnError
	var linkErr *amqp.LinkError
	var sessErr *amqp.SessionError
	if errors.As(err, &connErr) || errors.As(err, &linkErr) || errors.As(err, &sessErr) {
		return fatalError{err}
	}
	return err
}

type amqpSender struct {
	d *amqpDriver
	s *amqp.Sender
}

func (d *amqpDriver) newSender(ctx context.Context) (msgSender, error) {
	sess, err := d.session(ctx)
	if err != nil {
		return nil, err
	}
	s, err := sess.NewSender(ctx, d.address, nil)
	if err != nil {
		return nil, err
	}
	return &amqpSender{d: d, s: s}, nil
}

// send sends unsettled and waits for the broker's outcome; concurrent
// calls keep --in-flight transfers unsettled on the link.
func (s *amqpSender) send(ctx context.Context, stamps []stamp) error {
	for _, st := range stamps {
		msg := &amqp.Message{
			// Durable, so brokers that keep non-durable messages only in
			// memory do the same work as a Service Bus broker.
			Header:                &amqp.MessageHeader{Durable: true},
			ApplicationProperties: stampProps(st, s.d.run),
			Data:                  [][]byte{s.d.payload},
		}
		if err := s.s.Send(ctx, msg, nil); err != nil {
			return amqpFailure(err)
		}
	}
	return nil
}

// amqpReceiver manages its link credit by hand: --in-flight credits at the
// start, and each settled message's credit given back in batches of half
// that, so the broker always has messages it may send.
type amqpReceiver struct {
	d        *amqpDriver
	r        *amqp.Receiver
	returned atomic.Int64 // credits freed by settled messages, not yet reissued
}

// maxPrefetched bounds the messages one receive call takes, the first
// and those already in go-amqp's buffer.
const maxPrefetched = 256

func (d *amqpDriver) newReceiver(ctx context.Context, address string) (msgReceiver, error) {
	sess, err := d.session(ctx)
	if err != nil {
		return nil, err
	}
	opts := &amqp.ReceiverOptions{Credit: -1} // manual credit
	if d.settled {
		opts.RequestedSenderSettleMode = amqp.SenderSettleModeSettled.Ptr()
	}
	r, err := sess.NewReceiver(ctx, address, opts)
	if err != nil {
		return nil, err
	}
	if err := r.IssueCredit(uint32(d.inFlight)); err != nil {
		return nil, err
	}
	return &amqpReceiver{d: d, r: r}, nil
}

// giveBack returns one message's credit, reissuing once enough are due.
func (r *amqpReceiver) giveBack() error {
	threshold := int64(max(1, r.d.inFlight/2))
	if r.returned.Add(1) < threshold {
		return nil
	}
	n := r.returned.Swap(0)
	if n == 0 {
		return nil // another settler took them
	}
	return amqpFailure(r.r.IssueCredit(uint32(n)))
}

func (r *amqpReceiver) receive(ctx context.Context, dst []delivery) ([]delivery, error) {
	m, err := r.r.Receive(ctx, nil)
	if err != nil {
		return dst, amqpFailure(err)
	}
	for n := 1; ; n++ {
		dst, err = r.add(dst, m)
		if err != nil || n == maxPrefetched {
			return dst, err
		}
		if m = r.r.Prefetched(); m == nil {
			return dst, nil
		}
	}
}

func (r *amqpReceiver) add(dst []delivery, m *amqp.Message) ([]delivery, error) {
	sent, ours := readStamp(m.ApplicationProperties, r.d.run)
	dl := delivery{sent: sent, ours: ours}
	if r.d.settled {
		// Nothing to settle: the credit is free as soon as it arrives.
		return append(dst, dl), r.giveBack()
	}
	dl.settle = func(ctx context.Context) error {
		if err := r.r.AcceptMessage(ctx, m); err != nil {
			return amqpFailure(err)
		}
		return r.giveBack()
	}
	return append(dst, dl), nil
}
