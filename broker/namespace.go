package broker

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/walbus/walbus/log/event"
)

// namespace is what the namespace log says: the live entities, by id
// (the index of their EntityCreated record), how far the test clock was
// advanced, and in a cluster the nodes' peer addresses. A single node reads it from its log at Open; a cluster's
// node builds it from its metadata group's committed entries (meta.go).
type namespace struct {
	names    map[uint64]string     // live ids -> name
	byName   map[string]uint64     // lower-case name -> live id
	specs    map[uint64]entitySpec // live ids -> what the last record said
	times    map[uint64][2]int64   // created, updated (unix ns)
	advanced time.Duration         // the test clock's advances
	peers    map[uint64]string     // node id -> peer address ("": left)
}

func newNamespace() *namespace {
	return &namespace{names: map[uint64]string{}, byName: map[string]uint64{}, specs: map[uint64]entitySpec{},
		times: map[uint64][2]int64{}, peers: map[uint64]string{}}
}

// apply takes one record of the namespace log; others (a cluster's
// markers) change nothing.
func (ns *namespace) apply(ev *event.Event) error {
	switch ev.Type {
	case event.EntityCreated, event.EntityUpdated:
		var spec entitySpec
		if err := json.Unmarshal(ev.Props, &spec); err != nil {
			return fmt.Errorf("namespace event %d: %w", ev.Index, err)
		}
		key := strings.ToLower(ev.Name)
		id := ev.Index
		if ev.Type == event.EntityUpdated {
			id = ns.byName[key]
		}
		ns.names[id], ns.specs[id] = ev.Name, spec
		ns.byName[key] = id
		t := ns.times[id]
		if ev.Type == event.EntityCreated {
			t[0] = ev.Time
		}
		t[1] = ev.Time
		ns.times[id] = t
	case event.EntityDeleted:
		key := strings.ToLower(ev.Name)
		id := ns.byName[key]
		delete(ns.names, id)
		delete(ns.specs, id)
		delete(ns.times, id)
		delete(ns.byName, key)
	case event.ClockAdvanced:
		ns.advanced += time.Duration(ev.TTL)
	case event.NodeAddress:
		ns.peers[ev.Source] = ev.Name
	}
	return nil
}

// ids is the live ids, ascending: the order the entities were created.
func (ns *namespace) ids() []uint64 { return slices.Sorted(maps.Keys(ns.names)) }

// clone is a copy of ns that shares nothing with it.
func (ns *namespace) clone() *namespace {
	return &namespace{names: maps.Clone(ns.names), byName: maps.Clone(ns.byName), specs: maps.Clone(ns.specs),
		times: maps.Clone(ns.times), advanced: ns.advanced, peers: maps.Clone(ns.peers)}
}
