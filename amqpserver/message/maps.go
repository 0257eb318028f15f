package message

import (
	"github.com/walbus/walbus/amqpserver/encoding"
)

// MapIter walks the entries of an encoded map (annotations, application
// properties) without decoding them, handing out each key and value as
// encoded bytes that can be copied into a new map unchanged.
type MapIter struct {
	r          encoding.Reader
	left       int
	key, value []byte
	err        error
}

// NewMapIter starts iterating the encoded map m. A nil m iterates nothing.
func NewMapIter(m []byte) MapIter {
	it := MapIter{r: encoding.NewReader(m)}
	if len(m) == 0 {
		return it
	}
	it.left, _, it.err = it.r.ReadMapHeader()
	return it
}

// Next moves to the next entry and reports whether there is one.
func (it *MapIter) Next() bool {
	if it.err != nil || it.left < 2 {
		return false
	}
	it.left -= 2
	if it.key, it.err = it.r.ReadRaw(); it.err != nil {
		return false
	}
	it.value, it.err = it.r.ReadRaw()
	return it.err == nil
}

// Key is the current entry's encoded key.
func (it *MapIter) Key() []byte { return it.key }

// Value is the current entry's encoded value.
func (it *MapIter) Value() []byte { return it.value }

// Err reports a malformed map.
func (it *MapIter) Err() error { return it.err }

// KeyText returns the text of an encoded string or symbol key. Annotation
// keys are symbols and application property keys strings; lookups by name
// accept either.
func KeyText(encodedKey []byte) ([]byte, bool) {
	r := encoding.NewReader(encodedKey)
	text, err := r.ReadStringOrSymbolBytes()
	return text, err == nil && r.Len() == 0
}

// keyIs reports whether an encoded key is the string or symbol key.
func keyIs(encodedKey []byte, key string) bool {
	text, ok := KeyText(encodedKey)
	return ok && string(text) == key
}

// FindMapValue returns the encoded value stored in the encoded map m under
// a string or symbol key equal to key.
func FindMapValue(m []byte, key string) (value []byte, found bool, err error) {
	it := NewMapIter(m)
	for it.Next() {
		if keyIs(it.Key(), key) {
			return it.Value(), true, nil
		}
	}
	return nil, false, it.Err()
}

// MessageAnnotation returns the encoded value of a message annotation.
func (s *Sections) MessageAnnotation(key string) ([]byte, bool, error) {
	if !s.MessageAnnotations.Present() {
		return nil, false, nil
	}
	return FindMapValue(s.ValueBytes(s.MessageAnnotations), key)
}

// ApplicationProperty returns the encoded value of an application property.
func (s *Sections) ApplicationProperty(key string) ([]byte, bool, error) {
	if !s.ApplicationProperties.Present() {
		return nil, false, nil
	}
	return FindMapValue(s.ValueBytes(s.ApplicationProperties), key)
}
