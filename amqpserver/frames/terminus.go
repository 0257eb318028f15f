package frames

import "github.com/walbus/walbus/amqpserver/encoding"

// Terminus durability values (AMQP 1.0 §3.5.5).
const (
	DurabilityNone           uint32 = 0
	DurabilityConfiguration  uint32 = 1
	DurabilityUnsettledState uint32 = 2
)

// Terminus expiry policies (§3.5.6); null means ExpirySessionEnd.
const (
	ExpiryLinkDetach      encoding.Symbol = "link-detach"
	ExpirySessionEnd      encoding.Symbol = "session-end"
	ExpiryConnectionClose encoding.Symbol = "connection-close"
	ExpiryNever           encoding.Symbol = "never"
)

// Source is the node messages come from (§3.5.3), descriptor 0x28.
//
//	#   field                    type                   mandatory  default
//	0   address                  * (address: string)    no
//	1   durable                  terminus-durability    no         0 none
//	2   expiry-policy            terminus-expiry-policy no         session-end
//	3   timeout                  seconds (uint)         no         0
//	4   dynamic                  boolean                no         false
//	5   dynamic-node-properties  node-properties (map)  no
//	6   distribution-mode        symbol                 no
//	7   filter                   filter-set (map)       no
//	8   default-outcome          * (outcome)            no
//	9   outcomes                 symbol[]               no
//	10  capabilities             symbol[]               no
//
// Filter keeps each value exactly as ReadAny decoded it: the Service Bus
// session filter is a Described value from the Go SDK and a plain string
// from the JS SDK, and the attach reply has to echo whichever arrived.
type Source struct {
	Address               string
	Durable               uint32
	ExpiryPolicy          encoding.Symbol
	Timeout               uint32
	Dynamic               bool
	DynamicNodeProperties encoding.Map
	DistributionMode      encoding.Symbol
	Filter                encoding.Map
	DefaultOutcome        DeliveryState
	Outcomes              []encoding.Symbol
	Capabilities          []encoding.Symbol
}

// Target is the node messages go to (§3.5.4), descriptor 0x29.
//
//	#  field                    type                   mandatory  default
//	0  address                  * (address: string)    no
//	1  durable                  terminus-durability    no         0 none
//	2  expiry-policy            terminus-expiry-policy no         session-end
//	3  timeout                  seconds (uint)         no         0
//	4  dynamic                  boolean                no         false
//	5  dynamic-node-properties  node-properties (map)  no
//	6  capabilities             symbol[]               no
type Target struct {
	Address               string
	Durable               uint32
	ExpiryPolicy          encoding.Symbol
	Timeout               uint32
	Dynamic               bool
	DynamicNodeProperties encoding.Map
	Capabilities          []encoding.Symbol
}

func (*Source) Descriptor() uint64 { return CodeSource }
func (*Target) Descriptor() uint64 { return CodeTarget }

// AppendTo writes s.
func (s *Source) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeSource)
	dst = w.str(dst, s.Address)
	dst = w.zeroUint(dst, s.Durable)
	dst = w.sym(dst, s.ExpiryPolicy)
	dst = w.zeroUint(dst, s.Timeout)
	dst = w.flag(dst, s.Dynamic)
	dst = w.fields(dst, s.DynamicNodeProperties)
	dst = w.sym(dst, s.DistributionMode)
	dst = w.fields(dst, s.Filter)
	dst = w.optState(dst, s.DefaultOutcome)
	dst = w.symbols(dst, s.Outcomes)
	dst = w.symbols(dst, s.Capabilities)
	return w.end(dst)
}

// AppendTo writes t.
func (t *Target) AppendTo(dst []byte) []byte {
	dst, w := beginComposite(dst, CodeTarget)
	dst = w.str(dst, t.Address)
	dst = w.zeroUint(dst, t.Durable)
	dst = w.sym(dst, t.ExpiryPolicy)
	dst = w.zeroUint(dst, t.Timeout)
	dst = w.flag(dst, t.Dynamic)
	dst = w.fields(dst, t.DynamicNodeProperties)
	dst = w.symbols(dst, t.Capabilities)
	return w.end(dst)
}

// zeroUint writes a uint whose default is 0, as null when 0.
func (w *fieldWriter) zeroUint(dst []byte, v uint32) []byte {
	if v == 0 {
		return w.null(dst)
	}
	return w.uint(dst, v)
}

// Decode reads s from b, which must hold exactly one source.
func (s *Source) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, s.decodeFrom(&in))
}

// Decode reads t from b, which must hold exactly one target.
func (t *Target) Decode(b []byte) error {
	in := encoding.NewReader(b)
	return whole(&in, t.decodeFrom(&in))
}

func (s *Source) decodeFrom(r *encoding.Reader) error {
	*s = Source{}
	f, err := openComposite(r, CodeSource)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			s.Address, err = readAddress(&f.in)
		case 1:
			s.Durable, err = f.in.ReadUint()
		case 2:
			s.ExpiryPolicy, err = f.in.ReadSymbol()
		case 3:
			s.Timeout, err = f.in.ReadUint()
		case 4:
			s.Dynamic, err = f.in.ReadBool()
		case 5:
			s.DynamicNodeProperties, err = readFields(&f.in)
		case 6:
			s.DistributionMode, err = f.in.ReadSymbol()
		case 7:
			s.Filter, err = readFields(&f.in)
		case 8:
			s.DefaultOutcome, err = readDeliveryState(&f.in)
		case 9:
			s.Outcomes, err = f.in.ReadSymbols(nil)
		case 10:
			s.Capabilities, err = f.in.ReadSymbols(nil)
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 0)
}

func (t *Target) decodeFrom(r *encoding.Reader) error {
	*t = Target{}
	f, err := openComposite(r, CodeTarget)
	if err != nil {
		return err
	}
	for f.next() {
		switch f.index {
		case 0:
			t.Address, err = readAddress(&f.in)
		case 1:
			t.Durable, err = f.in.ReadUint()
		case 2:
			t.ExpiryPolicy, err = f.in.ReadSymbol()
		case 3:
			t.Timeout, err = f.in.ReadUint()
		case 4:
			t.Dynamic, err = f.in.ReadBool()
		case 5:
			t.DynamicNodeProperties, err = readFields(&f.in)
		case 6:
			t.Capabilities, err = f.in.ReadSymbols(nil)
		default:
			err = f.skip()
		}
		if err != nil {
			return f.wrap(err)
		}
	}
	return f.finish(r, 0)
}

// readAddress reads a terminus address. The type is "*" with the address
// archetype (§3.5.3); every peer seen sends a string, and a symbol is
// accepted too rather than failing the attach.
func readAddress(r *encoding.Reader) (string, error) {
	b, err := r.ReadStringOrSymbolBytes()
	return string(b), err
}
