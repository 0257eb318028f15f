package admin

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/walbus/walbus/amqpserver"
	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/message"
	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// sendRequest is a message the console sends (POST /$walbus/send/<path>).
type sendRequest struct {
	Body          string         `json:"body"`
	BodyEncoding  string         `json:"bodyEncoding"` // text (the default) or base64
	ContentType   string         `json:"contentType"`
	MessageID     string         `json:"messageId"`
	CorrelationID string         `json:"correlationId"`
	Subject       string         `json:"subject"`
	To            string         `json:"to"`
	ReplyTo       string         `json:"replyTo"`
	SessionID     *string        `json:"sessionId"` // "" is a session of its own
	TimeToLive    string         `json:"timeToLive"`
	Scheduled     string         `json:"scheduledEnqueueTime"` // RFC 3339
	Properties    map[string]any `json:"applicationProperties"`
}

// annScheduledEnqueueTime is the annotation that schedules a message.
const annScheduledEnqueueTime = "x-opt-scheduled-enqueue-time"

// encode writes the request as an AMQP message, as an SDK would send it:
// a header (durable, its time to live), the schedule annotation, the
// properties, the application properties and one data section.
func (req *sendRequest) encode(now time.Time) ([]byte, error) {
	body := []byte(req.Body)
	switch req.BodyEncoding {
	case "", "text":
	case "base64":
		var err error
		if body, err = base64.StdEncoding.DecodeString(req.Body); err != nil {
			return nil, fmt.Errorf("body: %w", err)
		}
	default:
		return nil, fmt.Errorf("bodyEncoding %q: want text or base64", req.BodyEncoding)
	}
	h := message.Header{Durable: true, Priority: message.DefaultPriority}
	if req.TimeToLive != "" {
		ttl, err := parseAdvance(req.TimeToLive)
		if err != nil || ttl <= 0 || ttl/time.Millisecond > math.MaxUint32 {
			return nil, fmt.Errorf("timeToLive %q: want a positive duration such as 1h or PT1H", req.TimeToLive)
		}
		h.TTL, h.HasTTL = uint32(ttl/time.Millisecond), true
	}
	raw := message.AppendHeader(nil, h)
	if req.Scheduled != "" {
		at, err := time.Parse(time.RFC3339Nano, req.Scheduled)
		if err != nil {
			return nil, fmt.Errorf("scheduledEnqueueTime %q: want RFC 3339, such as %s", req.Scheduled, now.UTC().Format(time.RFC3339))
		}
		raw = encoding.AppendDescriptor(raw, message.CodeMessageAnnotations)
		if raw, err = encoding.AppendAny(raw, encoding.Map{{Key: encoding.Symbol(annScheduledEnqueueTime), Value: at}}); err != nil {
			return nil, err
		}
	}
	p := message.Properties{To: nonEmpty(req.To), Subject: nonEmpty(req.Subject), ReplyTo: nonEmpty(req.ReplyTo),
		ContentType: nonEmpty(req.ContentType)}
	if req.MessageID != "" {
		p.MessageID = message.StringID(req.MessageID)
	}
	if req.CorrelationID != "" {
		p.CorrelationID = message.StringID(req.CorrelationID)
	}
	if req.SessionID != nil {
		p.GroupID = []byte(*req.SessionID)
	}
	raw = message.AppendProperties(raw, &p)
	if len(req.Properties) > 0 {
		props := make(encoding.Map, 0, len(req.Properties))
		for _, k := range slices.Sorted(maps.Keys(req.Properties)) {
			v := req.Properties[k]
			value, err := propertyValue(v)
			if err != nil {
				return nil, fmt.Errorf("application property %q: %w", k, err)
			}
			props = append(props, encoding.MapEntry{Key: k, Value: value})
		}
		raw = encoding.AppendDescriptor(raw, message.CodeApplicationProperties)
		var err error
		if raw, err = encoding.AppendAny(raw, props); err != nil {
			return nil, err
		}
	}
	raw = encoding.AppendDescriptor(raw, message.CodeData)
	return encoding.AppendBinary(raw, body), nil
}

func nonEmpty(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

// propertyValue is a JSON value as an application property: text, a
// boolean, a whole number as a long, another number as a double.
func propertyValue(v any) (any, error) {
	switch v := v.(type) {
	case string, bool:
		return v, nil
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
			return int64(v), nil
		}
		return v, nil
	}
	return nil, fmt.Errorf("a %T: want text, a number or a boolean", v)
}

// send serves POST /$walbus/send/<queue or topic>: the message goes the
// way a client's does (checked, logged, durable before the answer). A
// request over maxBody bytes cannot be passed on (replayBody): on a node
// that does not lead the entity it is refused with 503.
func (a *API) send(w http.ResponseWriter, r *http.Request, e *broker.Entity, queue uint32) {
	if queue != event.MainQueue || e.QueuePath(queue) != e.Name() {
		jsonError(w, http.StatusBadRequest, "messages are sent to a queue or a topic, not to "+e.QueuePath(queue))
		return
	}
	var req sendRequest
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBody*4))
	if err == nil {
		err = json.Unmarshal(raw, &req)
	}
	var m broker.Message
	if err == nil {
		raw, err = req.encode(a.b.Now())
	}
	if err == nil {
		m, err = amqpserver.Inbound(raw)
	}
	if err != nil {
		jsonError(w, http.StatusBadRequest, err.Error())
		return
	}
	if m.ScheduledAt > a.b.Now().UnixNano() {
		seqs, err := call2(func(done func([]uint64, error)) { e.Schedule(queue, []broker.Message{m}, done) })
		if err == nil && len(seqs) != 1 {
			err = fmt.Errorf("%w: scheduled %d messages", projection.ErrInvalid, len(seqs))
		}
		if err != nil {
			a.jsonBrokerError(w, r, err)
			return
		}
		a.answer(w, r, nil, map[string]any{"sequenceNumber": seqs[0], "messageId": m.MessageID})
		return
	}
	done := make(chan error, 1)
	e.Send(queue, []broker.Message{m}, func(err error) { done <- err })
	if err := <-done; err != nil {
		a.jsonBrokerError(w, r, err)
		return
	}
	a.answer(w, r, nil, map[string]any{"sent": 1, "messageId": m.MessageID})
}

// call2 waits for an operation that answers with a value.
func call2[T any](op func(done func(T, error))) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	op(func(v T, err error) { ch <- result{v, err} })
	res := <-ch
	return res.v, res.err
}

// cancel cancels scheduled messages and counts those that were scheduled
// when asked (one that activates meanwhile stays).
func cancel(e *broker.Entity, queue uint32, seqs []uint64) (int, error) {
	n := 0
	for _, seq := range seqs {
		ds, err := e.Peek(queue, seq, 1, "")
		if err != nil {
			return 0, err
		}
		if len(ds) == 1 && ds[0].Seq == seq && ds[0].State == broker.Scheduled {
			n++
		}
	}
	done := make(chan error, 1)
	e.Cancel(queue, seqs, func(err error) { done <- err })
	return n, <-done
}
