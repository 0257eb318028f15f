package frames

import (
	"fmt"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// DeliveryState is the state of a delivery carried by transfer and
// disposition (AMQP 1.0 §2.8.1, §3.4): Received, or one of the outcomes
// Accepted, Rejected, Released, Modified, or the transaction states
// Declared and TransactionalState (§4.5).
type DeliveryState interface {
	Descriptor() uint64
	AppendTo(dst []byte) []byte
	Decode(b []byte) error
}

// Received records how much of a delivery arrived, for resuming links
// (§3.4.1), descriptor 0x23.
//
//	#  field           type  mandatory
//	0  section-number  uint  yes
//	1  section-offset  ulong yes
type Received struct {
	SectionNumber uint32
	SectionOffset uint64
}

// Accepted is the outcome of a successfully processed message (§3.4.2),
// descriptor 0x24. It has no fields.
type Accepted struct{}

// Rejected is the outcome of an invalid message (§3.4.3), descriptor 0x25.
//
//	#  field  type   mandatory
//	0  error  error  no
type Rejected struct {
	Error *Error
}

// Released is the outcome of a message that was not and will not be
// processed (§3.4.4), descriptor 0x26. It has no fields; the delivery count
// is not incremented.
type Released struct{}

// Modified is the outcome of a message that was not processed but whose
// annotations should change (§3.4.5), descriptor 0x27.
//
//	#  field                type    mandatory  default
//	0  delivery-failed      boolean no         false
//	1  undeliverable-here   boolean no         false
//	2  message-annotations  fields  no
type Modified struct {
	DeliveryFailed     bool
	UndeliverableHere  bool
	MessageAnnotations encoding.Map
}

func (*Received) Descriptor() uint64 { return CodeReceived }
func (*Accepted) Descriptor() uint64 { return CodeAccepted }
func (*Rejected) Descriptor() uint64 { return CodeRejected }
func (*Released) Descriptor() uint64 { return CodeReleased }
func (*Modified) Descriptor() uint64 { return CodeModified }

// AppendTo writes s.
func (s *Received) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeReceived)
	dst = w.uint(dst, s.SectionNumber)
	dst = w.kept(encoding.AppendUlong(dst, s.SectionOffset))
	return w.end(dst)
}

// AppendTo writes s as an empty composite, 00 53 24 45.
func (s *Accepted) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeAccepted)
	return w.end(dst)
}

// AppendTo writes s.
func (s *Rejected) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeRejected)
	dst = w.optError(dst, s.Error)
	return w.end(dst)
}

// AppendTo writes s as an empty composite.
func (s *Released) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeReleased)
	return w.end(dst)
}

// AppendTo writes s.
func (s *Modified) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeModified)
	dst = w.flag(dst, s.DeliveryFailed)
	dst = w.flag(dst, s.UndeliverableHere)
	dst = w.fields(dst, s.MessageAnnotations)
	return w.end(dst)
}

// Decode reads s from b, which must hold exactly one received state.
func (s *Received) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, s.decodeFrom(&in))
}

// Decode reads s from b.
func (s *Accepted) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, s.decodeFrom(&in))
}

// Decode reads s from b.
func (s *Rejected) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, s.decodeFrom(&in))
}

// Decode reads s from b.
func (s *Released) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, s.decodeFrom(&in))
}

// Decode reads s from b.
func (s *Modified) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, s.decodeFrom(&in))
}

func (s *Received) decodeFrom(r *encoding.Reader) error {
	*s = Received{}
	f, err := openComposite(r, CodeReceived)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			s.SectionNumber, err = f.in.ReadUint()
		case 1:
			s.SectionOffset, err = f.in.ReadUlong()
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 1<<0|1<<1)
}

func (s *Accepted) decodeFrom(r *encoding.Reader) error {
	return decodeEmpty(r, CodeAccepted)
}

func (s *Released) decodeFrom(r *encoding.Reader) error {
	return decodeEmpty(r, CodeReleased)
}

// decodeEmpty reads a composite without fields, ignoring any extras.
func decodeEmpty(r *encoding.Reader, code uint64) error {
	f, err := openComposite(r, code)
	if err != nil {
		return err
	}
	for f.next() {
		if err := f.skip(); err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 0)
}

func (s *Rejected) decodeFrom(r *encoding.Reader) error {
	*s = Rejected{}
	f, err := openComposite(r, CodeRejected)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			s.Error, err = readError(&f.in)
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 0)
}

func (s *Modified) decodeFrom(r *encoding.Reader) error {
	*s = Modified{}
	f, err := openComposite(r, CodeModified)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			s.DeliveryFailed, err = f.in.ReadBool()
		case 1:
			s.UndeliverableHere, err = f.in.ReadBool()
		case 2:
			s.MessageAnnotations, err = readFields(&f.in)
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 0)
}

// readDeliveryState decodes whichever delivery state comes next. Each
// case calls a concrete decoder: a call through an interface would make
// the Reader, and with it every enclosing decoder's state, escape to the
// heap.
func readDeliveryState(r *encoding.Reader) (DeliveryState, error) {
	code, err := peekCompositeCode(r)
	if err != nil {
		return nil, err
	}
	if code == CodeTransactionalState {
		s := new(TransactionalState)
		return s, s.decodeFrom(r)
	}
	return readOutcome(r, code)
}

// readOutcome decodes a delivery state other than transactional-state,
// which cannot nest (P4 §4.5.5: the outcome of a transactional state is an
// outcome). Keeping it apart also keeps the decoders free of recursion.
func readOutcome(r *encoding.Reader, code uint64) (DeliveryState, error) {
	switch code {
	case CodeAccepted:
		s := new(Accepted)
		return s, s.decodeFrom(r)
	case CodeReleased:
		s := new(Released)
		return s, s.decodeFrom(r)
	case CodeRejected:
		s := new(Rejected)
		return s, s.decodeFrom(r)
	case CodeModified:
		s := new(Modified)
		return s, s.decodeFrom(r)
	case CodeReceived:
		s := new(Received)
		return s, s.decodeFrom(r)
	case CodeDeclared:
		s := new(Declared)
		return s, s.decodeFrom(r)
	}
	return nil, fmt.Errorf("%w: descriptor 0x%x is not a delivery state", encoding.ErrDecode, code)
}

// optState writes a delivery state or null. The type switch calls each
// concrete AppendTo directly: a call through the interface would make the
// buffer escape to the heap in every caller, stack scratch buffers
// included.
func (w *fieldWriter) optState(dst []byte, s DeliveryState) []byte {
	if isNil(s) {
		return w.null(dst)
	}
	switch v := s.(type) {
	case *Accepted:
		dst = v.AppendTo(dst)
	case *Released:
		dst = v.AppendTo(dst)
	case *Rejected:
		dst = v.AppendTo(dst)
	case *Modified:
		dst = v.AppendTo(dst)
	case *Received:
		dst = v.AppendTo(dst)
	case *Declared:
		dst = v.AppendTo(dst)
	case *TransactionalState:
		dst = v.appendTo(dst)
	default:
		dst = s.AppendTo(dst)
	}
	return w.kept(dst)
}

// isNil reports whether a state is absent, including a typed nil pointer
// stored in the interface.
func isNil(s DeliveryState) bool {
	switch v := s.(type) {
	case nil:
		return true
	case *Received:
		return v == nil
	case *Accepted:
		return v == nil
	case *Rejected:
		return v == nil
	case *Released:
		return v == nil
	case *Modified:
		return v == nil
	case *Declared:
		return v == nil
	case *TransactionalState:
		return v == nil
	}
	return false
}
