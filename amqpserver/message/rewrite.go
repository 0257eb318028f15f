package message

import (
	"fmt"

	"github.com/walbus/walbus/amqpserver/encoding"
)

// Property is an application property to set: a string key (§3.2.5) and a
// value of any type encoding.AppendAny accepts; or, with Remove, to delete
// (Value unused).
type Property struct {
	Key    string
	Value  any
	Remove bool
}

// AppendWithApplicationProperties writes s with its application-properties
// section replaced by a merge: existing entries stay, in order and byte
// for byte, unless set overwrites them in place or removes them; keys new
// to the map are added at the end (the last of duplicate keys in set wins,
// and a removal of a key the map lacks adds nothing). Keys match exactly.
// Every other section is copied unchanged. Service Bus merges dead-letter
// reasons and properties-to-modify this way (docs/compatibility.md §5), and
// a rule action's SET and REMOVE.
func AppendWithApplicationProperties(dst []byte, s *Sections, set []Property) ([]byte, error) {
	insertAt, resumeAt := applicationPropertiesPlace(s)
	dst = append(dst, s.Raw[:insertAt]...)
	dst = encoding.AppendDescriptor(dst, CodeApplicationProperties)
	dst, start := encoding.BeginMap(dst)
	pairs := 0
	var existing []byte
	if s.ApplicationProperties.Present() {
		existing = s.ValueBytes(s.ApplicationProperties)
	}
	it := NewMapIter(existing)
	var err error
	for it.Next() {
		i := lastProperty(set, it.Key())
		if i >= 0 && set[i].Remove {
			continue
		}
		dst = append(dst, it.Key()...)
		if i >= 0 {
			if dst, err = encoding.AppendAny(dst, set[i].Value); err != nil {
				return dst, fmt.Errorf("application property %q: %w", set[i].Key, err)
			}
		} else {
			dst = append(dst, it.Value()...)
		}
		pairs++
	}
	if err := it.Err(); err != nil {
		return dst, err
	}
	for i := range set {
		if set[i].Remove || supersededLater(set, i) {
			continue
		}
		if _, found, _ := FindMapValue(existing, set[i].Key); found {
			continue
		}
		dst = encoding.AppendString(dst, set[i].Key)
		if dst, err = encoding.AppendAny(dst, set[i].Value); err != nil {
			return dst, fmt.Errorf("application property %q: %w", set[i].Key, err)
		}
		pairs++
	}
	dst = encoding.EndMap(dst, start, pairs)
	return append(dst, s.Raw[resumeAt:]...), nil
}

// applicationPropertiesPlace says which bytes the new section replaces:
// the old section, or nothing at its place in the grammar (after the
// properties, before the body).
func applicationPropertiesPlace(s *Sections) (insertAt, resumeAt int) {
	switch {
	case s.ApplicationProperties.Present():
		return s.ApplicationProperties.Start, s.ApplicationProperties.End
	case s.Properties.Present():
		return s.Properties.End, s.Properties.End
	}
	at := s.BareStart()
	return at, at
}

// lastProperty finds the last entry of set whose key matches an encoded
// map key.
func lastProperty(set []Property, encodedKey []byte) int {
	text, ok := KeyText(encodedKey)
	if !ok {
		return -1
	}
	for i := len(set) - 1; i >= 0; i-- {
		if set[i].Key == string(text) {
			return i
		}
	}
	return -1
}

func supersededLater(set []Property, i int) bool {
	for j := i + 1; j < len(set); j++ {
		if set[j].Key == set[i].Key {
			return true
		}
	}
	return false
}

// AppendWithMessageID writes s with id as its message-id when the client
// sent none (Service Bus assigns one; the Go SDK sends null and its tests
// expect an id back). The properties section is rebuilt with the id in
// field 0 and the other fields copied byte for byte, or created when
// absent. When s already has a message-id nothing is appended and changed
// is false: the stored bytes can be kept as they are.
func AppendWithMessageID(dst []byte, s *Sections, id string) (out []byte, changed bool, err error) {
	if !s.Properties.Present() {
		at := s.BareStart()
		dst = append(dst, s.Raw[:at]...)
		dst = AppendProperties(dst, &Properties{MessageID: StringID(id)})
		return append(dst, s.Raw[at:]...), true, nil
	}
	r := encoding.NewReader(s.ValueBytes(s.Properties))
	count, end, err := r.ReadListHeader()
	if err != nil {
		return dst, false, err
	}
	if count > 0 && !r.IsNull() {
		return dst, false, nil
	}
	rest := r.Offset() // the fields after message-id start here...
	if count > 0 {
		rest++ // ...after the null that held its place
	} else {
		count = 1
	}
	base := s.Properties.Value
	dst = append(dst, s.Raw[:s.Properties.Start]...)
	dst = encoding.AppendDescriptor(dst, CodeProperties)
	dst, start := encoding.BeginList(dst)
	dst = encoding.AppendString(dst, id)
	dst = append(dst, s.Raw[base+rest:base+end]...)
	dst = encoding.EndList(dst, start, count)
	return append(dst, s.Raw[s.Properties.End:]...), true, nil
}

// AppendWithProperties writes s with its properties section replaced by p
// (or, if s has none, p inserted where the grammar puts it), every other
// section copied unchanged. p may alias s.Raw. A rule action's changes to
// a topic's copy of a message are written this way.
func AppendWithProperties(dst []byte, s *Sections, p *Properties) []byte {
	insertAt, resumeAt := s.Properties.Start, s.Properties.End
	if !s.Properties.Present() {
		insertAt = s.BareStart()
		resumeAt = insertAt
	}
	dst = append(dst, s.Raw[:insertAt]...)
	dst = AppendProperties(dst, p)
	return append(dst, s.Raw[resumeAt:]...)
}

// AppendWithoutBody writes s without its body sections: every other
// section is copied unchanged. Service Bus peeks this way when asked to
// omit message bodies.
func AppendWithoutBody(dst []byte, s *Sections) []byte {
	if !s.Body.Present() {
		return append(dst, s.Raw...)
	}
	dst = append(dst, s.Raw[:s.Body.Start]...)
	return append(dst, s.Raw[s.Body.End:]...)
}
