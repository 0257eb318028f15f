package admin

import (
	"context"
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
	b         *broker.Broker
	keys      sas.Keys
	logger    *slog.Logger
	namespace string
	started   time.Time
	now       func() time.Time
}

// NewAPI serves b's administration API, authorising with keys.
func NewAPI(b *broker.Broker, keys sas.Keys, logger *slog.Logger) *API {
	return &API{b: b, keys: keys, logger: logger, namespace: "sbemulatorns", started: time.Now(), now: time.Now}
}

// maxBody bounds a request's document.
const maxBody = 1 << 20

// defaultTop is how many entries a list returns when the client names no
// $top, as Service Bus does.
const defaultTop = 100

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := a.authorize(r); err != nil {
		a.fail(w, r, http.StatusUnauthorized, err.Error())
		return
	}
	path := strings.Trim(r.URL.Path, "/")
	segs := strings.Split(path, "/")
	switch {
	case strings.EqualFold(path, "$namespaceinfo"):
		if r.Method != http.MethodGet {
			a.fail(w, r, http.StatusMethodNotAllowed, "the namespace is read with GET")
			return
		}
		a.write(w, http.StatusOK, "entry", atom.NamespaceInfo(base(r), a.namespace, a.started, a.started))
	case len(segs) == 2 && strings.EqualFold(segs[0], "$Resources"):
		a.listEntities(w, r, segs[1])
	default:
		a.entityRequest(w, r, segs)
	}
}

// authorize checks the request's SAS token: its signature by a known key,
// its expiry, and Manage rights.
func (a *API) authorize(r *http.Request) error {
	token := r.Header.Get("Authorization")
	if token == "" {
		token = r.Header.Get("ServiceBusAuthorization")
	}
	if token == "" {
		return errors.New("no SharedAccessSignature in the Authorization header")
	}
	_, key, err := sas.Verify(token, a.keys, a.now())
	if err != nil {
		return fmt.Errorf("the SharedAccessSignature is not valid: %s", sas.Description(err))
	}
	if !key.Rights.Has(sas.Manage) {
		return fmt.Errorf("the key %s lacks Manage rights, which the administration API requires", key.Name)
	}
	return nil
}

// entityRequest serves the paths below an entity's name.
func (a *API) entityRequest(w http.ResponseWriter, r *http.Request, segs []string) {
	at := -1
	for i := 1; i < len(segs); i++ {
		if strings.EqualFold(segs[i], "Subscriptions") {
			at = i
			break
		}
	}
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
		switch {
		case update && cfg.RequiresSession != old.RequiresSession:
			a.fail(w, r, http.StatusBadRequest, "RequiresSession cannot be changed once the entity exists")
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
	created, updated := e.Times()
	info := atom.Info{Kind: atom.Queue, Path: e.Name(), Config: cfg, SizeInBytes: e.Bytes(),
		Created: created, Updated: updated, Accessed: updated}
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
// subscription's) and its dead-letter and transfer dead-letter queues.
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
	return atom.Counts{Active: int64(main.Available + main.Locked), Scheduled: int64(main.Scheduled),
		DeadLetter: int64(dead.Total), TransferDeadLetter: int64(tdead.Total)}, nil
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
		Counts: c, Created: at, Updated: at, Accessed: at}, nil
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
			a.fail(w, r, http.StatusBadRequest, "RequiresSession cannot be changed once the subscription exists")
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

func (a *API) listRules(w http.ResponseWriter, r *http.Request, topic, sub string) {
	e, ok := a.topic(w, r, topic)
	if !ok {
		return
	}
	s, err := findSubscription(e, sub)
	if err != nil {
		a.brokerError(w, r, err)
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
	e, ok := a.topic(w, r, topic)
	if !ok {
		return
	}
	s, err := findSubscription(e, sub)
	if err != nil {
		a.brokerError(w, r, err)
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

// brokerError answers with the status the SDKs expect for err.
func (a *API) brokerError(w http.ResponseWriter, r *http.Request, err error) {
	var pe *atom.PropertyError
	switch {
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
