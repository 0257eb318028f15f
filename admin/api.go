package admin

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/walbus/walbus/admin/atom"
	"github.com/walbus/walbus/amqpserver/sas"
	"github.com/walbus/walbus/amqpserver/transport"
	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// API serves the Service Bus administration API: ATOM documents over
// HTTP(S), as the SDKs' administration clients send and read them
// (package atom has the documents). Every request must carry a SAS token
// of a key with Manage rights.
//
// Paths, as the service has them:
//
//	/$namespaceinfo
//	/$Resources/Queues, /$Resources/Topics            lists, with $skip and $top
//	/NAME                                              a queue or a topic
//	/TOPIC/Subscriptions[/SUB]                         a list, or one
//	/TOPIC/Subscriptions/SUB/Rules[/RULE]              a list, or one
//
// A PUT creates (201, or 409 if it exists) unless it has If-Match, which
// makes it an update (200, or 404).
type API struct {
	b          *broker.Broker
	keys       sas.Keys
	logger     *slog.Logger
	namespace  string
	started    time.Time
	now        func() time.Time
	maxMessage int // the largest message a link carries (--max-message-size)

	// Audit, if set, returns the recorded lives of the messages entity's
	// log numbers seq (walbus audit's answer), for the console.
	Audit func(entity string, seq uint64) (any, error)
	// Cluster, if set, is the node's side of its cluster, for the
	// membership requests (walbus cluster add and remove).
	Cluster ClusterControl
	// Forward, if set, gives the base URL of a cluster's node's HTTP
	// listener, false when this node does not know it. A request that
	// the broker refuses because another node leads the group it touches
	// is then passed on to that node, and its answer passed back
	// (forward.go). Nil on a single node. It is called on the request's
	// goroutine.
	Forward func(node uint64) (baseURL string, ok bool)
	// Node is this node's id in its cluster: requests are not passed on
	// to it.
	Node uint64
}

// NewAPI serves b's administration API, authorising with keys. maxMessage
// is the largest message the broker's links carry: an entity created here
// takes the smaller of it and 1 MB as its MaxMessageSizeInKilobytes unless
// it names one, and may not name a larger one (a broker started with
// --max-message-size 256KiB is a Standard namespace, 256 KB for all).
func NewAPI(b *broker.Broker, keys sas.Keys, maxMessage int, logger *slog.Logger) *API {
	return &API{b: b, keys: keys, logger: logger, namespace: "sbemulatorns", started: time.Now(), now: time.Now,
		maxMessage: maxMessage}
}

// maxBody bounds a request's document.
const maxBody = 1 << 20

// defaultTop is how many entries a list returns when the client names no
// $top, as Service Bus does.
const defaultTop = 100

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.keepBody(r)
	if strings.EqualFold(strings.Trim(r.URL.Path, "/"), "$test/clock") {
		a.testClock(w, r) // it asks for a key only off loopback
		return
	}
	path := strings.Trim(r.URL.Path, "/")
	if serveConsole(w, r, path) {
		return
	}
	if strings.EqualFold(path, "$walbus/token") {
		a.token(w, r) // the console's sign-in: the key is in the body
		return
	}
	key, err := a.authenticate(r)
	if err != nil && !hasToken(r) && loopbackConsole(r) {
		key, err = consoleKey, nil
	}
	if err != nil {
		a.fail(w, r, http.StatusUnauthorized, err.Error())
		return
	}
	segs := strings.Split(path, "/")
	if !key.Rights.Has(sas.Manage) {
		a.refuse(w, r, segs, key)
		return
	}
	switch {
	case strings.EqualFold(path, "$namespaceinfo"):
		if r.Method != http.MethodGet {
			a.fail(w, r, http.StatusMethodNotAllowed, "the namespace is read with GET")
			return
		}
		a.write(w, http.StatusOK, "entry", atom.NamespaceInfo(base(r), a.namespace, a.started, a.started))
	case len(segs) == 2 && strings.EqualFold(segs[0], "$Resources"):
		a.listEntities(w, r, segs[1])
	case len(segs) == 3 && strings.EqualFold(segs[0], "$walbus") && strings.EqualFold(segs[1], "cluster"):
		a.clusterRequest(w, r, strings.ToLower(segs[2]))
	case len(segs) >= 2 && strings.EqualFold(segs[0], "$walbus"):
		a.walbusRequest(w, r, segs[1], segs[2:])
	default:
		a.entityRequest(w, r, segs)
	}
}

// authenticate checks the request's SAS token: its signature by a known
// key and its expiry. Whether the key may do what the request asks is the
// caller's to check.
func (a *API) authenticate(r *http.Request) (sas.Key, error) {
	token := r.Header.Get("Authorization")
	if token == "" {
		token = r.Header.Get("ServiceBusAuthorization")
	}
	if token == "" {
		return sas.Key{}, errors.New("no SharedAccessSignature in the Authorization header")
	}
	_, key, err := sas.Verify(token, a.keys, a.now())
	if err != nil {
		return sas.Key{}, fmt.Errorf("the SharedAccessSignature is not valid: %s", sas.Description(err))
	}
	return key, nil
}

// refuse answers a request whose key lacks Manage rights with 401 and the
// text Service Bus gives for the operation, which the SDKs' tests match.
// As the service does, a queue or topic that does not exist is reported
// missing even so.
func (a *API) refuse(w http.ResponseWriter, r *http.Request, segs []string, key sas.Key) {
	sub := subscriptionsAt(segs)
	var detail string
	switch {
	case sub >= 0:
		detail = fmt.Sprintf("401 SubCode=40100: Unauthorized : Unauthorized access for '%s' operation on endpoint '%s'. "+
			"The key %s lacks Manage rights.", operationName(r.Method, segs[sub+1:]), r.URL.Path, key.Name)
	case r.Method == http.MethodGet && len(segs) == 1 && !strings.EqualFold(segs[0], "$namespaceinfo"):
		if _, err := a.b.Entity(segs[0]); errors.Is(err, broker.ErrEntityNotFound) {
			a.brokerError(w, r, err)
			return
		}
		fallthrough
	case r.Method == http.MethodGet:
		detail = "Manage,EntityRead claims required for this operation. The key " + key.Name + " lacks Manage rights."
	case r.Method == http.MethodDelete:
		detail = "Authorization failed for specified action: Manage,EntityDelete. The key " + key.Name + " lacks Manage rights."
	default:
		detail = "Authorization failed for specified action: Manage,EntityWrite. The key " + key.Name + " lacks Manage rights."
	}
	a.fail(w, r, http.StatusUnauthorized, detail)
}

// operationName is Service Bus's name for a request on a topic's
// subscriptions or rules (rest is the path after "Subscriptions").
func operationName(method string, rest []string) string {
	what := "Subscription"
	if len(rest) >= 2 {
		what = "Rule"
	}
	one := len(rest) == 1 || len(rest) == 3
	switch {
	case method == http.MethodGet && one:
		return "Get" + what
	case method == http.MethodGet:
		return "Enumerate" + what + "s"
	case method == http.MethodDelete:
		return "Delete" + what
	default:
		return "CreateOrUpdate" + what
	}
}

// subscriptionsAt is where a path's "Subscriptions" segment is (after a
// topic's name), -1 for none.
func subscriptionsAt(segs []string) int {
	for i := 1; i < len(segs); i++ {
		if strings.EqualFold(segs[i], "Subscriptions") {
			return i
		}
	}
	return -1
}

// entityRequest serves the paths below an entity's name.
func (a *API) entityRequest(w http.ResponseWriter, r *http.Request, segs []string) {
	at := subscriptionsAt(segs)
	if at < 0 {
		a.entity(w, r, strings.Join(segs, "/"))
		return
	}
	topic, rest := strings.Join(segs[:at], "/"), segs[at+1:]
	if len(rest) > 0 && rest[len(rest)-1] == "" {
		rest = rest[:len(rest)-1] // the JS client lists rules with a trailing slash
	}
	switch {
	case len(rest) == 0:
		a.listSubscriptions(w, r, topic)
	case len(rest) == 1:
		a.subscription(w, r, topic, rest[0])
	case len(rest) == 2 && strings.EqualFold(rest[1], "Rules"):
		a.listRules(w, r, topic, rest[0])
	case len(rest) == 3 && strings.EqualFold(rest[1], "Rules"):
		a.rule(w, r, topic, rest[0], rest[2])
	default:
		a.fail(w, r, http.StatusNotFound, "no such resource: "+r.URL.Path)
	}
}

// entity serves a queue or a topic.
func (a *API) entity(w http.ResponseWriter, r *http.Request, name string) {
	switch r.Method {
	case http.MethodGet:
		a.replyEntity(w, r, name, http.StatusOK)
	case http.MethodPut:
		body, ok := a.body(w, r)
		if !ok {
			return
		}
		kind, err := atom.KindOf(body)
		if err == nil && kind != atom.Queue && kind != atom.Topic {
			err = &atom.PropertyError{Property: "content", Reason: fmt.Sprintf("a %s cannot be put at /%s", kind, name)}
		}
		if err != nil {
			a.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		topic := kind == atom.Topic
		update := r.Header.Get("If-Match") != ""
		cfg := projection.DefaultConfig()
		if topic {
			cfg = projection.DefaultTopicConfig()
		}
		cfg.MaxMessageSize = min(cfg.MaxMessageSize, a.maxMessage)
		old := cfg
		if update {
			e, err := a.b.Entity(name)
			if err != nil {
				a.brokerError(w, r, err)
				return
			}
			if e.IsTopic() != topic {
				a.fail(w, r, http.StatusBadRequest, fmt.Sprintf("%s is a %s", name, kindName(e.IsTopic())))
				return
			}
			if old, err = e.Config(); err != nil {
				a.brokerError(w, r, err)
				return
			}
			cfg = replacing(cfg, old)
		}
		if topic {
			err = atom.ParseTopic(body, &cfg)
		} else {
			err = atom.ParseQueue(body, &cfg)
		}
		if err != nil {
			a.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		what := "Queue"
		if topic {
			what = "Topic"
		}
		partitioned(&cfg)
		generateKeys(cfg.AuthorizationRules)
		switch {
		case update && cfg.RequiresSession != old.RequiresSession:
			a.fail(w, r, http.StatusBadRequest, "The value for the RequiresSession property of an existing "+what+" cannot be changed.")
			return
		case update && cfg.EnablePartitioning != old.EnablePartitioning:
			a.fail(w, r, http.StatusBadRequest, "Partitioning cannot be changed for "+what+". ")
			return
		case cfg.MaxMessageSize > a.maxMessage && (!update || cfg.MaxMessageSize != old.MaxMessageSize):
			a.fail(w, r, http.StatusBadRequest, fmt.Sprintf("invalid MaxMessageSizeInKilobytes: %d is above the largest message this broker carries, %d (--max-message-size)",
				cfg.MaxMessageSize/1024, a.maxMessage/1024))
			return
		case update && topic:
			err = a.b.UpdateTopic(name, cfg)
		case update:
			err = a.b.UpdateQueue(name, cfg)
		case topic:
			_, err = a.b.CreateTopic(name, cfg)
		default:
			_, err = a.b.CreateQueue(name, cfg)
		}
		if err != nil {
			a.brokerError(w, r, err)
			return
		}
		if !update {
			a.logger.Info("entity created", "entity", name, "kind", kindName(topic))
		}
		a.replyEntity(w, r, name, created(update))
	case http.MethodDelete:
		if err := a.b.DeleteEntity(name); err != nil {
			a.brokerError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusOK)
	default:
		a.fail(w, r, http.StatusMethodNotAllowed, r.Method+" is not served here")
	}
}

// partitioned gives a partitioned entity's size as Service Bus reports
// it: the service makes 16 partitions of MaxSizeInMegabytes each, so a
// size up to 5 GB (the most a Standard entity may ask) is multiplied by
// 16; a larger one is such a total already (an update sending back what
// it read).
func partitioned(cfg *projection.Config) {
	if !cfg.EnablePartitioning {
		return
	}
	mb := cfg.MaxSizeMB
	if mb == 0 {
		mb = projection.DefaultMaxSizeMB
	}
	if mb <= maxPartitionMB {
		cfg.MaxSizeMB = mb * 16
	}
}

// generateKeys gives the authorization rules that came without keys
// random ones, as Service Bus does: 32 random bytes in base64.
func generateKeys(rules []projection.AccessRule) {
	for i := range rules {
		for _, k := range []*string{&rules[i].PrimaryKey, &rules[i].SecondaryKey} {
			if *k == "" {
				*k = base64.StdEncoding.EncodeToString(randomBytes(32))
			}
		}
	}
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return b
}

// maxPartitionMB is the largest MaxSizeInMegabytes a Standard entity takes.
const maxPartitionMB = 5 * 1024

// replacing is what an update starts from: an update replaces the whole
// description, as Service Bus does (the SDKs send every setting they
// read, and leave out one to clear it), so the kind's defaults, but with
// the settings that only a create sets kept from the current config.
func replacing(defaults, current projection.Config) projection.Config {
	defaults.RequiresSession = current.RequiresSession
	defaults.RequiresDuplicateDetection = current.RequiresDuplicateDetection
	defaults.Topic = current.Topic
	return defaults
}

// replyEntity answers with queue or topic name's entry.
func (a *API) replyEntity(w http.ResponseWriter, r *http.Request, name string, status int) {
	e, err := a.b.Entity(name)
	if err != nil {
		a.brokerError(w, r, err)
		return
	}
	info, err := a.entityInfo(e)
	if err != nil {
		a.brokerError(w, r, err)
		return
	}
	a.write(w, status, "entry", atom.Entry(base(r), info))
}

func kindName(topic bool) string {
	if topic {
		return "topic"
	}
	return "queue"
}

func created(update bool) int {
	if update {
		return http.StatusOK
	}
	return http.StatusCreated
}

// entityInfo is what an entry shows of a queue or topic.
func (a *API) entityInfo(e *broker.Entity) (atom.Info, error) {
	cfg, err := e.Config()
	if err != nil {
		return atom.Info{}, err
	}
	size, err := e.MessageBytes()
	if err != nil {
		return atom.Info{}, err
	}
	created, updated := e.Times()
	info := atom.Info{Kind: atom.Queue, Path: e.Name(), Config: cfg, SizeInBytes: size,
		Created: created, Updated: updated, Accessed: e.Accessed()}
	if e.IsTopic() {
		info.Kind = atom.Topic
		subs, err := e.Subscriptions()
		if err != nil {
			return atom.Info{}, err
		}
		info.SubscriptionCount = len(subs)
		for _, sub := range subs {
			for _, rule := range sub.Rules {
				if rule.Filter.Kind == projection.FilterCorrelation {
					info.CorrelationFilterCount++
				} else {
					info.SQLFilterCount++ // true and false filters are SQL filters, $Default too
				}
			}
		}
		c, err := e.Counts(event.MainQueue)
		if err != nil {
			return atom.Info{}, err
		}
		info.Counts.Scheduled = int64(c.Scheduled)
		return info, nil
	}
	info.Counts, err = counts(e, event.MainQueue)
	return info, err
}

// counts are the message counts of queue q (a queue's main queue, or a
// subscription's), its dead-letter and transfer dead-letter queues, and a
// queue's transfer queue.
func counts(e *broker.Entity, q uint32) (atom.Counts, error) {
	main, err := e.Counts(q)
	if err != nil {
		return atom.Counts{}, err
	}
	dead, err := e.Counts(event.SubqueueOf(q, event.KindDeadLetter))
	if err != nil {
		return atom.Counts{}, err
	}
	tdead, err := e.Counts(event.SubqueueOf(q, event.KindTransferDeadLetter))
	if err != nil {
		return atom.Counts{}, err
	}
	c := atom.Counts{Active: int64(main.Available + main.Locked), Scheduled: int64(main.Scheduled),
		DeadLetter: int64(dead.Total), TransferDeadLetter: int64(tdead.Total)}
	if q == event.MainQueue && !e.IsTopic() {
		// A queue's transfer queue exists once something was sent through
		// it (send-via).
		if tr, err := e.Counts(event.TransferQueue); err == nil {
			c.Transfer = int64(tr.Total)
		}
	}
	return c, nil
}

// listEntities serves /$Resources/Queues and /$Resources/Topics.
func (a *API) listEntities(w http.ResponseWriter, r *http.Request, what string) {
	if r.Method != http.MethodGet {
		a.fail(w, r, http.StatusMethodNotAllowed, "lists are read with GET")
		return
	}
	var topics bool
	switch strings.ToLower(what) {
	case "queues":
		what = "Queues"
	case "topics":
		what, topics = "Topics", true
	default:
		a.fail(w, r, http.StatusNotFound, "no list of "+what)
		return
	}
	var names []*broker.Entity
	for _, e := range a.b.Entities() {
		if e.IsTopic() == topics {
			names = append(names, e)
		}
	}
	skip, top, ok := a.paging(w, r)
	if !ok {
		return
	}
	page, next := pageOf(names, skip, top)
	infos := make([]atom.Info, 0, len(page))
	for _, e := range page {
		info, err := a.entityInfo(e)
		if errors.Is(err, broker.ErrEntityNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			a.brokerError(w, r, err)
			return
		}
		infos = append(infos, info)
	}
	a.write(w, http.StatusOK, "feed", atom.Feed(base(r), what, r.URL.Path, infos, nextLink(r, next, top)))
}

// paging reads $skip and $top.
func (a *API) paging(w http.ResponseWriter, r *http.Request) (skip, top int, ok bool) {
	q := r.URL.Query()
	skip, top = 0, defaultTop
	for _, p := range []struct {
		name string
		v    *int
	}{{"$skip", &skip}, {"$top", &top}} {
		if s := q.Get(p.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				a.fail(w, r, http.StatusBadRequest, fmt.Sprintf("%s=%q is not a count", p.name, s))
				return 0, 0, false
			}
			*p.v = n
		}
	}
	if top == 0 {
		top = defaultTop
	}
	return skip, top, true
}

// pageOf is items[skip:skip+top] and where the next page starts (0 for
// none).
func pageOf[T any](items []T, skip, top int) ([]T, int) {
	if skip >= len(items) {
		return nil, 0
	}
	end := min(len(items), skip+top)
	next := 0
	if end < len(items) {
		next = end
	}
	return items[skip:end], next
}

// nextLink is the URL of the page starting at next, "" for none.
func nextLink(r *http.Request, next, top int) string {
	if next == 0 {
		return ""
	}
	q := url.Values{}
	for k, v := range r.URL.Query() {
		q[k] = v
	}
	q.Set("$skip", strconv.Itoa(next))
	q.Set("$top", strconv.Itoa(top))
	return base(r) + r.URL.Path + "?" + q.Encode()
}

// topic finds a topic for its subscriptions' paths.
func (a *API) topic(w http.ResponseWriter, r *http.Request, name string) (*broker.Entity, bool) {
	e, err := a.b.Entity(name)
	if err == nil && !e.IsTopic() {
		err = fmt.Errorf("%w: %s is a queue, not a topic", broker.ErrEntityNotFound, name)
	}
	if err != nil {
		a.brokerError(w, r, err)
		return nil, false
	}
	return e, true
}

func (a *API) subscriptionInfo(e *broker.Entity, s broker.SubscriptionInfo) (atom.Info, error) {
	c, err := counts(e, s.Queue)
	if err != nil {
		return atom.Info{}, err
	}
	at := time.Unix(0, s.Created)
	return atom.Info{Kind: atom.Subscription, Path: e.Name() + "/Subscriptions/" + s.Name, Config: s.Config,
		Counts: c, Created: at, Updated: at, Accessed: subscriptionAccessed(e, s)}, nil
}

// subscriptionAccessed is a subscription's AccessedAt: unlike a queue's
// or a topic's it is never the zero time, as Service Bus has it, but its
// creation until it is used.
func subscriptionAccessed(e *broker.Entity, s broker.SubscriptionInfo) time.Time {
	if at := e.SubscriptionAccessed(s.Queue); !at.IsZero() {
		return at
	}
	return time.Unix(0, s.Created)
}

func findSubscription(e *broker.Entity, name string) (broker.SubscriptionInfo, error) {
	subs, err := e.Subscriptions()
	if err != nil {
		return broker.SubscriptionInfo{}, err
	}
	for _, s := range subs {
		if strings.EqualFold(s.Name, name) {
			return s, nil
		}
	}
	return broker.SubscriptionInfo{}, fmt.Errorf("%w: subscription %s/Subscriptions/%s", broker.ErrEntityNotFound, e.Name(), name)
}

func (a *API) listSubscriptions(w http.ResponseWriter, r *http.Request, topic string) {
	e, ok := a.topic(w, r, topic)
	if !ok {
		return
	}
	subs, err := e.Subscriptions()
	if err != nil {
		a.brokerError(w, r, err)
		return
	}
	skip, top, ok := a.paging(w, r)
	if !ok {
		return
	}
	page, next := pageOf(subs, skip, top)
	var infos []atom.Info
	for _, s := range page {
		info, err := a.subscriptionInfo(e, s)
		if err != nil {
			a.brokerError(w, r, err)
			return
		}
		infos = append(infos, info)
	}
	a.write(w, http.StatusOK, "feed", atom.Feed(base(r), "Subscriptions", r.URL.Path, infos, nextLink(r, next, top)))
}

func (a *API) subscription(w http.ResponseWriter, r *http.Request, topic, name string) {
	e, ok := a.topic(w, r, topic)
	if !ok {
		return
	}
	reply := func(status int) {
		s, err := findSubscription(e, name)
		if err != nil {
			a.brokerError(w, r, err)
			return
		}
		info, err := a.subscriptionInfo(e, s)
		if err != nil {
			a.brokerError(w, r, err)
			return
		}
		a.write(w, status, "entry", atom.Entry(base(r), info))
	}
	switch r.Method {
	case http.MethodGet:
		reply(http.StatusOK)
	case http.MethodPut:
		body, ok := a.body(w, r)
		if !ok {
			return
		}
		update := r.Header.Get("If-Match") != ""
		cfg := projection.DefaultSubscriptionConfig()
		old := cfg
		if update {
			s, err := findSubscription(e, name)
			if err != nil {
				a.brokerError(w, r, err)
				return
			}
			old = s.Config
			cfg = replacing(cfg, old)
		}
		rule, err := atom.ParseSubscription(body, &cfg)
		if err != nil {
			a.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		switch {
		case update && cfg.RequiresSession != old.RequiresSession:
			a.fail(w, r, http.StatusBadRequest, "The value for the RequiresSession property of an existing Subscription cannot be changed.")
			return
		case update:
			err = e.UpdateSubscription(name, cfg)
		default:
			var rules []projection.RuleSpec
			if rule != nil {
				rules = []projection.RuleSpec{*rule}
			}
			err = e.CreateSubscription(name, cfg, rules)
		}
		if err != nil {
			a.brokerError(w, r, err)
			return
		}
		reply(created(update))
	case http.MethodDelete:
		if err := e.DeleteSubscription(name); err != nil {
			a.brokerError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusOK)
	default:
		a.fail(w, r, http.StatusMethodNotAllowed, r.Method+" is not served here")
	}
}

func ruleInfo(e *broker.Entity, sub string, spec projection.RuleSpec) atom.Info {
	at := time.Unix(0, spec.Created)
	return atom.Info{Kind: atom.Rule, Path: e.Name() + "/Subscriptions/" + sub + "/Rules/" + spec.Name, Rule: spec,
		Created: at, Updated: at, Accessed: at}
}

// subscriptionOf finds a topic's subscription for its rules' paths.
func (a *API) subscriptionOf(w http.ResponseWriter, r *http.Request, topic, sub string) (*broker.Entity, broker.SubscriptionInfo, bool) {
	e, ok := a.topic(w, r, topic)
	if !ok {
		return nil, broker.SubscriptionInfo{}, false
	}
	s, err := findSubscription(e, sub)
	if err != nil {
		a.brokerError(w, r, err)
		return nil, broker.SubscriptionInfo{}, false
	}
	return e, s, true
}

func (a *API) listRules(w http.ResponseWriter, r *http.Request, topic, sub string) {
	e, s, ok := a.subscriptionOf(w, r, topic, sub)
	if !ok {
		return
	}
	skip, top, ok := a.paging(w, r)
	if !ok {
		return
	}
	page, next := pageOf(s.Rules, skip, top)
	var infos []atom.Info
	for _, spec := range page {
		infos = append(infos, ruleInfo(e, s.Name, spec))
	}
	a.write(w, http.StatusOK, "feed", atom.Feed(base(r), "Rules", r.URL.Path, infos, nextLink(r, next, top)))
}

func (a *API) rule(w http.ResponseWriter, r *http.Request, topic, sub, name string) {
	e, s, ok := a.subscriptionOf(w, r, topic, sub)
	if !ok {
		return
	}
	find := func() (projection.RuleSpec, error) {
		rules, err := e.Rules(s.Queue)
		if err != nil {
			return projection.RuleSpec{}, err
		}
		i := slices.IndexFunc(rules, func(rs projection.RuleSpec) bool { return strings.EqualFold(rs.Name, name) })
		if i < 0 {
			return projection.RuleSpec{}, fmt.Errorf("%w: rule %s of %s/Subscriptions/%s", broker.ErrEntityNotFound, name, e.Name(), s.Name)
		}
		return rules[i], nil
	}
	switch r.Method {
	case http.MethodGet:
		spec, err := find()
		if err != nil {
			a.brokerError(w, r, err)
			return
		}
		a.write(w, http.StatusOK, "entry", atom.Entry(base(r), ruleInfo(e, s.Name, spec)))
	case http.MethodPut:
		body, ok := a.body(w, r)
		if !ok {
			return
		}
		spec, err := atom.ParseRule(body)
		if err != nil {
			a.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		spec.Name = name
		update := r.Header.Get("If-Match") != ""
		if update {
			old, err := find()
			if err == nil {
				err = e.RemoveRule(s.Queue, name)
			}
			if err != nil {
				a.brokerError(w, r, err)
				return
			}
			if err := e.AddRule(s.Queue, spec); err != nil {
				// The new rule was refused: the old one goes back.
				old.Created = 0
				if rerr := e.AddRule(s.Queue, old); rerr != nil {
					a.logger.Error("a rule update failed and the old rule could not be put back", "rule", name, "err", rerr)
				}
				a.brokerError(w, r, err)
				return
			}
		} else if err := e.AddRule(s.Queue, spec); err != nil {
			a.brokerError(w, r, err)
			return
		}
		spec, err = find()
		if err != nil {
			a.brokerError(w, r, err)
			return
		}
		a.write(w, created(update), "entry", atom.Entry(base(r), ruleInfo(e, s.Name, spec)))
	case http.MethodDelete:
		if err := e.RemoveRule(s.Queue, name); err != nil {
			a.brokerError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusOK)
	default:
		a.fail(w, r, http.StatusMethodNotAllowed, r.Method+" is not served here")
	}
}

// body reads a request's document.
func (a *API) body(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		a.fail(w, r, http.StatusBadRequest, "reading the request: "+err.Error())
		return nil, false
	}
	if len(b) > maxBody {
		a.fail(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("the document is over %d bytes", maxBody))
		return nil, false
	}
	return b, true
}

// brokerError answers with the status the SDKs expect for err. An
// operation another node must do is passed on to that node when it is
// known (forward), else refused with 503, which the SDKs retry.
func (a *API) brokerError(w http.ResponseWriter, r *http.Request, err error) {
	if node, ok := a.forwardTo(r, err); ok {
		a.forward(w, r, node, err)
		return
	}
	var pe *atom.PropertyError
	switch {
	case errors.Is(err, broker.ErrNotLeader):
		a.unavailable(w, r, err.Error())
	case errors.Is(err, broker.ErrEntityNotFound):
		a.fail(w, r, http.StatusNotFound, err.Error())
	case errors.Is(err, broker.ErrEntityExists):
		a.fail(w, r, http.StatusConflict, err.Error())
	case errors.Is(err, broker.ErrQuotaExceeded):
		a.fail(w, r, http.StatusForbidden, err.Error())
	case errors.As(err, &pe), errors.Is(err, broker.ErrInvalid), errors.Is(err, broker.ErrBadName),
		errors.Is(err, broker.ErrForwarding):
		a.fail(w, r, http.StatusBadRequest, err.Error())
	default:
		a.logger.Error("administration request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		a.fail(w, r, http.StatusInternalServerError, err.Error())
	}
}

func (a *API) fail(w http.ResponseWriter, r *http.Request, status int, detail string) {
	a.logger.Debug("administration request refused", "method", r.Method, "path", r.URL.Path, "status", status, "detail", detail)
	w.Header().Set("Content-Type", "application/xml; charset=utf-8")
	w.WriteHeader(status)
	w.Write(atom.ErrorBody(status, detail))
}

func (a *API) write(w http.ResponseWriter, status int, kind string, doc []byte) {
	w.Header().Set("Content-Type", "application/atom+xml;type="+kind+";charset=utf-8")
	w.WriteHeader(status)
	w.Write(doc)
}

// base is the scheme and authority the request came to.
func base(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || r.Context().Value(tlsKey{}) != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

type tlsKey struct{}

// ConnContext marks the requests of a connection that transport.Split
// took over TLS (http.Server sees only what came out of the handshake), for
// http.Server.ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	if st := transport.TLSState(c); st != nil {
		return context.WithValue(ctx, tlsKey{}, st)
	}
	return ctx
}
