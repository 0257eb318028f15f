package sas

import (
	"errors"
	"fmt"
	"strings"
)

// Rights is the set of claims a shared access key grants, as in a Service Bus
// authorization rule.
type Rights uint8

const (
	Send Rights = 1 << iota
	Listen
	// Manage implies Send and Listen; Service Bus refuses a rule that has
	// Manage without the other two, we simply treat it as a superset.
	Manage

	allRights = Send | Listen | Manage
)

var rightNames = [...]struct {
	bit  Rights
	name string
}{{Send, "Send"}, {Listen, "Listen"}, {Manage, "Manage"}}

// Has reports whether r grants every right in want, counting Manage as
// granting Send and Listen too.
func (r Rights) Has(want Rights) bool {
	granted := r
	if r&Manage != 0 {
		granted |= Send | Listen
	}
	return want&^granted == 0
}

// String lists the rights as they are written in configuration, e.g.
// "Send,Listen". Bits outside the known set are shown in hex.
func (r Rights) String() string {
	var parts []string
	for _, rn := range rightNames {
		if r&rn.bit != 0 {
			parts = append(parts, rn.name)
		}
	}
	if rest := r &^ allRights; rest != 0 {
		parts = append(parts, fmt.Sprintf("0x%x", uint8(rest)))
	}
	return strings.Join(parts, ",")
}

// ParseRights reads a comma-separated list such as "Send, Listen" or
// "manage". Names are case-insensitive; an empty list is an error because a
// key without rights is almost certainly a configuration mistake.
func ParseRights(s string) (Rights, error) {
	if strings.TrimSpace(s) == "" {
		return 0, errors.New("sas: empty rights list")
	}
	var r Rights
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		bit, ok := rightByName(item)
		if !ok {
			return 0, fmt.Errorf("sas: unknown right %q (want Send, Listen or Manage)", item)
		}
		r |= bit
	}
	return r, nil
}

func rightByName(name string) (Rights, bool) {
	for _, rn := range rightNames {
		if strings.EqualFold(name, rn.name) {
			return rn.bit, true
		}
	}
	return 0, false
}

// Key is one shared access authorization rule.
type Key struct {
	Name   string // SharedAccessKeyName; matched case-sensitively
	Value  string // SharedAccessKey; its UTF-8 bytes are the HMAC key as is
	Rights Rights
}

// Keys is an immutable set of keys indexed by name. The zero value holds no
// keys. It is safe for concurrent use.
type Keys struct {
	byName map[string]Key
}

// NewKeys indexes keys by name. Names must be unique and non-empty and values
// non-empty (an empty HMAC key would accept tokens anyone can compute).
func NewKeys(keys ...Key) (Keys, error) {
	byName := make(map[string]Key, len(keys))
	for i, k := range keys {
		switch {
		case k.Name == "":
			return Keys{}, fmt.Errorf("sas: key %d has no name", i)
		case k.Value == "":
			return Keys{}, fmt.Errorf("sas: key %q has an empty value", k.Name)
		case k.Rights&^allRights != 0:
			return Keys{}, fmt.Errorf("sas: key %q has unknown rights %s", k.Name, k.Rights)
		}
		if _, dup := byName[k.Name]; dup {
			return Keys{}, fmt.Errorf("sas: duplicate key name %q", k.Name)
		}
		byName[k.Name] = k
	}
	return Keys{byName: byName}, nil
}

// Lookup finds a key by its exact name.
func (ks Keys) Lookup(name string) (Key, bool) {
	k, ok := ks.byName[name]
	return k, ok
}

// Len is the number of keys.
func (ks Keys) Len() int { return len(ks.byName) }
