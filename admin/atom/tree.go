package atom

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Namespaces of the documents.
const (
	nsAtom     = "http://www.w3.org/2005/Atom"
	nsConnect  = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
	nsCounts   = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
	nsInstance = "http://www.w3.org/2001/XMLSchema-instance"
	nsSchema   = "http://www.w3.org/2001/XMLSchema"
	// .NET's DataContract namespace, which holds the guid type.
	nsSerialization = "http://schemas.microsoft.com/2003/10/Serialization/"
)

// xmlSpace is the white space XML allows around a value.
const xmlSpace = " \t\r\n"

// node is one element of a parsed document. Element and attribute names
// carry namespace URIs, as encoding/xml resolves them; ns keeps the
// prefixes declared on the element, which attribute values such as
// i:type="d6p1:int" need.
type node struct {
	name     xml.Name
	attrs    []xml.Attr
	ns       map[string]string // prefix ("" for the default) → URI
	parent   *node
	children []*node
	text     strings.Builder // character data directly inside
}

// parseTree reads a whole document. Entities other than XML's five are
// refused (encoding/xml knows no others), so no DTD is ever expanded.
func parseTree(body []byte) (*node, error) {
	d := xml.NewDecoder(bytes.NewReader(body))
	var root, cur *node
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if root != nil && cur == nil {
				return nil, errors.New("more than one root element")
			}
			n := &node{name: t.Name, attrs: t.Attr, parent: cur}
			for _, a := range t.Attr {
				switch {
				case a.Name.Space == "xmlns":
					n.declare(a.Name.Local, a.Value)
				case a.Name.Space == "" && a.Name.Local == "xmlns":
					n.declare("", a.Value)
				}
			}
			if cur == nil {
				root = n
			} else {
				cur.children = append(cur.children, n)
			}
			cur = n
		case xml.EndElement:
			cur = cur.parent // the decoder has matched the tags
		case xml.CharData:
			switch {
			case cur != nil:
				cur.text.Write(t)
			case len(bytes.Trim(t, xmlSpace)) > 0:
				return nil, errors.New("text outside the root element")
			}
		}
	}
	if root == nil {
		return nil, errors.New("no root element")
	}
	return root, nil
}

func (n *node) declare(prefix, uri string) {
	if n.ns == nil {
		n.ns = make(map[string]string)
	}
	n.ns[prefix] = uri
}

// lookup resolves a prefix in n's scope.
func (n *node) lookup(prefix string) (string, bool) {
	for ; n != nil; n = n.parent {
		if uri, ok := n.ns[prefix]; ok {
			return uri, true
		}
	}
	return "", false
}

// child is n's last child named local, in any namespace: clients differ
// in how they qualify names (Python's serializer prefixes everything), and
// the names alone are unambiguous in these documents.
func (n *node) child(local string) *node {
	for i := len(n.children) - 1; i >= 0; i-- {
		if n.children[i].name.Local == local {
			return n.children[i]
		}
	}
	return nil
}

// value is n's text with surrounding white space removed, for numbers,
// booleans, durations and names of types.
func (n *node) value() string { return strings.Trim(n.text.String(), xmlSpace) }

// typeAttr is n's xsi:type, whatever prefix names the namespace (Go's
// encoding/xml invents _XMLSchema-instance, JS uses p4, Python xsi, .NET
// i). An undeclared prefix is accepted too.
func (n *node) typeAttr() (string, bool) {
	var loose string
	found := false
	for _, a := range n.attrs {
		if a.Name.Local != "type" || a.Name.Space == "" {
			continue
		}
		if a.Name.Space == nsInstance {
			return a.Value, true
		}
		// encoding/xml leaves an undeclared prefix as it is; a declared
		// one becomes its URI, which has a colon.
		if a.Name.Space != "xmlns" && !strings.Contains(a.Name.Space, ":") {
			loose, found = a.Value, true
		}
	}
	return loose, found
}

// isNil reports xsi:nil="true", .NET's way of writing null.
func (n *node) isNil() bool {
	for _, a := range n.attrs {
		if a.Name.Space == nsInstance && a.Name.Local == "nil" {
			return strings.Trim(a.Value, xmlSpace) == "true"
		}
	}
	return false
}

// qname splits a prefixed name such as "d6p1:int" found in an attribute
// value, and resolves the prefix in n's scope. uri is "" for no prefix or
// an undeclared one: the local name alone is then taken.
func (n *node) qname(v string) (uri, local string) {
	v = strings.Trim(v, xmlSpace)
	prefix, local, ok := strings.Cut(v, ":")
	if !ok {
		return "", v
	}
	uri, _ = n.lookup(prefix)
	return uri, local
}

// description finds the entry's content element named one of want, or
// says what the entry holds instead.
func description(body []byte, want string) (*node, error) {
	root, err := parseTree(body)
	if err != nil {
		return nil, &PropertyError{Property: "entry", Reason: "not well-formed XML: " + err.Error()}
	}
	d, err := content(root)
	if err != nil {
		return nil, err
	}
	if d.name.Local != want {
		return nil, &PropertyError{Property: want, Reason: fmt.Sprintf("the entry holds a %s", d.name.Local)}
	}
	return d, nil
}

// content is the description inside <entry><content>.
func content(root *node) (*node, error) {
	if root.name.Local != "entry" {
		return nil, &PropertyError{Property: "entry", Reason: fmt.Sprintf("the document is a <%s>, not an ATOM entry", root.name.Local)}
	}
	c := root.child("content")
	if c == nil || len(c.children) == 0 {
		return nil, &PropertyError{Property: "content", Reason: "the entry has no description"}
	}
	return c.children[0], nil
}
