package frames

import (
	"testing"
)

func BenchmarkPerformatives(b *testing.B) {
	for _, p := range full() {
		enc := p.AppendTo(nil)
		name := nameOf(p.Descriptor())
		b.Run("encode/"+name, func(b *testing.B) {
			b.ReportAllocs()
			buf := make([]byte, 0, 1024)
			for b.Loop() {
				buf = p.AppendTo(buf[:0])
			}
		})
		b.Run("decode/"+name, func(b *testing.B) {
			b.ReportAllocs()
			fresh := NewPerformative(p.Descriptor())
			for b.Loop() {
				if err := fresh.Decode(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHotPath measures what a busy link does per message: decode an
// incoming transfer and flow, write a disposition and a delivery.
func BenchmarkHotPath(b *testing.B) {
	b.ReportAllocs()
	in := (&Transfer{Handle: 1, DeliveryID: Some[uint32](7), DeliveryTag: make([]byte, 8), MessageFormat: Some[uint32](0)}).AppendTo(nil)
	flow := (&Flow{NextIncomingID: Some[uint32](1), IncomingWindow: 5000, NextOutgoingID: 1, OutgoingWindow: 5000, Handle: Some[uint32](0), DeliveryCount: Some[uint32](0), LinkCredit: Some[uint32](100)}).AppendTo(nil)
	payload := make([]byte, 1024)
	out := &Transfer{Handle: 0, DeliveryID: Some[uint32](1), DeliveryTag: make([]byte, 16), MessageFormat: Some[uint32](0)}
	disp := &Disposition{Role: RoleReceiver, First: 7, Settled: true, State: &Accepted{}}
	buf := make([]byte, 0, 4096)
	var tr Transfer
	var fl Flow
	for b.Loop() {
		if err := tr.Decode(in); err != nil {
			b.Fatal(err)
		}
		if err := fl.Decode(flow); err != nil {
			b.Fatal(err)
		}
		d, start := BeginFrame(buf[:0], TypeAMQP, 0)
		d = disp.AppendTo(d)
		d = EndFrame(d, start)
		d, _, _ = AppendTransferFrames(d, 0, out, payload, 65536)
		buf = d
	}
}
