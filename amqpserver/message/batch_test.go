package message

import (
	"bytes"
	"errors"
	"testing"

	amqp "github.com/Azure/go-amqp"
)

// TestSplitBatch builds a batch the way azservicebus's message_batch.go
// does: an envelope copying the first message's sections, and one data
// section per complete encoded message.
func TestSplitBatch(t *testing.T) {
	first := clientMessage()
	inners := [][]byte{
		marshal(t, first),
		marshal(t, &amqp.Message{Properties: &amqp.MessageProperties{MessageID: "2"}, Data: [][]byte{make([]byte, 300)}}),
		marshal(t, &amqp.Message{Value: "third"}),
	}
	for n := 1; n <= len(inners); n++ {
		envelope := &amqp.Message{
			Header: first.Header, Annotations: first.Annotations, Properties: first.Properties,
			ApplicationProperties: first.ApplicationProperties, Data: inners[:n],
		}
		got, err := SplitBatch(marshal(t, envelope), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != n {
			t.Fatalf("%d messages, want %d", len(got), n)
		}
		for i := range got {
			if !bytes.Equal(got[i], inners[i]) {
				t.Errorf("message %d differs", i)
			}
			if _, err := Parse(got[i]); err != nil {
				t.Errorf("message %d: %v", i, err)
			}
		}
	}
	for name, payload := range map[string][]byte{
		"value body": marshal(t, &amqp.Message{Value: "v"}),
		"no body":    marshal(t, &amqp.Message{Properties: &amqp.MessageProperties{MessageID: "m"}}),
		"garbage":    {0x00, 0x53, 0x75, 0xa0, 0x05, 1},
	} {
		if _, err := SplitBatch(payload, nil); !errors.Is(err, ErrInvalidMessage) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
