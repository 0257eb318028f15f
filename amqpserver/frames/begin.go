package frames

import (
	"math"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// Begin starts a session (AMQP 1.0 §2.7.2), descriptor 0x11.
//
//	#  field                 type             mandatory  default
//	0  remote-channel        ushort           no         (null when initiating)
//	1  next-outgoing-id      transfer-number  yes
//	2  incoming-window       uint             yes
//	3  outgoing-window       uint             yes
//	4  handle-max            handle (uint)    no         4294967295
//	5  offered-capabilities  symbol[]         no
//	6  desired-capabilities  symbol[]         no
//	7  properties            fields           no
type Begin struct {
	RemoteChannel       Optional[uint16]
	NextOutgoingID      uint32
	IncomingWindow      uint32
	OutgoingWindow      uint32
	HandleMax           Optional[uint32]
	OfferedCapabilities []encoding.Symbol
	DesiredCapabilities []encoding.Symbol
	Properties          encoding.Map
}

// Descriptor returns CodeBegin.
func (*Begin) Descriptor() uint64 { return CodeBegin }

// HandleLimit is handle-max with its default applied.
func (b *Begin) HandleLimit() uint32 { return b.HandleMax.Or(math.MaxUint32) }

// AppendTo writes b.
func (b *Begin) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeBegin)
	dst = w.optUshort(dst, b.RemoteChannel)
	dst = w.uint(dst, b.NextOutgoingID)
	dst = w.uint(dst, b.IncomingWindow)
	dst = w.uint(dst, b.OutgoingWindow)
	dst = w.optUint(dst, b.HandleMax)
	dst = w.symbols(dst, b.OfferedCapabilities)
	dst = w.symbols(dst, b.DesiredCapabilities)
	dst = w.fields(dst, b.Properties)
	return w.end(dst)
}

// Decode reads b from data, which must hold exactly one begin.
func (b *Begin) Decode(data []byte) error {
	in := encoding.NewReader(data)
	return whole(&in, b.decodeFrom(&in))
}

func (b *Begin) decodeFrom(r *encoding.Reader) error {
	*b = Begin{}
	f, err := openComposite(r, CodeBegin)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			b.RemoteChannel.Value, err = f.in.ReadUshort()
			b.RemoteChannel.Present = err == nil
		case 1:
			b.NextOutgoingID, err = f.in.ReadUint()
		case 2:
			b.IncomingWindow, err = f.in.ReadUint()
		case 3:
			b.OutgoingWindow, err = f.in.ReadUint()
		case 4:
			b.HandleMax.Value, err = f.in.ReadUint()
			b.HandleMax.Present = err == nil
		case 5:
			b.OfferedCapabilities, err = f.in.ReadSymbols(nil)
		case 6:
			b.DesiredCapabilities, err = f.in.ReadSymbols(nil)
		case 7:
			b.Properties, err = readFields(&f.in)
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 1<<1|1<<2|1<<3)
}
