// Package bench is walbus bench: a load generator for Service Bus
// compatible brokers (through the official Go SDK) and for AMQP 1.0
// brokers in general (through go-amqp).
//
// Senders stamp each message with the time it was due to be sent; receivers
// turn the stamp into an end-to-end latency in an HDR-style histogram. Over
// a measured window after a warm-up, Run counts messages, reads the broker
// process's CPU time and RSS from /proc and the bench's own from getrusage,
// and divides CPU by messages, so a reader sees who pays what.
//
//	cfg, err := bench.ParseArgs(os.Args[1:], os.Stderr)
//	res, err := bench.Run(ctx, cfg, os.Stderr)
//	res.WriteText(os.Stdout) // or json.Marshal(res)
package bench
