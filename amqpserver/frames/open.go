package frames

import (
	"math"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// Open negotiates connection parameters (AMQP 1.0 §2.7.1), descriptor
// 0x10.
//
//	#  field                 type                 mandatory  default
//	0  container-id          string               yes
//	1  hostname              string               no
//	2  max-frame-size        uint                 no         4294967295
//	3  channel-max           ushort               no         65535
//	4  idle-time-out         milliseconds (uint)  no         none
//	5  outgoing-locales      symbol[]             no
//	6  incoming-locales      symbol[]             no
//	7  offered-capabilities  symbol[]             no
//	8  desired-capabilities  symbol[]             no
//	9  properties            fields               no
//
// IdleTimeout 0 means none, which the spec treats the same as null.
type Open struct {
	ContainerID         string
	Hostname            string
	MaxFrameSize        Optional[uint32]
	ChannelMax          Optional[uint16]
	IdleTimeout         uint32
	OutgoingLocales     []encoding.Symbol
	IncomingLocales     []encoding.Symbol
	OfferedCapabilities []encoding.Symbol
	DesiredCapabilities []encoding.Symbol
	Properties          encoding.Map
}

// Descriptor returns CodeOpen.
func (*Open) Descriptor() uint64 { return CodeOpen }

// FrameSizeLimit is max-frame-size with its default applied.
func (o *Open) FrameSizeLimit() uint32 { return o.MaxFrameSize.Or(math.MaxUint32) }

// ChannelLimit is channel-max with its default applied.
func (o *Open) ChannelLimit() uint16 { return o.ChannelMax.Or(math.MaxUint16) }

// AppendTo writes o.
func (o *Open) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeOpen)
	dst = w.kept(encoding.AppendString(dst, o.ContainerID))
	dst = w.str(dst, o.Hostname)
	dst = w.optUint(dst, o.MaxFrameSize)
	dst = w.optUshort(dst, o.ChannelMax)
	dst = w.zeroUint(dst, o.IdleTimeout)
	dst = w.symbols(dst, o.OutgoingLocales)
	dst = w.symbols(dst, o.IncomingLocales)
	dst = w.symbols(dst, o.OfferedCapabilities)
	dst = w.symbols(dst, o.DesiredCapabilities)
	dst = w.fields(dst, o.Properties)
	return w.end(dst)
}

// Decode reads o from b, which must hold exactly one open.
func (o *Open) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, o.decodeFrom(&in))
}

func (o *Open) decodeFrom(r *encoding.Reader) error {
	*o = Open{}
	f, err := openComposite(r, CodeOpen)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			o.ContainerID, err = f.in.ReadString()
		case 1:
			o.Hostname, err = f.in.ReadString()
		case 2:
			o.MaxFrameSize.Value, err = f.in.ReadUint()
			o.MaxFrameSize.Present = err == nil
		case 3:
			o.ChannelMax.Value, err = f.in.ReadUshort()
			o.ChannelMax.Present = err == nil
		case 4:
			o.IdleTimeout, err = f.in.ReadUint()
		case 5:
			o.OutgoingLocales, err = f.in.ReadSymbols(nil)
		case 6:
			o.IncomingLocales, err = f.in.ReadSymbols(nil)
		case 7:
			o.OfferedCapabilities, err = f.in.ReadSymbols(nil)
		case 8:
			o.DesiredCapabilities, err = f.in.ReadSymbols(nil)
		case 9:
			o.Properties, err = readFields(&f.in)
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 1<<0)
}
