// Package encoding is walbus's server-side codec for the AMQP 1.0 type
// system (AMQP 1.0 part 1, "Types").
//
// It has three layers, from hottest to coolest:
//
//   - Append functions (AppendUint, AppendString, BeginList/EndList, ...)
//     write one value at the end of a caller-owned buffer, always choosing the
//     smallest valid encoding, and never allocate once the buffer has grown.
//   - Reader walks an encoded buffer without copying: strings, symbols and
//     binaries come back as sub-slices of the input, and every ReadX accepts
//     every encoding of its type (AMQP 1.0 §1.2 says decoders must).
//   - ReadAny/AppendAny convert between the wire and Go values for the paths
//     where convenience matters more than speed (CBS and management bodies,
//     link properties, filters, error info).
//
// ReadAny produces, and AppendAny accepts, this mapping. It is chosen so that
// decoding then encoding keeps every AMQP type (a long stays a long, a symbol
// stays a symbol, an array of uuid stays an array of uuid):
//
//	null        nil
//	boolean     bool
//	ubyte       uint8         byte    int8
//	ushort      uint16        short   int16
//	uint        uint32        int     int32
//	ulong       uint64        long    int64
//	float       float32       double  float64
//	decimal32   Decimal32     decimal64 Decimal64   decimal128 Decimal128
//	char        Char
//	timestamp   Timestamp (signed milliseconds since the Unix epoch)
//	uuid        UUID
//	binary      []byte (copied)
//	string      string
//	symbol      Symbol
//	list        List
//	map         Map (ordered key/value pairs; keys of any type)
//	array       Array (element type and optional descriptor kept)
//	described   Described
//
// AppendAny also accepts a few Go conveniences: int and uint (as long and
// ulong), time.Time (as timestamp) and []any (as list).
//
// Decoding never panics and never trusts a length field: every size and count
// is checked against the bytes actually present before anything is
// allocated. Failures wrap ErrDecode (and ErrLimitExceeded for Limits
// violations) so the server can answer with amqp:decode-error.
package encoding
