package transport

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	amqp "github.com/Azure/go-amqp"
	"github.com/walbus/walbus/amqpserver/frames"
)

// collector is an InboundHandler that keeps every delivery, copied, for
// the test to settle.
type collector struct {
	h          *testHandler
	deliveries chan Delivery
}

func newCollector(h *testHandler, n int) *collector {
	return &collector{h: h, deliveries: make(chan Delivery, n)}
}

// collectingServer starts a server with cfg whose inbound links all
// deliver to one collector holding up to n deliveries.
func collectingServer(t *testing.T, cfg Config, n int) (*testServer, *collector) {
	t.Helper()
	h := newTestHandler()
	col := newCollector(h, n)
	h.inbound = func(*Link) InboundHandler { return col }
	return startServer(t, cfg, h), col
}

func (c *collector) Deliver(d Delivery) {
	d.Tag = bytes.Clone(d.Tag)
	d.Payload = bytes.Clone(d.Payload)
	d.State = cloneState(d.State)
	c.deliveries <- d
}
func (c *collector) Detached(l *Link, err *frames.Error) { c.h.linkDetached(l, err) }

func TestSendUnsettled(t *testing.T) {
	ts, col := collectingServer(t, Config{}, 16)
	snd, err := newSession(t, ts.dial(t, nil)).NewSender(testCtx(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- snd.Send(testCtx(t), amqp.NewMessage([]byte("one")), nil) }()
	d := <-col.deliveries
	if d.Settled || d.MessageFormat != 0 || len(d.Tag) == 0 || string(decode(t, d.Payload)) != "one" {
		t.Fatalf("delivery %+v", d)
	}
	if err := d.Settle(&frames.Accepted{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := d.Settle(&frames.Accepted{}); !errors.Is(err, ErrUnknownDelivery) {
		t.Fatalf("second settle: %v", err)
	}
}

func TestSendSettled(t *testing.T) {
	ts, col := collectingServer(t, Config{}, 16)
	mode := amqp.SenderSettleModeSettled
	snd, err := newSession(t, ts.dial(t, nil)).NewSender(testCtx(t), "q", &amqp.SenderOptions{SettlementMode: &mode})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := snd.Send(testCtx(t), amqp.NewMessage([]byte("fire")), nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ {
		d := <-col.deliveries
		if !d.Settled {
			t.Fatalf("delivery %d not pre-settled", i)
		}
		// Settling a pre-settled delivery only returns its credit.
		if err := d.Settle(nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSendPipelinedOutOfOrder sends many messages concurrently and settles
// them in random order with mixed outcomes; each Send sees its own.
func TestSendPipelinedOutOfOrder(t *testing.T) {
	const n = 500
	ts, col := collectingServer(t, Config{}, n)
	snd, err := newSession(t, ts.dial(t, nil)).NewSender(testCtx(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = snd.Send(testCtx(t), amqp.NewMessage([]byte(fmt.Sprint(i))), nil)
		}()
	}
	batch := make([]Delivery, 0, n)
	for len(batch) < n {
		batch = append(batch, <-col.deliveries)
	}
	rand.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
	var settle sync.WaitGroup
	for w := 0; w < 4; w++ {
		settle.Add(1)
		go func() {
			defer settle.Done()
			for i := w; i < n; i += 4 {
				d := batch[i]
				var state frames.DeliveryState = &frames.Accepted{}
				if body := string(decode(t, d.Payload)); body[len(body)-1] == '7' {
					state = &frames.Rejected{Error: &frames.Error{Condition: "test:seven", Description: body}}
				}
				if err := d.Settle(state); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	settle.Wait()
	wg.Wait()
	for i, err := range errs {
		want := fmt.Sprint(i)[len(fmt.Sprint(i))-1] == '7'
		var ae *amqp.Error
		got := errors.As(err, &ae) && ae.Condition == "test:seven" && ae.Description == fmt.Sprint(i)
		if want != got || (!want && err != nil) {
			t.Fatalf("send %d: %v", i, err)
		}
	}
}

func TestSendRejected(t *testing.T) {
	h := newTestHandler()
	h.inbound = func(*Link) InboundHandler {
		return &funcInbound{h: h, deliver: func(d Delivery) {
			_ = d.Settle(&frames.Rejected{Error: &frames.Error{Condition: "amqp:precondition-failed", Description: "no"}})
		}}
	}
	ts := startServer(t, Config{}, h)
	snd, err := newSession(t, ts.dial(t, nil)).NewSender(testCtx(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	err = snd.Send(testCtx(t), amqp.NewMessage([]byte("x")), nil)
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Condition != "amqp:precondition-failed" || ae.Description != "no" {
		t.Fatalf("send error %v", err)
	}
}

// keptBuffer reports, for each delivery, the capacity of the reassembly
// buffer its link keeps for the next one.
type keptBuffer struct {
	*collector
	kept chan int
}

func (k keptBuffer) Deliver(d Delivery) {
	k.kept <- cap(d.Link.asm.buf) // the reader goroutine: the buffer's owner
	k.collector.Deliver(d)
}

// TestSendLargeMessages sends messages of 1 MB and more through small
// frames; the handler sees each reassembled exactly, and the link does not
// keep a buffer over keepAssemblyBuffer once a delivery is handed over.
func TestSendLargeMessages(t *testing.T) {
	h := newTestHandler()
	col := keptBuffer{newCollector(h, 4), make(chan int, 4)}
	h.inbound = func(*Link) InboundHandler { return col }
	ts := startServer(t, Config{MaxFrameSize: 4096, MaxMessageSize: 5 << 20}, h)
	snd, err := newSession(t, ts.dial(t, nil)).NewSender(testCtx(t), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	if snd.MaxMessageSize() != 5<<20 {
		t.Fatalf("advertised max-message-size %d", snd.MaxMessageSize())
	}
	for _, size := range []int{1 << 20, 3<<20 + 17, 64 << 10} {
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(i * 7)
		}
		done := make(chan error, 1)
		go func() { done <- snd.Send(testCtx(t), amqp.NewMessage(body), nil) }()
		d := <-col.deliveries
		if !bytes.Equal(decode(t, d.Payload), body) {
			t.Fatalf("message of %d bytes corrupted", size)
		}
		switch kept := <-col.kept; {
		case size > keepAssemblyBuffer && kept != 0:
			t.Fatalf("after a message of %d bytes the link keeps a buffer of %d", size, kept)
		case size < keepAssemblyBuffer && kept < size:
			t.Fatalf("after a message of %d bytes the link keeps %d bytes, not its buffer", size, kept)
		}
		if err := d.Settle(&frames.Accepted{}); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// TestAppendGrowing: frames appended one by one keep their bytes in order,
// and a full buffer doubles, so a message of n frames costs about log2(n)
// copies of what has arrived, not one per quarter of growth.
func TestAppendGrowing(t *testing.T) {
	var buf, want []byte
	grows := 0
	for i := range 2000 {
		frame := bytes.Repeat([]byte{byte(i)}, 4000+i%97)
		before := cap(buf)
		buf = appendGrowing(buf, frame)
		want = append(want, frame...)
		if cap(buf) != before {
			grows++
			if before > 0 && cap(buf) < 2*before {
				t.Fatalf("grew from %d to %d", before, cap(buf))
			}
		}
	}
	if !bytes.Equal(buf, want) {
		t.Fatal("appended bytes differ")
	}
	if grows > 12 { // 8 MB in frames of about 4 KB: 12 doublings at most
		t.Fatalf("%d reallocations for %d bytes", grows, len(buf))
	}
}

func TestSendSettleModesEchoed(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	s := newSession(t, ts.dial(t, nil))
	for _, snd := range []amqp.SenderSettleMode{amqp.SenderSettleModeUnsettled, amqp.SenderSettleModeSettled, amqp.SenderSettleModeMixed} {
		for _, rcv := range []amqp.ReceiverSettleMode{amqp.ReceiverSettleModeFirst, amqp.ReceiverSettleModeSecond} {
			// go-amqp fails the attach if a requested mode is not echoed.
			l, err := s.NewSender(testCtx(t), "q", &amqp.SenderOptions{SettlementMode: &snd, RequestedReceiverSettleMode: &rcv})
			if err != nil {
				t.Fatalf("snd %v rcv %v: %v", snd, rcv, err)
			}
			_ = l.Close(testCtx(t))
		}
	}
}

// TestSendSecondMode covers rcv-settle-mode second on a go-amqp sender:
// the mode is echoed (go-amqp fails the attach otherwise) and our settled
// outcomes end its sends.
func TestSendSecondMode(t *testing.T) {
	ts := startServer(t, Config{}, nil)
	rcv := amqp.ReceiverSettleModeSecond
	snd, err := newSession(t, ts.dial(t, nil)).NewSender(testCtx(t), "q", &amqp.SenderOptions{RequestedReceiverSettleMode: &rcv})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if err := snd.Send(testCtx(t), amqp.NewMessage([]byte("x")), nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSlowHandlerBackPressuresItsLinkOnly holds every delivery of one link
// while another link keeps flowing; the held link never has more than its
// credit window outstanding.
func TestSlowHandlerBackPressuresItsLinkOnly(t *testing.T) {
	const window = 8
	h := newTestHandler()
	slow := newCollector(h, 100)
	h.inbound = func(l *Link) InboundHandler {
		if l.PeerAttach().Target.Address == "slow" {
			return slow
		}
		return &acceptAll{h: h}
	}
	h.reply = func(*Link) *Reply { return &Reply{Credit: window} }
	ts := startServer(t, Config{}, h)
	s := newSession(t, ts.dial(t, nil))
	slowSnd, err := s.NewSender(testCtx(t), "slow", nil)
	if err != nil {
		t.Fatal(err)
	}
	fastSnd, err := s.NewSender(testCtx(t), "fast", nil)
	if err != nil {
		t.Fatal(err)
	}
	var slowDone atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 3*window; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := slowSnd.Send(testCtx(t), amqp.NewMessage([]byte("s")), nil); err != nil {
				t.Error(err)
			}
			slowDone.Add(1)
		}()
	}
	for i := 0; i < 100; i++ {
		if err := fastSnd.Send(testCtx(t), amqp.NewMessage([]byte("f")), nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(slow.deliveries); got > window {
		t.Fatalf("%d deliveries outstanding, window %d", got, window)
	}
	if slowDone.Load() != 0 {
		t.Fatal("a held send completed")
	}
	for i := 0; i < 3*window; i++ {
		d := <-slow.deliveries
		if n := len(slow.deliveries); n >= window {
			t.Fatalf("%d more deliveries outstanding beyond one being settled", n)
		}
		if err := d.Settle(&frames.Accepted{}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}

// TestSendBatchFormat keeps the transfer's message-format.
func TestSendBatchFormat(t *testing.T) {
	ts, col := collectingServer(t, Config{}, 4)
	r := dialRaw(t, ts.addr)
	r.open(frames.Open{})
	r.begin(0)
	r.attachSender(0, 0, "s")
	r.send(0, &frames.Transfer{Handle: 0, DeliveryID: frames.Some[uint32](0), DeliveryTag: []byte{1},
		MessageFormat: frames.Some(frames.MessageFormatBatch), State: &frames.TransactionalState{TxnID: []byte("tx1")}}, []byte("payload"))
	d := <-col.deliveries
	ts2, ok := d.State.(*frames.TransactionalState)
	if d.MessageFormat != frames.MessageFormatBatch || !ok || string(ts2.TxnID) != "tx1" || string(d.Payload) != "payload" {
		t.Fatalf("delivery %+v", d)
	}
	_ = d.Settle(&frames.Accepted{})
	disp := expect[*frames.Disposition](r)
	if disp.Role != frames.RoleReceiver || !disp.Settled || disp.First != 0 {
		t.Fatalf("disposition %+v", disp)
	}
	if _, ok := disp.State.(*frames.Accepted); !ok {
		t.Fatalf("state %T", disp.State)
	}
}
