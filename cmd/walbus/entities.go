package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	sbadmin "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
)

// The entity commands: walbus queue|topic|subscription|rule VERB ...,
// through a running walbus's administration API, with the official Go SDK's
// administration client (the same requests every SDK sends).

// entityFlags are the flags every entity command takes.
type entityFlags struct {
	server, keyName, key, format string
	// settings, set only when given
	lockDuration, ttl, dupWindow, autoDelete, forwardTo, forwardDLQ, metadata, status string
	maxDelivery, maxSizeMB                                                            int
	sessions, dedup, dlqOnExpiry                                                      bool
	sql, action, label, correlationID                                                 string
	set                                                                               map[string]bool
}

func (f *entityFlags) register(fs *flag.FlagSet, kind string) {
	fs.StringVar(&f.server, "server", "http://127.0.0.1:5300", "the walbus to manage: its --http address (or an AMQP one; https:// when it has a certificate)")
	fs.StringVar(&f.keyName, "key-name", defaultKeyName, "SAS key name (with Manage rights)")
	fs.StringVar(&f.key, "key", defaultKey, "SAS key")
	fs.StringVar(&f.format, "format", "text", "output: text or json")
	if kind == "rule" {
		fs.StringVar(&f.sql, "sql", "", "SQL filter, e.g. \"color = 'red'\" (default: a true filter)")
		fs.StringVar(&f.action, "action", "", "SQL action, e.g. \"SET tagged = 1\"")
		fs.StringVar(&f.label, "label", "", "correlation filter on the Subject (Label), instead of --sql")
		fs.StringVar(&f.correlationID, "correlation-id", "", "correlation filter on the CorrelationId, instead of --sql")
		return
	}
	fs.StringVar(&f.ttl, "ttl", "", "default message time to live, e.g. 1h")
	fs.StringVar(&f.status, "status", "", "Active, Disabled, SendDisabled or ReceiveDisabled")
	fs.StringVar(&f.metadata, "metadata", "", "user metadata")
	fs.StringVar(&f.autoDelete, "auto-delete-on-idle", "", "delete the entity after this long idle, e.g. 1h")
	if kind != "topic" {
		fs.StringVar(&f.lockDuration, "lock-duration", "", "peek-lock duration, e.g. 30s (at most 5m)")
		fs.IntVar(&f.maxDelivery, "max-delivery-count", 0, "deliveries before a message is dead-lettered")
		fs.BoolVar(&f.sessions, "sessions", false, "require sessions (at creation only)")
		fs.BoolVar(&f.dlqOnExpiry, "dead-letter-on-expiry", false, "dead-letter expired messages")
		fs.StringVar(&f.forwardTo, "forward-to", "", "forward messages to this queue or topic")
		fs.StringVar(&f.forwardDLQ, "forward-dead-letters-to", "", "forward dead-lettered messages to this queue or topic")
	}
	if kind != "subscription" {
		fs.IntVar(&f.maxSizeMB, "max-size-mb", 0, "quota in megabytes")
		fs.BoolVar(&f.dedup, "duplicate-detection", false, "detect duplicate MessageIds (at creation only)")
		fs.StringVar(&f.dupWindow, "duplicate-window", "", "duplicate detection window, e.g. 10m")
	}
	if kind == "subscription" {
		fs.StringVar(&f.sql, "sql", "", "the subscription's first rule: a SQL filter instead of $Default's true filter")
	}
}

// entityCmd runs `walbus KIND VERB ...`.
func entityCmd(kind string, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		entityUsage(os.Stdout, kind)
		return 0
	}
	verb := args[0]
	var f entityFlags
	fs := flag.NewFlagSet(kind+" "+verb, flag.ContinueOnError)
	f.register(fs, kind)
	fs.SetOutput(io.Discard)
	names, err := parseInterspersed(fs, args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "walbus %s %s: %v\nRun 'walbus %s --help'.\n", kind, verb, err, kind)
		return 2
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	want := map[string]int{"queue": 1, "topic": 1, "subscription": 2, "rule": 3}[kind]
	if verb == "list" {
		want--
	}
	if len(names) != want {
		fmt.Fprintf(os.Stderr, "walbus %s %s: want %s\n", kind, verb, entityArgs(kind, verb))
		return 2
	}
	ac, err := f.client()
	if err != nil {
		fmt.Fprintf(os.Stderr, "walbus %s: %v\n", kind, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := runEntity(ctx, ac, kind, verb, names, &f)
	if err != nil {
		fmt.Fprintf(os.Stderr, "walbus %s %s: %s\n", kind, verb, describeAdminError(err))
		return 1
	}
	if f.format == "json" {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		enc.Encode(out)
		return 0
	}
	printEntities(os.Stdout, out)
	return 0
}

func entityArgs(kind, verb string) string {
	args := map[string]string{"queue": "NAME", "topic": "NAME", "subscription": "TOPIC NAME", "rule": "TOPIC SUBSCRIPTION NAME"}[kind]
	if verb == "list" {
		if i := strings.LastIndexByte(args, ' '); i >= 0 {
			return args[:i]
		}
		return "no name"
	}
	return args
}

func entityUsage(w io.Writer, kind string) {
	fmt.Fprintf(w, `Usage: walbus %[1]s create|get|update|delete %[2]s [flags]
       walbus %[1]s list %[3]s [flags]

Manages %[1]ss of a running walbus through its administration API (the one
the SDKs' administration clients use), with the emulator's key by default.

Flags:
`, kind, entityArgs(kind, "get"), entityArgs(kind, "list"))
	fs := flag.NewFlagSet(kind, flag.ContinueOnError)
	var f entityFlags
	f.register(fs, kind)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// parseInterspersed parses flags that may come after the names.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return names, nil
		}
		names = append(names, args[0])
		args = args[1:]
	}
}

// client is an administration client for f.server. The SDK's client always
// speaks https to the namespace it is given; a plain http:// server is
// reached by rewriting each request's URL.
func (f *entityFlags) client() (*sbadmin.Client, error) {
	u, err := url.Parse(f.server)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("--server %q: want http://HOST:PORT or https://HOST:PORT", f.server)
	}
	cs := fmt.Sprintf("Endpoint=sb://%s;SharedAccessKeyName=%s;SharedAccessKey=%s", u.Host, f.keyName, f.key)
	opts := &sbadmin.ClientOptions{}
	opts.Retry = policy.RetryOptions{MaxRetries: -1}
	if u.Scheme == "http" {
		opts.Transport = plainHTTP{}
	}
	return sbadmin.NewClientFromConnectionString(cs, opts)
}

// plainHTTP sends the SDK's https requests as http.
type plainHTTP struct{}

func (plainHTTP) Do(r *http.Request) (*http.Response, error) {
	r.URL.Scheme = "http"
	return http.DefaultClient.Do(r)
}

// entityView is one entity as the commands print it.
type entityView struct {
	Name     string            `json:"name"`
	Settings map[string]any    `json:"settings,omitempty"`
	Counts   map[string]int64  `json:"counts,omitempty"`
	Rule     map[string]string `json:"rule,omitempty"`
}

func runEntity(ctx context.Context, ac *sbadmin.Client, kind, verb string, names []string, f *entityFlags) ([]entityView, error) {
	update := verb == "update"
	switch kind + " " + verb {
	case "queue create", "queue update":
		err := put(update, func() (*sbadmin.QueueProperties, error) {
			q, err := ac.GetQueue(ctx, names[0], nil)
			if err != nil || q == nil {
				return nil, notFoundOr(err, "queue", names[0])
			}
			return &q.QueueProperties, nil
		}, f.queueProps, func(p *sbadmin.QueueProperties) (err error) {
			if update {
				_, err = ac.UpdateQueue(ctx, names[0], *p, nil)
			} else {
				_, err = ac.CreateQueue(ctx, names[0], &sbadmin.CreateQueueOptions{Properties: p})
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		return getQueue(ctx, ac, names[0])
	case "queue get":
		return getQueue(ctx, ac, names[0])
	case "queue list":
		return listAll(ctx, ac.NewListQueuesRuntimePropertiesPager(nil), func(page sbadmin.ListQueuesRuntimePropertiesResponse) (out []entityView) {
			for _, q := range page.QueueRuntimeProperties {
				out = append(out, entityView{Name: q.QueueName, Counts: queueCounts(q.QueueRuntimeProperties)})
			}
			return out
		})
	case "queue delete":
		_, err := ac.DeleteQueue(ctx, names[0], nil)
		return nil, err
	case "topic create", "topic update":
		err := put(update, func() (*sbadmin.TopicProperties, error) {
			t, err := ac.GetTopic(ctx, names[0], nil)
			if err != nil || t == nil {
				return nil, notFoundOr(err, "topic", names[0])
			}
			return &t.TopicProperties, nil
		}, f.topicProps, func(p *sbadmin.TopicProperties) (err error) {
			if update {
				_, err = ac.UpdateTopic(ctx, names[0], *p, nil)
			} else {
				_, err = ac.CreateTopic(ctx, names[0], &sbadmin.CreateTopicOptions{Properties: p})
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		return getTopic(ctx, ac, names[0])
	case "topic get":
		return getTopic(ctx, ac, names[0])
	case "topic list":
		return listAll(ctx, ac.NewListTopicsRuntimePropertiesPager(nil), func(page sbadmin.ListTopicsRuntimePropertiesResponse) (out []entityView) {
			for _, t := range page.TopicRuntimeProperties {
				out = append(out, entityView{Name: t.TopicName, Counts: map[string]int64{
					"subscriptions": int64(t.SubscriptionCount), "scheduled": int64(t.ScheduledMessageCount)}})
			}
			return out
		})
	case "topic delete":
		_, err := ac.DeleteTopic(ctx, names[0], nil)
		return nil, err
	case "subscription create", "subscription update":
		err := put(update, func() (*sbadmin.SubscriptionProperties, error) {
			s, err := ac.GetSubscription(ctx, names[0], names[1], nil)
			if err != nil || s == nil {
				return nil, notFoundOr(err, "subscription", names[0]+"/"+names[1])
			}
			return &s.SubscriptionProperties, nil
		}, f.subscriptionProps, func(p *sbadmin.SubscriptionProperties) (err error) {
			if update {
				_, err = ac.UpdateSubscription(ctx, names[0], names[1], *p, nil)
				return err
			}
			if f.sql != "" {
				p.DefaultRule = &sbadmin.RuleProperties{Name: "$Default", Filter: &sbadmin.SQLFilter{Expression: f.sql}}
			}
			_, err = ac.CreateSubscription(ctx, names[0], names[1], &sbadmin.CreateSubscriptionOptions{Properties: p})
			return err
		})
		if err != nil {
			return nil, err
		}
		return getSubscription(ctx, ac, names[0], names[1])
	case "subscription get":
		return getSubscription(ctx, ac, names[0], names[1])
	case "subscription list":
		return listAll(ctx, ac.NewListSubscriptionsRuntimePropertiesPager(names[0], nil), func(page sbadmin.ListSubscriptionsRuntimePropertiesResponse) (out []entityView) {
			for _, s := range page.SubscriptionRuntimeProperties {
				out = append(out, entityView{Name: s.SubscriptionName, Counts: subscriptionCounts(s.SubscriptionRuntimeProperties)})
			}
			return out
		})
	case "subscription delete":
		_, err := ac.DeleteSubscription(ctx, names[0], names[1], nil)
		return nil, err
	case "rule create", "rule update":
		props := f.ruleProps(names[2])
		var err error
		if update {
			_, err = ac.UpdateRule(ctx, names[0], names[1], props)
		} else {
			_, err = ac.CreateRule(ctx, names[0], names[1], &sbadmin.CreateRuleOptions{Name: &props.Name, Filter: props.Filter, Action: props.Action})
		}
		if err != nil {
			return nil, err
		}
		return getRule(ctx, ac, names[0], names[1], names[2])
	case "rule get":
		return getRule(ctx, ac, names[0], names[1], names[2])
	case "rule list":
		return listAll(ctx, ac.NewListRulesPager(names[0], names[1], nil), func(page sbadmin.ListRulesResponse) (out []entityView) {
			for _, r := range page.Rules {
				out = append(out, ruleView(r))
			}
			return out
		})
	case "rule delete":
		_, err := ac.DeleteRule(ctx, names[0], names[1], names[2], nil)
		return nil, err
	}
	return nil, fmt.Errorf("unknown verb %q: want create, get, list, update or delete", verb)
}

// put creates or updates one entity: an update starts from what current
// reads, apply sets the flags given, and send makes the request.
func put[P any](update bool, current func() (*P, error), apply func(*P) error, send func(*P) error) error {
	var props P
	if update {
		cur, err := current()
		if err != nil {
			return err
		}
		props = *cur
	}
	if err := apply(&props); err != nil {
		return err
	}
	return send(&props)
}

// listAll reads every page of pager into views.
func listAll[P any](ctx context.Context, pager *runtime.Pager[P], views func(P) []entityView) ([]entityView, error) {
	var out []entityView
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, views(page)...)
	}
	return out, nil
}

// ruleProps is the rule the flags describe: a correlation filter on the
// Label or CorrelationId, a SQL filter, or a true filter; and an action.
func (f *entityFlags) ruleProps(name string) sbadmin.RuleProperties {
	props := sbadmin.RuleProperties{Name: name, Filter: &sbadmin.TrueFilter{}}
	switch {
	case f.label != "" || f.correlationID != "":
		cf := &sbadmin.CorrelationFilter{}
		if f.label != "" {
			cf.Subject = &f.label
		}
		if f.correlationID != "" {
			cf.CorrelationID = &f.correlationID
		}
		props.Filter = cf
	case f.sql != "":
		props.Filter = &sbadmin.SQLFilter{Expression: f.sql}
	}
	if f.action != "" {
		props.Action = &sbadmin.SQLAction{Expression: f.action}
	}
	return props
}

func notFoundOr(err error, kind, name string) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("no %s %s", kind, name)
}

func getQueue(ctx context.Context, ac *sbadmin.Client, name string) ([]entityView, error) {
	q, err := ac.GetQueue(ctx, name, nil)
	if err != nil || q == nil {
		return nil, notFoundOr(err, "queue", name)
	}
	rt, err := ac.GetQueueRuntimeProperties(ctx, name, nil)
	if err != nil || rt == nil {
		return nil, notFoundOr(err, "queue", name)
	}
	return []entityView{{Name: q.QueueName, Settings: settings(q.QueueProperties), Counts: queueCounts(rt.QueueRuntimeProperties)}}, nil
}

func getTopic(ctx context.Context, ac *sbadmin.Client, name string) ([]entityView, error) {
	t, err := ac.GetTopic(ctx, name, nil)
	if err != nil || t == nil {
		return nil, notFoundOr(err, "topic", name)
	}
	rt, err := ac.GetTopicRuntimeProperties(ctx, name, nil)
	if err != nil || rt == nil {
		return nil, notFoundOr(err, "topic", name)
	}
	return []entityView{{Name: t.TopicName, Settings: settings(t.TopicProperties),
		Counts: map[string]int64{"subscriptions": int64(rt.SubscriptionCount), "scheduled": int64(rt.ScheduledMessageCount)}}}, nil
}

func getSubscription(ctx context.Context, ac *sbadmin.Client, topic, name string) ([]entityView, error) {
	s, err := ac.GetSubscription(ctx, topic, name, nil)
	if err != nil || s == nil {
		return nil, notFoundOr(err, "subscription", topic+"/"+name)
	}
	rt, err := ac.GetSubscriptionRuntimeProperties(ctx, topic, name, nil)
	if err != nil || rt == nil {
		return nil, notFoundOr(err, "subscription", topic+"/"+name)
	}
	return []entityView{{Name: s.SubscriptionName, Settings: settings(s.SubscriptionProperties),
		Counts: subscriptionCounts(rt.SubscriptionRuntimeProperties)}}, nil
}

func getRule(ctx context.Context, ac *sbadmin.Client, topic, sub, name string) ([]entityView, error) {
	r, err := ac.GetRule(ctx, topic, sub, name, nil)
	if err != nil || r == nil {
		return nil, notFoundOr(err, "rule", topic+"/"+sub+"/"+name)
	}
	return []entityView{ruleView(r.RuleProperties)}, nil
}

func ruleView(r sbadmin.RuleProperties) entityView {
	v := entityView{Name: r.Name, Rule: map[string]string{}}
	switch f := r.Filter.(type) {
	case *sbadmin.SQLFilter:
		v.Rule["filter"] = f.Expression
	case *sbadmin.TrueFilter:
		v.Rule["filter"] = "true"
	case *sbadmin.FalseFilter:
		v.Rule["filter"] = "false"
	case *sbadmin.CorrelationFilter:
		b, _ := json.Marshal(f)
		v.Rule["filter"] = "correlation " + string(b)
	}
	if a, ok := r.Action.(*sbadmin.SQLAction); ok {
		v.Rule["action"] = a.Expression
	}
	return v
}

func queueCounts(rt sbadmin.QueueRuntimeProperties) map[string]int64 {
	return map[string]int64{"active": int64(rt.ActiveMessageCount), "dead-letter": int64(rt.DeadLetterMessageCount),
		"scheduled": int64(rt.ScheduledMessageCount), "transfer-dead-letter": int64(rt.TransferDeadLetterMessageCount),
		"bytes": rt.SizeInBytes}
}

func subscriptionCounts(rt sbadmin.SubscriptionRuntimeProperties) map[string]int64 {
	return map[string]int64{"active": int64(rt.ActiveMessageCount), "dead-letter": int64(rt.DeadLetterMessageCount),
		"transfer-dead-letter": int64(rt.TransferDeadLetterMessageCount)}
}

// settings are the non-empty fields of an SDK properties struct, by their
// JSON names.
func settings(props any) map[string]any {
	b, _ := json.Marshal(props)
	var m map[string]any
	json.Unmarshal(b, &m)
	for k, v := range m {
		switch v {
		case nil:
			delete(m, k)
		case timeSpanMax:
			m[k] = "never"
		}
	}
	return m
}

// timeSpanMax is how Service Bus writes "never" for a time to live or an
// idle time: .NET's TimeSpan.MaxValue.
const timeSpanMax = "P10675199DT2H48M5.4775807S"

// iso is a duration flag as the API takes it (ISO 8601).
func iso(flagName, s string) (*string, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return nil, fmt.Errorf("--%s %q: want a positive duration such as 30s, 10m or 1h", flagName, s)
	}
	out := "PT"
	if h := d / time.Hour; h > 0 {
		out += fmt.Sprintf("%dH", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		out += fmt.Sprintf("%dM", m)
		d -= m * time.Minute
	}
	if d > 0 || out == "PT" {
		out += strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", d.Seconds()), "0"), ".") + "S"
	}
	return &out, nil
}

// fields are the settings of one kind's SDK properties struct, nil where
// the kind has none.
type fields struct {
	lockDuration, dupWindow, ttl, autoDelete, forwardTo, forwardDLQ, metadata **string
	maxDelivery, maxSize                                                      **int32
	sessions, dedup, dlqOnExpiry                                              **bool
	status                                                                    **sbadmin.EntityStatus
}

// apply sets the fields whose flags were given.
func (f *entityFlags) apply(p fields) error {
	durations := []struct {
		flag  string
		value string
		field **string
	}{{"lock-duration", f.lockDuration, p.lockDuration}, {"duplicate-window", f.dupWindow, p.dupWindow},
		{"ttl", f.ttl, p.ttl}, {"auto-delete-on-idle", f.autoDelete, p.autoDelete}}
	for _, d := range durations {
		if d.field != nil && f.set[d.flag] {
			v, err := iso(d.flag, d.value)
			if err != nil {
				return err
			}
			*d.field = v
		}
	}
	for _, s := range []struct {
		flag  string
		value *string
		field **string
	}{{"forward-to", &f.forwardTo, p.forwardTo}, {"forward-dead-letters-to", &f.forwardDLQ, p.forwardDLQ},
		{"metadata", &f.metadata, p.metadata}} {
		if s.field != nil && f.set[s.flag] {
			*s.field = s.value
		}
	}
	for _, n := range []struct {
		flag  string
		value int
		field **int32
	}{{"max-delivery-count", f.maxDelivery, p.maxDelivery}, {"max-size-mb", f.maxSizeMB, p.maxSize}} {
		if n.field != nil && f.set[n.flag] {
			v := int32(n.value)
			*n.field = &v
		}
	}
	for _, b := range []struct {
		flag  string
		value *bool
		field **bool
	}{{"sessions", &f.sessions, p.sessions}, {"duplicate-detection", &f.dedup, p.dedup},
		{"dead-letter-on-expiry", &f.dlqOnExpiry, p.dlqOnExpiry}} {
		if b.field != nil && f.set[b.flag] {
			*b.field = b.value
		}
	}
	if p.status != nil && f.set["status"] {
		s := sbadmin.EntityStatus(f.status)
		*p.status = &s
	}
	return nil
}

func (f *entityFlags) queueProps(p *sbadmin.QueueProperties) error {
	return f.apply(fields{lockDuration: &p.LockDuration, dupWindow: &p.DuplicateDetectionHistoryTimeWindow,
		ttl: &p.DefaultMessageTimeToLive, autoDelete: &p.AutoDeleteOnIdle, forwardTo: &p.ForwardTo,
		forwardDLQ: &p.ForwardDeadLetteredMessagesTo, metadata: &p.UserMetadata, maxDelivery: &p.MaxDeliveryCount,
		maxSize: &p.MaxSizeInMegabytes, sessions: &p.RequiresSession, dedup: &p.RequiresDuplicateDetection,
		dlqOnExpiry: &p.DeadLetteringOnMessageExpiration, status: &p.Status})
}

func (f *entityFlags) topicProps(p *sbadmin.TopicProperties) error {
	return f.apply(fields{dupWindow: &p.DuplicateDetectionHistoryTimeWindow, ttl: &p.DefaultMessageTimeToLive,
		autoDelete: &p.AutoDeleteOnIdle, metadata: &p.UserMetadata, maxSize: &p.MaxSizeInMegabytes,
		dedup: &p.RequiresDuplicateDetection, status: &p.Status})
}

func (f *entityFlags) subscriptionProps(p *sbadmin.SubscriptionProperties) error {
	return f.apply(fields{lockDuration: &p.LockDuration, ttl: &p.DefaultMessageTimeToLive, autoDelete: &p.AutoDeleteOnIdle,
		forwardTo: &p.ForwardTo, forwardDLQ: &p.ForwardDeadLetteredMessagesTo, metadata: &p.UserMetadata,
		maxDelivery: &p.MaxDeliveryCount, sessions: &p.RequiresSession, dlqOnExpiry: &p.DeadLetteringOnMessageExpiration,
		status: &p.Status})
}

// printEntities prints views as a table: names with counts, then each
// entity's settings and rule when there is one entity.
func printEntities(w io.Writer, views []entityView) {
	if len(views) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	cols := []string{"active", "dead-letter", "scheduled", "transfer-dead-letter", "subscriptions", "bytes"}
	var shown []string
	for _, c := range cols {
		for _, v := range views {
			if _, ok := v.Counts[c]; ok {
				shown = append(shown, c)
				break
			}
		}
	}
	if len(views[0].Rule) > 0 {
		shown = []string{"filter", "action"}
	}
	fmt.Fprintln(tw, "name\t"+strings.Join(shown, "\t"))
	for _, v := range views {
		row := []string{v.Name}
		for _, c := range shown {
			if v.Rule != nil {
				row = append(row, v.Rule[c])
			} else {
				row = append(row, fmt.Sprint(v.Counts[c]))
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
	if len(views) == 1 && len(views[0].Settings) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, k := range slices.Sorted(maps.Keys(views[0].Settings)) {
			fmt.Fprintf(tw, "%s\t%v\n", k, views[0].Settings[k])
		}
		tw.Flush()
	}
}

// describeAdminError says what an administration request's failure was.
func describeAdminError(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return fmt.Sprintf("%d %s", re.StatusCode, http.StatusText(re.StatusCode)) + detailOf(re)
	}
	return err.Error()
}

// detailOf is the Detail of the error document in a response, if any.
func detailOf(re *azcore.ResponseError) string {
	if re.RawResponse == nil || re.RawResponse.Body == nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(re.RawResponse.Body, 4096))
	s := string(b)
	if i := strings.Index(s, "<Detail>"); i >= 0 {
		s = s[i+len("<Detail>"):]
		if j := strings.Index(s, "</Detail>"); j >= 0 {
			return ": " + s[:j]
		}
	}
	return ""
}
