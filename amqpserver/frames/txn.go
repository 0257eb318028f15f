package frames

import "github.com/walbus/walbus/amqpserver/encoding"

// Coordinator is the target of a transaction controller's link, used in
// place of a Target in attach (AMQP 1.0 §4.5.1), descriptor 0x30.
//
//	#  field         type                    mandatory
//	0  capabilities  symbol[] txn-capability no
type Coordinator struct {
	Capabilities []encoding.Symbol
}

// Declare asks the coordinator for a new transaction; it travels as the
// amqp-value body of a message on the control link (§4.5.2), descriptor
// 0x31.
//
//	#  field      type              mandatory
//	0  global-id  * (global-tx-id)  no
type Declare struct {
	GlobalID any
}

// Discharge ends a transaction, committing unless Fail (§4.5.3),
// descriptor 0x32.
//
//	#  field   type      mandatory  default
//	0  txn-id  binary    yes
//	1  fail    boolean   no         false
type Discharge struct {
	TxnID []byte
	Fail  bool
}

// Declared is the outcome of a successful declare (§4.5.4), descriptor
// 0x33.
//
//	#  field   type    mandatory
//	0  txn-id  binary  yes
type Declared struct {
	TxnID []byte
}

// TransactionalState ties a delivery to a transaction, optionally with the
// outcome it will have on commit (§4.5.5), descriptor 0x34.
//
//	#  field    type               mandatory
//	0  txn-id   binary             yes
//	1  outcome  * (an outcome)     no
type TransactionalState struct {
	TxnID   []byte
	Outcome DeliveryState
}

func (*Coordinator) Descriptor() uint64        { return CodeCoordinator }
func (*Declare) Descriptor() uint64            { return CodeDeclare }
func (*Discharge) Descriptor() uint64          { return CodeDischarge }
func (*Declared) Descriptor() uint64           { return CodeDeclared }
func (*TransactionalState) Descriptor() uint64 { return CodeTransactionalState }

// AppendTo writes c.
func (c *Coordinator) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeCoordinator)
	dst = w.symbols(dst, c.Capabilities)
	return w.end(dst)
}

// AppendTo writes d.
func (d *Declare) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeDeclare)
	dst = w.anyValue(dst, d.GlobalID)
	return w.end(dst)
}

// AppendTo writes d.
func (d *Discharge) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeDischarge)
	dst = w.kept(encoding.AppendBinary(dst, d.TxnID))
	dst = w.flag(dst, d.Fail)
	return w.end(dst)
}

// AppendTo writes d.
func (d *Declared) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeDeclared)
	dst = w.kept(encoding.AppendBinary(dst, d.TxnID))
	return w.end(dst)
}

// AppendTo writes s.
func (s *TransactionalState) AppendTo(dst []byte) []byte {
	return s.appendTo(dst)
}

// appendTo is AppendTo for optState; the indirection breaks the recursion
// between the two, which would otherwise defeat escape analysis.
func (s *TransactionalState) appendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeTransactionalState)
	dst = w.kept(encoding.AppendBinary(dst, s.TxnID))
	dst = w.outcome(dst, s.Outcome)
	return w.end(dst)
}

// outcome writes the outcome of a transactional state, which is never
// itself transactional.
func (w *fieldWriter) outcome(dst []byte, s DeliveryState) []byte {
	if _, nested := s.(*TransactionalState); nested || isNil(s) {
		return w.optState(dst, nil)
	}
	return w.optState(dst, s)
}

// Decode reads c from b, which must hold exactly one coordinator.
func (c *Coordinator) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, c.decodeFrom(&in))
}

// Decode reads d from b.
func (d *Declare) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, d.decodeFrom(&in))
}

// Decode reads d from b.
func (d *Discharge) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, d.decodeFrom(&in))
}

// Decode reads d from b.
func (d *Declared) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, d.decodeFrom(&in))
}

// Decode reads s from b.
func (s *TransactionalState) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, s.decodeFrom(&in))
}

func (c *Coordinator) decodeFrom(r *encoding.Reader) error {
	*c = Coordinator{}
	f, err := openComposite(r, CodeCoordinator)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			c.Capabilities, err = f.in.ReadSymbols(nil)
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 0)
}

func (d *Declare) decodeFrom(r *encoding.Reader) error {
	*d = Declare{}
	f, err := openComposite(r, CodeDeclare)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			d.GlobalID, err = readAny(&f.in)
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 0)
}

func (d *Discharge) decodeFrom(r *encoding.Reader) error {
	*d = Discharge{}
	f, err := openComposite(r, CodeDischarge)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			d.TxnID, err = f.in.ReadBinary()
		case 1:
			d.Fail, err = f.in.ReadBool()
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 1<<0)
}

func (d *Declared) decodeFrom(r *encoding.Reader) error {
	*d = Declared{}
	f, err := openComposite(r, CodeDeclared)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			d.TxnID, err = f.in.ReadBinary()
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 1<<0)
}

func (s *TransactionalState) decodeFrom(r *encoding.Reader) error {
	*s = TransactionalState{}
	f, err := openComposite(r, CodeTransactionalState)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			s.TxnID, err = f.in.ReadBinary()
		case 1:
			var code uint64
			if code, err = peekCompositeCode(&f.in); err == nil {
				s.Outcome, err = readOutcome(&f.in, code)
			}
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 1<<0)
}
