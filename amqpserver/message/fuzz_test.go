package message

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	amqp "github.com/Azure/go-amqp"
)

func fuzzSeeds(f *testing.F) {
	f.Add(marshal(f, clientMessage()))
	f.Add(marshal(f, &amqp.Message{Value: "v", Footer: amqp.Annotations{"x-opt-f": int64(1)}}))
	f.Add(marshal(f, &amqp.Message{Sequence: [][]any{{"a"}, {int64(1)}}}))
	f.Add(marshal(f, &amqp.Message{Properties: &amqp.MessageProperties{}, Data: [][]byte{marshal(f, clientMessage())}}))
	f.Add([]byte{0x00, 0x53, 0x70, 0x45})
	if raw, err := hex.DecodeString(uamqpOrder); err == nil {
		f.Add(raw)
	}
}

// FuzzParse checks that Parse and everything built on it never panic, and
// that whatever Parse accepts can be delivered and rewritten into messages
// that parse again with the bare message intact.
func FuzzParse(f *testing.F) {
	fuzzSeeds(f)
	d := brokerDelivery(sampleTime, sampleTime)
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := Parse(raw)
		if errors.Is(err, ErrSectionOrder) {
			// What Reorder mends parses, with every byte kept.
			out, rerr := Reorder(raw)
			if rerr != nil {
				return
			}
			if s, err = Parse(out); err != nil || len(out) != len(raw) {
				t.Fatalf("reordered message: %v (%d bytes of %d)\nin  % x\nout % x", err, len(out), len(raw), raw, out)
			}
		}
		if err != nil {
			return
		}
		_, _ = s.ReadProperties()
		_, _ = s.ReadClientAnnotations()
		if _, err := s.ReadHeader(); err != nil {
			return
		}
		out, err := AppendDelivery(nil, &s, d)
		if err != nil {
			return
		}
		s2, err := Parse(out)
		if err != nil {
			t.Fatalf("delivery does not parse: %v\nin  % x\nout % x", err, raw, out)
		}
		if !bytes.Equal(s2.Bare(), s.Bare()) {
			t.Fatalf("bare message changed")
		}
		if merged, err := AppendWithApplicationProperties(nil, &s, []Property{{Key: "DeadLetterReason", Value: "r"}, {Key: "color", Remove: true}}); err == nil {
			if _, err := Parse(merged); err != nil {
				t.Fatalf("merged message does not parse: %v", err)
			}
		}
		if p, err := s.ReadProperties(); err == nil {
			p.Subject = []byte("tagged")
			if _, err := Parse(AppendWithProperties(nil, &s, &p)); err != nil {
				t.Fatalf("message with rewritten properties does not parse: %v", err)
			}
		}
		if withID, changed, err := AppendWithMessageID(nil, &s, "id"); err == nil && changed {
			s3, err := Parse(withID)
			if err != nil {
				t.Fatalf("message with id does not parse: %v", err)
			}
			if p, err := s3.ReadProperties(); err == nil && string(p.MessageID.Bytes) != "id" {
				t.Fatalf("message id %+v", p.MessageID)
			}
		}
	})
}

// FuzzSplitBatch checks the batch splitter never panics and only returns
// slices of its input.
func FuzzSplitBatch(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, payload []byte) {
		inner, err := SplitBatch(payload, nil)
		if err != nil {
			return
		}
		for _, m := range inner {
			if len(m) > len(payload) {
				t.Fatalf("inner message longer than the payload")
			}
			_, _ = Parse(m)
		}
	})
}
