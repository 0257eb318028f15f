package atom

import (
	"bytes"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/walbus/walbus/projection"
)

// APIVersion is the api-version the <id> and link URLs carry. Clients
// read only the path (JS's setName); 2021-05 is the JS SDK's.
const APIVersion = "2021-05"

// Info is what an entry shows about one entity.
type Info struct {
	Kind Kind
	// Path as in URLs: "q1", "t1/Subscriptions/s1", "t1/Subscriptions/s1/Rules/r1".
	// Its last segment names a subscription or rule; a queue's or topic's
	// name is the whole path.
	Path        string
	Config      projection.Config   // queues, topics, subscriptions
	Rule        projection.RuleSpec // rules
	Counts      Counts
	SizeInBytes int64
	// Created, Updated, Accessed; the zero time is written as
	// 0001-01-01T00:00:00Z, which every SDK reads.
	Created, Updated, Accessed time.Time
	// Topics only.
	SubscriptionCount      int
	SQLFilterCount         int // rules with a SQL, true or false filter (the service counts $Default)
	CorrelationFilterCount int
}

// Counts are an entity's messages by queue.
type Counts struct {
	Active, DeadLetter, Scheduled, Transfer, TransferDeadLetter int64
}

func (c Counts) total() int64 {
	return c.Active + c.DeadLetter + c.Scheduled + c.Transfer + c.TransferDeadLetter
}

// Entry is the <entry> document for one entity; base is the scheme and
// authority the request came to ("https://127.0.0.1:5671"), used in <id>
// and links.
func Entry(base string, info Info) []byte {
	var w writer
	w.entry(base, info, true)
	return w.Bytes()
}

// Feed is a list: title as Service Bus gives it ("Queues", "Topics",
// "Subscriptions", "Rules"), self is the request path, and next, if not "",
// the URL of the next page. JS pages only on <link rel="next"> and reads
// links only when there are several; Python takes the second of exactly
// two. So self always comes first.
func Feed(base, title, self string, infos []Info, next string) []byte {
	var w writer
	w.open("feed", "xmlns", nsAtom)
	w.elem("id", join(base, self))
	w.open("title", "type", "text")
	w.text(title)
	w.close("title")
	w.empty("link", "rel", "self", "href", join(base, self))
	if next != "" {
		w.empty("link", "rel", "next", "href", next)
	}
	for _, info := range infos {
		w.entry(base, info, false)
	}
	w.close("feed")
	return w.Bytes()
}

// EmptyFeed is what a GET of a missing entity may answer, as the service
// does: Go looks for this title (entity_manager.go, ErrFeedEmpty), Python
// and JS for an entry that is not there.
func EmptyFeed(base, self string) []byte {
	var w writer
	w.open("feed", "xmlns", nsAtom)
	w.open("title", "type", "text")
	w.text("Publicly Listed Services")
	w.close("title")
	w.open("subtitle", "type", "text")
	w.text("This is the list of publicly-listed services currently available.")
	w.close("subtitle")
	w.elem("id", join(base, self))
	w.elem("generator", "Microsoft® Service Bus")
	w.close("feed")
	return w.Bytes()
}

// ErrorBody is the XML error body: <Error><Code>N</Code><Detail>...</Detail></Error>.
func ErrorBody(code int, detail string) []byte {
	var w writer
	w.open("Error")
	w.elem("Code", strconv.Itoa(code))
	w.elem("Detail", detail)
	w.close("Error")
	return w.Bytes()
}

// NamespaceInfo is GET /$namespaceinfo's entry. Go reads the times as
// RFC 3339; JS needs MessagingSKU and, for Premium only, MessagingUnits.
func NamespaceInfo(base, name string, created, modified time.Time) []byte {
	var w writer
	self := strings.TrimRight(base, "/") + "/$namespaceinfo?api-version=" + APIVersion
	w.open("entry", "xmlns", nsAtom)
	w.elem("id", self)
	w.open("title", "type", "text")
	w.text(name)
	w.close("title")
	w.elem("updated", modified.UTC().Format(time.RFC3339))
	w.open("author")
	w.elem("name", name)
	w.close("author")
	w.empty("link", "rel", "self", "href", self)
	w.open("content", "type", "application/xml")
	w.open("NamespaceInfo", "xmlns", nsConnect, "xmlns:i", nsInstance)
	w.elem("CreatedTime", timeText(created))
	w.elem("MessagingSKU", "Standard")
	w.elem("ModifiedTime", timeText(modified))
	w.elem("Name", name)
	w.elem("NamespaceType", "Messaging")
	w.close("NamespaceInfo")
	w.close("content")
	w.close("entry")
	return w.Bytes()
}

// entry writes one <entry>; top says it is the document's root, which
// declares the ATOM namespace.
func (w *writer) entry(base string, info Info, top bool) {
	name := info.Path
	if info.Kind == Subscription || info.Kind == Rule {
		name = name[strings.LastIndexByte(name, '/')+1:]
	}
	ruleName := info.Rule.Name
	if info.Kind == Rule {
		switch {
		case name == "":
			name = ruleName
		case ruleName == "":
			ruleName = name
		}
	}
	self := join(base, "/"+escapePath(info.Path)+"?api-version="+APIVersion)
	if top {
		w.open("entry", "xmlns", nsAtom)
	} else {
		w.open("entry")
	}
	// JS takes names from the <id> URL's path (atomXmlHelper.js, setName);
	// Go and Python from the title.
	w.elem("id", self)
	w.open("title", "type", "text")
	w.text(name)
	w.close("title")
	w.elem("published", info.Created.UTC().Format(time.RFC3339))
	w.elem("updated", info.Updated.UTC().Format(time.RFC3339))
	w.open("author")
	w.elem("name", hostname(base))
	w.close("author")
	w.empty("link", "rel", "self", "href", self)
	w.open("content", "type", "application/xml")
	// The namespace is declared on the description itself, where JS looks
	// for it.
	if info.Kind > 0 && int(info.Kind) < len(descriptionTags) {
		tag := descriptionTags[info.Kind]
		w.open(tag, "xmlns", nsConnect, "xmlns:i", nsInstance)
		switch info.Kind {
		case Queue:
			w.queue(info)
		case Topic:
			w.topic(info)
		case Subscription:
			w.subscription(info)
		case Rule:
			w.rule(info.Rule, ruleName, info.Created)
		}
		w.close(tag)
	}
	w.close("content")
	w.close("entry")
}

// descriptionTags names each kind's description element.
var descriptionTags = [...]string{Queue: "QueueDescription", Topic: "TopicDescription",
	Subscription: "SubscriptionDescription", Rule: "RuleDescription"}

// queue writes a QueueDescription's children in .NET's order, which Go's
// models.go follows (clients read them in any order). Every element JS and
// Python require is there, whatever the config holds.
func (w *writer) queue(info Info) {
	c := info.Config
	w.elem("LockDuration", FormatDuration(c.LockDuration))
	w.elem("MaxSizeInMegabytes", strconv.Itoa(maxSizeMB(c)))
	w.boolean("RequiresDuplicateDetection", c.RequiresDuplicateDetection)
	w.boolean("RequiresSession", c.RequiresSession)
	w.elem("DefaultMessageTimeToLive", neverIfZero(c.DefaultTTL))
	w.boolean("DeadLetteringOnMessageExpiration", c.DeadLetterOnExpiry)
	w.elem("DuplicateDetectionHistoryTimeWindow", FormatDuration(c.DuplicateWindow))
	w.elem("MaxDeliveryCount", strconv.Itoa(c.MaxDeliveryCount))
	w.boolean("EnableBatchedOperations", !c.NoBatchedOperations)
	w.elem("SizeInBytes", strconv.FormatInt(info.SizeInBytes, 10))
	w.elem("MessageCount", strconv.FormatInt(info.Counts.total(), 10))
	w.boolean("IsAnonymousAccessible", false)
	w.authorizationRules(c.AuthorizationRules)
	w.elem("Status", status(c))
	w.times(info)
	w.boolean("SupportOrdering", !c.NoSupportOrdering)
	w.elem("AutoDeleteOnIdle", neverIfZero(c.AutoDeleteOnIdle))
	w.boolean("EnablePartitioning", c.EnablePartitioning)
	w.boolean("EnableExpress", false)
	w.countDetails(info.Counts)
	w.optional("ForwardTo", written(c.ForwardTo, c.ForwardToAddress))
	w.optional("ForwardDeadLetteredMessagesTo", written(c.ForwardDeadLetteredMessagesTo, c.ForwardDeadLetteredMessagesToAddress))
	w.optional("UserMetadata", c.UserMetadata)
	w.elem("MaxMessageSizeInKilobytes", strconv.Itoa(c.MaxMessageSize/1024))
	w.elem("EntityAvailabilityStatus", "Available")
}

// topic writes a TopicDescription's children (the times in the order a
// captured 2024-05 response has them, admin_client_topic_filtercount_test.go).
func (w *writer) topic(info Info) {
	c := info.Config
	w.elem("DefaultMessageTimeToLive", neverIfZero(c.DefaultTTL))
	w.elem("MaxSizeInMegabytes", strconv.Itoa(maxSizeMB(c)))
	w.boolean("RequiresDuplicateDetection", c.RequiresDuplicateDetection)
	w.elem("DuplicateDetectionHistoryTimeWindow", FormatDuration(c.DuplicateWindow))
	w.boolean("EnableBatchedOperations", !c.NoBatchedOperations)
	w.elem("SizeInBytes", strconv.FormatInt(info.SizeInBytes, 10))
	w.boolean("FilteringMessagesBeforePublishing", false)
	w.boolean("IsAnonymousAccessible", false)
	w.authorizationRules(c.AuthorizationRules)
	w.elem("Status", status(c))
	w.optional("UserMetadata", c.UserMetadata)
	w.times(info)
	w.boolean("SupportOrdering", !c.NoSupportOrdering)
	w.elem("AutoDeleteOnIdle", neverIfZero(c.AutoDeleteOnIdle))
	w.boolean("EnablePartitioning", c.EnablePartitioning)
	w.boolean("EnableSubscriptionPartitioning", false)
	w.boolean("EnableExpress", false)
	w.countDetails(info.Counts)
	w.elem("SubscriptionCount", strconv.Itoa(info.SubscriptionCount))
	w.elem("SqlFilterCount", strconv.Itoa(info.SQLFilterCount))
	w.elem("CorrelationFilterCount", strconv.Itoa(info.CorrelationFilterCount))
	w.elem("MaxMessageSizeInKilobytes", strconv.Itoa(c.MaxMessageSize/1024))
	w.elem("EntityAvailabilityStatus", "Available")
}

// subscription writes a SubscriptionDescription's children. The
// DefaultRuleDescription a create carried is never written back.
func (w *writer) subscription(info Info) {
	c := info.Config
	w.elem("LockDuration", FormatDuration(c.LockDuration))
	w.boolean("RequiresSession", c.RequiresSession)
	w.elem("DefaultMessageTimeToLive", neverIfZero(c.DefaultTTL))
	w.boolean("DeadLetteringOnMessageExpiration", c.DeadLetterOnExpiry)
	w.boolean("DeadLetteringOnFilterEvaluationExceptions", c.DeadLetterOnFilterError)
	w.elem("MaxDeliveryCount", strconv.Itoa(c.MaxDeliveryCount))
	w.elem("MessageCount", strconv.FormatInt(info.Counts.total(), 10))
	w.boolean("EnableBatchedOperations", !c.NoBatchedOperations)
	w.elem("Status", status(c))
	w.optional("ForwardTo", written(c.ForwardTo, c.ForwardToAddress))
	w.optional("UserMetadata", c.UserMetadata)
	w.optional("ForwardDeadLetteredMessagesTo", written(c.ForwardDeadLetteredMessagesTo, c.ForwardDeadLetteredMessagesToAddress))
	w.elem("AutoDeleteOnIdle", neverIfZero(c.AutoDeleteOnIdle))
	w.times(info)
	w.countDetails(info.Counts)
	w.elem("EntityAvailabilityStatus", "Available")
}

// written is a forwarding target as the client wrote it.
func written(name, address string) string {
	if address != "" && name != "" {
		return address
	}
	return name
}

// authorizationRules writes an entity's own SharedAccessAuthorizationRules
// (the i prefix is declared on the description).
func (w *writer) authorizationRules(rules []projection.AccessRule) {
	if len(rules) == 0 {
		w.empty("AuthorizationRules")
		return
	}
	w.open("AuthorizationRules")
	for _, r := range rules {
		w.open("AuthorizationRule", "i:type", "SharedAccessAuthorizationRule")
		w.elem("ClaimType", "SharedAccessKey")
		w.elem("ClaimValue", "None")
		w.open("Rights")
		for _, right := range r.Rights {
			w.elem("AccessRights", right)
		}
		w.close("Rights")
		w.elem("KeyName", r.KeyName)
		w.elem("PrimaryKey", r.PrimaryKey)
		w.optional("SecondaryKey", r.SecondaryKey)
		w.close("AuthorizationRule")
	}
	w.close("AuthorizationRules")
}

func (w *writer) times(info Info) {
	w.elem("CreatedAt", timeText(info.Created))
	w.elem("UpdatedAt", timeText(info.Updated))
	w.elem("AccessedAt", timeText(info.Accessed))
}

// countDetails writes CountDetails with exactly one namespace declaration
// and prefixed children, which JS requires (utils.js, getXMLNSPrefix). Go
// reads the counts as int32s, so they are capped there.
func (w *writer) countDetails(c Counts) {
	w.open("CountDetails", "xmlns:d2p1", nsCounts)
	for _, n := range []struct {
		name  string
		count int64
	}{{"ActiveMessageCount", c.Active}, {"DeadLetterMessageCount", c.DeadLetter},
		{"ScheduledMessageCount", c.Scheduled}, {"TransferMessageCount", c.Transfer},
		{"TransferDeadLetterMessageCount", c.TransferDeadLetter}} {
		w.elem("d2p1:"+n.name, strconv.FormatInt(min(n.count, math.MaxInt32), 10))
	}
	w.close("CountDetails")
}

func maxSizeMB(c projection.Config) int {
	if c.MaxSizeMB == 0 {
		return projection.DefaultMaxSizeMB
	}
	return c.MaxSizeMB
}

func status(c projection.Config) string {
	if c.Status == "" {
		return string(projection.StatusActive)
	}
	return string(c.Status)
}

// neverIfZero writes a TTL or auto-delete interval, 0 (never) as
// TimeSpan.MaxValue.
func neverIfZero(d time.Duration) string {
	if d == 0 {
		return timeSpanMax
	}
	return FormatDuration(d)
}

// timeText writes a time as the service does: UTC, up to seven fraction
// digits. Go parses it as RFC 3339, JS with new Date, Python as ISO 8601.
func timeText(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.9999999Z07:00")
}

// join makes base and a path one URL.
func join(base, path string) string {
	if path != "" && !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return strings.TrimRight(base, "/") + path
}

// escapePath escapes each segment of an entity path for a URL.
func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

// hostname is base's host, the author of its entries.
func hostname(base string) string {
	if u, err := url.Parse(base); err == nil && u.Hostname() != "" {
		return u.Hostname()
	}
	return base
}

// writer builds a document; text and attribute values go through text.
type writer struct{ bytes.Buffer }

// open writes a start tag with attributes given as name, value pairs.
func (w *writer) open(tag string, attrs ...string) {
	w.startTag(tag, attrs)
	w.WriteByte('>')
}

// empty writes an element with no content.
func (w *writer) empty(tag string, attrs ...string) {
	w.startTag(tag, attrs)
	w.WriteString("/>")
}

func (w *writer) startTag(tag string, attrs []string) {
	w.WriteByte('<')
	w.WriteString(tag)
	for i := 0; i+1 < len(attrs); i += 2 {
		w.WriteString(" " + attrs[i] + `="`)
		w.escape(attrs[i+1], true)
		w.WriteByte('"')
	}
}

func (w *writer) close(tag string) { w.WriteString("</" + tag + ">") }

// text writes s as character data: see escape.
func (w *writer) text(s string) { w.escape(s, false) }

// escape writes s escaped with named entities only: the JS clients' parser
// (fast-xml-parser through @azure/core-xml) leaves numeric character
// references such as &#39; undecoded, so a quote in an attribute must be
// &apos;. Quotes in character data go as they are, as the service writes
// them (error details quote names, and the SDKs' tests match the text).
// A carriage return is written as &#xD; so that it survives XML's line-end
// normalisation; tabs and newlines go as they are. What XML cannot hold
// (other control characters, invalid UTF-8) becomes U+FFFD, as
// encoding/xml's EscapeText makes it.
func (w *writer) escape(s string, attr bool) {
	for _, r := range s {
		switch {
		case r == '&':
			w.WriteString("&amp;")
		case r == '<':
			w.WriteString("&lt;")
		case r == '>':
			w.WriteString("&gt;")
		case r == '"' && attr:
			w.WriteString("&quot;")
		case r == '\'' && attr:
			w.WriteString("&apos;")
		case r == '\r':
			w.WriteString("&#xD;")
		case r == '\t' || r == '\n':
			w.WriteRune(r)
		case r < 0x20 || r == utf8.RuneError || r == 0xFFFE || r == 0xFFFF:
			w.WriteRune('\uFFFD')
		default:
			w.WriteRune(r)
		}
	}
}

// elem writes <tag>text</tag>.
func (w *writer) elem(tag, text string) {
	w.open(tag)
	w.text(text)
	w.close(tag)
}

// optional writes elem unless text is "": the service leaves unset
// strings out, and Go and JS read an absent one as nil.
func (w *writer) optional(tag, text string) {
	if text != "" {
		w.elem(tag, text)
	}
}

func (w *writer) boolean(tag string, b bool) { w.elem(tag, strconv.FormatBool(b)) }
