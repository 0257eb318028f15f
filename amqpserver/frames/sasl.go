package frames

import "github.com/walbus/walbus/amqpserver/encoding"

// SASLCode is the outcome of a SASL exchange (AMQP 1.0 §5.3.3.6).
type SASLCode uint8

// SASL outcome codes, named as in the spec (go-amqp numbers them the same
// but mislabels 2).
const (
	SASLOK      SASLCode = 0 // authentication succeeded
	SASLAuth    SASLCode = 1 // bad credentials
	SASLSys     SASLCode = 2 // system error
	SASLSysPerm SASLCode = 3 // permanent system error
	SASLSysTemp SASLCode = 4 // transient system error
)

// SASLMechanisms lists the server's mechanisms, most preferred first
// (§5.3.3.1), descriptor 0x40.
//
//	#  field                   type      mandatory
//	0  sasl-server-mechanisms  symbol[]  yes (at least one)
type SASLMechanisms struct {
	Mechanisms []encoding.Symbol
}

// SASLInit selects a mechanism and carries the client's first response
// (§5.3.3.2), descriptor 0x41.
//
//	#  field             type    mandatory
//	0  mechanism         symbol  yes
//	1  initial-response  binary  no
//	2  hostname          string  no
type SASLInit struct {
	Mechanism       encoding.Symbol
	InitialResponse []byte
	Hostname        string
}

// SASLChallenge carries a server challenge (§5.3.3.3), descriptor 0x42.
//
//	#  field      type    mandatory
//	0  challenge  binary  yes
type SASLChallenge struct {
	Challenge []byte
}

// SASLResponse carries a client response (§5.3.3.4), descriptor 0x43.
//
//	#  field     type    mandatory
//	0  response  binary  yes
type SASLResponse struct {
	Response []byte
}

// SASLOutcome ends the SASL exchange (§5.3.3.5), descriptor 0x44.
//
//	#  field            type              mandatory
//	0  code             sasl-code (ubyte) yes
//	1  additional-data  binary            no
type SASLOutcome struct {
	Code           SASLCode
	AdditionalData []byte
}

func (*SASLMechanisms) Descriptor() uint64 { return CodeSASLMechanisms }
func (*SASLInit) Descriptor() uint64       { return CodeSASLInit }
func (*SASLChallenge) Descriptor() uint64  { return CodeSASLChallenge }
func (*SASLResponse) Descriptor() uint64   { return CodeSASLResponse }
func (*SASLOutcome) Descriptor() uint64    { return CodeSASLOutcome }

// AppendTo writes m; the mechanisms always go out as an array.
func (m *SASLMechanisms) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeSASLMechanisms)
	dst = w.kept(encoding.AppendSymbolArray(dst, m.Mechanisms))
	return w.end(dst)
}

// AppendTo writes i.
func (i *SASLInit) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeSASLInit)
	dst = w.kept(encoding.AppendSymbol(dst, i.Mechanism))
	dst = w.binary(dst, i.InitialResponse)
	dst = w.str(dst, i.Hostname)
	return w.end(dst)
}

// AppendTo writes c.
func (c *SASLChallenge) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeSASLChallenge)
	dst = w.kept(encoding.AppendBinary(dst, c.Challenge))
	return w.end(dst)
}

// AppendTo writes r.
func (r *SASLResponse) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeSASLResponse)
	dst = w.kept(encoding.AppendBinary(dst, r.Response))
	return w.end(dst)
}

// AppendTo writes o; the code is a 0x50 ubyte, which go-amqp insists on.
func (o *SASLOutcome) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeSASLOutcome)
	dst = w.optUbyte(dst, true, uint8(o.Code))
	dst = w.binary(dst, o.AdditionalData)
	return w.end(dst)
}

// Decode reads m from b, which must hold exactly one sasl-mechanisms.
func (m *SASLMechanisms) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, m.decodeFrom(&in))
}

// Decode reads i from b.
func (i *SASLInit) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, i.decodeFrom(&in))
}

// Decode reads c from b.
func (c *SASLChallenge) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, c.decodeFrom(&in))
}

// Decode reads r from b.
func (r *SASLResponse) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, r.decodeFrom(&in))
}

// Decode reads o from b.
func (o *SASLOutcome) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, o.decodeFrom(&in))
}

func (m *SASLMechanisms) decodeFrom(r *encoding.Reader) error {
	*m = SASLMechanisms{}
	f, err := openComposite(r, CodeSASLMechanisms)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			m.Mechanisms, err = f.in.ReadSymbols(nil)
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	if err := f.finish(r, 1<<0); err != nil {
		return err
	}
	if len(m.Mechanisms) == 0 {
		// multiple + mandatory needs at least one value (§1.4).
		return f.wrap(ErrMissingField)
	}
	return nil
}

func (i *SASLInit) decodeFrom(r *encoding.Reader) error {
	*i = SASLInit{}
	f, err := openComposite(r, CodeSASLInit)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			i.Mechanism, err = f.in.ReadSymbol()
		case 1:
			i.InitialResponse, err = f.in.ReadBinary()
		case 2:
			i.Hostname, err = f.in.ReadString()
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 1<<0)
}

func (c *SASLChallenge) decodeFrom(r *encoding.Reader) error {
	*c = SASLChallenge{}
	var err error
	c.Challenge, err = decodeBinaryOnly(r, CodeSASLChallenge)
	return err
}

func (s *SASLResponse) decodeFrom(r *encoding.Reader) error {
	*s = SASLResponse{}
	var err error
	s.Response, err = decodeBinaryOnly(r, CodeSASLResponse)
	return err
}

func decodeBinaryOnly(r *encoding.Reader, code uint64) ([]byte, error) {
	f, err := openComposite(r, code)
	if err != nil {
		return nil, err
	}
	var b []byte
	for f.next() {
		switch f.index {
		case 0:
			b, err = f.in.ReadBinary()
		default:
			err = f.skip()
		}
		if err != nil {
			return nil, f.wrap(err)
		}
	}
	return b, f.finish(r, 1<<0)
}

func (o *SASLOutcome) decodeFrom(r *encoding.Reader) error {
	*o = SASLOutcome{}
	f, err := openComposite(r, CodeSASLOutcome)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			var code uint8
			code, err = f.in.ReadUbyte()
			o.Code = SASLCode(code)
		case 1:
			o.AdditionalData, err = f.in.ReadBinary()
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 1<<0)
}
