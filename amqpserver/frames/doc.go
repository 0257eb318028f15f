// Package frames encodes and decodes AMQP 1.0 frames: the 8-byte frame
// header (AMQP 1.0 §2.3), the performatives of the transport layer (§2.7),
// the SASL frame bodies (§5.3.3), and the composite types they carry
// (error, source, target, delivery states, transaction types).
//
// Every composite is a Go struct whose comment lists the spec's fields by
// position, type, whether it is mandatory, and its default. AppendTo writes
// the composite with a numeric descriptor and without trailing null fields,
// allocating nothing; Decode accepts numeric or symbolic descriptors, any
// encoding of each field, and rejects a missing mandatory field.
//
// Absent versus zero: where the protocol gives null a meaning of its own
// (a flow without link-credit, a continuation transfer without delivery-id,
// an attach that does not state its settle mode) the field is an
// Optional[T]. Fields whose null simply means the zero value (false, empty)
// are plain Go values; empty strings, nil slices and nil maps are written as
// null.
//
// Byte-slice fields filled by Decode ([]byte delivery tags, SASL responses,
// transaction ids) alias the decoded buffer; copy them to keep them past the
// buffer's reuse. Strings and symbols are copied.
package frames
