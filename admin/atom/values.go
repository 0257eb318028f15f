package atom

import (
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/walbus/walbus/projection/filter"
)

// parseKeyValues reads the <KeyValueOfstringanyType> pairs of a
// correlation filter's Properties or a SQL filter's or action's Parameters.
// A key given twice is refused: the compilers take a map.
func parseKeyValues(list *node, property string) ([]filter.Property, error) {
	if list == nil || list.isNil() {
		return nil, nil
	}
	var out []filter.Property
	seen := make(map[string]bool)
	for _, kv := range list.children {
		if kv.name.Local != "KeyValueOfstringanyType" {
			continue
		}
		key, value := kv.child("Key"), kv.child("Value")
		if key == nil || value == nil {
			return nil, &PropertyError{Property: property, Reason: "a KeyValueOfstringanyType without its Key or Value"}
		}
		name := key.text.String()
		if seen[name] {
			return nil, &PropertyError{Property: property, Reason: fmt.Sprintf("the key %q is given twice", name)}
		}
		seen[name] = true
		v, err := parseValue(value)
		if err != nil {
			return nil, &PropertyError{Property: property, Reason: fmt.Sprintf("the value of %q: %v", name, err)}
		}
		out = append(out, filter.Property{Name: name, Value: v})
	}
	return out, nil
}

// parseValue reads a typed <Value i:type="d6p1:int">. The type's prefix
// must name XML Schema (or .NET's serialization namespace, for guid), or
// be undeclared.
func parseValue(n *node) (filter.Value, error) {
	if n.isNil() {
		return filter.NullValue(), nil
	}
	typ, ok := n.typeAttr()
	if !ok {
		return filter.Value{}, fmt.Errorf("no type attribute")
	}
	uri, local := n.qname(typ)
	if uri != "" && uri != nsSchema && uri != nsSerialization {
		return filter.Value{}, fmt.Errorf("type %q is not an XML Schema type", typ)
	}
	text := n.value()
	switch local {
	case "string":
		return filter.StringValue(n.text.String()), nil
	case "int", "long", "short", "byte":
		i, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return filter.Value{}, fmt.Errorf("%q is not an integer", text)
		}
		return filter.IntValue(i), nil
	case "unsignedInt", "unsignedLong", "unsignedShort", "unsignedByte":
		u, err := strconv.ParseUint(text, 10, 64)
		if err != nil {
			return filter.Value{}, fmt.Errorf("%q is not an unsigned integer", text)
		}
		return filter.UintValue(u), nil
	case "double", "float", "decimal":
		f, err := parseFloat(text)
		if err != nil {
			return filter.Value{}, err
		}
		if local == "decimal" {
			return filter.DecimalValue(f), nil
		}
		return filter.DoubleValue(f), nil
	case "boolean":
		b, err := parseBool(text)
		if err != nil {
			return filter.Value{}, err
		}
		return filter.BoolValue(b), nil
	case "dateTime":
		t, err := parseDateTime(text)
		if err != nil {
			return filter.Value{}, err
		}
		return filter.TimeValue(t), nil
	case "duration":
		ticks, err := parseTicks(text)
		if err != nil {
			return filter.Value{}, err
		}
		return filter.DurationTicks(ticks), nil
	case "guid":
		u, err := parseGUID(text)
		if err != nil {
			return filter.Value{}, err
		}
		return filter.UUIDValue(u), nil
	}
	return filter.Value{}, fmt.Errorf("type %q is not supported", typ)
}

// parseFloat reads an xsd:double: a decimal number, INF, -INF or NaN (Go's
// spellings of the last three are accepted too).
func parseFloat(text string) (float64, error) {
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", text)
	}
	return f, nil
}

// parseBool reads an xsd:boolean: true, false, 1 or 0. Case is ignored,
// as clients print booleans in more than one way.
func parseBool(text string) (bool, error) {
	switch strings.ToLower(text) {
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	}
	return false, fmt.Errorf("%q is not true or false", text)
}

// parseDateTime reads an xsd:dateTime; one without a zone is UTC.
func parseDateTime(text string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999"} {
		if t, err := time.Parse(layout, text); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not an xsd:dateTime", text)
}

// parseGUID reads a guid written 8-4-4-4-12.
func parseGUID(text string) (filter.UUID, error) {
	var u filter.UUID
	if len(text) != 36 || text[8] != '-' || text[13] != '-' || text[18] != '-' || text[23] != '-' {
		return u, fmt.Errorf("%q is not a guid", text)
	}
	digits := text[0:8] + text[9:13] + text[14:18] + text[19:23] + text[24:36]
	if _, err := hex.Decode(u[:], []byte(digits)); err != nil {
		return u, fmt.Errorf("%q is not a guid", text)
	}
	return u, nil
}

// keyValues writes pairs as Service Bus does. JS reads the type by
// the literal attribute name i:type and drops its first five characters,
// so the prefix is i (declared on the description) and the type's prefix
// has four characters (ruleResourceSerializer.js, getKeyValuePairsOrUndefined).
func (w *writer) keyValues(tag string, props []filter.Property) {
	if len(props) == 0 {
		return
	}
	w.open(tag)
	for _, p := range props {
		w.open("KeyValueOfstringanyType")
		w.elem("Key", p.Name)
		w.value(p.Value)
		w.close("KeyValueOfstringanyType")
	}
	w.close(tag)
}

// value writes one typed <Value>. Integers are always "int": Go's and JS's
// readers know no "long" (admin_client_rules.go, internalSQLParametersToPublic),
// and all three SDKs read an "int" of any width.
func (w *writer) value(v filter.Value) {
	var typ, text string
	ns := nsSchema
	switch v.Kind() {
	case filter.KindString:
		typ, text = "string", v.Text()
	case filter.KindInt:
		typ, text = "int", strconv.FormatInt(v.Int(), 10)
	case filter.KindDouble:
		typ, text = "double", formatFloat(v.Float())
	case filter.KindDecimal:
		typ, text = "decimal", formatFloat(v.Float())
	case filter.KindBool:
		typ, text = "boolean", strconv.FormatBool(v.Bool())
	case filter.KindTimestamp:
		typ, text = "dateTime", v.Time().Format(time.RFC3339Nano)
	case filter.KindDuration:
		typ, text = "duration", formatTicks(v.Ticks())
	case filter.KindUUID:
		typ, text, ns = "guid", v.UUID().String(), nsSerialization
	default: // null, and values that have no XML form
		w.empty("Value", "i:nil", "true")
		return
	}
	w.open("Value", "i:type", "d6p1:"+typ, "xmlns:d6p1", ns)
	w.text(text)
	w.close("Value")
}

// formatFloat writes a double so that Go's ParseFloat, JS's Number,
// Python's float and .NET's double.Parse all read it back.
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
