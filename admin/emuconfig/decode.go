package emuconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// maxDepth bounds nesting as .NET's JSON readers do by default, so a hostile
// file cannot exhaust the stack.
const maxDepth = 64

var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// decoder is a pull parser for JSON with comments. The schema code asks for
// the value it expects next, so the first problem found, syntax or meaning,
// is the first in the file, and it knows the byte offset of the value it is
// about and the path of keys and indexes that led there. Comments are
// skipped as white space, never inside strings.
type decoder struct {
	file  string
	data  []byte
	pos   int
	depth int
	path  []string // keys, and indexes as "[i]"
}

// failure carries the first *Error from deep in the decoder to Parse.
type failure struct{ err *Error }

// failAt stops decoding with an error at byte offset off under the current
// path extended by more.
func (d *decoder) failAt(off int, err error, more ...string) {
	line, col := d.lineCol(off)
	path := append(d.path[:len(d.path):len(d.path)], more...)
	panic(failure{&Error{File: d.file, Line: line, Col: col, Path: renderPath(path), Err: err}})
}

func (d *decoder) failf(off int, format string, args ...any) {
	d.failAt(off, fmt.Errorf(format, args...))
}

// lineCol is the 1-based line and byte column of off; a byte order mark does
// not count as a column.
func (d *decoder) lineCol(off int) (line, col int) {
	before := d.data[:off]
	line = 1 + bytes.Count(before, []byte{'\n'})
	lineStart := bytes.LastIndexByte(before, '\n') + 1
	if lineStart == 0 && bytes.HasPrefix(d.data, utf8BOM) && off >= len(utf8BOM) {
		lineStart = len(utf8BOM)
	}
	return line, off - lineStart + 1
}

func renderPath(path []string) string {
	var b strings.Builder
	for _, seg := range path {
		if b.Len() > 0 && !strings.HasPrefix(seg, "[") {
			b.WriteByte('.')
		}
		b.WriteString(seg)
	}
	return b.String()
}

func (d *decoder) push(seg string) { d.path = append(d.path, seg) }
func (d *decoder) pop()            { d.path = d.path[:len(d.path)-1] }

// peek skips white space and comments and returns the next byte, or 0 at
// the end of the input (a NUL in the input is also 0: atEnd tells them
// apart).
func (d *decoder) peek() byte {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		case '/':
			d.comment()
		default:
			return d.data[d.pos]
		}
	}
	return 0
}

// atEnd skips white space and comments and reports whether the input
// ends there.
func (d *decoder) atEnd() bool {
	d.peek()
	return d.pos >= len(d.data)
}

func (d *decoder) comment() {
	start := d.pos
	switch {
	case bytes.HasPrefix(d.data[start:], []byte("//")):
		end := bytes.IndexAny(d.data[start:], "\r\n")
		if end < 0 {
			end = len(d.data) - start
		}
		d.pos = start + end
	case bytes.HasPrefix(d.data[start:], []byte("/*")):
		end := bytes.Index(d.data[start+2:], []byte("*/"))
		if end < 0 {
			d.failf(start, "unterminated /* comment")
		}
		d.pos = start + 2 + end + 2
	default:
		d.failf(start, "invalid character '/': a comment starts with // or /*")
	}
}

// unexpected fails at the next byte, which is not what the caller wanted.
func (d *decoder) unexpected(want string) {
	if d.atEnd() {
		d.failf(d.pos, "unexpected end of file, want %s", want)
	}
	d.failf(d.pos, "invalid character %s, want %s", quoteByte(d.data[d.pos]), want)
}

func quoteByte(c byte) string {
	if c < utf8.RuneSelf {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte %#02x", c)
}

// kindAt names the JSON value starting with c, or "" if none does.
func kindAt(c byte) string {
	switch {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case c == '-' || isDigit(c):
		return "a number"
	}
	return ""
}

// wrongType fails because the next value is not of the wanted kind.
func (d *decoder) wrongType(want string) {
	if kind := kindAt(d.peek()); kind != "" {
		d.failf(d.pos, "want %s, not %s", want, kind)
	}
	d.unexpected("a value")
}

// open consumes the delimiter that starts an object or array.
func (d *decoder) open(delim byte, want string) int {
	if d.peek() != delim {
		d.wrongType(want)
	}
	start := d.pos
	d.depth++
	if d.depth > maxDepth {
		d.failf(start, "nested deeper than %d", maxDepth)
	}
	d.pos++
	return start
}

// members reads an object, calling each with every key and the key's offset
// and leaving it to consume the value. It returns the offset of the '{'.
func (d *decoder) members(each func(key string, keyOff int)) int {
	start := d.open('{', "an object")
	if d.peek() == '}' {
		d.pos++
		d.depth--
		return start
	}
	for {
		if d.peek() != '"' {
			d.unexpected("a key string")
		}
		keyOff := d.pos
		key := d.stringLit()
		if d.peek() != ':' {
			d.unexpected("':' after the key")
		}
		d.pos++
		d.peek() // each starts at the value
		each(key, keyOff)
		switch d.peek() {
		case ',':
			d.pos++
		case '}':
			d.pos++
			d.depth--
			return start
		default:
			d.unexpected("',' or '}'")
		}
	}
}

// field is a key the schema knows, spelled as the emulator writes it.
type field struct {
	name   string
	decode func()
}

// object reads an object whose known keys are fields; it matches keys
// without regard to case, as .NET's deserializer does, refuses a known key
// given twice and skips unknown keys (newer emulators add some). It returns
// the offset of the '{'.
func (d *decoder) object(fields ...field) int {
	seen := make([]bool, len(fields))
	return d.members(func(key string, keyOff int) {
		i := matchField(fields, key)
		if i < 0 {
			d.push(key)
			d.skip()
			d.pop()
			return
		}
		d.push(fields[i].name)
		if seen[i] {
			d.failf(keyOff, "duplicate key %q", key)
		}
		seen[i] = true
		fields[i].decode()
		d.pop()
	})
}

func matchField(fields []field, key string) int {
	for i, f := range fields {
		if f.name == key {
			return i
		}
	}
	for i, f := range fields {
		if strings.EqualFold(f.name, key) {
			return i
		}
	}
	return -1
}

// array reads an array, calling each with every index and leaving it to
// consume the element. It returns the offset of the '['.
func (d *decoder) array(each func(i int)) int {
	start := d.open('[', "an array")
	if d.peek() == ']' {
		d.pos++
		d.depth--
		return start
	}
	for i := 0; ; i++ {
		d.push("[" + strconv.Itoa(i) + "]")
		d.peek()
		each(i)
		d.pop()
		switch d.peek() {
		case ',':
			d.pos++
		case ']':
			d.pos++
			d.depth--
			return start
		default:
			d.unexpected("',' or ']'")
		}
	}
}

// skip reads and discards any value, checking its syntax.
func (d *decoder) skip() {
	switch c := d.peek(); {
	case c == '{':
		d.object()
	case c == '[':
		d.array(func(int) { d.skip() })
	case c == '"':
		d.stringLit()
	case c == 't':
		d.literal("true")
	case c == 'f':
		d.literal("false")
	case c == 'n':
		d.literal("null")
	case c == '-' || isDigit(c):
		d.numberLit()
	default:
		d.unexpected("a value")
	}
}

func (d *decoder) literal(word string) {
	if !bytes.HasPrefix(d.data[d.pos:], []byte(word)) {
		d.failf(d.pos, "invalid literal, want %s", word)
	}
	d.pos += len(word)
}

// stringLit reads the string at d.pos (its opening quote) as RFC 8259 says:
// no raw control characters, only JSON's escapes, valid UTF-8.
func (d *decoder) stringLit() string {
	start := d.pos
	escaped := false
	d.pos++
	for {
		if d.pos >= len(d.data) {
			d.failf(start, "unterminated string")
		}
		switch c := d.data[d.pos]; {
		case c == '"':
			d.pos++
			raw := d.data[start:d.pos]
			if !escaped {
				return string(raw[1 : len(raw)-1])
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				d.failf(start, "invalid string: %v", err) // unreachable: checked above
			}
			return s
		case c == '\\':
			escaped = true
			d.escape()
		case c < 0x20:
			d.failf(d.pos, "control character %#02x in string", c)
		case c < utf8.RuneSelf:
			d.pos++
		default:
			r, size := utf8.DecodeRune(d.data[d.pos:])
			if r == utf8.RuneError && size == 1 {
				d.failf(d.pos, "invalid UTF-8 in string")
			}
			d.pos += size
		}
	}
}

func (d *decoder) escape() {
	if d.pos+1 >= len(d.data) {
		d.failf(d.pos, "unterminated escape")
	}
	switch d.data[d.pos+1] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		d.pos += 2
	case 'u':
		for i := 2; i < 6; i++ {
			if d.pos+i >= len(d.data) || !isHex(d.data[d.pos+i]) {
				d.failf(d.pos, "invalid \\u escape, want 4 hex digits")
			}
		}
		d.pos += 6
	default:
		d.failf(d.pos, "invalid escape %s", quoteByte(d.data[d.pos+1]))
	}
}

func isHex(c byte) bool {
	return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// numberLit reads a number by RFC 8259's grammar and returns its text and
// whether it has neither fraction nor exponent.
func (d *decoder) numberLit() (text string, integer bool) {
	start := d.pos
	if d.pos < len(d.data) && d.data[d.pos] == '-' {
		d.pos++
	}
	digitsFrom := func(what string) {
		if d.pos >= len(d.data) || !isDigit(d.data[d.pos]) {
			d.unexpectedInNumber(what)
		}
		for d.pos < len(d.data) && isDigit(d.data[d.pos]) {
			d.pos++
		}
	}
	if d.pos < len(d.data) && d.data[d.pos] == '0' {
		d.pos++
	} else {
		digitsFrom("a digit")
	}
	integer = true
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		d.pos++
		digitsFrom("a digit after the decimal point")
		integer = false
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		digitsFrom("a digit in the exponent")
		integer = false
	}
	return string(d.data[start:d.pos]), integer
}

func (d *decoder) unexpectedInNumber(want string) {
	if d.pos >= len(d.data) {
		d.failf(d.pos, "unexpected end of file, want %s", want)
	}
	d.failf(d.pos, "invalid character %s in number, want %s", quoteByte(d.data[d.pos]), want)
}

// Typed readers. Each starts at the value (d.peek already called) and
// returns the value's offset for later checks.

// null consumes a null and reports whether there was one; the schema treats
// null as an absent property, as .NET does for its optional settings.
func (d *decoder) null() bool {
	if d.peek() != 'n' {
		return false
	}
	d.literal("null")
	return true
}

func (d *decoder) str() (string, int) {
	if d.peek() != '"' {
		d.wrongType("a string")
	}
	off := d.pos
	return d.stringLit(), off
}

func (d *decoder) boolean() bool {
	switch d.peek() {
	case 't':
		d.literal("true")
		return true
	case 'f':
		d.literal("false")
		return false
	}
	d.wrongType("a boolean")
	return false
}

// integer reads an integer in [lo, hi].
func (d *decoder) integer(lo, hi int64) (int64, int) {
	c := d.peek()
	if c != '-' && !isDigit(c) {
		d.wrongType("an integer")
	}
	off := d.pos
	text, integer := d.numberLit()
	if !integer {
		d.failf(off, "want an integer, not %s", text)
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil || n < lo || n > hi {
		d.failf(off, "%s out of range [%d, %d]", text, lo, hi)
	}
	return n, off
}

func (d *decoder) duration() (time.Duration, int) {
	text, off := d.str()
	v, err := ParseDuration(text)
	if err != nil {
		d.failAt(off, err)
	}
	return v, off
}

// scalar reads a string, number or boolean, as a correlation filter's
// application properties hold: numbers become int64 when integral and in
// range, float64 otherwise.
func (d *decoder) scalar() any {
	switch c := d.peek(); {
	case c == '"':
		s, _ := d.str()
		return s
	case c == 't' || c == 'f':
		return d.boolean()
	case c == '-' || isDigit(c):
		off := d.pos
		text, integer := d.numberLit()
		if integer {
			if n, err := strconv.ParseInt(text, 10, 64); err == nil {
				return n
			}
		}
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			d.failf(off, "number %s out of range", text)
		}
		return f
	}
	d.wrongType("a string, number or boolean")
	return nil
}
