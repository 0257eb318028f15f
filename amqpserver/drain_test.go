package amqpserver

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/walbus/walbus/amqpserver/frames"
	"github.com/walbus/walbus/broker"
)

// The JS SDK's receiveMessages(n) adds credit, waits, then drains with the
// credit still outstanding (rhea: flow{drain=true, link-credit=<remaining>}).
// The server consumes that credit (delivery-count advances by it). The next
// receiveMessages(1) grants one credit on top of the new delivery-count; the
// broker must then lock one message for the link, not one plus the credit
// drained away before.
func TestDrainedCreditIsNotGrantedAgain(t *testing.T) {
	b, addr := startRaw(t, Config{})
	e, _ := b.Entity("q1")
	sess := plainConn(t, addr)
	js := afterADrain(t, sess, addr, "q1", false, "a", "b", "c")
	// receiveMessages(1): one credit from delivery-count 10 (rhea took the
	// server's delivery-count from the drain answer).
	js.flow(0, 10, 1, false)
	js.nextTransfer()
	// What the credit took was taken in the batch that sent the transfer.
	if err := e.Sync(); err != nil {
		t.Fatal(err)
	}
	peek, err := e.Peek(broker.MainQueue, 1, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	locked := 0
	for _, d := range peek {
		if d.State == broker.Locked {
			locked++
		}
	}
	if locked != 1 {
		t.Errorf("%d messages locked after one credit and one transfer, want 1", locked)
	}
	// Another receiver with credit must get b at once.
	rcv2, err := sess.NewReceiver(ctxT(t), "q1", &amqp.ReceiverOptions{Credit: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := rcv2.IssueCredit(5); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if m, err := rcv2.Receive(ctx, nil); err != nil {
		t.Fatalf("a receiver with credit got nothing while two messages no client has wait: %v", err)
	} else if got := string(m.GetData()); got != "b" {
		t.Fatalf("second receiver got %q, want b", got)
	}
}

// After a drain, credit on a link whose message's lock ran out brings that
// message again with a fresh lock and the next one, each once: messages
// locked for drained credit used to wait on the link, their locks ran out
// unseen, and the next credit sent a stale copy and the same message again.
func TestCreditAfterADrainSendsFreshLocksOnce(t *testing.T) {
	b, addr := startRaw(t, Config{})
	cfg := broker.DefaultConfig()
	cfg.LockDuration = 500 * time.Millisecond
	if _, err := b.CreateQueue("q2", cfg); err != nil {
		t.Fatal(err)
	}
	js := afterADrain(t, plainConn(t, addr), addr, "q2", false, "a", "b")
	js.flow(0, 10, 1, false)
	js.nextTransfer()
	// The client works on "a" past its lock; then it asks for two.
	time.Sleep(1500 * time.Millisecond)
	js.flow(0, 11, 2, false)
	seen := map[string]int{}
	for len(seen) < 2 {
		p, payload, ok := js.nextWithin(2 * time.Second)
		if !ok {
			t.Fatalf("only %v arrived for two credits", seen)
		}
		if _, isTransfer := p.(*frames.Transfer); !isTransfer {
			continue
		}
		var m amqp.Message
		if err := m.UnmarshalBinary(payload); err != nil {
			t.Fatal(err)
		}
		body := string(m.GetData())
		if seen[body]++; seen[body] > 1 {
			t.Fatalf("message %q sent twice for two credits", body)
		}
		if until, _ := m.Annotations["x-opt-locked-until"].(time.Time); !until.After(time.Now()) {
			t.Fatalf("message %q arrived with a lock that ended at %v", body, until)
		}
		if want := map[string]uint32{"a": 1, "b": 0}[body]; m.Header.DeliveryCount != want {
			t.Fatalf("message %q arrived with delivery-count %d, want %d", body, m.Header.DeliveryCount, want)
		}
	}
}

// A JS receive-and-delete receiver: receiveMessages(10) on an empty queue
// (credit, then drain), receiveMessages(1) (one credit, one message), then
// close. Only one message ever crossed the wire; the two others are still
// in the queue (they were once removed for the drained credit and dropped
// when the link closed).
func TestReceiveAndDeleteAfterADrainTakesOnlyWhatItSends(t *testing.T) {
	b, addr := startRaw(t, Config{})
	e, _ := b.Entity("q1")
	js := afterADrain(t, plainConn(t, addr), addr, "q1", true, "a", "b", "c")
	js.flow(0, 10, 1, false)
	js.nextTransfer()
	js.send(0, &frames.Detach{Handle: 0, Closed: true}, nil)
	expectFrame[*frames.Detach](js)
	// What the credit took was taken in the batch that sent the transfer.
	if err := e.Sync(); err != nil {
		t.Fatal(err)
	}
	peek, err := e.Peek(broker.MainQueue, 1, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(peek) != 2 {
		t.Fatalf("%d messages left after one of three was received, want 2", len(peek))
	}
}

// afterADrain attaches a JS-like receiver on handle 0 of queue, lets it
// ask for ten messages of the empty queue and drain, then sends bodies.
func afterADrain(t *testing.T, sess *amqp.Session, addr, queue string, receiveAndDelete bool, bodies ...string) *frameClient {
	t.Helper()
	snd, err := sess.NewSender(ctxT(t), queue, nil)
	if err != nil {
		t.Fatal(err)
	}
	js := dialFrames(t, addr)
	js.attachJS(0, "js-receiver", queue, receiveAndDelete)
	js.receiveNothing(10)
	for _, body := range bodies {
		if err := snd.Send(ctxT(t), &amqp.Message{Data: [][]byte{[]byte(body)}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return js
}

// receiveNothing is the JS SDK's receiveMessages(n) on handle 0 of an
// empty queue: credit n, then rhea's drain with all n left, answered by
// flow(drain, delivery-count n, link-credit 0).
func (r *frameClient) receiveNothing(n uint32) {
	r.t.Helper()
	r.flow(0, 0, n, false)
	r.flow(0, 0, n, true)
	for {
		p, _ := r.next()
		if fl, ok := p.(*frames.Flow); ok && fl.Drain {
			if fl.LinkCredit.Or(1) != 0 || fl.DeliveryCount.Or(0) != n {
				r.t.Fatalf("drain answer: %+v", fl)
			}
			return
		}
	}
}

// nextTransfer skips frames up to the next transfer.
func (r *frameClient) nextTransfer() {
	r.t.Helper()
	for {
		if p, _ := r.next(); p != nil {
			if _, ok := p.(*frames.Transfer); ok {
				return
			}
		}
	}
}

// A drain is answered while the queue's log is busy making something else
// durable. The JS SDK closes a link whose drain is not answered within
// 200 ms (after a receiveMessages that waited out its time), and a session
// receiver loses its session with it. Peek-lock deliveries reach the link
// as they are locked, and a receive-and-delete link with none of its
// deliveries waiting for durability has nothing the answer must follow;
// the answer waited for the log's next fsync all the same (slower than
// 200 ms on a loaded machine: JS SDK links closed, and their sessions).
func TestDrainAnsweredWhileTheLogSyncs(t *testing.T) {
	for _, mode := range []struct {
		name             string
		receiveAndDelete bool
	}{{"peek-lock", false}, {"receive-and-delete", true}} {
		t.Run(mode.name, func(t *testing.T) {
			b, addr, hold := startWithSyncHold(t)
			e, _ := b.Entity("q1")
			snd, err := plainConn(t, addr).NewSender(ctxT(t), "q1", nil)
			if err != nil {
				t.Fatal(err)
			}
			js := dialFrames(t, addr)
			js.attachJS(0, "js-receiver", "q1", mode.receiveAndDelete)
			if err := e.Sync(); err != nil {
				t.Fatal(err)
			}

			// A send whose fsync is held: the log is busy until released.
			hold.arm()
			sent := make(chan error, 1)
			go func() { sent <- snd.Send(context.Background(), &amqp.Message{Data: [][]byte{[]byte("m")}}, nil) }()
			hold.wait()

			// receiveMessages(5) on the empty queue, then rhea's drain.
			js.flow(0, 0, 5, false)
			js.flow(0, 0, 5, true)
			for {
				p, _, ok := js.nextWithin(5 * time.Second)
				if !ok {
					t.Fatal("no answer to the drain while the queue's log syncs")
				}
				if fl, isFlow := p.(*frames.Flow); isFlow && fl.Drain {
					if fl.LinkCredit.Or(1) != 0 || fl.DeliveryCount.Or(0) != 5 {
						t.Fatalf("drain answer %+v, want delivery-count 5 and no credit", fl)
					}
					break
				}
			}
			hold.free()
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			// The message sent meanwhile goes to the next credit.
			js.flow(0, 5, 1, false)
			js.nextTransfer()
		})
	}
}
