package transport

import (
	"context"
	"errors"
	"testing"

	amqp "github.com/Azure/go-amqp"
	"github.com/walbus/walbus/amqpserver/frames"
)

// TestEndWithoutDetach: ending a session detaches its links implicitly
// (Service Bus clients do this, docs/compatibility.md §2).
func TestEndWithoutDetach(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.attachSender(0, 0, "s")
	r.attachReceiver(0, 1, "r", frames.ReceiverSettleFirst)
	r.send(0, &frames.End{}, nil)
	if e := expect[*frames.End](r); e.Error != nil {
		t.Fatalf("end reply %v", e.Error)
	}
	names := map[string]bool{}
	for i := 0; i < 2; i++ {
		d := ts.h.nextDetached(t)
		if d.err != nil {
			t.Fatalf("detached with %v", d.err)
		}
		names[d.l.Name()] = true
	}
	if !names["s"] || !names["r"] {
		t.Fatalf("detached %v", names)
	}
	// The channel is free again.
	r.begin(0)
}

func TestGoAMQPSessionClose(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	s := newSession(t, ts.dial(t, nil))
	if _, err := s.NewSender(testCtx(t), "q", nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	ts.h.nextDetached(t)
}

func TestDetachByPeer(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.attachSender(0, 0, "s")
	r.send(0, &frames.Detach{Handle: 0, Closed: true, Error: &frames.Error{Condition: "test:bye"}}, nil)
	if d := expect[*frames.Detach](r); !d.Closed || d.Error != nil {
		t.Fatalf("detach reply %+v", d)
	}
	if d := ts.h.nextDetached(t); condition(d.err) != "test:bye" {
		t.Fatalf("detached with %v", d.err)
	}
	// The handle can be reused.
	r.attachSender(0, 0, "s2")
}

// TestDetachWithError: the handler closes a link with an error; go-amqp
// reports it as a *LinkError.
func TestDetachWithError(t *testing.T) {
	h := newTestHandler()
	var links = make(chan *Link, 1)
	h.inbound = func(l *Link) InboundHandler {
		links <- l
		return &acceptAll{h: h}
	}
	ts := startServer(t, Config{}, h)
	snd, err := newSession(t, ts.dial(t, nil)).NewSender(testCtx(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	l := <-links
	if err := l.Close(&frames.Error{Condition: CondDetachForced, Description: "entity deleted"}); err != nil {
		t.Fatal(err)
	}
	if d := ts.h.nextDetached(t); condition(d.err) != CondDetachForced {
		t.Fatalf("Detached with %v", d.err)
	}
	err = snd.Send(testCtx(t), amqp.NewMessage([]byte("x")), nil)
	var le *amqp.LinkError
	if !errors.As(err, &le) || le.RemoteErr == nil || le.RemoteErr.Condition != amqp.ErrCond(CondDetachForced) {
		t.Fatalf("send after detach: %v", err)
	}
	if err := l.Close(nil); err != ErrLinkClosed {
		t.Fatalf("second close: %v", err)
	}
}

// TestAttachRefused: a null terminus then detach(error) reaches go-amqp as
// the error from NewSender/NewReceiver (v1.7.0 returns the *amqp.Error
// itself, not wrapped in a *LinkError).
func TestAttachRefused(t *testing.T) {
	h := newTestHandler()
	h.attach = func(l *Link) {
		if err := l.Refuse(&frames.Error{Condition: CondNotFound, Description: "no such queue"}); err != nil {
			panic(err)
		}
	}
	ts := startServer(t, Config{}, h)
	s := newSession(t, ts.dial(t, nil))
	_, err := s.NewSender(testCtx(t), "missing", nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondNotFound || ae.Description != "no such queue" {
		t.Fatalf("sender refused with %v", err)
	}
	_, err = s.NewReceiver(testCtx(t), "missing", nil)
	if !errors.As(err, &ae) || ae.Condition != amqp.ErrCondNotFound {
		t.Fatalf("receiver refused with %v", err)
	}
	// The session survives and handles are reused.
	for i := 0; i < 3; i++ {
		if _, err := s.NewSender(testCtx(t), "missing", nil); err == nil {
			t.Fatal("refusal did not repeat")
		}
	}

	// The raw frames: attach with a null target, detach(closed, error).
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.send(0, &frames.Attach{Name: "x", Handle: 0, Role: frames.RoleSender, Source: &frames.Source{}, Target: &frames.Target{Address: "missing"}, InitialDeliveryCount: frames.Some[uint32](0)}, nil)
	a := expect[*frames.Attach](r)
	d := expect[*frames.Detach](r)
	if a.Target != nil || a.Role != frames.RoleReceiver || !d.Closed || condition(d.Error) != CondNotFound {
		t.Fatalf("refusal frames %+v %+v", a, d)
	}
}

// TestAttachAsync completes an attach from another goroutine later, as a
// handler waiting for a session lock would.
func TestAttachAsync(t *testing.T) {
	h := newTestHandler()
	pending := make(chan *Link, 4)
	h.attach = func(l *Link) { pending <- l }
	ts := startServer(t, Config{}, h)
	s := newSession(t, ts.dial(t, nil))
	type result struct {
		snd *amqp.Sender
		err error
	}
	done := make(chan result, 1)
	go func() {
		snd, err := s.NewSender(testCtx(t), "q", nil)
		done <- result{snd, err}
	}()
	l := <-pending
	go func() {
		if err := l.AcceptInbound(&Reply{Properties: nil}, &acceptAll{h: h}); err != nil {
			t.Error(err)
		}
	}()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if err := res.snd.Send(testCtx(t), amqp.NewMessage([]byte("late")), nil); err != nil {
		t.Fatal(err)
	}
	if err := l.AcceptInbound(nil, &acceptAll{h: h}); err != ErrAttached {
		t.Fatalf("second accept: %v", err)
	}
}

// TestAttachCancelled: the peer detaches, or ends the session, before the
// handler answers; Done tells the handler and a late Accept fails.
func TestAttachCancelled(t *testing.T) {
	h := newTestHandler()
	pending := make(chan *Link, 4)
	h.attach = func(l *Link) { pending <- l }
	ts := startServer(t, Config{}, h)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.send(0, &frames.Attach{Name: "a", Handle: 0, Role: frames.RoleReceiver, Source: &frames.Source{Address: "q"}, Target: &frames.Target{}}, nil)
	l := <-pending
	r.send(0, &frames.Detach{Handle: 0, Closed: true}, nil)
	// The server answers for the handler: attach with a null source, then
	// detach.
	a := expect[*frames.Attach](r)
	if d := expect[*frames.Detach](r); a.Source != nil || !d.Closed {
		t.Fatalf("answers %+v %+v", a, d)
	}
	<-l.Done()
	if err := l.AcceptOutbound(nil, &outSender{}); err != ErrLinkClosed {
		t.Fatalf("accept after detach: %v", err)
	}

	r.send(0, &frames.Attach{Name: "b", Handle: 0, Role: frames.RoleSender, Source: &frames.Source{}, Target: &frames.Target{Address: "q"}, InitialDeliveryCount: frames.Some[uint32](0)}, nil)
	l = <-pending
	r.send(0, &frames.End{}, nil)
	expect[*frames.End](r)
	<-l.Done()
	if err := l.AcceptInbound(nil, &acceptAll{h: h}); err != ErrLinkClosed {
		t.Fatalf("accept after end: %v", err)
	}
	if err := l.Refuse(nil); err != ErrLinkClosed {
		t.Fatalf("refuse after end: %v", err)
	}
}

func TestWrongRole(t *testing.T) {
	h := newTestHandler()
	errs := make(chan error, 2)
	h.attach = func(l *Link) {
		errs <- l.AcceptOutbound(nil, &outSender{})
		_ = l.AcceptInbound(nil, &acceptAll{h: h})
	}
	ts := startServer(t, Config{}, h)
	if _, err := newSession(t, ts.dial(t, nil)).NewSender(testCtx(t), "q", nil); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != ErrWrongRole {
		t.Fatalf("accept with the wrong role: %v", err)
	}
}

// TestConnClose: the handler closes a connection with an error.
func TestConnClose(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	c := ts.dial(t, nil)
	sc := <-ts.h.conns
	sc.Close(&frames.Error{Condition: CondUnauthorizedAccess, Description: "token expired"})
	<-c.Done()
	var ce *amqp.ConnError
	if err := c.Err(); !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != amqp.ErrCondUnauthorizedAccess {
		t.Fatalf("client saw %v", err)
	}
	var fe *frames.Error
	if e := ts.h.nextClosed(t); !errors.As(e.err, &fe) || fe.Condition != CondUnauthorizedAccess {
		t.Fatalf("ConnectionClosed with %v", e.err)
	}
	<-sc.Done()
}

// TestOpenRefusedByHandler: ConnectionOpened returning an error closes.
func TestOpenRefusedByHandler(t *testing.T) {
	h := newTestHandler()
	h.opened = func(*Conn) *frames.Error { return &frames.Error{Condition: CondNotAllowed, Description: "go away"} }
	ts := startServer(t, Config{}, h)
	c, err := amqp.Dial(testCtx(t), "amqp://"+ts.addr, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
	if err == nil {
		<-c.Done()
		err = c.Err()
	}
	var ce *amqp.ConnError
	if !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != amqp.ErrCondNotAllowed {
		t.Fatalf("client saw %v", err)
	}
}

// TestShutdown closes live connections with connection:forced.
func TestShutdown(t *testing.T) {
	h := newTestHandler()
	ts := startServer(t, Config{}, h)
	c := ts.dial(t, nil)
	if _, err := newSession(t, c).NewSender(testCtx(t), "q", nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	<-c.Done()
	var ce *amqp.ConnError
	if err := c.Err(); !errors.As(err, &ce) || ce.RemoteErr == nil || ce.RemoteErr.Condition != amqp.ErrCondConnectionForced {
		t.Fatalf("client saw %v", err)
	}
	if d := h.nextDetached(t); condition(d.err) != CondConnectionForced {
		t.Fatalf("link detached with %v", d.err)
	}
	if e := h.nextClosed(t); e.err == nil {
		t.Fatal("closed without error")
	}
	if _, err := amqp.Dial(testCtx(t), "amqp://"+ts.addr, nil); err == nil {
		t.Fatal("dial after shutdown succeeded")
	}
}
