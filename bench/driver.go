package bench

import (
	"context"
	"errors"
)

// Application properties every bench message carries (set by senders,
// read by receivers), so latency needs no clock but the bench's own.
const (
	propSent = "bench-sent" // int64 unix ns: when the message was due to be sent
	propSeq  = "bench-seq"  // int64: the message's number in its run
	propRun  = "bench-run"  // string: the run that sent it
)

// stamp is one outgoing message's measurement data.
type stamp struct {
	sent int64 // unix ns
	seq  int64
}

// delivery is one received message as the runner sees it.
type delivery struct {
	sent int64 // unix ns, from propSent
	// ours says the message came from this run; others (left over from an
	// earlier run, or from another program) count but have no latency.
	ours bool
	// settle completes the message; nil when there is nothing to settle
	// (receive-and-delete).
	settle func(context.Context) error
}

// A driver connects senders and receivers with one client library. Each
// sender and receiver gets its own connection, as separate processes
// would.
type driver interface {
	newSender(ctx context.Context) (msgSender, error)
	// newReceiver receives from source, one of Config.receiveSources.
	newReceiver(ctx context.Context, source string) (msgReceiver, error)
	// close closes every connection the driver opened.
	close(ctx context.Context)
}

// msgSender sends; concurrent calls are allowed (that is --in-flight).
type msgSender interface {
	// send sends one message per stamp, in one transfer if it can.
	send(ctx context.Context, stamps []stamp) error
}

// msgReceiver receives; one goroutine calls receive, while settle
// functions of earlier deliveries may run concurrently.
type msgReceiver interface {
	// receive appends to dst at least one delivery, or fails.
	receive(ctx context.Context, dst []delivery) ([]delivery, error)
}

// fatalError marks a failure after which a sender or receiver cannot go
// on, such as a closed connection the client library will not reopen.
type fatalError struct{ err error }

func (e fatalError) Error() string { return e.err.Error() }
func (e fatalError) Unwrap() error { return e.err }

func isFatal(err error) bool {
	var f fatalError
	return errors.As(err, &f)
}

// readStamp reads the bench properties of a received message.
func readStamp(props map[string]any, run string) (sent int64, ours bool) {
	if r, _ := props[propRun].(string); r != run {
		return 0, false
	}
	sent, ours = props[propSent].(int64)
	return sent, ours
}

// stampProps are the application properties for s.
func stampProps(s stamp, run string) map[string]any {
	return map[string]any{propSent: s.sent, propSeq: s.seq, propRun: run}
}
