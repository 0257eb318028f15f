package frames

import "github.com/walbus/walbus/amqpserver/encoding"

// Role is the role of the peer sending an attach or disposition (§2.8.1).
type Role bool

// Roles as sent on the wire: false for sender, true for receiver.
const (
	RoleSender   Role = false
	RoleReceiver Role = true
)

// SenderSettleMode is the sender's settlement policy (§2.8.2).
type SenderSettleMode uint8

// Sender settle modes; null means SenderSettleMixed.
const (
	SenderSettleUnsettled SenderSettleMode = 0
	SenderSettleSettled   SenderSettleMode = 1
	SenderSettleMixed     SenderSettleMode = 2
)

// ReceiverSettleMode is the receiver's settlement policy (§2.8.3).
type ReceiverSettleMode uint8

// Receiver settle modes; null means ReceiverSettleFirst.
const (
	ReceiverSettleFirst  ReceiverSettleMode = 0
	ReceiverSettleSecond ReceiverSettleMode = 1
)

// Attach attaches a link to a session (AMQP 1.0 §2.7.3), descriptor 0x12.
//
//	#   field                   type                         mandatory  default
//	0   name                    string                       yes
//	1   handle                  handle (uint)                yes
//	2   role                    role (boolean)               yes
//	3   snd-settle-mode         sender-settle-mode (ubyte)   no         2 mixed
//	4   rcv-settle-mode         receiver-settle-mode (ubyte) no         0 first
//	5   source                  * (source)                   no
//	6   target                  * (target or coordinator)    no
//	7   unsettled               map                          no
//	8   incomplete-unsettled    boolean                      no         false
//	9   initial-delivery-count  sequence-no (uint)           no (yes when role=sender)
//	10  max-message-size        ulong                        no         no limit
//	11  offered-capabilities    symbol[]                     no
//	12  desired-capabilities    symbol[]                     no
//	13  properties              fields                       no
//
// The settle modes are Optional because go-amqp compares the reply's mode
// with the one it asked for, and an attach reply should state exactly what
// the link uses. Target and Coordinator are alternatives for field 6; at
// most one is set.
type Attach struct {
	Name                 string
	Handle               uint32
	Role                 Role
	SndSettleMode        Optional[SenderSettleMode]
	RcvSettleMode        Optional[ReceiverSettleMode]
	Source               *Source
	Target               *Target
	Coordinator          *Coordinator
	Unsettled            encoding.Map
	IncompleteUnsettled  bool
	InitialDeliveryCount Optional[uint32]
	MaxMessageSize       Optional[uint64]
	OfferedCapabilities  []encoding.Symbol
	DesiredCapabilities  []encoding.Symbol
	Properties           encoding.Map
}

// Descriptor returns CodeAttach.
func (*Attach) Descriptor() uint64 { return CodeAttach }

// AppendTo writes a.
func (a *Attach) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeAttach)
	dst = w.kept(encoding.AppendString(dst, a.Name))
	dst = w.uint(dst, a.Handle)
	dst = w.boolean(dst, bool(a.Role))
	dst = w.optUbyte(dst, a.SndSettleMode.Present, uint8(a.SndSettleMode.Value))
	dst = w.optUbyte(dst, a.RcvSettleMode.Present, uint8(a.RcvSettleMode.Value))
	dst = w.composite(dst, a.Source != nil, a.Source)
	switch {
	case a.Coordinator != nil:
		dst = w.kept(a.Coordinator.AppendTo(dst))
	case a.Target != nil:
		dst = w.kept(a.Target.AppendTo(dst))
	default:
		dst = w.null(dst)
	}
	dst = w.fields(dst, a.Unsettled)
	dst = w.flag(dst, a.IncompleteUnsettled)
	dst = w.optUint(dst, a.InitialDeliveryCount)
	dst = w.optUlong(dst, a.MaxMessageSize)
	dst = w.symbols(dst, a.OfferedCapabilities)
	dst = w.symbols(dst, a.DesiredCapabilities)
	dst = w.fields(dst, a.Properties)
	return w.end(dst)
}

// Decode reads a from b, which must hold exactly one attach.
func (a *Attach) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, a.decodeFrom(&in))
}

func (a *Attach) decodeFrom(r *encoding.Reader) error {
	*a = Attach{}
	f, err := openComposite(r, CodeAttach)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			a.Name, err = f.in.ReadString()
		case 1:
			a.Handle, err = f.in.ReadUint()
		case 2:
			var role bool
			role, err = f.in.ReadBool()
			a.Role = Role(role)
		case 3:
			var mode uint8
			mode, err = f.in.ReadUbyte()
			a.SndSettleMode = Optional[SenderSettleMode]{Value: SenderSettleMode(mode), Present: err == nil}
		case 4:
			var mode uint8
			mode, err = f.in.ReadUbyte()
			a.RcvSettleMode = Optional[ReceiverSettleMode]{Value: ReceiverSettleMode(mode), Present: err == nil}
		case 5:
			a.Source = new(Source)
			err = a.Source.decodeFrom(&f.in)
		case 6:
			err = a.decodeTarget(&f.in)
		case 7:
			a.Unsettled, err = readFields(&f.in)
		case 8:
			a.IncompleteUnsettled, err = f.in.ReadBool()
		case 9:
			a.InitialDeliveryCount.Value, err = f.in.ReadUint()
			a.InitialDeliveryCount.Present = err == nil
		case 10:
			a.MaxMessageSize.Value, err = f.in.ReadUlong()
			a.MaxMessageSize.Present = err == nil
		case 11:
			a.OfferedCapabilities, err = f.in.ReadSymbols(nil)
		case 12:
			a.DesiredCapabilities, err = f.in.ReadSymbols(nil)
		case 13:
			a.Properties, err = readFields(&f.in)
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 1<<0|1<<1|1<<2)
}

// decodeTarget reads field 6, a target or, for a transaction controller's
// link, a coordinator (§4.5.1).
func (a *Attach) decodeTarget(r *encoding.Reader) error {
	code, err := peekCompositeCode(r)
	if err != nil {
		return err
	}
	if code == CodeCoordinator {
		a.Coordinator = new(Coordinator)
		return a.Coordinator.decodeFrom(r)
	}
	a.Target = new(Target)
	return a.Target.decodeFrom(r)
}
