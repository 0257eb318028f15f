package frames

import "github.com/walbus/walbus/amqpserver/encoding"

// Detach detaches a link, closing it when Closed (AMQP 1.0 §2.7.7),
// descriptor 0x16.
//
//	#  field   type           mandatory  default
//	0  handle  handle (uint)  yes
//	1  closed  boolean        no         false
//	2  error   error          no
type Detach struct {
	Handle uint32
	Closed bool
	Error  *Error
}

// End ends a session (§2.7.8), descriptor 0x17.
//
//	#  field  type   mandatory
//	0  error  error  no
type End struct {
	Error *Error
}

// Close closes the connection (§2.7.9), descriptor 0x18.
//
//	#  field  type   mandatory
//	0  error  error  no
type Close struct {
	Error *Error
}

func (*Detach) Descriptor() uint64 { return CodeDetach }
func (*End) Descriptor() uint64    { return CodeEnd }
func (*Close) Descriptor() uint64  { return CodeClose }

// AppendTo writes d.
func (d *Detach) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeDetach)
	dst = w.uint(dst, d.Handle)
	dst = w.flag(dst, d.Closed)
	dst = w.optError(dst, d.Error)
	return w.end(dst)
}

// AppendTo writes e.
func (e *End) AppendTo(dst []byte) []byte {
	return appendErrorOnly(dst, CodeEnd, e.Error)
}

// AppendTo writes c.
func (c *Close) AppendTo(dst []byte) []byte {
	return appendErrorOnly(dst, CodeClose, c.Error)
}

func appendErrorOnly(dst []byte, code uint64, err *Error) []byte {
	dst, w := beginComposite(dst, code)
	dst = w.optError(dst, err)
	return w.end(dst)
}

// Decode reads d from b, which must hold exactly one detach.
func (d *Detach) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, d.decodeFrom(&in))
}

// Decode reads e from b, which must hold exactly one end.
func (e *End) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, e.decodeFrom(&in))
}

// Decode reads c from b, which must hold exactly one close.
func (c *Close) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, c.decodeFrom(&in))
}

func (d *Detach) decodeFrom(r *encoding.Reader) error {
	*d = Detach{}
	f, err := openComposite(r, CodeDetach)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			d.Handle, err = f.in.ReadUint()
		case 1:
			d.Closed, err = f.in.ReadBool()
		case 2:
			d.Error, err = readError(&f.in)
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 1<<0)
}

func (e *End) decodeFrom(r *encoding.Reader) error {
	*e = End{}
	var err error
	e.Error, err = decodeErrorOnly(r, CodeEnd)
	return err
}

func (c *Close) decodeFrom(r *encoding.Reader) error {
	*c = Close{}
	var err error
	c.Error, err = decodeErrorOnly(r, CodeClose)
	return err
}

func decodeErrorOnly(r *encoding.Reader, code uint64) (*Error, error) {
	f, err := openComposite(r, code)
	if err != nil {
		return nil, err
	}
	var e *Error
	for f.next() {
		switch f.index {
		case 0:
			e, err = readError(&f.in)
		default:
			err = f.skip()
		}
		if err != nil {
			return nil, f.wrap(err)
		}
	}
	return e, f.finish(r, 0)
}
