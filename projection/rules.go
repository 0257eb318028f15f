package projection

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/walbus/walbus/log/event"
	"github.com/walbus/walbus/projection/filter"
)

// RuleSpec is a subscription rule as a client gives it: a filter and an
// optional SQL action. It is stored as given (JSON, in RuleAdded events and
// snapshots), so enumerating rules returns the expressions verbatim.
type RuleSpec struct {
	Name   string     `json:"name"`
	Filter FilterSpec `json:"filter"`
	Action string     `json:"action,omitempty"` // SQL rule action; "" for none
	// ActionParameters are the values of the action's @name references
	// (only the ATOM API carries them), in the order given.
	ActionParameters []filter.Property `json:"actionParameters,omitempty"`
	Created          int64             `json:"created,omitempty"` // unix ns, from the RuleAdded event
}

// FilterKind is the type of a rule's filter.
type FilterKind string

// The filter types of Service Bus.
const (
	FilterSQL         FilterKind = "sql"
	FilterTrue        FilterKind = "true"
	FilterFalse       FilterKind = "false"
	FilterCorrelation FilterKind = "correlation"
)

// FilterSpec is a rule's filter: SQL text, true, false, or a correlation
// filter.
type FilterSpec struct {
	Kind FilterKind `json:"kind"`
	SQL  string     `json:"sql,omitempty"`
	// Parameters are the values of a SQL filter's @name references (only
	// the ATOM API carries them), in the order given.
	Parameters  []filter.Property `json:"parameters,omitempty"`
	Correlation *CorrelationSpec  `json:"correlation,omitempty"`
}

// CorrelationSpec is a correlation filter: nil fields are not set.
type CorrelationSpec struct {
	CorrelationID    *string           `json:"correlationId,omitempty"`
	MessageID        *string           `json:"messageId,omitempty"`
	To               *string           `json:"to,omitempty"`
	ReplyTo          *string           `json:"replyTo,omitempty"`
	Subject          *string           `json:"label,omitempty"`
	SessionID        *string           `json:"sessionId,omitempty"`
	ReplyToSessionID *string           `json:"replyToSessionId,omitempty"`
	ContentType      *string           `json:"contentType,omitempty"`
	Properties       []filter.Property `json:"properties,omitempty"` // in the order given
}

// DefaultRuleName names the rule every new subscription gets unless its
// creator gives rules.
const DefaultRuleName = "$Default"

// DefaultRule is the $Default rule: a true filter, no action.
func DefaultRule() RuleSpec {
	return RuleSpec{Name: DefaultRuleName, Filter: FilterSpec{Kind: FilterTrue}}
}

// MaxNameLength bounds subscription and rule names, as Service Bus does.
const MaxNameLength = 50

// ValidateSubName checks a subscription or rule name: 1 to 50 characters,
// none of @ ? # * / (Service Bus's rule for subscriptions, applied to rules
// too), no control characters.
func ValidateSubName(what, name string) error {
	if !utf8.ValidString(name) {
		return fmt.Errorf("%w: %s name %q is not valid UTF-8", ErrInvalid, what, name)
	}
	if name == "" || len(name) > MaxNameLength {
		return fmt.Errorf("%w: %s name %q: length must be 1 to %d", ErrInvalid, what, name, MaxNameLength)
	}
	if i := strings.IndexAny(name, "@?#*/\\"); i >= 0 {
		return fmt.Errorf("%w: %s name %q: %q is not allowed", ErrInvalid, what, name, name[i])
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("%w: %s name %q: control characters are not allowed", ErrInvalid, what, name)
		}
	}
	return nil
}

// rule is a compiled rule.
type rule struct {
	spec   RuleSpec
	filter filter.Filter
	action *filter.SQLAction // nil: none
}

// Compile checks a rule and compiles its filter and action. Its errors
// wrap ErrInvalid and, for a bad expression, name the position.
func (r RuleSpec) Compile() error {
	_, err := compileRule(r)
	return err
}

func compileRule(r RuleSpec) (*rule, error) {
	if err := ValidateSubName("rule", r.Name); err != nil && r.Name != DefaultRuleName {
		return nil, err
	}
	// The rule is stored as JSON, which cannot carry other bytes: what is
	// checked here must be what replay reads back.
	if err := r.validUTF8(); err != nil {
		return nil, err
	}
	out := &rule{spec: r}
	switch r.Filter.Kind {
	case FilterTrue:
		out.filter = filter.TrueFilter{}
	case FilterFalse:
		out.filter = filter.FalseFilter{}
	case FilterSQL:
		params, err := paramMap(r.Filter.Parameters)
		if err != nil {
			return nil, fmt.Errorf("%w: rule %s: the filter's parameters: %v", ErrInvalid, r.Name, err)
		}
		f, err := filter.CompileSQLParams(r.Filter.SQL, params)
		if err != nil {
			return nil, fmt.Errorf("%w: rule %s: the filter: %v", ErrInvalid, r.Name, err)
		}
		out.filter = f
	case FilterCorrelation:
		c := r.Filter.Correlation
		if c == nil {
			return nil, fmt.Errorf("%w: rule %s: a correlation filter with no fields", ErrInvalid, r.Name)
		}
		fc := filter.Correlation{CorrelationID: c.CorrelationID, MessageID: c.MessageID, To: c.To,
			ReplyTo: c.ReplyTo, Subject: c.Subject, SessionID: c.SessionID, ReplyToSessionID: c.ReplyToSessionID,
			ContentType: c.ContentType}
		if len(c.Properties) > 0 {
			fc.Properties = make(map[string]filter.Value, len(c.Properties))
			for _, p := range c.Properties {
				fc.Properties[p.Name] = p.Value
			}
		}
		f, err := filter.CompileCorrelation(fc)
		if err != nil {
			return nil, fmt.Errorf("%w: rule %s: %v", ErrInvalid, r.Name, err)
		}
		out.filter = f
	default:
		return nil, fmt.Errorf("%w: rule %s: unknown filter type %q", ErrInvalid, r.Name, r.Filter.Kind)
	}
	if r.Action != "" {
		params, err := paramMap(r.ActionParameters)
		if err != nil {
			return nil, fmt.Errorf("%w: rule %s: the action's parameters: %v", ErrInvalid, r.Name, err)
		}
		a, err := filter.CompileActionParams(r.Action, params)
		if err != nil {
			return nil, fmt.Errorf("%w: rule %s: the action: %v", ErrInvalid, r.Name, err)
		}
		out.action = a
	}
	return out, nil
}

// paramMap is a rule's parameters as the compiler takes them: nil for
// none. A name given twice is refused: a map would keep only one of them.
func paramMap(params []filter.Property) (map[string]filter.Value, error) {
	if len(params) == 0 {
		return nil, nil
	}
	m := make(map[string]filter.Value, len(params))
	for _, p := range params {
		if _, ok := m[p.Name]; ok {
			return nil, fmt.Errorf("%q is given twice", p.Name)
		}
		m[p.Name] = p.Value
	}
	return m, nil
}

// validUTF8 refuses a rule whose text is not UTF-8.
func (r RuleSpec) validUTF8() error {
	texts := appendPropertyTexts([]string{r.Filter.SQL, r.Action}, r.Filter.Parameters)
	texts = appendPropertyTexts(texts, r.ActionParameters)
	if c := r.Filter.Correlation; c != nil {
		for _, p := range []*string{c.CorrelationID, c.MessageID, c.To, c.ReplyTo, c.Subject, c.SessionID,
			c.ReplyToSessionID, c.ContentType} {
			if p != nil {
				texts = append(texts, *p)
			}
		}
		texts = appendPropertyTexts(texts, c.Properties)
	}
	for _, t := range texts {
		if !utf8.ValidString(t) {
			return fmt.Errorf("%w: rule %s: %q is not valid UTF-8", ErrInvalid, r.Name, t)
		}
	}
	return nil
}

// appendPropertyTexts appends the names and string values of props.
func appendPropertyTexts(texts []string, props []filter.Property) []string {
	for _, p := range props {
		texts = append(texts, p.Name)
		if p.Value.Kind() == filter.KindString {
			texts = append(texts, p.Value.Text())
		}
	}
	return texts
}

func (r RuleSpec) encode() []byte {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // plain fields and filter.Values: cannot fail
	}
	return b
}

func decodeRule(b []byte) (*rule, error) {
	var spec RuleSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return nil, fmt.Errorf("decode rule: %w", err)
	}
	return compileRule(spec)
}

// EncodeOverlay is an action's changes as a Copied event stores them.
func EncodeOverlay(o filter.Overlay) []byte {
	if len(o) == 0 {
		return nil
	}
	b, err := json.Marshal(o)
	if err != nil {
		panic(err)
	}
	return b
}

// DecodeOverlay reads what EncodeOverlay wrote.
func DecodeOverlay(b []byte) (filter.Overlay, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var o filter.Overlay
	if err := json.Unmarshal(b, &o); err != nil {
		return nil, fmt.Errorf("decode action overlay: %w", err)
	}
	return o, nil
}

// EncodeCopy is what a RestoredCopy event keeps of a rule action's copy:
// the rule's name and the action's changes (as EncodeOverlay writes them).
func EncodeCopy(rule string, changes filter.Overlay) []byte {
	return append(event.AppendString(nil, rule), EncodeOverlay(changes)...)
}

// DecodeCopy reads what EncodeCopy wrote.
func DecodeCopy(b []byte) (rule string, changes filter.Overlay, err error) {
	r := event.NewReader(b)
	rule = r.String()
	if r.Err() != nil {
		return "", nil, fmt.Errorf("decode restored copy: %w", r.Err())
	}
	changes, err = DecodeOverlay(r.Fixed(r.Len()))
	return rule, changes, err
}
