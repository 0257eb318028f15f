// Package message handles encoded AMQP 1.0 messages (AMQP 1.0 part 3) the
// way a Service Bus broker needs to on its hot path: it locates sections as
// byte ranges instead of decoding them, reads the few fields the broker
// acts on as sub-slices, and builds outgoing deliveries by copying the
// client's bytes around new header and annotation sections.
//
// The bare message (properties, application-properties and body) is
// immutable once sent (AMQP 1.0 §3.2): nothing here re-encodes it except
// the two rewrites a broker must make, merging application properties on
// dead-letter or modify, and assigning a message-id the client left out.
//
// Slices returned by Read functions alias the message buffer.
package message
