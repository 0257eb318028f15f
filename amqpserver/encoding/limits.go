package encoding

// Limits bounds what ReadAny will build from untrusted bytes. Lengths are
// always checked against the bytes present; Limits adds bounds for input
// that is well formed but expensive (AMQP 1.0 allows an array of four
// billion nulls in a dozen bytes).
type Limits struct {
	// MaxDepth bounds nesting of lists, maps, arrays and described values.
	MaxDepth int
	// MaxElements bounds the items of any single list, map or array.
	MaxElements int
	// MaxBytes bounds the memory the decoded value may take: each element
	// slot is charged its Go size and each string or binary its length.
	MaxBytes int
}

// DefaultLimits are generous enough for any management or CBS body the
// Service Bus SDKs send (a few thousand lock tokens or sequence numbers)
// while keeping a hostile value well below a gigabyte.
var DefaultLimits = Limits{
	MaxDepth:    32,
	MaxElements: 1 << 20,
	MaxBytes:    64 << 20,
}

// orDefault fills zero fields from DefaultLimits.
func (l Limits) orDefault() Limits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultLimits.MaxDepth
	}
	if l.MaxElements <= 0 {
		l.MaxElements = DefaultLimits.MaxElements
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	return l
}
