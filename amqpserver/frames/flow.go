package frames

import "github.com/walbus/walbus/amqpserver/encoding"

// Flow updates session and link flow state (AMQP 1.0 §2.7.4), descriptor
// 0x13.
//
//	#   field             type             mandatory  default
//	0   next-incoming-id  transfer-number  no (set once the peer's begin is seen)
//	1   incoming-window   uint             yes
//	2   next-outgoing-id  transfer-number  yes
//	3   outgoing-window   uint             yes
//	4   handle            handle           no (null: session flow only)
//	5   delivery-count    sequence-no      no
//	6   link-credit       uint             no
//	7   available         uint             no
//	8   drain             boolean          no         false
//	9   echo              boolean          no         false
//	10  properties        fields           no
//
// The link fields are Optional: a flow without a handle is session-only,
// and a receiver's delivery-count is null until it has seen the sender's
// attach (§2.6.7).
type Flow struct {
	NextIncomingID Optional[uint32]
	IncomingWindow uint32
	NextOutgoingID uint32
	OutgoingWindow uint32
	Handle         Optional[uint32]
	DeliveryCount  Optional[uint32]
	LinkCredit     Optional[uint32]
	Available      Optional[uint32]
	Drain          bool
	Echo           bool
	Properties     encoding.Map
}

// Descriptor returns CodeFlow.
func (*Flow) Descriptor() uint64 { return CodeFlow }

// AppendTo writes fl.
func (fl *Flow) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeFlow)
	dst = w.optUint(dst, fl.NextIncomingID)
	dst = w.uint(dst, fl.IncomingWindow)
	dst = w.uint(dst, fl.NextOutgoingID)
	dst = w.uint(dst, fl.OutgoingWindow)
	dst = w.optUint(dst, fl.Handle)
	dst = w.optUint(dst, fl.DeliveryCount)
	dst = w.optUint(dst, fl.LinkCredit)
	dst = w.optUint(dst, fl.Available)
	dst = w.flag(dst, fl.Drain)
	dst = w.flag(dst, fl.Echo)
	dst = w.fields(dst, fl.Properties)
	return w.end(dst)
}

// Decode reads fl from b, which must hold exactly one flow.
func (fl *Flow) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, fl.decodeFrom(&in))
}

func (fl *Flow) decodeFrom(r *encoding.Reader) error {
	*fl = Flow{}
	f, err := openComposite(r, CodeFlow)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			err = readOptUint(&f.in, &fl.NextIncomingID)
		case 1:
			fl.IncomingWindow, err = f.in.ReadUint()
		case 2:
			fl.NextOutgoingID, err = f.in.ReadUint()
		case 3:
			fl.OutgoingWindow, err = f.in.ReadUint()
		case 4:
			err = readOptUint(&f.in, &fl.Handle)
		case 5:
			err = readOptUint(&f.in, &fl.DeliveryCount)
		case 6:
			err = readOptUint(&f.in, &fl.LinkCredit)
		case 7:
			err = readOptUint(&f.in, &fl.Available)
		case 8:
			fl.Drain, err = f.in.ReadBool()
		case 9:
			fl.Echo, err = f.in.ReadBool()
		case 10:
			fl.Properties, err = readFields(&f.in)
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 1<<1|1<<2|1<<3)
}

// readOptUint reads a uint into a present Optional.
func readOptUint(r *encoding.Reader, dst *Optional[uint32]) error {
	v, err := r.ReadUint()
	if err != nil {
		return err
	}
	*dst = Some(v)
	return nil
}
