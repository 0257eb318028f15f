package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/walbus/walbus/admin/emuconfig"
	"github.com/walbus/walbus/broker"
	"github.com/walbus/walbus/projection"
)

// applyConfig creates the queues an emulator Config.json lists that do not
// exist yet, and gives those that exist the file's settings, keeping their
// messages: the file is the entities' definition, as the emulator's is at
// every start, and (with no management API yet) the only way to change
// one. A change Service Bus does not allow (RequiresSession) stops the
// start. A queue that allows larger messages than the server's
// --max-message-size (linkMax) gets a warning: links advertise the smaller
// of the two.
func applyConfig(b *broker.Broker, path string, linkMax uint64, logger *slog.Logger) error {
	f, err := emuconfig.Load(path)
	if err != nil {
		return err
	}
	made := &creations{logger: logger}
	defer func() {
		if made.n > 0 {
			logger.Info("config applied", "file", path, "entities_created", made.n)
		}
	}()
	for _, ns := range f.Namespaces {
		// Topics first and their subscriptions last: queues may forward
		// to topics, subscriptions to queues and topics. The entities the
		// file adds are created together (broker.CreateEntities), which
		// for thousands of them is many times faster than one by one.
		topics := make([]*broker.Entity, len(ns.Topics))
		// A name the file gives twice is created once, then updated.
		var fresh []broker.NewEntity
		var freshAt, existing []int
		seen := map[string]bool{}
		for i, t := range ns.Topics {
			key := strings.ToLower(t.Name)
			if _, err := b.Entity(t.Name); errors.Is(err, broker.ErrEntityNotFound) && !seen[key] {
				fresh = append(fresh, broker.NewEntity{Name: t.Name, Topic: true, Config: t.Config()})
				freshAt = append(freshAt, i)
				seen[key] = true
			} else {
				existing = append(existing, i)
			}
		}
		created, err := b.CreateEntities(fresh)
		made.record(fresh, created)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for k, i := range freshAt {
			topics[i] = created[k]
		}
		for _, i := range existing {
			if topics[i], err = applyTopic(b, ns.Topics[i], logger); err != nil {
				return fmt.Errorf("%s: topic %s: %w", path, ns.Topics[i].Name, err)
			}
		}
		for _, e := range topics {
			warnLarger(e, "topic", linkMax, logger)
		}

		queues, err := forwardTargetsFirst(ns.Queues)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		// New queues first: a queue that exists may now forward to one.
		fresh = nil
		var updates []emuconfig.Queue
		for _, q := range queues {
			key := strings.ToLower(q.Name)
			if _, err := b.Entity(q.Name); errors.Is(err, broker.ErrEntityNotFound) && !seen[key] {
				fresh = append(fresh, broker.NewEntity{Name: q.Name, Config: q.Config()})
				seen[key] = true
			} else {
				updates = append(updates, q)
			}
		}
		created, err = b.CreateEntities(fresh)
		made.record(fresh, created)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, e := range created {
			warnLarger(e, "queue", linkMax, logger)
		}
		for _, q := range updates {
			e, err := updateQueue(b, q, logger)
			if err != nil {
				return fmt.Errorf("%s: queue %s: %w", path, q.Name, err)
			}
			// The queue's own setting, which may not be the file's.
			warnLarger(e, "queue", linkMax, logger)
		}
		for i, t := range ns.Topics {
			if err := applySubscriptions(topics[i], t, logger); err != nil {
				return fmt.Errorf("%s: topic %s: %w", path, t.Name, err)
			}
		}
	}
	return nil
}

// clusterConfigWait is how long a cluster's node goes on applying the
// config file while some of it waits for other nodes.
const clusterConfigWait = 10 * time.Minute

// applyClusterConfig applies the config file on a cluster's node, where
// the node that leads the metadata group creates the entities and the
// node that leads each entity gives it the file's settings, subscriptions
// and rules (every node is given the same file): each node applies it
// again every second while some of it is left to another node or waits
// for a group's leader, until all of it holds or ctx ends. The file was
// read once before (a bad one stops the start).
func applyClusterConfig(ctx context.Context, b *broker.Broker, path string, linkMax uint64, logger *slog.Logger) {
	deadline := time.Now().Add(clusterConfigWait)
	for {
		err := applyConfig(b, path, linkMax, logger)
		switch {
		case err == nil:
			logger.Info("config applied: the cluster holds the file's entities", "file", path)
			return
		case !errors.Is(err, broker.ErrNotLeader):
			logger.Error("bad config", "err", err)
			return
		case time.Now().After(deadline):
			logger.Warn("config: some of it is still left to other nodes; this node stops trying", "file", path, "err", err)
			return
		}
		logger.Debug("config: waiting for other nodes", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// warnLarger warns of an entity that allows larger messages than the
// server's --max-message-size (linkMax): links advertise the smaller.
func warnLarger(e *broker.Entity, kind string, linkMax uint64, logger *slog.Logger) {
	if cfg, err := e.Config(); err == nil && uint64(cfg.MaxMessageSize) > linkMax {
		logger.Warn(kind+" allows larger messages than --max-message-size; its links take up to that",
			kind, e.Name(), "MaxMessageSizeInKilobytes", cfg.MaxMessageSize/1024, "max_message_size", linkMax)
	}
}

// creations logs the entities a Config.json creates: the first few at
// info, one by one, the rest at debug, and then their number, so that a
// file of thousands of queues takes a few lines.
type creations struct {
	logger *slog.Logger
	n      int
}

// maxCreationLines is how many creations are logged at info one by one.
const maxCreationLines = 20

// record logs those of specs that were created.
func (c *creations) record(specs []broker.NewEntity, created []*broker.Entity) {
	for i, e := range created {
		if e == nil {
			continue
		}
		level := slog.LevelDebug
		if c.n < maxCreationLines {
			level = slog.LevelInfo
		}
		c.n++
		kind := "queue"
		if specs[i].Topic {
			kind = "topic"
		}
		c.logger.Log(context.Background(), level, "entity created", "entity", e.Name(), "kind", kind)
	}
}

// applyTopic gives a topic that exists the file's settings.
func applyTopic(b *broker.Broker, t emuconfig.Topic, logger *slog.Logger) (*broker.Entity, error) {
	e, err := b.Entity(t.Name)
	if err != nil {
		return nil, err
	}
	if !e.IsTopic() {
		return nil, fmt.Errorf("an entity of that name exists and is not a topic")
	}
	was, err := e.Config()
	if err != nil {
		return nil, err
	}
	if changed := configChanges(was, t.Config()); len(changed) > 0 {
		if err := b.UpdateTopic(t.Name, t.Config()); errors.Is(err, broker.ErrNotLeader) {
			logger.Info("topic settings left to the node that leads it", "topic", t.Name)
			return e, nil
		} else if err != nil {
			return nil, err
		}
		logger.Info("topic settings changed to the file's; its messages are kept", "topic", t.Name,
			"changed", strings.Join(changed, ","))
	}
	return e, nil
}

// applySubscriptions gives topic e the file's subscriptions and rules: a
// subscription the topic lacks is created with the file's rules (or
// $Default when it lists none); one that exists gets the file's settings,
// and its rules become the file's, as rule events ordered against the
// topic's sends. Subscriptions the file does not list are kept.
func applySubscriptions(e *broker.Entity, t emuconfig.Topic, logger *slog.Logger) error {
	have, err := e.Subscriptions()
	if err != nil {
		return err
	}
	for _, s := range t.Subscriptions {
		if err := applySubscription(e, s, have, logger); err != nil {
			return fmt.Errorf("subscription %s: %w", s.Name, err)
		}
	}
	return nil
}

func applySubscription(e *broker.Entity, s emuconfig.Subscription, have []broker.SubscriptionInfo, logger *slog.Logger) error {
	var cur *broker.SubscriptionInfo
	for i := range have {
		if strings.EqualFold(have[i].Name, s.Name) {
			cur = &have[i]
		}
	}
	if cur == nil {
		return e.CreateSubscription(s.Name, s.Config(), s.RuleSpecs())
	}
	if changed := configChanges(cur.Config, s.Config()); len(changed) > 0 {
		if err := e.UpdateSubscription(cur.Name, s.Config()); err != nil {
			if errors.Is(err, broker.ErrNotAllowed) {
				err = fmt.Errorf("%w (the subscription exists with its messages: change the file back, or start on a new --data directory)", err)
			}
			return err
		}
		logger.Info("subscription settings changed to the file's; its messages are kept", "topic", e.Name(),
			"subscription", cur.Name, "changed", strings.Join(changed, ","))
	}
	want := s.RuleSpecs()
	if want == nil {
		want = []broker.RuleSpec{{Name: broker.DefaultRuleName, Filter: broker.FilterSpec{Kind: broker.FilterTrue}}}
	}
	same := func(a, b broker.RuleSpec) bool {
		a.Created, b.Created = 0, 0
		x, _ := json.Marshal(a)
		y, _ := json.Marshal(b)
		return string(x) == string(y)
	}
	for _, r := range cur.Rules {
		keep := slices.ContainsFunc(want, func(w broker.RuleSpec) bool { return same(w, r) })
		if !keep {
			if err := e.RemoveRule(cur.Queue, r.Name); err != nil {
				return fmt.Errorf("rule %s: %w", r.Name, err)
			}
			logger.Info("rule removed: the file no longer has it as it was", "topic", e.Name(), "subscription", cur.Name, "rule", r.Name)
		}
	}
	for _, w := range want {
		if slices.ContainsFunc(cur.Rules, func(r broker.RuleSpec) bool { return same(w, r) }) {
			continue
		}
		if err := e.AddRule(cur.Queue, w); err != nil {
			return fmt.Errorf("rule %s: %w", w.Name, err)
		}
		logger.Info("rule added from the file", "topic", e.Name(), "subscription", cur.Name, "rule", w.Name)
	}
	return nil
}

// updateQueue gives an existing queue the file's settings if they differ,
// and says which changed.
func updateQueue(b *broker.Broker, q emuconfig.Queue, logger *slog.Logger) (*broker.Entity, error) {
	e, err := b.Entity(q.Name)
	if err != nil {
		return nil, err
	}
	was, err := e.Config()
	if err != nil {
		return nil, err
	}
	changed := configChanges(was, q.Config())
	if len(changed) == 0 {
		logger.Debug("queue exists with the file's settings", "queue", q.Name)
		return e, nil
	}
	if err := b.UpdateQueue(q.Name, q.Config()); err != nil {
		if errors.Is(err, broker.ErrNotLeader) {
			// A cluster's node that does not lead the queue: its leader's
			// node applies the file (the nodes are given the same one).
			logger.Info("queue settings left to the node that leads it", "queue", q.Name)
			return e, nil
		}
		if errors.Is(err, projection.ErrNotAllowed) {
			err = fmt.Errorf("%w (the queue exists with its messages: change the file back, or start on a new --data directory)", err)
		}
		return nil, err
	}
	logger.Info("queue settings changed to the file's; its messages are kept", "queue", q.Name,
		"changed", strings.Join(changed, ","))
	return e, nil
}

// configChanges names, as Config.json does, the settings that differ
// between a and b.
func configChanges(a, b projection.Config) []string {
	var out []string
	for _, f := range []struct {
		name string
		diff bool
	}{
		{"LockDuration", a.LockDuration != b.LockDuration},
		{"MaxDeliveryCount", a.MaxDeliveryCount != b.MaxDeliveryCount},
		{"DefaultMessageTimeToLive", a.DefaultTTL != b.DefaultTTL},
		{"DeadLetteringOnMessageExpiration", a.DeadLetterOnExpiry != b.DeadLetterOnExpiry},
		{"RequiresSession", a.RequiresSession != b.RequiresSession},
		{"RequiresDuplicateDetection", a.RequiresDuplicateDetection != b.RequiresDuplicateDetection},
		{"DuplicateDetectionHistoryTimeWindow", a.DuplicateWindow != b.DuplicateWindow},
		{"MaxMessageSizeInKilobytes", a.MaxMessageSize != b.MaxMessageSize},
		{"ForwardTo", a.ForwardTo != b.ForwardTo},
		{"ForwardDeadLetteredMessagesTo", a.ForwardDeadLetteredMessagesTo != b.ForwardDeadLetteredMessagesTo},
	} {
		if f.diff {
			out = append(out, f.name)
		}
	}
	if len(out) == 0 && !a.Equal(b) {
		out = append(out, "other") // a setting this list does not know yet
	}
	return out
}

// forwardTargetsFirst orders queues so that each comes after the queues it
// forwards to (a forwarding target must exist when its source is created),
// keeping the file's order otherwise. A cycle is an error.
func forwardTargetsFirst(queues []emuconfig.Queue) ([]emuconfig.Queue, error) {
	byName := map[string]int{}
	for i, q := range queues {
		byName[strings.ToLower(q.Name)] = i
	}
	const (
		unvisited = iota
		visiting
		done
	)
	state := make([]int, len(queues))
	out := make([]emuconfig.Queue, 0, len(queues))
	var visit func(i int) error
	visit = func(i int) error {
		switch state[i] {
		case done:
			return nil
		case visiting:
			return fmt.Errorf("queue %s: forwarding comes back to it", queues[i].Name)
		}
		state[i] = visiting
		cfg := queues[i].Config()
		for _, target := range []string{cfg.ForwardTo, cfg.ForwardDeadLetteredMessagesTo} {
			if j, ok := byName[strings.ToLower(target)]; ok && target != "" {
				if err := visit(j); err != nil {
					return err
				}
			}
		}
		state[i] = done
		out = append(out, queues[i])
		return nil
	}
	for i := range queues {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}
