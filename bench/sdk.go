package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// sdkDriver drives the broker through azservicebus, with the SDK's default
// retry policy: what an application would see.
type sdkDriver struct {
	connString string
	entity     string // the queue or topic senders send to
	topic      string // receivers receive from its subscriptions; "": from the queue
	mode       azservicebus.ReceiveMode
	batch      int // messages per receive call
	run        string
	payload    []byte

	mu      sync.Mutex
	clients []*azservicebus.Client
}

func newSDKDriver(cfg Config, run string, payload []byte) *sdkDriver {
	mode := azservicebus.ReceiveModePeekLock
	if cfg.Mode == ModeReceiveAndDelete {
		mode = azservicebus.ReceiveModeReceiveAndDelete
	}
	return &sdkDriver{connString: cfg.sdkConnString(), entity: cfg.entity(), topic: cfg.Topic, mode: mode,
		batch: cfg.receiveBatch(), run: run, payload: payload}
}

// client opens a client: one AMQP connection, opened on first use.
func (d *sdkDriver) client() (*azservicebus.Client, error) {
	c, err := azservicebus.NewClientFromConnectionString(d.connString, nil)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.clients = append(d.clients, c)
	d.mu.Unlock()
	return c, nil
}

func (d *sdkDriver) close(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range d.clients {
		wg.Go(func() { c.Close(ctx) })
	}
	wg.Wait()
	d.clients = nil
}

type sdkSender struct {
	d *sdkDriver
	s *azservicebus.Sender
}

func (d *sdkDriver) newSender(ctx context.Context) (msgSender, error) {
	c, err := d.client()
	if err != nil {
		return nil, err
	}
	s, err := c.NewSender(d.entity, nil)
	if err != nil {
		return nil, err
	}
	// The SDK connects and attaches lazily; an empty batch makes it do so
	// now, so a wrong address or key fails here and not in the warm-up.
	if _, err := s.NewMessageBatch(ctx, nil); err != nil {
		return nil, fmt.Errorf("connect sender: %w", err)
	}
	return &sdkSender{d: d, s: s}, nil
}

func (s *sdkSender) message(st stamp) *azservicebus.Message {
	return &azservicebus.Message{Body: s.d.payload, ApplicationProperties: stampProps(st, s.d.run)}
}

func (s *sdkSender) send(ctx context.Context, stamps []stamp) error {
	if len(stamps) == 1 {
		return s.s.SendMessage(ctx, s.message(stamps[0]), nil)
	}
	// A batch takes what fits under the link's limit; the rest go in the
	// next one.
	for len(stamps) > 0 {
		b, err := s.s.NewMessageBatch(ctx, nil)
		if err != nil {
			return err
		}
		n := 0
		for _, st := range stamps {
			if err := b.AddMessage(s.message(st), nil); errors.Is(err, azservicebus.ErrMessageTooLarge) {
				break
			} else if err != nil {
				return err
			}
			n++
		}
		if n == 0 {
			return fmt.Errorf("a %d-byte message does not fit in a batch", len(s.d.payload))
		}
		if err := s.s.SendMessageBatch(ctx, b, nil); err != nil {
			return err
		}
		stamps = stamps[n:]
	}
	return nil
}

type sdkReceiver struct {
	d *sdkDriver
	r *azservicebus.Receiver
}

// newReceiver receives from the queue, or from the topic's subscription
// source.
func (d *sdkDriver) newReceiver(ctx context.Context, source string) (msgReceiver, error) {
	c, err := d.client()
	if err != nil {
		return nil, err
	}
	opts := &azservicebus.ReceiverOptions{ReceiveMode: d.mode}
	var r *azservicebus.Receiver
	if d.topic != "" {
		r, err = c.NewReceiverForSubscription(d.topic, source, opts)
	} else {
		r, err = c.NewReceiverForQueue(source, opts)
	}
	if err != nil {
		return nil, err
	}
	// As for senders: a peek connects, authorises and attaches the
	// receiver's links now. Without it a missing queue or a Send-only key
	// would only show as receive calls that the SDK keeps retrying.
	if _, err := r.PeekMessages(ctx, 1, nil); err != nil {
		return nil, fmt.Errorf("connect receiver: %w", err)
	}
	return &sdkReceiver{d: d, r: r}, nil
}

func (r *sdkReceiver) receive(ctx context.Context, dst []delivery) ([]delivery, error) {
	msgs, err := r.r.ReceiveMessages(ctx, r.d.batch, nil)
	if err != nil {
		return dst, err
	}
	for _, m := range msgs {
		sent, ours := readStamp(m.ApplicationProperties, r.d.run)
		dl := delivery{sent: sent, ours: ours}
		if r.d.mode == azservicebus.ReceiveModePeekLock {
			dl.settle = func(ctx context.Context) error { return r.r.CompleteMessage(ctx, m, nil) }
		}
		dst = append(dst, dl)
	}
	return dst, nil
}
