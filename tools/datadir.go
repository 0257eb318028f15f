// Package tools is walbus's offline log tooling behind the CLI subcommands:
// replay (every event, in order), audit (the life of one message), state (the
// projection at a point in time), verify (checksums, continuity, invariants,
// snapshots, archives) and dump (segments, snapshots and archives).
//
// Every tool works on a data directory with the server stopped and never
// modifies it: logs are opened with log.OpenReadOnly, which neither repairs
// a torn tail nor writes anything, snapshots and archives are only read, and
// the directory's lock (its LOCK file) is neither taken nor needed.
//
// After `walbus compact` an entity's records from before its log's first
// index live in archives (those the state still needs) or nowhere (the
// rest), unless the compaction kept them with --retain: records.go reads an
// entity's records from all of these places in index order.
package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/walbus/walbus/broker/layout"
	"github.com/walbus/walbus/log"
	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection"
)

// NamespaceLabel names the namespace log in output and findings. Entity
// names cannot start with '$', so it never collides with one.
const NamespaceLabel = "$namespace"

// EntityInfo is one entity of a data directory.
type EntityInfo struct {
	Name    string            `json:"name"`
	ID      uint64            `json:"id"` // index of its EntityCreated event in the namespace log
	Kind    string            `json:"kind,omitempty"`
	Config  projection.Config `json:"config"`
	Dir     string            `json:"dir"`
	Created int64             `json:"created,omitempty"` // unix ns
	// Orphan marks a directory the namespace log does not list (a crash
	// between recording a deletion and removing the files, or a damaged
	// namespace log). The server deletes it on start. Its Name is a label.
	Orphan bool `json:"orphan,omitempty"`
}

// LogDir is the entity's log directory.
func (e EntityInfo) LogDir() string { return layout.LogDir(e.Dir) }

// SnapshotDir is the entity's snapshot directory.
func (e EntityInfo) SnapshotDir() string { return layout.SnapshotDir(e.Dir) }

// Catalog is what a data directory holds: its live entities in creation
// order, then orphaned entity directories.
type Catalog struct {
	Data     string
	Entities []EntityInfo
	// NamespaceDamage is why the namespace log could not be read to its end;
	// entities recorded after it show up as orphans.
	NamespaceDamage error
}

// entitySpec is the namespace log's record of an entity (broker.entitySpec).
type entitySpec struct {
	Kind   string            `json:"kind"`
	Config projection.Config `json:"config"`
}

// ReadCatalog lists the entities of the data directory data.
func ReadCatalog(data string) (*Catalog, error) {
	if fi, err := os.Stat(data); err != nil {
		return nil, err
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", data)
	}
	c := &Catalog{Data: data}
	live := map[uint64]*EntityInfo{}
	nsDir := layout.NamespaceLog(data)
	if _, err := os.Stat(nsDir); err != nil {
		c.NamespaceDamage = fmt.Errorf("no namespace log: %w", err)
	} else if ro, err := log.OpenReadOnly(nsDir); err != nil {
		c.NamespaceDamage = err
	} else {
		dmg, err := readLog(ro, 1, 0, func(ev *event.Event, _ string) error {
			applyNamespace(live, data, ev)
			return nil
		})
		ro.Close()
		switch {
		case err != nil:
			c.NamespaceDamage = err
		case dmg != nil:
			c.NamespaceDamage = dmg
		}
	}
	for _, id := range slices.Sorted(mapKeys(live)) {
		c.Entities = append(c.Entities, *live[id])
	}
	ents, err := os.ReadDir(layout.EntitiesDir(data))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, ent := range ents {
		id, ok := layout.ParseDirName(ent.Name())
		if !ok || live[id] != nil {
			continue
		}
		c.Entities = append(c.Entities, EntityInfo{Name: fmt.Sprintf("$entity-%d", id), ID: id,
			Dir: layout.EntityDir(data, id), Orphan: true})
	}
	return c, nil
}

// applyNamespace follows one namespace event the way broker.Open does.
// Events it cannot make sense of are left to verify to report.
func applyNamespace(live map[uint64]*EntityInfo, data string, ev *event.Event) {
	switch ev.Type {
	case event.EntityCreated:
		var spec entitySpec
		_ = json.Unmarshal(ev.Props, &spec)
		live[ev.Index] = &EntityInfo{Name: ev.Name, ID: ev.Index, Kind: spec.Kind, Config: spec.Config,
			Dir: layout.EntityDir(data, ev.Index), Created: ev.Time}
	case event.EntityUpdated:
		if e := findLive(live, ev.Name); e != nil {
			var spec entitySpec
			if json.Unmarshal(ev.Props, &spec) == nil {
				e.Kind, e.Config = spec.Kind, spec.Config
			}
		}
	case event.EntityDeleted:
		if e := findLive(live, ev.Name); e != nil {
			delete(live, e.ID)
		}
	}
}

func findLive(live map[uint64]*EntityInfo, name string) *EntityInfo {
	for _, e := range live {
		if strings.EqualFold(e.Name, name) {
			return e
		}
	}
	return nil
}

// Find returns the live entity called name (compared without case, as the
// broker does).
func (c *Catalog) Find(name string) (EntityInfo, error) {
	var names []string
	for _, e := range c.Entities {
		if e.Orphan {
			continue
		}
		if strings.EqualFold(e.Name, name) {
			return e, nil
		}
		names = append(names, e.Name)
	}
	if len(names) == 0 {
		return EntityInfo{}, fmt.Errorf("no entity %q: the data directory %s has no entities", name, c.Data)
	}
	return EntityInfo{}, fmt.Errorf("no entity %q in %s (entities: %s)", name, c.Data, strings.Join(names, ", "))
}

// Live returns the entities the namespace log lists.
func (c *Catalog) Live() []EntityInfo {
	var out []EntityInfo
	for _, e := range c.Entities {
		if !e.Orphan {
			out = append(out, e)
		}
	}
	return out
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// QueueName is how output names queue no of an entity: "main" for the queue
// itself, "dlq" for its dead-letter subqueue, "tdlq" for its transfer
// dead-letter subqueue.
func QueueName(no uint32) string {
	switch no {
	case event.MainQueue:
		return "main"
	case event.DeadLetterQueue:
		return "dlq"
	case event.TransferDeadLetterQueue:
		return "tdlq"
	}
	// A topic's subscription k owns queues 3k to 3k+2; its
	// subscription-created event gives its name.
	sub := "s" + strconv.FormatUint(uint64(no/event.QueueGroup), 10)
	switch event.KindOf(no) {
	case event.KindDeadLetter:
		return sub + "/dlq"
	case event.KindTransferDeadLetter:
		return sub + "/tdlq"
	}
	return sub
}

// formatTime renders unix ns for people: UTC with milliseconds.
func formatTime(ns int64) string {
	if ns == 0 {
		return "-"
	}
	return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
