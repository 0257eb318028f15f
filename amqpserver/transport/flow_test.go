package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	amqp "github.com/Azure/go-amqp"
	"github.com/walbus/walbus/amqpserver/frames"
)

// TestSessionWindowRefreshed: with a tiny incoming window the server
// sends session flows as transfers arrive, each with next-incoming-id, so
// a peer honouring the window is never stuck (§2.5.6).
func TestSessionWindowRefreshedRaw(t *testing.T) {
	ts := startServer(t, Config{}, nil, func(s *Server) { s.sessionWindow = 4 })
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	if b := r.begin(0); b.IncomingWindow != 4 {
		t.Fatalf("incoming-window %d", b.IncomingWindow)
	}
	r.attachSender(0, 0, "s")
	window := uint32(4) // as the peer computes it from our begin
	next := uint32(0)
	for id := uint32(0); id < 20; id++ {
		if window == 0 {
			fl := expect[*frames.Flow](r)
			if fl.Handle.Present || !fl.NextIncomingID.Present {
				t.Fatalf("session flow %+v", fl)
			}
			window = fl.NextIncomingID.Value + fl.IncomingWindow - next
		}
		r.transfer(0, 0, id, true, []byte("x"))
		next++
		window--
	}
}

func TestEcho(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.attachSender(0, 0, "s")
	r.attachReceiver(0, 1, "r", frames.ReceiverSettleFirst)
	base := frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 100, OutgoingWindow: 100, Echo: true}

	r.send(0, &base, nil)
	if fl := expect[*frames.Flow](r); fl.Handle.Present || fl.Echo || !fl.NextIncomingID.Present {
		t.Fatalf("session echo %+v", fl)
	}
	in := base
	in.Handle, in.DeliveryCount = frames.Some[uint32](0), frames.Some[uint32](0)
	r.send(0, &in, nil)
	if fl := expect[*frames.Flow](r); fl.Handle.Or(9) != 0 || fl.Echo || fl.LinkCredit.Or(0) != DefaultLinkCredit {
		t.Fatalf("inbound link echo %+v", fl)
	}
	out := base
	out.Handle, out.DeliveryCount, out.LinkCredit = frames.Some[uint32](1), frames.Some[uint32](0), frames.Some[uint32](3)
	r.send(0, &out, nil)
	if fl := expect[*frames.Flow](r); fl.Handle.Or(9) != 1 || fl.Echo || fl.LinkCredit.Or(0) != 3 || fl.DeliveryCount.Or(9) != 0 {
		t.Fatalf("outbound link echo %+v", fl)
	}
}

// TestCreditBeforeAccept: flows that arrive while the attach is pending
// are kept; Accept answers a pending drain and Credit shows the rest.
func TestCreditBeforeAccept(t *testing.T) {
	h := newTestHandler()
	pending := make(chan *Link, 2)
	h.attach = func(l *Link) { pending <- l }
	ts := startServer(t, Config{}, h)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	for handle, drain := range []bool{false, true} {
		r.send(0, &frames.Attach{Name: "r", Handle: uint32(handle), Role: frames.RoleReceiver, Source: &frames.Source{Address: "q"}, Target: &frames.Target{}}, nil)
		credit := uint32(5)
		if drain {
			credit = 0
		}
		r.send(0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 100, OutgoingWindow: 100,
			Handle: frames.Some(uint32(handle)), LinkCredit: frames.Some(credit), Drain: drain}, nil)
		// A session echo behind the flow proves the flow was processed.
		r.send(0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 100, OutgoingWindow: 100, Echo: true}, nil)
		if fl := expect[*frames.Flow](r); fl.Handle.Present {
			t.Fatalf("echo answer %+v", fl)
		}
		l := <-pending
		o := &outSender{l: l, h: h, dispositions: make(chan disposition, 1)}
		if err := l.AcceptOutbound(nil, o); err != nil {
			t.Fatal(err)
		}
		expect[*frames.Attach](r)
		if drain {
			if fl := expect[*frames.Flow](r); !fl.Drain || fl.LinkCredit.Or(9) != 0 {
				t.Fatalf("drain answer %+v", fl)
			}
			continue
		}
		if c := l.Credit(); c.Limit != 5 || c.Available() != 5 {
			t.Fatalf("credit %+v", c)
		}
	}
}

// TestDispositionRanges: one disposition may settle a huge range; only
// our unsettled deliveries in it are reported, once.
func TestDispositionRanges(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.attachReceiver(0, 0, "r", frames.ReceiverSettleFirst)
	o := ts.h.nextOut(t)
	r.send(0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 100, OutgoingWindow: 100,
		Handle: frames.Some[uint32](0), DeliveryCount: frames.Some[uint32](0), LinkCredit: frames.Some[uint32](10)}, nil)
	waitUntil(t, func() bool { return o.l.Credit().Limit == 10 })
	o.push([]byte("a"), []byte("b"), []byte("c"))
	for i := 0; i < 3; i++ {
		expect[*frames.Transfer](r)
	}
	r.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: 1, Last: frames.Some[uint32](4000000000), Settled: true, State: &frames.Accepted{}}, nil)
	r.send(0, &frames.Disposition{Role: frames.RoleReceiver, First: 0, Last: frames.Some[uint32](2), Settled: true, State: &frames.Released{}}, nil)
	got := map[uint32]string{}
	for i := 0; i < 3; i++ {
		d := <-o.dispositions
		if !d.settled {
			t.Fatalf("disposition %+v", d)
		}
		switch d.state.(type) {
		case *frames.Accepted:
			got[d.id] = "accepted"
		case *frames.Released:
			got[d.id] = "released"
		}
	}
	if got[0] != "released" || got[1] != "accepted" || got[2] != "accepted" {
		t.Fatalf("dispositions %v", got)
	}
	select {
	case d := <-o.dispositions:
		t.Fatalf("extra disposition %+v", d)
	default:
	}
}

// TestAbortedDelivery: an aborted delivery is dropped and its credit comes
// back (§2.6.14).
func TestAbortedDelivery(t *testing.T) {
	h := newTestHandler()
	col := newCollector(h, 4)
	h.inbound = func(*Link) InboundHandler { return col }
	h.reply = func(*Link) *Reply { return &Reply{Credit: 1} }
	ts := startServer(t, Config{}, h)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.attachSender(0, 0, "s")
	r.send(0, &frames.Transfer{Handle: 0, DeliveryID: frames.Some[uint32](0), DeliveryTag: []byte{0}, MessageFormat: frames.Some[uint32](0), More: true}, []byte("part"))
	r.send(0, &frames.Transfer{Handle: 0, Aborted: true}, nil)
	if fl := expect[*frames.Flow](r); fl.DeliveryCount.Or(0) != 1 || fl.LinkCredit.Or(0) != 1 {
		t.Fatalf("credit after abort %+v", fl)
	}
	r.transfer(0, 0, 1, false, []byte("whole"))
	d := <-col.deliveries
	if d.ID != 1 || string(d.Payload) != "whole" {
		t.Fatalf("delivery %+v", d)
	}
}

// TestShutdownDuringHandshake: Shutdown does not wait for a client stuck
// in SASL.
func TestShutdownDuringHandshake(t *testing.T) {
	srv := NewServer(Config{}, newTestHandler())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	r := dialRaw(t, ln.Addr().String())
	r.header(frames.ProtocolSASL)
	r.readHeader()
	expect[*frames.SASLMechanisms](r)
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	r.expectEOF()
}

// TestTLS serves a TLS listener; the handler sees the TLS state.
func TestTLS(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	h := newTestHandler()
	infos := make(chan ConnInfo, 1)
	h.authenticate = func(info ConnInfo, _ Credentials) (any, error) {
		infos <- info
		return nil, nil
	}
	srv := NewServer(Config{}, h)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	c, err := amqp.Dial(testCtx(t), "amqps://"+ln.Addr().String(), &amqp.ConnOptions{
		SASLType: amqp.SASLTypeAnonymous(), TLSConfig: &tls.Config{InsecureSkipVerify: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if info := <-infos; info.TLS == nil || !info.TLS.HandshakeComplete {
		t.Fatalf("conn info %+v", info)
	}
	snd, err := newSession(t, c).NewSender(testCtx(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snd.Send(testCtx(t), amqp.NewMessage([]byte("secure")), nil); err != nil {
		t.Fatal(err)
	}
}

// TestQueuedTransferKeepsItsTag: a delivery held back by the peer's closed
// session window goes out with the tag it was sent with, although Send
// lets the caller reuse its tag buffer once it returns.
func TestQueuedTransferKeepsItsTag(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.beginWindow(0, 0) // our incoming-window is 0: nothing may be sent yet
	r.attachReceiver(0, 0, "r", frames.ReceiverSettleFirst)
	o := ts.h.nextOut(t)
	r.send(0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 0, OutgoingWindow: 100,
		Handle: frames.Some[uint32](0), DeliveryCount: frames.Some[uint32](0), LinkCredit: frames.Some[uint32](1)}, nil)
	waitUntil(t, func() bool { return o.l.Credit().Available() == 1 })

	tag := []byte("AAAA")
	if _, err := o.l.Send(tag, 0, []byte("payload"), false); err != nil {
		t.Fatal(err)
	}
	copy(tag, "BBBB") // allowed by Send's contract

	// Open the window.
	r.send(0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 100, OutgoingWindow: 100}, nil)
	tr := expect[*frames.Transfer](r)
	if string(tr.DeliveryTag) != "AAAA" {
		t.Fatalf("delivery-tag %q, want %q (the caller's buffer was reused after Send returned)", tr.DeliveryTag, "AAAA")
	}
}

// TestLinkFlowWaitsForQueuedTransfers: a drain answered while the delivery
// that used the credit still waits for the peer's session window goes out
// after that transfer. The peer counts deliveries as they arrive
// (§2.6.7); a flow(delivery-count=1, link-credit=0) ahead of the transfer
// would have it count the delivery twice and grant one credit more than
// it meant on its next flow.
func TestLinkFlowWaitsForQueuedTransfers(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.beginWindow(0, 0)
	r.attachReceiver(0, 0, "r", frames.ReceiverSettleFirst)
	o := ts.h.nextOut(t)
	o.push([]byte("m")) // no credit yet: stays pending in the handler

	r.send(0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 0, OutgoingWindow: 100,
		Handle: frames.Some[uint32](0), DeliveryCount: frames.Some[uint32](0), LinkCredit: frames.Some[uint32](1), Drain: true}, nil)
	waitUntil(t, func() bool { return o.l.Credit().Sent == 1 })

	// Open the session window so the queued transfer can go.
	r.send(0, &frames.Flow{NextIncomingID: frames.Some[uint32](0), IncomingWindow: 100, OutgoingWindow: 100}, nil)

	// The receiver's view, per §2.6.7.
	var rcvDeliveryCount, rcvCredit uint32 = 0, 1
	var order []string
	for len(order) < 2 {
		f := r.next()
		switch p := f.p.(type) {
		case *frames.Transfer:
			order = append(order, "transfer")
			rcvDeliveryCount++
			rcvCredit--
		case *frames.Flow:
			if !p.Handle.Present {
				continue
			}
			order = append(order, "flow")
			rcvDeliveryCount = p.DeliveryCount.Value
			rcvCredit = p.LinkCredit.Value
		default:
			t.Fatalf("unexpected %T", p)
		}
	}
	t.Logf("order %v; receiver delivery-count %d, link-credit %d", order, rcvDeliveryCount, rcvCredit)

	// The receiver grants 1 more credit on top of its view of the count.
	r.send(0, &frames.Flow{NextIncomingID: frames.Some[uint32](1), IncomingWindow: 100, OutgoingWindow: 100,
		Handle: frames.Some[uint32](0), DeliveryCount: frames.Some(rcvDeliveryCount), LinkCredit: frames.Some[uint32](1)}, nil)
	waitUntil(t, func() bool { return o.l.Credit().Limit != 1 })
	if c := o.l.Credit(); order[0] != "transfer" || c.Available() != 1 {
		t.Fatalf("frames arrived as %v; after the receiver granted link-credit 1 the server believes it may send %d", order, c.Available())
	}
}
