package transport

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	"github.com/walbus/walbus/amqpserver/frames"
)

// safety is the generous bound on every wait in these tests; reaching it
// means the test is broken, it never measures anything.
const safety = 30 * time.Second

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	t.Cleanup(cancel)
	return ctx
}

// testServer is a Server on a real loopback listener.
type testServer struct {
	srv  *Server
	addr string
	h    *testHandler
}

func startServer(t testing.TB, cfg Config, h *testHandler, setup ...func(*Server)) *testServer {
	t.Helper()
	if h == nil {
		h = newTestHandler()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	srv := NewServer(cfg, h)
	for _, f := range setup {
		f(srv)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), safety)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != ErrServerClosed {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return &testServer{srv: srv, addr: ln.Addr().String(), h: h}
}

// dial opens a go-amqp connection with SASL ANONYMOUS unless opts say
// otherwise.
func (ts *testServer) dial(t testing.TB, opts *amqp.ConnOptions) *amqp.Conn {
	t.Helper()
	if opts == nil {
		opts = &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()}
	}
	c, err := amqp.Dial(testCtx(t), "amqp://"+ts.addr, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newSession(t testing.TB, c *amqp.Conn) *amqp.Session {
	t.Helper()
	s, err := c.NewSession(testCtx(t), nil)
	if err != nil {
		t.Fatalf("new session: %v", err)
	}
	return s
}

// testHandler is a Handler whose behaviour each test replaces piecemeal.
// By default it accepts every connection and link; inbound deliveries are
// accepted at once; outbound links send what the test queues on them.
type testHandler struct {
	authenticate func(ConnInfo, Credentials) (any, error)
	opened       func(*Conn) *frames.Error
	attach       func(*Link)
	inbound      func(*Link) InboundHandler // the handler given to AcceptInbound
	reply        func(*Link) *Reply

	mu       sync.Mutex
	creds    []Credentials
	outs     map[string]*outSender // by link name
	outReady chan *outSender
	closed   chan connEnd
	detached chan linkEnd
	conns    chan *Conn
}

type connEnd struct {
	c   *Conn
	err error
}

type linkEnd struct {
	l   *Link
	err *frames.Error
}

func newTestHandler() *testHandler {
	return &testHandler{
		outs:     make(map[string]*outSender),
		outReady: make(chan *outSender, 64),
		closed:   make(chan connEnd, 64),
		detached: make(chan linkEnd, 1024),
		conns:    make(chan *Conn, 64),
	}
}

func (h *testHandler) Authenticate(info ConnInfo, cred Credentials) (any, error) {
	h.mu.Lock()
	h.creds = append(h.creds, cred)
	h.mu.Unlock()
	if h.authenticate != nil {
		return h.authenticate(info, cred)
	}
	return cred.Mechanism, nil
}

func (h *testHandler) ConnectionOpened(c *Conn) *frames.Error {
	select {
	case h.conns <- c:
	default:
	}
	if h.opened != nil {
		return h.opened(c)
	}
	return nil
}

func (h *testHandler) ConnectionClosed(c *Conn, err error) {
	select {
	case h.closed <- connEnd{c, err}:
	default:
	}
}

func (h *testHandler) Attach(l *Link) {
	if h.attach != nil {
		h.attach(l)
		return
	}
	h.acceptDefault(l)
}

// acceptDefault accepts l with the test's inbound handler or an outSender.
func (h *testHandler) acceptDefault(l *Link) {
	var r *Reply
	if h.reply != nil {
		r = h.reply(l)
	}
	if l.Inbound() {
		var ih InboundHandler = &acceptAll{h: h}
		if h.inbound != nil {
			ih = h.inbound(l)
		}
		if err := l.AcceptInbound(r, ih); err != nil && err != ErrLinkClosed {
			panic(err)
		}
		return
	}
	o := &outSender{l: l, h: h, dispositions: make(chan disposition, 4096)}
	if err := l.AcceptOutbound(r, o); err == ErrLinkClosed {
		return
	} else if err != nil {
		panic(err)
	}
	h.mu.Lock()
	h.outs[l.Name()] = o
	h.mu.Unlock()
	h.outReady <- o
	o.pump()
}

func (h *testHandler) linkDetached(l *Link, err *frames.Error) {
	h.detached <- linkEnd{l, err}
}

// acceptAll settles every delivery as accepted inside Deliver. A peer
// that closes its socket right after a transfer can leave the writer dead
// before the reader dispatches that transfer; Settle then says
// ErrLinkClosed, which is the answer, not a failure of the harness.
type acceptAll struct{ h *testHandler }

func (a *acceptAll) Deliver(d Delivery) {
	if err := d.Settle(&frames.Accepted{}); err != nil && err != ErrLinkClosed {
		panic(err)
	}
}
func (a *acceptAll) Detached(l *Link, err *frames.Error) { a.h.linkDetached(l, err) }

// funcInbound adapts functions to InboundHandler.
type funcInbound struct {
	h       *testHandler
	deliver func(Delivery)
}

func (f *funcInbound) Deliver(d Delivery)                  { f.deliver(d) }
func (f *funcInbound) Detached(l *Link, err *frames.Error) { f.h.linkDetached(l, err) }

// disposition is one peer disposition seen by an outSender.
type disposition struct {
	id      uint32
	state   frames.DeliveryState
	settled bool
}

// outSender serves an outbound link from a queue of payloads, sending as
// credit allows and answering drains once the queue is empty.
type outSender struct {
	l            *Link
	h            *testHandler
	settled      bool
	answer       bool // reply to unsettled dispositions with Settle
	dispositions chan disposition

	mu      sync.Mutex
	pending [][]byte
	ids     []uint32
	credits []Credit
	tag     uint64
}

func (o *outSender) push(payloads ...[]byte) {
	o.mu.Lock()
	o.pending = append(o.pending, payloads...)
	o.mu.Unlock()
	o.pump()
}

func (o *outSender) pump() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(o.pending) > 0 {
		o.tag++
		tag := []byte(fmt.Sprintf("t%d", o.tag))
		id, err := o.l.Send(tag, 0, o.pending[0], o.settled)
		if err != nil {
			break
		}
		o.ids = append(o.ids, id)
		o.pending = o.pending[1:]
	}
	if len(o.pending) == 0 && o.l.Credit().Drain {
		_ = o.l.Drained()
	}
}

func (o *outSender) Credit(l *Link, c Credit) {
	o.mu.Lock()
	o.credits = append(o.credits, c)
	o.mu.Unlock()
	o.pump()
}

func (o *outSender) Disposition(l *Link, id uint32, state frames.DeliveryState, settled bool) {
	if o.answer && !settled {
		if err := l.Settle(id, state); err != nil && err != ErrLinkClosed {
			panic(err)
		}
	}
	o.dispositions <- disposition{id, state, settled}
}

func (o *outSender) Detached(l *Link, err *frames.Error) { o.h.linkDetached(l, err) }

// nextOut waits for the next outbound link the handler accepted.
func (h *testHandler) nextOut(t testing.TB) *outSender {
	t.Helper()
	select {
	case o := <-h.outReady:
		return o
	case <-time.After(safety):
		t.Fatal("no outbound link attached")
		return nil
	}
}

func (h *testHandler) nextDetached(t testing.TB) linkEnd {
	t.Helper()
	select {
	case d := <-h.detached:
		return d
	case <-time.After(safety):
		t.Fatal("no link detached")
		return linkEnd{}
	}
}

func (h *testHandler) nextClosed(t testing.TB) connEnd {
	t.Helper()
	select {
	case d := <-h.closed:
		return d
	case <-time.After(safety):
		t.Fatal("no connection closed")
		return connEnd{}
	}
}

// encode returns an AMQP message with body data, as go-amqp encodes it.
func encode(t testing.TB, data []byte) []byte {
	t.Helper()
	b, err := amqp.NewMessage(data).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// decode returns the data body of an encoded message.
func decode(t testing.TB, payload []byte) []byte {
	t.Helper()
	var m amqp.Message
	if err := m.UnmarshalBinary(payload); err != nil {
		t.Fatalf("decode message: %v", err)
	}
	return m.GetData()
}

// waitUntil polls cond until it holds, failing after the safety bound.
func waitUntil(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(safety)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
		time.Sleep(time.Millisecond)
	}
}
