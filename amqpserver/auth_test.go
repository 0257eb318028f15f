package amqpserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/amqpserver/transport"
	"github.com/walbus/walbus/broker"
)

// startRaw is startBroker with a custom server config, for go-amqp tests.
func startRaw(t testing.TB, cfg Config) (*broker.Broker, string) {
	t.Helper()
	return startRawWith(t, cfg, broker.Options{})
}

// startRawWith is startRaw with broker options (its Dir is a new temporary
// directory).
func startRawWith(t testing.TB, cfg Config, opts broker.Options) (*broker.Broker, string) {
	t.Helper()
	opts.Dir = t.TempDir()
	opts.NewBracket = NewBracket // as serve does
	opts.FilterMessage = FilterMessage
	b, _, err := broker.Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateQueue("q1", broker.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	if cfg.Keys.Len() == 0 {
		cfg.Keys, _ = sas.NewKeys(sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE", Rights: sas.Manage},
			sas.Key{Name: "ListenOnly", Value: "listen-key", Rights: sas.Listen})
	}
	srv := New(b, cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		b.Close()
	})
	return b, l.Addr().String()
}

// putTokenRaw performs a CBS put-token with go-amqp, as the SDKs do.
func putTokenRaw(t *testing.T, conn *amqp.Conn, audience, token string) (int32, string) {
	t.Helper()
	sess, err := conn.NewSession(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctxT(t))
	resp := newMgmtClient(t, sess, "$cbs").request(
		map[string]any{"operation": "put-token", "type": sasTokenType, "name": audience, "expiration": "0"}, token)
	status, _ := resp.ApplicationProperties["status-code"].(int32)
	desc, _ := resp.ApplicationProperties["status-description"].(string)
	return status, desc
}

func strPtr(s string) *string { return &s }

func dial(t *testing.T, addr string, opts *amqp.ConnOptions) *amqp.Conn {
	t.Helper()
	conn, err := amqp.Dial(ctxT(t), "amqp://"+addr, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// SASL PLAIN with a key name and key authorises the connection for that
// key's rights without any token.
func TestSASLPlainAuthorisesTheConnection(t *testing.T) {
	_, addr := startRaw(t, Config{})
	conn := dial(t, addr, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain("ListenOnly", "listen-key")})
	sess, err := conn.NewSession(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sess.NewReceiver(ctxT(t), "q1", nil); err != nil {
		t.Fatalf("Listen key receiving: %v", err)
	}
	_, err = sess.NewSender(ctxT(t), "q1", nil)
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Condition != "amqp:unauthorized-access" {
		t.Fatalf("Listen key sending: %v", err)
	}
	if _, err := amqp.Dial(ctxT(t), "amqp://"+addr, &amqp.ConnOptions{SASLType: amqp.SASLTypePlain("ListenOnly", "wrong")}); err == nil {
		t.Fatal("a wrong key was accepted")
	}
}

// A connection that authorises nothing is closed after the grace period.
func TestUnauthorisedConnectionIsClosed(t *testing.T) {
	_, addr := startRaw(t, Config{AuthTimeout: 300 * time.Millisecond})
	conn := dial(t, addr, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
	sess, err := conn.NewSession(ctxT(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Attaching without a claim is refused...
	if _, err := sess.NewSender(ctxT(t), "q1", nil); err == nil {
		t.Fatal("attached without authorization")
	}
	// ...and then the connection goes.
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the unauthorised connection stayed open")
	}
	var connErr *amqp.ConnError
	if err := conn.Err(); !errors.As(err, &connErr) || connErr.RemoteErr == nil || connErr.RemoteErr.Condition != "amqp:unauthorized-access" {
		t.Fatalf("closed with %v", conn.Err())
	}
}

// When the token that authorised a link expires, the link is detached.
func TestExpiredTokenDetachesItsLinks(t *testing.T) {
	_, addr := startRaw(t, Config{})
	conn := dial(t, addr, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
	key := sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE"}
	audience := "amqp://" + addr + "/q1"
	if status, desc := putTokenRaw(t, conn, audience, sas.Sign(audience, key, time.Now().Add(1500*time.Millisecond), sas.GoStyle)); status != 202 {
		t.Fatalf("put-token: %d %s", status, desc)
	}
	sess, _ := conn.NewSession(ctxT(t), nil)
	rcv, err := sess.NewReceiver(ctxT(t), "q1", &amqp.ReceiverOptions{Credit: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = rcv.Receive(ctxT(t), nil)
	var linkErr *amqp.LinkError
	if !errors.As(err, &linkErr) || linkErr.RemoteErr == nil || linkErr.RemoteErr.Condition != "amqp:unauthorized-access" {
		t.Fatalf("receive after the token expired: %v", err)
	}
}

// The JS SDK puts a token for exactly the address it attaches to: the
// management node "q1/$management" or the subqueue "q1/$DeadLetterQueue",
// not "q1". Such a token authorises that address and what lies under it,
// and nothing beside it.
func TestTokenForTheExactAddress(t *testing.T) {
	b, addr := startRaw(t, Config{})
	if _, err := b.CreateQueue("q2", broker.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	key := sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE"}
	for _, c := range []struct {
		path, allowed, refused string
		inbound                bool // the allowed link is one the client sends on
	}{
		{"q1/$management", "q1/$management", "q1", true},
		{"q1/$DeadLetterQueue", "q1/$DeadLetterQueue", "q1", false},
		{"q1", "q1/$DeadLetterQueue", "q2", false},
	} {
		t.Run(c.path, func(t *testing.T) {
			conn := dial(t, addr, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
			audience := "sb://" + addr + "/" + c.path
			if status, desc := putTokenRaw(t, conn, audience, sas.Sign(audience, key, time.Now().Add(time.Hour), sas.JSStyle)); status != 202 {
				t.Fatalf("put-token: %d %s", status, desc)
			}
			sess, _ := conn.NewSession(ctxT(t), nil)
			var err error
			if c.inbound {
				_, err = sess.NewSender(ctxT(t), c.allowed, nil)
			} else {
				_, err = sess.NewReceiver(ctxT(t), c.allowed, nil)
			}
			if err != nil {
				t.Fatalf("attach to %s with a token for %s: %v", c.allowed, c.path, err)
			}
			_, err = sess.NewReceiver(ctxT(t), c.refused, nil)
			var amqpErr *amqp.Error
			if !errors.As(err, &amqpErr) || amqpErr.Condition != "amqp:unauthorized-access" {
				t.Fatalf("attach to %s with a token for %s: %v, want unauthorized-access", c.refused, c.path, err)
			}
		})
	}
}

// A token for q1 authorises q1 and what lies under it, whatever put-token
// name the client asks for: a name without a scheme with "://" further on
// (which a scheme-cutting parser restarts at) gets no claim on q2, nor on
// the whole namespace.
func TestTokenForOneQueueNeverReachesAnother(t *testing.T) {
	b, addr := startRaw(t, Config{})
	if _, err := b.CreateQueue("q2", broker.DefaultConfig()); err != nil {
		t.Fatal(err)
	}
	key := sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE"}
	token := sas.Sign("sb://"+addr+"/q1", key, time.Now().Add(time.Hour), sas.JSStyle)
	for _, requested := range []string{
		addr + "/q1/x://" + addr + "/q2", // would be a claim on q2
		addr + "/q1/x://h",               // would be a claim on the namespace
	} {
		conn := dial(t, addr, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
		if status, desc := putTokenRaw(t, conn, requested, token); status == 202 {
			t.Errorf("put-token %q with a token for q1: %d %s, want a refusal", requested, status, desc)
		}
		sess, err := conn.NewSession(ctxT(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = sess.NewReceiver(ctxT(t), "q2", nil)
		var amqpErr *amqp.Error
		if !errors.As(err, &amqpErr) || amqpErr.Condition != "amqp:unauthorized-access" {
			t.Errorf("receiving from q2 with a token for q1 (put-token name %q): %v, want unauthorized-access", requested, err)
		}
	}
}

// A put-token that replaces a claim with one ending sooner re-arms the
// expiry watch: once the new token is over, the link it covers is
// detached, not an hour later when the replaced one would have ended.
func TestShorterReplacementTokenDetaches(t *testing.T) {
	_, addr := startRaw(t, Config{})
	conn := dial(t, addr, &amqp.ConnOptions{SASLType: amqp.SASLTypeAnonymous()})
	key := sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE"}
	audience := "amqp://" + addr + "/q1"
	if status, desc := putTokenRaw(t, conn, audience, sas.Sign(audience, key, time.Now().Add(time.Hour), sas.GoStyle)); status != 202 {
		t.Fatalf("put-token: %d %s", status, desc)
	}
	sess, _ := conn.NewSession(ctxT(t), nil)
	rcv, err := sess.NewReceiver(ctxT(t), "q1", &amqp.ReceiverOptions{Credit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if status, desc := putTokenRaw(t, conn, audience, sas.Sign(audience, key, time.Now().Add(1500*time.Millisecond), sas.GoStyle)); status != 202 {
		t.Fatalf("put-token: %d %s", status, desc)
	}
	ctx, cancel := contextWithTimeout(t, 10*time.Second)
	defer cancel()
	msg, err := rcv.Receive(ctx, nil)
	var linkErr *amqp.LinkError
	if err == nil || !errors.As(err, &linkErr) || linkErr.RemoteErr == nil || linkErr.RemoteErr.Condition != "amqp:unauthorized-access" {
		t.Fatalf("receive once the replacement token is over: %v %v, want the link detached with unauthorized-access", msg, err)
	}
}

// Detached links, senders as receivers, leave the connection's expiry
// watch: a long-lived connection that opens and closes links while keeping
// its token fresh holds none of the old ones.
func TestDetachedLinksLeaveTheExpiryWatch(t *testing.T) {
	_, addr := startRaw(t, Config{Transport: transport.Config{AllowNoSASL: true}})
	conn := dial(t, addr, nil) // no SASL: the connection's state is in noSASL
	key := sas.Key{Name: "RootManageSharedAccessKey", Value: "SAS_KEY_VALUE"}
	audience := "amqp://" + addr + "/q1"
	if status, desc := putTokenRaw(t, conn, audience, sas.Sign(audience, key, time.Now().Add(time.Hour), sas.GoStyle)); status != 202 {
		t.Fatalf("put-token: %d %s", status, desc)
	}
	sess, _ := conn.NewSession(ctxT(t), nil)
	for range 20 {
		snd, err := sess.NewSender(ctxT(t), "q1", nil)
		if err != nil {
			t.Fatal(err)
		}
		rcv, err := sess.NewReceiver(ctxT(t), "q1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := snd.Close(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		if err := rcv.Close(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	watched := func() int {
		noSASL.Lock()
		defer noSASL.Unlock()
		n := 0
		for _, cs := range noSASL.m {
			cs.mu.Lock()
			n += len(cs.guarded)
			cs.mu.Unlock()
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for watched() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 senders and 20 receivers attached and detached, %d are still watched", watched())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A client that sends requests and gives the reply link no credit makes
// the server hold at most maxPendingReplies of responses: then the reply
// link is detached with resource-limit-exceeded and the held responses go.
func TestUnreadRepliesAreBounded(t *testing.T) {
	old := maxPendingReplies
	maxPendingReplies = 4 << 10
	t.Cleanup(func() { maxPendingReplies = old })
	_, addr := startRaw(t, Config{Transport: transport.Config{AllowNoSASL: true}})
	conn := dial(t, addr, nil)
	ctx := ctxT(t)
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := sess.NewSender(ctx, "$cbs", &amqp.SenderOptions{SettlementMode: amqp.SenderSettleModeSettled.Ptr()})
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := sess.NewReceiver(ctx, "$cbs", &amqp.ReceiverOptions{TargetAddress: "cbs-reply", Credit: -1})
	if err != nil {
		t.Fatal(err)
	}
	held := func() (n int) {
		noSASL.Lock()
		defer noSASL.Unlock()
		for _, cs := range noSASL.m {
			cs.mu.Lock()
			for _, rl := range cs.replies {
				rl.mu.Lock()
				n = max(n, rl.pendingBytes)
				rl.mu.Unlock()
			}
			cs.mu.Unlock()
		}
		return n
	}
	for i := range 200 {
		msg := &amqp.Message{
			Properties:            &amqp.MessageProperties{MessageID: fmt.Sprint(i), ReplyTo: strPtr("cbs-reply")},
			ApplicationProperties: map[string]any{"operation": "put-token", "type": "bad", "name": "q1"},
			Value:                 "token",
		}
		if err := snd.Send(ctx, msg, nil); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		if n := held(); n > maxPendingReplies {
			t.Fatalf("%d bytes of responses held, limit %d", n, maxPendingReplies)
		}
	}
	if err := rcv.IssueCredit(1); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := contextWithTimeout(t, 10*time.Second)
	defer cancel()
	_, err = rcv.Receive(rctx, nil)
	var linkErr *amqp.LinkError
	if !errors.As(err, &linkErr) || linkErr.RemoteErr == nil || linkErr.RemoteErr.Condition != "amqp:resource-limit-exceeded" {
		t.Fatalf("the reply link after 200 unread responses: %v, want it detached with resource-limit-exceeded", err)
	}
}

// syncHold makes queue q1's next fsync, once armed, wait until released:
// what the broker decided stays not yet durable while a test acts.
type syncHold struct {
	armed            atomic.Bool
	entered, release chan struct{}
	releaseOnce      sync.Once
}

// startWithSyncHold is startRaw with a syncHold on q1; the hold is released
// at cleanup if the test has not released it.
func startWithSyncHold(t *testing.T) (*broker.Broker, string, *syncHold) {
	t.Helper()
	h := &syncHold{entered: make(chan struct{}), release: make(chan struct{})}
	b, addr := startRawWith(t, Config{}, broker.Options{Fault: func(entity, op string) error {
		if entity == "q1" && op == "sync" && h.armed.CompareAndSwap(true, false) {
			close(h.entered)
			<-h.release
		}
		return nil
	}})
	t.Cleanup(h.free)
	return b, addr, h
}

// arm makes the next fsync of q1 wait; wait returns once it does.
func (h *syncHold) arm()  { h.armed.Store(true) }
func (h *syncHold) wait() { <-h.entered }

// free lets the held fsync go on.
func (h *syncHold) free() { h.releaseOnce.Do(func() { close(h.release) }) }
