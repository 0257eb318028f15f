package transport

import (
	"testing"
	"time"

	"github.com/walbus/walbus/amqpserver/frames"
)

func TestOpenFields(t *testing.T) {
	ts := startServer(t, Config{ContainerID: "broker-1", MaxFrameSize: 8192, MaxSessions: 16, IdleTimeout: 40 * time.Second}, nil)
	r := dialRaw(t, ts.addr)
	o := r.open(frames.Open{MaxFrameSize: frames.Some[uint32](65536), ChannelMax: frames.Some[uint16](65535), IdleTimeout: 30000})
	if o.ContainerID != "broker-1" {
		t.Errorf("container-id %q", o.ContainerID)
	}
	if !o.ChannelMax.Present || o.ChannelMax.Value != 15 {
		t.Errorf("channel-max %+v, want explicit 15", o.ChannelMax)
	}
	if o.FrameSizeLimit() != 8192 {
		t.Errorf("max-frame-size %d", o.FrameSizeLimit())
	}
	if o.IdleTimeout != 20000 {
		t.Errorf("idle-time-out %d, want half of 40 s", o.IdleTimeout)
	}

	b := r.begin(3)
	if !b.RemoteChannel.Present || b.RemoteChannel.Value != 3 {
		t.Errorf("begin remote-channel %+v", b.RemoteChannel)
	}
	if b.IncomingWindow == 0 || b.OutgoingWindow == 0 || b.HandleLimit() != DefaultMaxLinksPerSession-1 {
		t.Errorf("begin %+v", b)
	}
	_, fl := r.attachSender(3, 0, "s")
	if !fl.NextIncomingID.Present || fl.NextIncomingID.Value != 0 {
		t.Errorf("flow next-incoming-id %+v", fl.NextIncomingID)
	}
	if !fl.LinkCredit.Present || fl.LinkCredit.Value != DefaultLinkCredit || fl.DeliveryCount.Or(1) != 0 {
		t.Errorf("flow %+v", fl)
	}
	r.send(0, &frames.Close{}, nil)
	if e, _ := r.expectClose(); e != nil {
		t.Fatalf("close error %v", e)
	}
}

func TestChannelMaxNeverZero(t *testing.T) {
	// go-amqp takes min(own, ours) and the Service Bus SDKs need several
	// sessions per connection: channel-max 0 would allow only one.
	ts := startServer(t, Config{MaxSessions: 1}, nil)
	r := dialRaw(t, ts.addr)
	o := r.open(frames.Open{})
	if !o.ChannelMax.Present || o.ChannelMax.Value == 0 {
		t.Fatalf("channel-max %+v", o.ChannelMax)
	}
}

// TestOpenAnnouncesTheSmallerFrameSize: our open announces the frame size
// both sides allow, so a peer that splits its transfers at the size we
// announce never makes a frame above its own limit (uAMQP encodes nothing
// larger than the 64 KiB it announces); a peer with no limit gets ours.
func TestOpenAnnouncesTheSmallerFrameSize(t *testing.T) {
	ts := startServer(t, Config{MaxFrameSize: 256 << 10}, nil)
	for _, c := range []struct {
		peer frames.Optional[uint32]
		want uint32
	}{
		{frames.Some[uint32](65536), 65536},
		{frames.Some[uint32](1 << 20), 256 << 10},
		{frames.Optional[uint32]{}, 256 << 10},
	} {
		r := dialRaw(t, ts.addr)
		if o := r.open(frames.Open{MaxFrameSize: c.peer}); o.FrameSizeLimit() != c.want {
			t.Errorf("peer max-frame-size %+v: we announced %d, want %d", c.peer, o.FrameSizeLimit(), c.want)
		}
	}
}
