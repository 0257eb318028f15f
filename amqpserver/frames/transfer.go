package frames

import "github.com/walbus/walbus/amqpserver/encoding"

// MessageFormatBatch is the message-format Service Bus clients put on a
// transfer whose payload holds a batch of messages (docs/compatibility.md §8).
const MessageFormatBatch uint32 = 0x80013700

// Transfer carries (part of) a message on a link (AMQP 1.0 §2.7.5),
// descriptor 0x14. The message bytes follow the performative in the frame.
//
//	#   field           type                          mandatory  default
//	0   handle          handle (uint)                 yes
//	1   delivery-id     delivery-number (uint)        first frame only
//	2   delivery-tag    delivery-tag (binary)         first frame only
//	3   message-format  message-format (uint)         first frame only
//	4   settled         boolean                       no   (see §2.7.5)
//	5   more            boolean                       no         false
//	6   rcv-settle-mode receiver-settle-mode (ubyte)  no         the link's
//	7   state           * (delivery-state)            no
//	8   resume          boolean                       no         false
//	9   aborted         boolean                       no         false
//	10  batchable       boolean                       no         false
//
// DeliveryID and MessageFormat are Optional and a nil DeliveryTag means
// absent, because continuation frames of a multi-frame delivery may leave
// them out. DeliveryTag aliases the decoded buffer.
type Transfer struct {
	Handle        uint32
	DeliveryID    Optional[uint32]
	DeliveryTag   []byte
	MessageFormat Optional[uint32]
	Settled       bool
	More          bool
	RcvSettleMode Optional[ReceiverSettleMode]
	State         DeliveryState
	Resume        bool
	Aborted       bool
	Batchable     bool
}

// Descriptor returns CodeTransfer.
func (*Transfer) Descriptor() uint64 { return CodeTransfer }

// AppendTo writes t.
func (t *Transfer) AppendTo(dst []byte) []byte {
	dst, w := t.appendHead(dst)
	dst = w.optState(dst, t.State)
	return t.appendTail(dst, &w)
}

// appendPlain is AppendTo for a transfer whose state isPlainState. Frame
// size arithmetic measures transfers in a stack buffer with it: AppendTo's
// path to the recursive map encoder (through rejected or modified states)
// makes every buffer passed to it escape to the heap.
func (t *Transfer) appendPlain(dst []byte) []byte {
	dst, w := t.appendHead(dst)
	switch v := t.State.(type) {
	case *Accepted:
		dst = w.kept(v.AppendTo(dst))
	case *Released:
		dst = w.kept(v.AppendTo(dst))
	case *Received:
		dst = w.kept(v.AppendTo(dst))
	case *Declared:
		dst = w.kept(v.AppendTo(dst))
	default:
		dst = w.null(dst)
	}
	return t.appendTail(dst, &w)
}

// appendHead writes fields 0 to 6, everything before the state.
func (t *Transfer) appendHead(dst []byte) ([]byte, fieldWriter) {
	dst, w := beginComposite(dst, CodeTransfer)
	dst = w.uint(dst, t.Handle)
	dst = w.optUint(dst, t.DeliveryID)
	dst = w.binary(dst, t.DeliveryTag)
	dst = w.optUint(dst, t.MessageFormat)
	dst = w.flag(dst, t.Settled)
	dst = w.flag(dst, t.More)
	dst = w.optUbyte(dst, t.RcvSettleMode.Present, uint8(t.RcvSettleMode.Value))
	return dst, w
}

// appendTail writes fields 8 to 10 and closes the list.
func (t *Transfer) appendTail(dst []byte, w *fieldWriter) []byte {
	dst = w.flag(dst, t.Resume)
	dst = w.flag(dst, t.Aborted)
	dst = w.flag(dst, t.Batchable)
	return w.end(dst)
}

// isPlainState reports a state appendPlain can write: none, or one
// without maps.
func isPlainState(s DeliveryState) bool {
	if isNil(s) {
		return true
	}
	switch s.(type) {
	case *Accepted, *Released, *Received, *Declared:
		return true
	}
	return false
}

// Decode reads t from b, which must hold exactly the performative (see
// SplitBody for separating it from the payload).
func (t *Transfer) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, t.decodeFrom(&in))
}

func (t *Transfer) decodeFrom(r *encoding.Reader) error {
	*t = Transfer{}
	f, err := openComposite(r, CodeTransfer)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			t.Handle, err = f.in.ReadUint()
		case 1:
			err = readOptUint(&f.in, &t.DeliveryID)
		case 2:
			t.DeliveryTag, err = f.in.ReadBinary()
		case 3:
			err = readOptUint(&f.in, &t.MessageFormat)
		case 4:
			t.Settled, err = f.in.ReadBool()
		case 5:
			t.More, err = f.in.ReadBool()
		case 6:
			var mode uint8
			mode, err = f.in.ReadUbyte()
			t.RcvSettleMode = Optional[ReceiverSettleMode]{Value: ReceiverSettleMode(mode), Present: err == nil}
		case 7:
			t.State, err = readDeliveryState(&f.in)
		case 8:
			t.Resume, err = f.in.ReadBool()
		case 9:
			t.Aborted, err = f.in.ReadBool()
		case 10:
			t.Batchable, err = f.in.ReadBool()
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 1<<0)
}
