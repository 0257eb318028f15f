package admin

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/walbus/walbus/amqpserver"
	"github.com/walbus/walbus/amqpserver/encoding"
	"github.com/walbus/walbus/amqpserver/message"
	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// What the console reads: the namespace at a glance, pages of messages as
// a receiver would get them, sessions, and a message's history.

// entityView is one queue, topic or subscription in the overview.
type entityView struct {
	Path              string     `json:"path"`
	Kind              string     `json:"kind"` // queue, topic or subscription
	Topic             string     `json:"topic,omitempty"`
	Name              string     `json:"name,omitempty"` // a subscription's
	Status            string     `json:"status"`
	RequiresSession   bool       `json:"requiresSession"`
	Counts            countsView `json:"counts"`
	DiskBytes         int64      `json:"diskBytes,omitempty"` // a queue's or topic's log and archives
	Sent              uint64     `json:"sent"`                // messages in, since the broker started
	Received          uint64     `json:"received"`            // deliveries, likewise
	SubscriptionCount int        `json:"subscriptionCount,omitempty"`
}

type countsView struct {
	Active             uint64 `json:"active"`
	Available          uint64 `json:"available"`
	Locked             uint64 `json:"locked"`
	Deferred           uint64 `json:"deferred"`
	Scheduled          uint64 `json:"scheduled"`
	DeadLetter         uint64 `json:"deadLetter"`
	TransferDeadLetter uint64 `json:"transferDeadLetter"`
	Transfer           uint64 `json:"transfer"`
}

// overview serves GET /$walbus/overview.
func (a *API) overview(w http.ResponseWriter, r *http.Request) {
	views := []entityView{}
	for _, e := range a.b.Entities() {
		vs, err := entityViews(e)
		if errors.Is(err, broker.ErrEntityNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			a.jsonBrokerError(w, r, err)
			return
		}
		views = append(views, vs...)
	}
	a.answer(w, r, nil, map[string]any{
		"now":       a.b.Now().UTC().Format(time.RFC3339Nano),
		"testClock": a.b.TestClock(),
		"entities":  views,
	})
}

// entityViews is a queue's view, or a topic's followed by its
// subscriptions'.
func entityViews(e *broker.Entity) ([]entityView, error) {
	cfg, err := e.Config()
	if err != nil {
		return nil, err
	}
	stats := e.Stats()
	v := entityView{Path: e.Name(), Kind: "queue", Status: statusText(cfg.Status), RequiresSession: cfg.RequiresSession,
		DiskBytes: e.Bytes(), Sent: stats.Sent, Received: stats.Delivered}
	if !e.IsTopic() {
		v.Counts, err = queueCounts(e, event.MainQueue)
		return []entityView{v}, err
	}
	v.Kind, v.RequiresSession = "topic", false
	c, err := e.Counts(event.MainQueue)
	if err != nil {
		return nil, err
	}
	v.Counts.Scheduled = c.Scheduled
	subs, err := e.Subscriptions()
	if err != nil {
		return nil, err
	}
	v.SubscriptionCount = len(subs)
	views := []entityView{v}
	for _, sub := range subs {
		counts, err := queueCounts(e, sub.Queue)
		if err != nil {
			return nil, err
		}
		st := e.SubscriptionStats(sub.Queue)
		views = append(views, entityView{Path: e.QueuePath(sub.Queue), Kind: "subscription", Topic: e.Name(), Name: sub.Name,
			Status: statusText(sub.Config.Status), RequiresSession: sub.Config.RequiresSession, Counts: counts,
			Sent: st.Enqueued, Received: st.Delivered})
	}
	return views, nil
}

func statusText(s projection.Status) string {
	if s == "" {
		return string(projection.StatusActive)
	}
	return string(s)
}

// queueCounts are the counts of queue q, its dead-letter queues and, for
// a queue, its transfer queue.
func queueCounts(e *broker.Entity, q uint32) (countsView, error) {
	c, err := counts(e, q)
	if err != nil {
		return countsView{}, err
	}
	main, err := e.Counts(q)
	if err != nil {
		return countsView{}, err
	}
	return countsView{Active: uint64(c.Active), Available: main.Available, Locked: main.Locked, Deferred: main.Deferred,
		Scheduled: main.Scheduled, DeadLetter: uint64(c.DeadLetter), TransferDeadLetter: uint64(c.TransferDeadLetter),
		Transfer: uint64(c.Transfer)}, nil
}

// Browsing pages: how many messages a page has unless asked, at most, and
// how many a page may pass over looking for those of the state asked.
const (
	browsePage    = 50
	browseMaxPage = 500
	browseScan    = 10000
)

// messageView is a message as a receiver gets it, for the console.
type messageView struct {
	Seq                  uint64         `json:"sequenceNumber"`
	State                string         `json:"state"` // available, locked, deferred or scheduled
	MessageID            string         `json:"messageId"`
	SessionID            string         `json:"sessionId,omitempty"`
	Size                 int            `json:"size"`
	EnqueuedTime         string         `json:"enqueuedTime"`
	ExpiresAt            string         `json:"expiresAt,omitempty"`
	ScheduledEnqueueTime string         `json:"scheduledEnqueueTime,omitempty"`
	LockedUntil          string         `json:"lockedUntil,omitempty"`
	DeliveryCount        int            `json:"deliveryCount"`
	DeadLetterReason     string         `json:"deadLetterReason,omitempty"`
	DeadLetterDesc       string         `json:"deadLetterErrorDescription,omitempty"`
	DeadLetterSource     string         `json:"deadLetterSource,omitempty"`
	Header               map[string]any `json:"header,omitempty"`
	Properties           map[string]any `json:"properties,omitempty"`
	ApplicationProps     map[string]any `json:"applicationProperties,omitempty"`
	MessageAnnotations   map[string]any `json:"messageAnnotations,omitempty"`
	BodyType             string         `json:"bodyType"`
	Body                 []byte         `json:"body"` // base64 in JSON
}

// browse serves GET /$walbus/messages/<path>: up to max messages from
// SequenceNumber from on, of one state or all. next is where the next page
// starts, 0 at the end.
func (a *API) browse(w http.ResponseWriter, r *http.Request, e *broker.Entity, queue uint32) {
	q := r.URL.Query()
	from, max := uint64(1), browsePage
	var err error
	if s := q.Get("from"); s != "" {
		if from, err = strconv.ParseUint(s, 10, 64); err != nil || from == 0 {
			jsonError(w, http.StatusBadRequest, fmt.Sprintf("from=%q is not a SequenceNumber", s))
			return
		}
	}
	if s := q.Get("max"); s != "" {
		if max, err = strconv.Atoi(s); err != nil || max < 1 || max > browseMaxPage {
			jsonError(w, http.StatusBadRequest, fmt.Sprintf("max=%q: want 1 to %d", s, browseMaxPage))
			return
		}
	}
	state := q.Get("state")
	keep, ok := stateFilters[state]
	if !ok {
		jsonError(w, http.StatusBadRequest, fmt.Sprintf("state=%q: want all, active, deferred or scheduled", state))
		return
	}
	views := []messageView{}
	next, scanned := from, 0
	for len(views) < max && scanned < browseScan {
		ds, err := e.Peek(queue, next, min(max, browseMaxPage), "")
		if err != nil {
			a.jsonBrokerError(w, r, err)
			return
		}
		if len(ds) == 0 {
			next = 0
			break
		}
		for i := range ds {
			d := &ds[i]
			scanned++
			next = d.Seq + 1
			if !keep(d) {
				continue
			}
			v, err := viewOf(d)
			if err != nil {
				jsonError(w, http.StatusInternalServerError, err.Error())
				return
			}
			views = append(views, v)
			if len(views) == max {
				break
			}
		}
	}
	a.answer(w, r, nil, map[string]any{"messages": views, "next": next})
}

// stateFilters choose the messages a page shows by their state.
var stateFilters = map[string]func(*broker.Delivery) bool{
	"":    func(*broker.Delivery) bool { return true },
	"all": func(*broker.Delivery) bool { return true },
	"active": func(d *broker.Delivery) bool {
		return d.State == broker.Available || d.State == broker.Locked && !d.Deferred
	},
	"deferred":  func(d *broker.Delivery) bool { return d.Deferred || d.State == broker.Deferred },
	"scheduled": func(d *broker.Delivery) bool { return d.State == broker.Scheduled },
}

// viewOf decodes a stored message as a receiver would get it.
func viewOf(d *broker.Delivery) (messageView, error) {
	v := messageView{Seq: d.Seq, State: stateName(d), MessageID: d.MessageID, SessionID: broker.ClientSessionID(d.SessionID),
		Size: len(d.Message), EnqueuedTime: rfc3339(d.EnqueuedAt), DeliveryCount: int(d.Deliveries)}
	if d.ExpiresAt > 0 {
		v.ExpiresAt = rfc3339(d.ExpiresAt)
	}
	if d.State == broker.Scheduled {
		v.ScheduledEnqueueTime = rfc3339(d.ScheduledAt)
	}
	if d.LockedUntil > 0 {
		v.LockedUntil = rfc3339(d.LockedUntil)
	}
	raw, err := amqpserver.Render(d)
	if err != nil {
		return v, err
	}
	s, err := message.Parse(raw)
	if err != nil {
		return v, fmt.Errorf("message %d: %w", d.Seq, err)
	}
	if v.Header, err = headerView(&s); err != nil {
		return v, fmt.Errorf("message %d: header: %w", d.Seq, err)
	}
	if v.Properties, err = propertiesView(&s); err != nil {
		return v, fmt.Errorf("message %d: properties: %w", d.Seq, err)
	}
	if v.ApplicationProps, err = mapView(&s, s.ApplicationProperties); err != nil {
		return v, fmt.Errorf("message %d: application properties: %w", d.Seq, err)
	}
	if v.MessageAnnotations, err = mapView(&s, s.MessageAnnotations); err != nil {
		return v, fmt.Errorf("message %d: message annotations: %w", d.Seq, err)
	}
	v.DeadLetterReason, _ = v.ApplicationProps["DeadLetterReason"].(string)
	v.DeadLetterDesc, _ = v.ApplicationProps["DeadLetterErrorDescription"].(string)
	v.DeadLetterSource, _ = v.MessageAnnotations["x-opt-deadletter-source"].(string)
	v.BodyType, v.Body, err = bodyView(&s)
	if err != nil {
		return v, fmt.Errorf("message %d: body: %w", d.Seq, err)
	}
	return v, nil
}

func stateName(d *broker.Delivery) string {
	switch d.State {
	case broker.Locked:
		return "locked"
	case broker.Deferred:
		return "deferred"
	case broker.Scheduled:
		return "scheduled"
	}
	return "available"
}

func rfc3339(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

func headerView(s *message.Sections) (map[string]any, error) {
	if !s.Header.Present() {
		return nil, nil
	}
	h, err := s.ReadHeader()
	if err != nil {
		return nil, err
	}
	v := map[string]any{"durable": h.Durable, "priority": h.Priority, "deliveryCount": h.DeliveryCount}
	if h.HasTTL {
		v["ttl"] = h.TTL
	}
	return v, nil
}

func propertiesView(s *message.Sections) (map[string]any, error) {
	p, err := s.ReadProperties()
	if err != nil {
		return nil, err
	}
	v := map[string]any{}
	id := func(name string, id message.ID) {
		if id.Kind != 0 {
			v[name] = string(id.AppendText(nil))
		}
	}
	text := func(name string, b []byte) {
		if b != nil {
			v[name] = string(b)
		}
	}
	id("messageId", p.MessageID)
	id("correlationId", p.CorrelationID)
	if p.UserID != nil {
		v["userId"] = p.UserID // base64, as binary
	}
	text("to", p.To)
	text("subject", p.Subject)
	text("replyTo", p.ReplyTo)
	text("contentType", p.ContentType)
	text("contentEncoding", p.ContentEncoding)
	text("groupId", p.GroupID)
	text("replyToGroupId", p.ReplyToGroupID)
	if p.HasAbsoluteExpiryTime {
		v["absoluteExpiryTime"] = jsonValue(p.AbsoluteExpiryTime)
	}
	if p.HasCreationTime {
		v["creationTime"] = jsonValue(p.CreationTime)
	}
	if p.HasGroupSequence {
		v["groupSequence"] = p.GroupSequence
	}
	if len(v) == 0 {
		return nil, nil
	}
	return v, nil
}

// mapView decodes an annotations or application properties section.
func mapView(s *message.Sections, sp message.Span) (map[string]any, error) {
	if !sp.Present() {
		return nil, nil
	}
	r := encoding.NewReader(s.ValueBytes(sp))
	if r.TryNull() {
		return nil, nil
	}
	raw, err := r.ReadAny(encoding.DefaultLimits)
	if err != nil {
		return nil, err
	}
	m, ok := raw.(encoding.Map)
	if !ok {
		return nil, fmt.Errorf("a %T, not a map", raw)
	}
	v := make(map[string]any, len(m))
	for _, e := range m {
		v[keyText(e.Key)] = jsonValue(e.Value)
	}
	return v, nil
}

// bodyView is the body's kind and bytes: a data body's bytes, or an
// amqp-value's or amqp-sequence's value written as JSON.
func bodyView(s *message.Sections) (string, []byte, error) {
	switch s.BodyKind {
	case message.BodyData:
		var body []byte
		r := encoding.NewReader(s.Raw[s.Body.Start:s.Body.End])
		for r.Len() > 0 {
			if _, err := r.ReadDescriptor(); err != nil {
				return "", nil, err
			}
			b, err := r.ReadBinary()
			if err != nil {
				return "", nil, err
			}
			body = append(body, b...)
		}
		return "data", body, nil
	case message.BodyValue, message.BodySequence:
		kind := "value"
		r := encoding.NewReader(s.Raw[s.Body.Start:s.Body.End])
		var values []any
		for r.Len() > 0 {
			if _, err := r.ReadDescriptor(); err != nil {
				return "", nil, err
			}
			v, err := r.ReadAny(encoding.DefaultLimits)
			if err != nil {
				return "", nil, err
			}
			values = append(values, jsonValue(v))
		}
		var out any = values
		if s.BodyKind == message.BodySequence {
			kind = "sequence"
		} else if len(values) == 1 {
			out = values[0]
		}
		text, err := json.MarshalIndent(out, "", "  ")
		return kind, text, err
	}
	return "none", nil, nil
}

// jsonValue is an AMQP value as JSON can carry it: timestamps as RFC 3339
// text, uuids in their usual form, binaries as base64 (encoding/json's
// way), symbols, chars and decimals as text, maps with text keys, and
// floats that JSON cannot write (NaN, infinities) as text.
func jsonValue(v any) any {
	switch v := v.(type) {
	case encoding.Symbol:
		return string(v)
	case encoding.Char:
		return string(rune(v))
	case encoding.Timestamp:
		return time.UnixMilli(int64(v)).UTC().Format(time.RFC3339Nano)
	case encoding.UUID:
		return fmt.Sprintf("%x-%x-%x-%x-%x", v[0:4], v[4:6], v[6:8], v[8:10], v[10:16])
	case encoding.Decimal32, encoding.Decimal64, encoding.Decimal128:
		return fmt.Sprintf("%v", v)
	case float32:
		return jsonFloat(float64(v))
	case float64:
		return jsonFloat(v)
	case encoding.List:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = jsonValue(e)
		}
		return out
	case []any:
		return jsonValue(encoding.List(v))
	case encoding.Map:
		out := make(map[string]any, len(v))
		for _, e := range v {
			out[keyText(e.Key)] = jsonValue(e.Value)
		}
		return out
	case encoding.Array:
		return jsonValue(encoding.List(v.Elements))
	case encoding.Described:
		return map[string]any{"descriptor": jsonValue(v.Descriptor), "value": jsonValue(v.Value)}
	}
	return v // []byte: base64, as encoding/json writes it
}

func jsonFloat(f float64) any {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return f
}

// keyText is a map key as text.
func keyText(k any) string {
	switch k := jsonValue(k).(type) {
	case string:
		return k
	case []byte:
		return base64.StdEncoding.EncodeToString(k)
	default:
		return fmt.Sprint(k)
	}
}

// sessions serves GET /$walbus/sessions/<path>.
func (a *API) sessions(w http.ResponseWriter, r *http.Request, e *broker.Entity, queue uint32) {
	skip, top := 0, defaultTop
	for _, p := range []struct {
		name string
		v    *int
	}{{"skip", &skip}, {"top", &top}} {
		if s := r.URL.Query().Get(p.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				jsonError(w, http.StatusBadRequest, fmt.Sprintf("%s=%q is not a count", p.name, s))
				return
			}
			*p.v = n
		}
	}
	list, err := e.SessionList(queue, skip, top)
	if errors.Is(err, projection.ErrNotAllowed) {
		jsonError(w, http.StatusBadRequest, e.QueuePath(queue)+" has no sessions")
		return
	}
	type sessionView struct {
		ID          string `json:"id"`
		Messages    int    `json:"messages"`
		Locked      bool   `json:"locked"`
		LockedUntil string `json:"lockedUntil,omitempty"`
		State       []byte `json:"state,omitempty"`
	}
	views := []sessionView{}
	for _, s := range list {
		v := sessionView{ID: s.ID, Messages: s.Messages, State: s.State, Locked: s.LockedUntil > 0}
		if v.Locked {
			v.LockedUntil = rfc3339(s.LockedUntil)
		}
		views = append(views, v)
	}
	a.answer(w, r, err, map[string]any{"sessions": views})
}

// audit serves GET /$walbus/audit/<path>?seq=N with the Audit function
// the server was given.
func (a *API) audit(w http.ResponseWriter, r *http.Request, e *broker.Entity) {
	if a.Audit == nil {
		jsonError(w, http.StatusNotFound, "this server keeps no audit")
		return
	}
	s := r.URL.Query().Get("seq")
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil || seq == 0 {
		jsonError(w, http.StatusBadRequest, fmt.Sprintf("seq=%q is not a SequenceNumber", s))
		return
	}
	lives, err := a.Audit(e.Name(), seq)
	if err != nil {
		jsonError(w, http.StatusInternalServerError, err.Error())
		return
	}
	a.answer(w, r, nil, map[string]any{"lives": lives})
}
