package frames

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/internal/hexbytes"
)

// reassemble parses consecutive transfer frames back into the first
// performative and the joined payload, checking each frame's limits.
func reassemble(t *testing.T, b []byte, maxFrameSize uint32, channel uint16) (Transfer, []byte, int) {
	t.Helper()
	var first Transfer
	var payload []byte
	frames := 0
	for len(b) > 0 {
		h, body, err := ParseFrame(b)
		if err != nil {
			t.Fatal(err)
		}
		if h.Size > maxFrameSize || h.Channel != channel {
			t.Fatalf("frame %d: %+v over %d", frames, h, maxFrameSize)
		}
		b = b[h.Size:]
		p, data, err := ParseBody(body)
		if err != nil {
			t.Fatal(err)
		}
		tr := p.(*Transfer)
		last := len(b) == 0
		if tr.More == last {
			t.Fatalf("frame %d: more=%v but last=%v", frames, tr.More, last)
		}
		if frames == 0 {
			first = *tr
		} else if tr.DeliveryID.Present || tr.DeliveryTag != nil || tr.MessageFormat.Present || tr.Handle != first.Handle {
			t.Fatalf("continuation frame %d: %+v", frames, tr)
		}
		payload = append(payload, data...)
		frames++
	}
	return first, payload, frames
}

func TestTransferSplitting(t *testing.T) {
	payload := make([]byte, 3000)
	for i := range payload {
		payload[i] = byte(i)
	}
	plain := &Transfer{Handle: 2, DeliveryID: Some[uint32](9), DeliveryTag: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		MessageFormat: Some[uint32](0), Settled: true}
	withMap := &Transfer{Handle: 2, DeliveryID: Some[uint32](9), DeliveryTag: []byte{1}, MessageFormat: Some[uint32](0),
		State: &Modified{MessageAnnotations: encoding.Map{{Key: encoding.Symbol("x-opt-a"), Value: "b"}}}}
	for _, tr := range []*Transfer{plain, withMap} {
		splitAndCheck(t, tr, payload)
	}
}

func splitAndCheck(t *testing.T, tr *Transfer, payload []byte) {
	for _, max := range []uint32{512, 600, 1024, 4096, 1 << 20} {
		for _, n := range []int{0, 1, 400, 469, 470, 471, 472, 473, 1000, 3000} {
			out, frames, err := AppendTransferFrames([]byte{0xff}, 5, tr, payload[:n], max)
			if err != nil {
				t.Fatal(err)
			}
			if out[0] != 0xff {
				t.Fatal("prefix overwritten")
			}
			first, got, count := reassemble(t, out[1:], max, 5)
			if !bytes.Equal(got, payload[:n]) {
				t.Fatalf("max %d, n %d: payload differs", max, n)
			}
			if count != frames {
				t.Fatalf("reported %d frames, wrote %d", frames, count)
			}
			want, err := TransferFrameCount(tr, n, max)
			if err != nil || want != frames {
				t.Fatalf("max %d, n %d: TransferFrameCount %d, wrote %d (%v)", max, n, want, frames, err)
			}
			first.More = false
			if !reflect.DeepEqual(&first, tr) {
				t.Fatalf("first frame %+v", first)
			}
		}
	}
	if tr.More {
		t.Fatal("AppendTransferFrames changed the caller's Transfer")
	}
}

func TestTransferFrameTooSmall(t *testing.T) {
	tr := &Transfer{Handle: 0, DeliveryID: Some[uint32](0), DeliveryTag: make([]byte, 16), MessageFormat: Some[uint32](0)}
	if _, _, err := AppendTransferFrames(nil, 0, tr, []byte{1}, 20); !errors.Is(err, ErrFrameTooSmall) {
		t.Fatalf("got %v", err)
	}
	if _, err := TransferFrameCount(tr, 1, 20); !errors.Is(err, ErrFrameTooSmall) {
		t.Fatalf("count: %v", err)
	}
}

func TestAppendFrameAndBeginEndAgree(t *testing.T) {
	fl := &Flow{IncomingWindow: 1, NextOutgoingID: 2, OutgoingWindow: 3}
	a := AppendFrame(nil, TypeAMQP, 9, fl, nil)
	b, start := BeginFrame(nil, TypeAMQP, 9)
	b = fl.AppendTo(b)
	b = EndFrame(b, start)
	if !bytes.Equal(a, b) {
		t.Fatalf("%s\n%s", hexbytes.Spaced(a), hexbytes.Spaced(b))
	}
	h, body, err := ParseFrame(a)
	if err != nil || h.Channel != 9 {
		t.Fatal(err)
	}
	var got Flow
	if err := got.Decode(body); err != nil || !reflect.DeepEqual(&got, fl) {
		t.Fatalf("%+v %v", got, err)
	}
}

func TestEncodingDoesNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 1<<16)
	payload := make([]byte, 2000)
	caps := []encoding.Symbol{"a"}
	tr := &Transfer{Handle: 1, DeliveryID: Some[uint32](1), DeliveryTag: make([]byte, 16), MessageFormat: Some[uint32](0), State: &Accepted{}}
	perfs := []Performative{
		&Open{ContainerID: "c", MaxFrameSize: Some[uint32](65536), OfferedCapabilities: caps},
		&Begin{RemoteChannel: Some[uint16](0), NextOutgoingID: 1, IncomingWindow: 5000, OutgoingWindow: 5000},
		&Attach{Name: "n", Role: RoleSender, SndSettleMode: Some(SenderSettleMixed), Source: &Source{Address: "q"}, Target: &Target{Address: "t"}, InitialDeliveryCount: Some[uint32](0), MaxMessageSize: Some[uint64](1 << 20)},
		&Flow{NextIncomingID: Some[uint32](1), IncomingWindow: 1, Handle: Some[uint32](0), LinkCredit: Some[uint32](5)},
		tr,
		&Disposition{Role: RoleReceiver, First: 1, Settled: true, State: &Accepted{}},
		&Detach{Handle: 1, Closed: true, Error: &Error{Condition: "amqp:not-found"}},
		&End{}, &Close{},
		&SASLMechanisms{Mechanisms: caps}, &SASLOutcome{Code: SASLOK},
	}
	for _, p := range perfs {
		allocs := testing.AllocsPerRun(50, func() {
			_ = p.AppendTo(buf[:0])
		})
		if allocs != 0 {
			t.Errorf("%T.AppendTo allocated %.1f times", p, allocs)
		}
	}
	allocs := testing.AllocsPerRun(50, func() {
		b, start := BeginFrame(buf[:0], TypeAMQP, 0)
		b = tr.AppendTo(b)
		_ = EndFrame(b, start)
		_, _, _ = AppendTransferFrames(buf[:0], 0, tr, payload, 512)
		_, _ = TransferFrameCount(tr, len(payload), 512)
	})
	if allocs != 0 {
		t.Errorf("frame writing allocated %.1f times", allocs)
	}
}
