package frames

import "github.com/walbus/walbus/amqpserver/encoding"

// Error reports a failure in close, end, detach or the rejected outcome
// (AMQP 1.0 §2.8.14), descriptor 0x1d amqp:error:list.
//
//	#  field        type    mandatory  default
//	0  condition    symbol  yes
//	1  description  string  no
//	2  info         fields  no
type Error struct {
	Condition   encoding.Symbol
	Description string
	Info        encoding.Map
}

// Descriptor returns CodeError.
func (e *Error) Descriptor() uint64 { return CodeError }

// AppendTo writes e.
func (e *Error) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeError)
	dst = w.kept(encoding.AppendSymbol(dst, e.Condition))
	dst = w.str(dst, e.Description)
	dst = w.fields(dst, e.Info)
	return w.end(dst)
}

// Decode reads e from b, which must hold exactly one error.
func (e *Error) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, e.decodeFrom(&in))
}

func (e *Error) decodeFrom(r *encoding.Reader) error {
	*e = Error{}
	f, err := openComposite(r, CodeError)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			e.Condition, err = f.in.ReadSymbol()
		case 1:
			e.Description, err = f.in.ReadString()
		case 2:
			e.Info, err = readFields(&f.in)
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 1<<0)
}

// Error makes *Error usable as a Go error in logs.
func (e *Error) Error() string {
	if e.Description == "" {
		return string(e.Condition)
	}
	return string(e.Condition) + ": " + e.Description
}

// appendOptionalError writes err or null.
func (w *fieldWriter) optError(dst []byte, err *Error) []byte {
	if err == nil {
		return w.null(dst)
	}
	return w.kept(err.AppendTo(dst))
}

// readError decodes a nested error field.
func readError(r *encoding.Reader) (*Error, error) {
	e := new(Error)
	if err := e.decodeFrom(r); err != nil {
		return nil, err
	}
	return e, nil
}
