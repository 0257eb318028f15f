package broker

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// NewEntity is one entity for CreateEntities to make.
type NewEntity struct {
	Name   string
	Topic  bool
	Config Config
}

func (n NewEntity) kind() string {
	if n.Topic {
		return "topic"
	}
	return "queue"
}

// maxCreateGroup is how many entities one namespace commit records.
const maxCreateGroup = 1024

// CreateEntities creates many entities as one start from Config.json
// does: their records share namespace commits, and the entities open side
// by side, so that thousands take seconds rather than a commit each in
// turn. An entity that forwards to another of the same call is created
// after it. It stops at the first error, which names the entity: entities
// are checked a group at a time, before the group is recorded, and those
// of groups recorded before stay; the result holds every entity made (nil
// for the others).
func (b *Broker) CreateEntities(specs []NewEntity) ([]*Entity, error) {
	out := make([]*Entity, len(specs))
	for i := range specs {
		specs[i].Config.Topic = specs[i].Topic
		if err := checkNew(specs[i]); err != nil {
			return out, fmt.Errorf("%s: %w", specs[i].Name, err)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	pending := make([]int, len(specs))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		// A wave is what forwards to nothing still pending; a cycle leaves
		// no such entity, and its first is tried so that its check says so.
		waiting := map[string]bool{}
		for _, i := range pending {
			waiting[strings.ToLower(specs[i].Name)] = true
		}
		var wave, rest []int
		for _, i := range pending {
			cfg, self := specs[i].Config, strings.ToLower(specs[i].Name)
			if t := strings.ToLower(cfg.ForwardTo); t != self && waiting[t] {
				rest = append(rest, i)
			} else if t := strings.ToLower(cfg.ForwardDeadLetteredMessagesTo); t != self && waiting[t] {
				rest = append(rest, i)
			} else {
				wave = append(wave, i)
			}
		}
		if len(wave) == 0 {
			wave, rest = rest[:1], rest[1:]
		}
		for len(wave) > 0 {
			n := min(len(wave), maxCreateGroup)
			if err := b.createGroup(specs, wave[:n], out); err != nil {
				return out, err
			}
			wave = wave[n:]
		}
		pending = rest
	}
	return out, nil
}

// checkNew checks what can be checked of an entity before the broker is
// locked.
func checkNew(n NewEntity) error {
	if err := ValidateName(n.Name); err != nil {
		return err
	}
	if err := n.Config.Validate(); err != nil {
		return fmt.Errorf("%w: %v", projection.ErrInvalid, err)
	}
	return nil
}

// create makes one entity.
func (b *Broker) create(n NewEntity) (*Entity, error) {
	n.Config.Topic = n.Topic
	if err := checkNew(n); err != nil {
		return nil, err
	}
	out := make([]*Entity, 1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.createGroup([]NewEntity{n}, []int{0}, out); err != nil {
		return nil, err
	}
	return out[0], nil
}

// createGroup records the entities specs[which] in one namespace commit,
// opens them side by side, and puts those that opened in out. Every check
// is done before anything is recorded. Callers hold b.mu.
func (b *Broker) createGroup(specs []NewEntity, which []int, out []*Entity) error {
	if b.closed {
		return ErrClosed
	}
	evs := make([]event.Event, 0, len(which))
	names := make(map[string]bool, len(which))
	var voters []uint64
	if b.meta != nil {
		voters = b.meta.voters()
	}
	for _, i := range which {
		n := specs[i]
		key := strings.ToLower(n.Name)
		if _, ok := b.entities[key]; ok || names[key] {
			return fmt.Errorf("%w: %s", ErrEntityExists, n.Name)
		}
		names[key] = true
		if err := b.checkForwarding(n.Name, n.Config); err != nil {
			return err
		}
		spec, _ := json.Marshal(entitySpec{Kind: n.kind(), Config: n.Config, Voters: voters})
		evs = append(evs, event.Event{Type: event.EntityCreated, Name: n.Name, Props: spec})
	}
	if err := b.appendNamespace(evs); err != nil {
		if len(evs) == 1 {
			return fmt.Errorf("create %s: %w", evs[0].Name, err)
		}
		return fmt.Errorf("create %d entities: %w", len(evs), err)
	}
	opened := make([]*Entity, len(which))
	errs := make([]error, len(which))
	made := b.makeDirs(evs, errs)
	sideBySide(len(which), createWorkers, func(k int) {
		if errs[k] == nil {
			n := specs[which[k]]
			opened[k], _, errs[k] = b.openEntity(n.Name, evs[k].Index, n.Config, voters)
		}
	})
	if made != nil {
		errs = made
	}
	var firstErr error
	var undo []event.Event
	for k, i := range which {
		if errs[k] != nil {
			firstErr = cmp.Or(firstErr, errs[k])
			undo = append(undo, event.Event{Type: event.EntityDeleted, Name: evs[k].Name})
			continue
		}
		e := opened[k]
		e.created.Store(evs[k].Time)
		e.updated.Store(evs[k].Time)
		b.entities[strings.ToLower(e.name)] = e
		b.byGroup.Store(e.id, e)
		out[i] = e
		// Callers say it at info: the administration API for each entity,
		// a start from Config.json in a few lines.
		b.logger.Debug("entity created", "entity", e.name, "kind", specs[i].kind())
	}
	if len(undo) > 0 {
		// Refused means not there: the namespace must not keep the record,
		// or a retry would make a second entity of that name and a later
		// delete remove only one of them.
		if err := b.appendNamespace(undo); err != nil {
			b.logger.Error("cannot record the removal of entities that failed to open; they reappear at the next start",
				"entities", len(undo), "err", err)
		} else {
			for k := range which {
				if errs[k] != nil {
					_ = os.RemoveAll(b.entityDir(evs[k].Index))
				}
			}
		}
	}
	return firstErr
}

// Entities open side by side: each reads its own directory, and with
// thousands of them one at a time is mostly waiting. Those being created
// wait for fsyncs of their new files and directories, which the file
// system commits together: the more at once, the fewer commits.
var (
	openWorkers   = max(8, 4*runtime.GOMAXPROCS(0))
	createWorkers = 64
)

// makeDirs makes the directories of the entities recorded by evs, with one
// fsync of their parent for all of them (and one of each), rather than one
// of the parent for each entity, which is what opening them one by one
// costs. It sets errs[k] for those it could not make, or returns errors for
// all when the parent cannot be synced.
func (b *Broker) makeDirs(evs []event.Event, errs []error) []error {
	parent := layout.EntitiesDir(b.opts.Dir)
	if err := log.MkdirAllDurable(parent, 0o750); err != nil {
		return slices.Repeat([]error{err}, len(evs))
	}
	sideBySide(len(evs), createWorkers, func(k int) {
		dir := b.entityDir(evs[k].Index)
		var err error
		for _, d := range []string{dir, layout.LogDir(dir), layout.SnapshotDir(dir)} {
			if err == nil {
				if err = os.Mkdir(d, 0o750); os.IsExist(err) {
					err = nil
				}
			}
		}
		if err == nil {
			err = log.SyncDir(dir)
		}
		if err != nil {
			errs[k] = fmt.Errorf("entity %s: %w", evs[k].Name, err)
		}
	})
	if err := log.SyncDir(parent); err != nil {
		return slices.Repeat([]error{fmt.Errorf("entities: %w", err)}, len(evs))
	}
	return nil
}

// sideBySide calls f(0) to f(n-1) on up to workers goroutines and waits
// for them.
func sideBySide(n, workers int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range min(n, workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		}()
	}
	wg.Wait()
}
