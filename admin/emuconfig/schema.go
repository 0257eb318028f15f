package emuconfig

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/walbus/walbus/broker"
)

// The schema of Config.json, read top down with the decoder; each function
// starts at its value.

func (d *decoder) document() *File {
	f := &File{}
	if bytes.HasPrefix(d.data, utf8BOM) {
		d.pos = len(utf8BOM) // .NET skips it too
	}
	sawUserConfig := false
	root := d.object(field{"UserConfig", func() {
		sawUserConfig = true
		sawNamespaces := false
		start := d.object(field{"Namespaces", func() {
			sawNamespaces = true
			// walbus serves one namespace, into which every namespace of
			// the file goes: an entity name may appear once in the file.
			names, entities := nameSet{}, nameSet{}
			d.array(func(int) { f.Namespaces = append(f.Namespaces, d.namespace(names, entities)) })
		}})
		if !sawNamespaces {
			d.failf(start, "missing Namespaces")
		}
	}})
	if !sawUserConfig {
		d.failf(root, "missing UserConfig")
	}
	if !d.atEnd() {
		d.failf(d.pos, "invalid character %s after the top-level object", quoteByte(d.data[d.pos]))
	}
	return f
}

// nameSet holds the names seen in one scope, folded to lower case as
// Service Bus compares them, with the offset of each.
type nameSet map[string]int

// name reads a name, checks it with validate and that it is new in names.
func (d *decoder) name(validate func(string) error, names nameSet, what string) (string, int) {
	name, off := d.str()
	if err := validate(name); err != nil {
		d.failAt(off, err)
	}
	key := strings.ToLower(name)
	if first, dup := names[key]; dup {
		line, col := d.lineCol(first)
		d.failf(off, "duplicate %s name %q (first at %d:%d)", what, name, line, col)
	}
	names[key] = off
	return name, off
}

// namespace reads one namespace; entities holds the queue and topic names
// of the whole file (they share one name space).
func (d *decoder) namespace(names, entities nameSet) Namespace {
	var ns Namespace
	named := false
	start := d.object(
		field{"Name", func() {
			ns.Name, _ = d.name(validateNamespaceName, names, "namespace")
			named = true
		}},
		field{"Queues", func() {
			if !d.null() {
				d.array(func(int) { ns.Queues = append(ns.Queues, d.queue(entities)) })
			}
		}},
		field{"Topics", func() {
			if !d.null() {
				d.array(func(int) { ns.Topics = append(ns.Topics, d.topic(entities)) })
			}
		}},
	)
	if !named {
		d.failf(start, "missing Name")
	}
	return ns
}

func (d *decoder) queue(entities nameSet) Queue {
	var q Queue
	named := false
	var offsets map[string]int
	start := d.object(
		field{"Name", func() {
			q.Name, _ = d.name(broker.ValidateName, entities, "queue or topic")
			named = true
		}},
		field{"Properties", func() { q.Properties, offsets = d.properties(queueKind) }},
	)
	if !named {
		d.failf(start, "missing Name")
	}
	// Service Bus refuses an entity that forwards to itself; report the
	// first such property in the file.
	selfKey := ""
	for key, target := range map[string]*string{
		"ForwardTo":                     q.Properties.ForwardTo,
		"ForwardDeadLetteredMessagesTo": q.Properties.ForwardDeadLetteredMessagesTo,
	} {
		if target != nil && strings.EqualFold(*target, q.Name) && (selfKey == "" || offsets[key] < offsets[selfKey]) {
			selfKey = key
		}
	}
	if selfKey != "" {
		d.failAt(offsets[selfKey], fmt.Errorf("queue %q cannot forward to itself", q.Name), "Properties", selfKey)
	}
	return q
}

func (d *decoder) topic(entities nameSet) Topic {
	var t Topic
	named := false
	start := d.object(
		field{"Name", func() {
			t.Name, _ = d.name(broker.ValidateName, entities, "queue or topic")
			named = true
		}},
		field{"Properties", func() { t.Properties, _ = d.properties(topicKind) }},
		field{"Subscriptions", func() {
			if d.null() {
				return
			}
			names := nameSet{}
			d.array(func(int) { t.Subscriptions = append(t.Subscriptions, d.subscription(names)) })
		}},
	)
	if !named {
		d.failf(start, "missing Name")
	}
	return t
}

func (d *decoder) subscription(names nameSet) Subscription {
	var s Subscription
	named := false
	start := d.object(
		field{"Name", func() {
			s.Name, _ = d.name(validateSubscriptionName, names, "subscription")
			named = true
		}},
		field{"Properties", func() { s.Properties, _ = d.properties(subscriptionKind) }},
		field{"Rules", func() {
			if d.null() {
				return
			}
			rules := nameSet{}
			d.array(func(int) { s.Rules = append(s.Rules, d.rule(rules)) })
		}},
	)
	if !named {
		d.failf(start, "missing Name")
	}
	return s
}

type entityKind uint8

const (
	queueKind entityKind = 1 << iota
	topicKind
	subscriptionKind
)

// properties reads an entity's Properties object, checking each value
// where it stands against Service Bus's limits (broker.Config.Validate
// on the defaults with that one setting applied), then the whole. It returns
// the offset of each property read.
func (d *decoder) properties(kind entityKind) (Properties, map[string]int) {
	var p Properties
	offsets := map[string]int{}
	if d.null() {
		return p, offsets
	}
	// check fails at off if Service Bus's limits refuse the defaults with
	// set applied.
	check := func(off int, set func(*broker.Config)) {
		c := broker.DefaultConfig()
		set(&c)
		if err := c.Validate(); err != nil {
			d.failAt(off, err)
		}
	}
	var fields []field
	add := func(name string, kinds entityKind, decode func()) {
		if kind&kinds == 0 {
			return
		}
		fields = append(fields, field{name, func() {
			if d.null() {
				return
			}
			offsets[name] = d.pos
			decode()
		}})
	}
	const all = queueKind | topicKind | subscriptionKind
	add("LockDuration", queueKind|subscriptionKind, func() {
		v, off := d.duration()
		check(off, func(c *broker.Config) { c.LockDuration = v })
		p.LockDuration = &v
	})
	add("MaxDeliveryCount", queueKind|subscriptionKind, func() {
		n, off := d.integer(math.MinInt32, math.MaxInt32) // a .NET int
		v := int(n)
		check(off, func(c *broker.Config) { c.MaxDeliveryCount = v })
		p.MaxDeliveryCount = &v
	})
	add("DefaultMessageTimeToLive", all, func() {
		v, off := d.duration()
		// Zero would read as walbus's "no limit", the opposite of what
		// it says; Service Bus wants a positive time to live.
		if v <= 0 {
			d.failf(off, "time to live %v must be positive", v)
		}
		check(off, func(c *broker.Config) { c.DefaultTTL = effectiveTTL(v) })
		p.DefaultMessageTimeToLive = &v
	})
	add("DeadLetteringOnMessageExpiration", queueKind|subscriptionKind, func() {
		v := d.boolean()
		p.DeadLetteringOnMessageExpiration = &v
	})
	add("RequiresSession", queueKind|subscriptionKind, func() {
		v := d.boolean()
		p.RequiresSession = &v
	})
	add("RequiresDuplicateDetection", queueKind|topicKind, func() {
		v := d.boolean()
		p.RequiresDuplicateDetection = &v
	})
	add("DuplicateDetectionHistoryTimeWindow", queueKind|topicKind, func() {
		v, off := d.duration()
		// Checked even when detection is off, as Service Bus's
		// administration client does.
		check(off, func(c *broker.Config) { c.RequiresDuplicateDetection, c.DuplicateWindow = true, v })
		p.DuplicateDetectionHistoryTimeWindow = &v
	})
	forward := func(target **string) func() {
		return func() {
			v, off := d.str()
			if v != "" {
				if err := broker.ValidateName(v); err != nil {
					d.failAt(off, err)
				}
			}
			*target = &v
		}
	}
	add("ForwardTo", queueKind|subscriptionKind, forward(&p.ForwardTo))
	add("ForwardDeadLetteredMessagesTo", queueKind|subscriptionKind, forward(&p.ForwardDeadLetteredMessagesTo))
	add("MaxMessageSizeInKilobytes", queueKind|topicKind, func() {
		kb, off := d.integer(math.MinInt64, math.MaxInt64) // a .NET long
		if kb < 0 || kb > maxKilobytes {
			d.failf(off, "max message size %d KB out of range", kb)
		}
		check(off, func(c *broker.Config) { c.MaxMessageSize = int(kb * 1024) })
		p.MaxMessageSizeInKilobytes = &kb
	})
	start := d.object(fields...)
	// Each setting passed alone; this catches any rule that spans several.
	if err := p.config().Validate(); err != nil {
		d.failAt(start, err)
	}
	// Service Bus does not support ForwardTo on an entity that requires
	// sessions (auto-forwarding docs); reported at whichever of the two
	// the file gives last.
	if p.RequiresSession != nil && *p.RequiresSession && p.ForwardTo != nil && *p.ForwardTo != "" {
		key := "ForwardTo"
		if offsets["RequiresSession"] > offsets[key] {
			key = "RequiresSession"
		}
		d.failAt(offsets[key], errors.New("ForwardTo is not supported for session-enabled queues or subscriptions"), key)
	}
	return p, offsets
}

func (d *decoder) rule(names nameSet) Rule {
	var r Rule
	named, sawProperties := false, false
	start := d.object(
		field{"Name", func() {
			r.Name, _ = d.name(validateRuleName, names, "rule")
			named = true
		}},
		field{"Properties", func() {
			sawProperties = true
			d.ruleProperties(&r)
		}},
	)
	switch {
	case !named:
		d.failf(start, "missing Name")
	case !sawProperties:
		d.failf(start, "missing Properties")
	}
	// The filter and action are compiled as the broker will: a bad
	// expression stops the start here, with its place in the file and in
	// the expression.
	if err := r.Spec().Compile(); err != nil {
		d.failAt(start, err, "Properties")
	}
	return r
}

func (d *decoder) ruleProperties(r *Rule) {
	start := d.object(
		field{"FilterType", func() {
			text, off := d.str()
			switch {
			case strings.EqualFold(text, string(FilterCorrelation)):
				r.FilterType = FilterCorrelation
			case strings.EqualFold(text, string(FilterSQL)):
				r.FilterType = FilterSQL
			default:
				d.failf(off, "unknown filter type %q, want Correlation or Sql", text)
			}
		}},
		field{"CorrelationFilter", func() {
			if !d.null() {
				r.CorrelationFilter = d.correlationFilter()
			}
		}},
		field{"SqlFilter", func() {
			if !d.null() {
				r.SQLFilter = &SQLFilter{Expression: d.sqlExpression()}
			}
		}},
		field{"Action", func() {
			if !d.null() {
				r.Action = &SQLAction{Expression: d.sqlExpression()}
			}
		}},
	)
	switch {
	case r.FilterType == "":
		d.failf(start, "missing FilterType")
	case r.FilterType == FilterSQL && r.SQLFilter == nil:
		d.failf(start, "missing SqlFilter for FilterType Sql")
	case r.FilterType == FilterCorrelation && r.CorrelationFilter == nil:
		d.failf(start, "missing CorrelationFilter for FilterType Correlation")
	}
}

// sqlExpression reads {"SqlExpression": "..."}, the shape of both a SQL
// filter and an action.
func (d *decoder) sqlExpression() string {
	var expr string
	found := false
	start := d.object(field{"SqlExpression", func() {
		var off int
		expr, off = d.str()
		if strings.TrimSpace(expr) == "" {
			d.failAt(off, errors.New("empty SqlExpression"))
		}
		found = true
	}})
	if !found {
		d.failf(start, "missing SqlExpression")
	}
	return expr
}

func (d *decoder) correlationFilter() *CorrelationFilter {
	var f CorrelationFilter
	text := func(target *string) func() {
		return func() {
			if !d.null() {
				*target, _ = d.str()
			}
		}
	}
	d.object(
		field{"ContentType", text(&f.ContentType)},
		field{"CorrelationId", text(&f.CorrelationID)},
		field{"Label", text(&f.Subject)},
		field{"MessageId", text(&f.MessageID)},
		field{"ReplyTo", text(&f.ReplyTo)},
		field{"ReplyToSessionId", text(&f.ReplyToSessionID)},
		field{"SessionId", text(&f.SessionID)},
		field{"To", text(&f.To)},
		field{"Properties", func() {
			if d.null() {
				return
			}
			f.Properties = map[string]any{}
			d.members(func(key string, keyOff int) {
				d.push(key)
				// Application property names are case-sensitive.
				if _, dup := f.Properties[key]; dup {
					d.failf(keyOff, "duplicate key %q", key)
				}
				f.Properties[key] = d.scalar()
				d.pop()
			})
		}},
	)
	return &f
}
