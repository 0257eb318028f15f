package tools

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// EventRecord is one event as replay prints it in JSON: the envelope and the
// fields its type uses, with times in RFC 3339.
type EventRecord struct {
	Log string `json:"log"` // entity name, or $namespace
	// Source is where the record was read: "log", "archive" (kept by a
	// compaction because the state still needs it) or "retained" (history
	// a compaction dropped, from --retained).
	Source    string `json:"source"`
	Index     uint64 `json:"index"`
	Time      string `json:"time"`
	Type      string `json:"type"`
	Continued bool   `json:"continued,omitempty"` // the record's atomic group goes on in the next one

	Queue        string `json:"queue,omitempty"` // main or dlq
	Seq          uint64 `json:"seq,omitempty"`   // the message the event is about
	From         uint64 `json:"from,omitempty"`  // activated, published: the scheduled message's SequenceNumber; copied: the published record
	MessageID    string `json:"message_id,omitempty"`
	SessionID    string `json:"session_id,omitempty"`
	Size         *int   `json:"size,omitempty"` // of the message as sent
	Receiver     string `json:"receiver,omitempty"`
	LockToken    string `json:"lock_token,omitempty"`
	LockedUntil  string `json:"locked_until,omitempty"`
	ScheduledFor string `json:"scheduled_for,omitempty"`
	Expires      string `json:"expires,omitempty"`
	TTL          string `json:"ttl,omitempty"`  // a scheduled message's time to live from activation
	Hops         uint32 `json:"hops,omitempty"` // auto-forwards that brought the message here
	// Deliveries is the message's count of failed delivery attempts after
	// the event (the AMQP header's delivery-count), when it can be derived.
	Deliveries  *int   `json:"deliveries,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Description string `json:"description,omitempty"`
	PropsSize   int    `json:"props_size,omitempty"` // encoded application properties the event sets
	StateSize   *int   `json:"state_size,omitempty"` // session state
	Name        string `json:"name,omitempty"`       // entity events; remembered: the entity on the way
	// RememberedUntil is when the entity on the way (Name) of a
	// remembered event forgets its MessageId.
	RememberedUntil string `json:"remembered_until,omitempty"`
	// Transaction is the id of the transaction a committed event closes
	// (the events before it in its atomic group), in hex.
	Transaction string `json:"transaction,omitempty"`
	// TransactionEvents is how many events before it the commit held.
	TransactionEvents uint64          `json:"transaction_events,omitempty"`
	Spec              json.RawMessage `json:"spec,omitempty"` // entity, subscription and rule events: the recorded definition
	// Routes are the subscriptions a published message reached as sent
	// (copies made by rule actions are copied events of their own).
	Routes []string     `json:"routes,omitempty"`
	Body   *BodyPreview `json:"body,omitempty"`
}

// BodyPreview is the start of a message as the client sent it (the bare
// AMQP message), as text when it is printable UTF-8, else as hex.
type BodyPreview struct {
	Encoding  string `json:"encoding"` // "utf-8" or "hex"
	Data      string `json:"data"`
	Truncated bool   `json:"truncated,omitempty"`
}

// DefaultBodyMax is how many bytes of a body a preview shows by default.
const DefaultBodyMax = 64

// previewBody renders up to max bytes of b.
func previewBody(b []byte, max int) BodyPreview {
	if max <= 0 {
		max = DefaultBodyMax
	}
	cut := b[:min(len(b), max)]
	p := BodyPreview{Truncated: len(cut) < len(b)}
	text := cut
	// A cut can split a character; its leading bytes are not damage.
	for k := 0; k < utf8.UTFMax-1 && p.Truncated && len(text) > 0 && !utf8.Valid(text); k++ {
		text = text[:len(text)-1]
	}
	if utf8.Valid(text) && printable(string(text)) {
		p.Encoding, p.Data = "utf-8", string(text)
		p.Truncated = len(text) < len(b)
		return p
	}
	p.Encoding, p.Data = "hex", hex.EncodeToString(cut)
	return p
}

func printable(s string) bool {
	for _, r := range s {
		if !unicode.IsPrint(r) && r != '\n' && r != '\t' && r != '\r' {
			return false
		}
	}
	return true
}

func (p BodyPreview) text(size int) string {
	s := strconv.Quote(p.Data)
	if p.Encoding == "hex" {
		s = "hex:" + p.Data
	}
	if p.Truncated {
		s += fmt.Sprintf("...(%d bytes)", size)
	}
	return s
}

// FormatToken renders a lock token as a GUID, the way the SDKs print it.
func FormatToken(t event.LockToken) string {
	h := hex.EncodeToString(t[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// eventContext is what a rendering knows beyond the event itself.
type eventContext struct {
	label      string
	source     string // SourceLog, SourceArchive or SourceRetained
	deliveries int    // -1: not derivable
	bodies     bool
	bodyMax    int
	// group is, for a committed event, how many events of its atomic
	// group came before it (the transaction's work); 0 if unknown.
	group uint64
}

func rfc3339(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

// seqOf is the message an event is about: its own index for the events that
// create a message.
func seqOf(ev *event.Event) uint64 {
	if ev.Type.CreatesMessage() {
		return ev.Index
	}
	switch ev.Type {
	case event.EntityCreated, event.EntityUpdated, event.EntityDeleted, event.ClockAdvanced, event.NodeAddress, event.Remembered,
		event.Committed, event.Arrived,
		event.SessionLocked, event.SessionLockRenewed, event.SessionUnlocked, event.SessionStateSet:
		return 0
	}
	return ev.Seq
}

func isNamespaceType(t event.Type) bool {
	return t == event.EntityCreated || t == event.EntityUpdated || t == event.EntityDeleted || t == event.ClockAdvanced ||
		t == event.NodeAddress
}

// hasQueue says whether events of type t are about one of the entity's
// queues.
func hasQueue(t event.Type) bool {
	return !isNamespaceType(t) && t != event.Checkpoint && t != event.Remembered && t != event.Committed && t != event.Arrived &&
		t != event.Marker
}

// hasMessage says whether events of type t carry a message body (a topic's
// copy reads its body from the published record before it).
func hasMessage(t event.Type) bool { return t.CreatesMessage() && t != event.Copied }

// eventRecord builds the JSON form of ev.
func eventRecord(ev *event.Event, c eventContext) EventRecord {
	source := c.source
	if source == "" {
		source = SourceLog
	}
	r := EventRecord{Log: c.label, Source: source, Index: ev.Index, Time: rfc3339(ev.Time), Type: ev.Type.String(),
		Continued: ev.Flags&event.FlagContinued != 0, Seq: seqOf(ev),
		MessageID: ev.MessageID, SessionID: ev.SessionID, Receiver: ev.Receiver,
		Reason: ev.Reason, Description: ev.Description, Name: ev.Name, Hops: ev.Hops}
	if hasQueue(ev.Type) {
		r.Queue = QueueName(ev.Queue)
	}
	if c.deliveries >= 0 && r.Seq != 0 {
		r.Deliveries = &c.deliveries
	}
	switch ev.Type {
	case event.EntityCreated, event.EntityUpdated, event.SubscriptionCreated, event.SubscriptionUpdated, event.RuleAdded:
		if json.Valid(ev.Props) {
			r.Spec = json.RawMessage(append([]byte(nil), ev.Props...))
		}
	case event.Published:
		if ev.Until != 0 {
			r.Expires = rfc3339(ev.Until)
		}
		if routes, err := event.DecodeRoutes(ev.Props); err == nil {
			r.Routes = make([]string, len(routes))
			for i, no := range routes {
				r.Routes[i] = QueueName(no)
			}
		}
		r.From = ev.Seq
	case event.Copied:
		r.From = ev.Index - ev.Seq
	case event.Enqueued, event.Activated, event.Forwarded, event.Restored, event.RestoredCopy:
		if ev.Until != 0 {
			r.Expires = rfc3339(ev.Until)
		}
	case event.Scheduled, event.ScheduledHeld:
		r.ScheduledFor = rfc3339(ev.Until)
		if ev.TTL != 0 {
			r.TTL = time.Duration(ev.TTL).String()
		}
	case event.Transfer:
		if ev.Until != 0 {
			r.ScheduledFor = rfc3339(ev.Until)
		}
		if ev.TTL != 0 {
			r.TTL = time.Duration(ev.TTL).String()
		}
	case event.Arrived:
		r.From = ev.Seq
	case event.Locked, event.LockRenewed, event.SessionLocked, event.SessionLockRenewed:
		r.LockedUntil = rfc3339(ev.Until)
	case event.SessionStateSet:
		n := len(ev.State)
		r.StateSize = &n
	case event.Remembered:
		r.RememberedUntil = rfc3339(ev.Until)
	case event.Committed:
		r.Transaction = hex.EncodeToString(ev.State)
		r.TransactionEvents = c.group
	}
	if ev.Type == event.Activated || ev.Type == event.Forwarded || ev.Type == event.Restored || ev.Type == event.RestoredCopy {
		r.From = ev.Seq
	}
	if ev.Type == event.Locked {
		r.LockToken = FormatToken(ev.Token)
	}
	switch ev.Type {
	case event.Published, event.SubscriptionCreated, event.SubscriptionUpdated, event.RuleAdded:
	default:
		if !isNamespaceType(ev.Type) {
			r.PropsSize = len(ev.Props)
		}
	}
	if hasMessage(ev.Type) {
		n := len(ev.Message)
		r.Size = &n
		if c.bodies {
			p := previewBody(ev.Message, c.bodyMax)
			r.Body = &p
		}
	}
	return r
}

// eventDetails renders the fields of ev for people: key=value pairs, times
// relative to the event's own time.
func eventDetails(ev *event.Event, c eventContext) string {
	var b strings.Builder
	add := func(key, val string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(key)
		b.WriteByte('=')
		b.WriteString(val)
	}
	rel := func(at int64) string { return relative(at, ev.Time) }
	switch ev.Type {
	case event.EntityCreated, event.EntityUpdated, event.EntityDeleted:
		add("name", quoteIfNeeded(ev.Name))
		if ev.Type != event.EntityDeleted {
			add("spec", string(ev.Props))
		}
		return b.String()
	case event.ClockAdvanced:
		add("by", time.Duration(ev.TTL).String())
		return b.String()
	case event.NodeAddress:
		add("node", strconv.FormatUint(ev.Source, 10))
		add("peer", quoteIfNeeded(ev.Name))
		return b.String()
	case event.Activated:
		add("from", strconv.FormatUint(ev.Seq, 10))
	case event.Forwarded:
		add("from", fmt.Sprintf("%s/%d", quoteIfNeeded(ev.Name), ev.Seq))
		add("reason", quoteIfNeeded(ev.Reason))
	case event.Restored:
		add("from", strconv.FormatUint(ev.Seq, 10))
	case event.RestoredCopy:
		add("from", strconv.FormatUint(ev.Seq, 10))
		if rule, _, err := projection.DecodeCopy(ev.State); err == nil {
			add("rule", quoteIfNeeded(rule))
		}
	case event.Transfer:
		add("to", quoteIfNeeded(ev.Name))
		if ev.Until != 0 {
			add("scheduled", rel(ev.Until))
		}
		if ev.TTL != 0 {
			add("ttl", time.Duration(ev.TTL).String())
		}
	case event.Arrived:
		add("from", fmt.Sprintf("%x/%d", ev.Source, ev.Seq))
		return b.String()
	case event.Remembered:
		add("via", quoteIfNeeded(ev.Name))
		add("id", quoteIfNeeded(ev.MessageID))
		add("until", rel(ev.Until))
	case event.Published:
		if ev.Seq != 0 {
			add("from", strconv.FormatUint(ev.Seq, 10))
		}
		add("to", routesText(ev.Props))
	case event.Copied:
		add("of", strconv.FormatUint(ev.Index-ev.Seq, 10))
		if ev.Name != "" {
			add("rule", quoteIfNeeded(ev.Name))
		}
		if ev.Reason != "" {
			add("reason", quoteIfNeeded(ev.Reason))
			add("description", quoteIfNeeded(ev.Description))
		}
	case event.SubscriptionCreated, event.RuleAdded:
		add("name", quoteIfNeeded(ev.Name))
		add("spec", string(ev.Props))
		return b.String()
	case event.SubscriptionUpdated:
		add("spec", string(ev.Props))
		return b.String()
	case event.RuleRemoved:
		add("name", quoteIfNeeded(ev.Name))
		return b.String()
	case event.SubscriptionDeleted:
		return b.String()
	case event.Committed:
		add("transaction", hex.EncodeToString(ev.State))
		if c.group > 0 {
			add("events", strconv.FormatUint(c.group, 10))
		}
		return b.String()
	}
	if hasMessage(ev.Type) {
		if ev.MessageID != "" {
			add("id", quoteIfNeeded(ev.MessageID))
		}
		if ev.SessionID != "" {
			add("session", sessionText(ev.SessionID))
		}
		add("size", strconv.Itoa(len(ev.Message)))
		if ev.Hops != 0 {
			add("hops", strconv.FormatUint(uint64(ev.Hops), 10))
		}
	}
	switch ev.Type {
	case event.Enqueued, event.Activated, event.Forwarded, event.Restored, event.RestoredCopy, event.Published:
		if ev.Until != 0 {
			add("expires", rel(ev.Until))
		}
	case event.Scheduled, event.ScheduledHeld:
		add("at", rel(ev.Until))
		if ev.TTL != 0 {
			add("ttl", time.Duration(ev.TTL).String())
		}
	case event.Confirmed:
		add("id", quoteIfNeeded(ev.MessageID))
	case event.Locked:
		add("receiver", quoteIfNeeded(ev.Receiver))
		add("until", rel(ev.Until))
		add("token", FormatToken(ev.Token))
	case event.LockRenewed:
		add("until", rel(ev.Until))
	case event.DeadLettered, event.TransferDeadLettered:
		add("reason", quoteIfNeeded(ev.Reason))
		if ev.Description != "" {
			add("description", quoteIfNeeded(ev.Description))
		}
	case event.ReceivedAndDeleted:
		add("receiver", quoteIfNeeded(ev.Receiver))
	case event.SessionLocked:
		add("session", sessionText(ev.SessionID))
		add("receiver", quoteIfNeeded(ev.Receiver))
		add("until", rel(ev.Until))
	case event.SessionLockRenewed:
		add("session", sessionText(ev.SessionID))
		add("until", rel(ev.Until))
	case event.SessionUnlocked:
		add("session", sessionText(ev.SessionID))
	case event.SessionStateSet:
		add("session", sessionText(ev.SessionID))
		add("state", fmt.Sprintf("%dB", len(ev.State)))
	}
	if len(ev.Props) > 0 && ev.Type != event.Published {
		add("props", fmt.Sprintf("%dB", len(ev.Props)))
	}
	if c.deliveries >= 0 && seqOf(ev) != 0 {
		add("deliveries", strconv.Itoa(c.deliveries))
	}
	if c.bodies && hasMessage(ev.Type) {
		add("body", previewBody(ev.Message, c.bodyMax).text(len(ev.Message)))
	}
	if c.source != "" && c.source != SourceLog {
		add("source", c.source)
	}
	return b.String()
}

// routesText lists the subscription queues a Published event reached:
// "[s1 s4]", or "[]" for none.
func routesText(props []byte) string {
	routes, err := event.DecodeRoutes(props)
	if err != nil {
		return quoteIfNeeded("unreadable: " + err.Error())
	}
	names := make([]string, len(routes))
	for i, no := range routes {
		names[i] = QueueName(no)
	}
	return "[" + strings.Join(names, ",") + "]"
}

// relative renders the time at as an offset from the time base ("+1m0s"),
// or "never" for 0.
func relative(at, base int64) string {
	if at == 0 {
		return "never"
	}
	d := time.Duration(at - base)
	if d < 0 {
		return d.String()
	}
	return "+" + d.String()
}

// sessionText shows a session id as its clients name it: the session ""
// (projection.EmptySessionID) as "".
func sessionText(id string) string { return quoteIfNeeded(projection.ClientSessionID(id)) }

// quoteIfNeeded leaves a plain word as it is and quotes anything else, so a
// key=value list stays unambiguous.
func quoteIfNeeded(s string) string {
	if s == "" {
		return `""`
	}
	if !utf8.ValidString(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if r <= ' ' || r == '"' || r == '=' || r == '\\' || r >= utf8.RuneSelf && !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// textHeader and textLine lay out replay's table: fixed columns, then the
// details. The TYPE column is as wide as the longest event type's name.
var (
	typeWidth  = longestTypeName()
	textHeader = fmt.Sprintf("%-9s %-25s %-*s %-6s %-9s %s", "INDEX", "TIME", typeWidth, "TYPE", "QUEUE", "SEQ", "DETAILS")
)

func longestTypeName() int {
	n := 0
	for _, t := range event.Types() {
		n = max(n, len(t.String()))
	}
	return n
}

func textLine(ev *event.Event, c eventContext) string {
	queue, seq := "-", "-"
	if hasQueue(ev.Type) {
		queue = QueueName(ev.Queue)
	}
	if s := seqOf(ev); s != 0 {
		seq = strconv.FormatUint(s, 10)
	}
	line := fmt.Sprintf("%-9d %-25s %-*s %-6s %-9s %s", ev.Index, formatTime(ev.Time), typeWidth, ev.Type, queue, seq, eventDetails(ev, c))
	return strings.TrimRight(line, " ")
}
