// Package bench is walbus bench: a load generator for Service Bus
// compatible brokers (through the official Go SDK) and for AMQP 1.0
// brokers in general (through go-amqp).
//
// Senders stamp each message with the time it was due to be sent; receivers
// turn the stamp into an end-to-end latency in an HDR-style histogram. Over
// a measured window after a warm-up, Run counts messages, reads the broker
// process's CPU time, RSS and disk writes from /proc and the bench's own
// CPU and RSS from getrusage, and divides by messages, so a reader sees who
// pays what. Senders send to a queue or a topic (or any AMQP node);
// receivers receive from the queue, or in a group per subscription (or
// per listed node, such as the queues behind a RabbitMQ fanout exchange),
// and every copy counts as received.
//
//	cfg, err := bench.ParseArgs(os.Args[1:], os.Stderr)
//	res, err := bench.Run(ctx, cfg, os.Stderr)
//	res.WriteText(os.Stdout) // or json.Marshal(res)
package bench
