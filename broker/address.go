package broker

import (
	"fmt"
	"strings"

	"github.com/walbus/walbus/log/event"
)

// Addresses: how the AMQP links, CBS audiences and the HTTP API name an
// entity's queues (docs/compatibility.md §4, "Addresses").

// subqueueSuffixes are the addresses of a queue's subqueues below its own
// (as Service Bus spells them), matched without regard to case; the
// longer first, as it ends like the shorter.
var subqueueSuffixes = []struct {
	suffix string
	queue  uint32
}{
	{"/$Transfer/$DeadLetterQueue", event.TransferDeadLetterQueue},
	{"/$DeadLetterQueue", event.DeadLetterQueue},
}

// subscriptionsWord joins a topic's name to a subscription's in an address,
// matched without regard to case, as SDKs spell it differently.
const subscriptionsWord = "/Subscriptions/"

// Resolve returns the entity and queue number an address names: a
// queue "q" (queue 0), "q/$DeadLetterQueue" or "q/$Transfer/$DeadLetterQueue";
// a topic "t" (queue 0, where sends and scheduled messages go; it has no
// dead-letter queues); a subscription "t/Subscriptions/s" and its two
// dead-letter queues, which are the topic's queues of that subscription.
func (b *Broker) Resolve(address string) (*Entity, uint32, error) {
	name, sub := address, event.MainQueue
	for _, s := range subqueueSuffixes {
		if n := len(name) - len(s.suffix); n >= 0 && strings.EqualFold(name[n:], s.suffix) {
			name, sub = name[:n], s.queue
			break
		}
	}
	if topic, subscription, found := SplitSubscription(name); found {
		if topic == "" || subscription == "" || strings.Contains(subscription, "/") || strings.Contains(topic, "/$") {
			return nil, 0, fmt.Errorf("%w: %s", ErrEntityNotFound, address)
		}
		e, err := b.Entity(topic)
		if err != nil {
			return nil, 0, err
		}
		q, err := e.SubscriptionQueue(subscription) // not found for a queue too
		if err != nil {
			return nil, 0, err
		}
		return e, q + sub, nil
	}
	if name == "" || strings.Contains(name, "/$") {
		return nil, 0, fmt.Errorf("%w: %s", ErrEntityNotFound, address)
	}
	e, err := b.Entity(name)
	if err != nil {
		return nil, 0, err
	}
	if sub != event.MainQueue && e.IsTopic() {
		// What is sent to a topic goes to its subscriptions at once: it has
		// no dead-letter queue of its own.
		return nil, 0, fmt.Errorf("%w: %s", ErrEntityNotFound, address)
	}
	return e, sub, nil
}

// SplitSubscription splits "t/Subscriptions/s" into its topic and
// subscription names, at the last "/Subscriptions/" in any case (a
// subscription's name has no "/").
func SplitSubscription(path string) (topic, subscription string, found bool) {
	for i := len(path) - len(subscriptionsWord); i >= 0; i-- {
		// The word is ASCII, so a match is exactly len(subscriptionsWord)
		// bytes long, whatever the runes around it.
		if path[i] == '/' && strings.EqualFold(path[i:i+len(subscriptionsWord)], subscriptionsWord) {
			return path[:i], path[i+len(subscriptionsWord):], true
		}
	}
	return path, "", false
}
