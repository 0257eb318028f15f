package frames

import "github.com/walbus/walbus/amqpserver/encoding"

// Disposition informs the peer of delivery state changes for a range of
// delivery-ids (AMQP 1.0 §2.7.6), descriptor 0x15.
//
//	#  field      type                    mandatory  default
//	0  role       role (boolean)          yes
//	1  first      delivery-number (uint)  yes
//	2  last       delivery-number (uint)  no         = first
//	3  settled    boolean                 no         false
//	4  state      * (delivery-state)      no
//	5  batchable  boolean                 no         false
type Disposition struct {
	Role      Role
	First     uint32
	Last      Optional[uint32]
	Settled   bool
	State     DeliveryState
	Batchable bool
}

// Descriptor returns CodeDisposition.
func (*Disposition) Descriptor() uint64 { return CodeDisposition }

// LastID is last with its default (first) applied; the range is inclusive.
func (d *Disposition) LastID() uint32 { return d.Last.Or(d.First) }

// AppendTo writes d.
func (d *Disposition) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeDisposition)
	dst = w.boolean(dst, bool(d.Role))
	dst = w.uint(dst, d.First)
	dst = w.optUint(dst, d.Last)
	dst = w.flag(dst, d.Settled)
	dst = w.optState(dst, d.State)
	dst = w.flag(dst, d.Batchable)
	return w.end(dst)
}

// Decode reads d from b, which must hold exactly one disposition.
func (d *Disposition) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, d.decodeFrom(&in))
}

func (d *Disposition) decodeFrom(r *encoding.Reader) error {
	*d = Disposition{}
	f, err := openComposite(r, CodeDisposition)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			var role bool
			role, err = f.in.ReadBool()
			d.Role = Role(role)
		case 1:
			d.First, err = f.in.ReadUint()
		case 2:
			err = readOptUint(&f.in, &d.Last)
		case 3:
			d.Settled, err = f.in.ReadBool()
		case 4:
			d.State, err = readDeliveryState(&f.in)
		case 5:
			d.Batchable, err = f.in.ReadBool()
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 1<<0|1<<1)
}
