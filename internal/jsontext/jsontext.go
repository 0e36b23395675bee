// Package jsontext reads JSON objects as text: it checks and compacts a
// call's arguments without decoding them into Go values, so that every
// number, string and key reaches the tool service exactly as the caller
// wrote it (only insignificant white space goes), and it splits an object
// into its members for the checks against a tool's declared arguments.
package jsontext

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
	"unsafe"
)

// MaxDepth bounds the nesting of a value Compact accepts.
const MaxDepth = 64

// The errors Compact explains its refusals with (wrapped with detail).
var (
	ErrNotObject = errors.New("must be a JSON object")
	ErrSyntax    = errors.New("is not valid JSON")
	ErrUTF8      = errors.New("is not valid UTF-8")
	ErrDepth     = fmt.Errorf("nests deeper than %d levels", MaxDepth)
	ErrDuplicate = errors.New("has a key twice in one object")
)

// Compact returns the JSON object data without insignificant white space,
// and every value otherwise exactly as written. It refuses text that is
// not valid JSON, not an object, not valid UTF-8, nests deeper than
// MaxDepth, or repeats a key within one object (decoders disagree on
// which of two keys wins).
func Compact(data []byte) ([]byte, error) {
	if out, ok := compactChecked(data); ok {
		return out, nil
	}
	// Refused: the passes below say why, in their order of precedence.
	return compactTrusting(data)
}

// compactChecked is Compact in one pass: it checks the grammar as it
// copies. ok is false for anything Compact refuses (and for nothing it
// accepts: FuzzCompactOnePass), which compactTrusting then explains.
func compactChecked(data []byte) (out []byte, ok bool) {
	data = skipSpace(data)
	if len(data) == 0 || data[0] != '{' || !utf8.Valid(data) {
		return nil, false
	}
	out, rest, ok := checkedContainer(make([]byte, 0, len(data)), data, 0)
	if !ok || len(skipSpace(rest)) != 0 {
		return nil, false
	}
	return out, true
}

// checkedContainer appends the compact form of the object or array at the
// start of data and returns what follows it; ok is false where the text is
// not JSON, nests deeper than MaxDepth or repeats a key. Like container it
// keeps its frame small.
func checkedContainer(out, data []byte, depth int) ([]byte, []byte, bool) {
	if depth >= MaxDepth {
		return nil, nil, false
	}
	open, end := data[0], byte('}')
	if open == '[' {
		end = ']'
	}
	out = append(out, open)
	data = skipSpace(data[1:])
	if len(data) > 0 && data[0] == end {
		return append(out, end), data[1:], true
	}
	var keys objectKeys
	var ok bool
	for {
		if open == '{' {
			var key []byte
			if key, data, ok = checkedStr(data); !ok {
				return nil, nil, false
			}
			out = append(out, key...)
			if keys.add(out, len(out)-len(key)) != nil {
				return nil, nil, false
			}
			if data = skipSpace(data); len(data) == 0 || data[0] != ':' {
				return nil, nil, false
			}
			data = skipSpace(data[1:])
			out = append(out, ':')
		}
		if len(data) == 0 {
			return nil, nil, false
		}
		switch data[0] {
		case '{', '[':
			if out, data, ok = checkedContainer(out, data, depth+1); !ok {
				return nil, nil, false
			}
		case '"':
			var s []byte
			if s, data, ok = checkedStr(data); !ok {
				return nil, nil, false
			}
			out = append(out, s...)
		default:
			n := literalLen(data)
			if n == 0 {
				return nil, nil, false
			}
			out, data = append(out, data[:n]...), data[n:]
		}
		if data = skipSpace(data); len(data) == 0 {
			return nil, nil, false
		}
		switch data[0] {
		case ',':
			out = append(out, ',')
			data = skipSpace(data[1:])
		case end:
			return append(out, end), data[1:], true
		default:
			return nil, nil, false
		}
	}
}

// checkedStr returns the JSON string at the start of data, quotes
// included, and what follows it; ok is false when there is none: no
// opening or closing quote, a control character, or an escape JSON does
// not have. (UTF-8 is checked over the whole text before.)
func checkedStr(data []byte) (s, rest []byte, ok bool) {
	if len(data) == 0 || data[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(data); i++ {
		switch c := data[i]; {
		case c == '"':
			return data[:i+1], data[i+1:], true
		case c < 0x20:
			return nil, nil, false
		case c == '\\':
			if i+1 >= len(data) {
				return nil, nil, false
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+5 >= len(data) || !isHex(data[i+2]) || !isHex(data[i+3]) || !isHex(data[i+4]) || !isHex(data[i+5]) {
					return nil, nil, false
				}
				i += 5
			default:
				return nil, nil, false
			}
		}
	}
	return nil, nil, false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// literalLen is the length of the true, false, null or number at the start
// of data, 0 when there is none. (What follows is the caller's to check.)
func literalLen(data []byte) int {
	switch data[0] {
	case 't':
		if len(data) >= 4 && string(data[:4]) == "true" {
			return 4
		}
		return 0
	case 'f':
		if len(data) >= 5 && string(data[:5]) == "false" {
			return 5
		}
		return 0
	case 'n':
		if len(data) >= 4 && string(data[:4]) == "null" {
			return 4
		}
		return 0
	}
	// -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
	i := 0
	if data[0] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		i = digits(data, i+1)
	default:
		return 0
	}
	if i < len(data) && data[i] == '.' {
		j := digits(data, i+1)
		if j == i+1 {
			return 0
		}
		i = j
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := digits(data, i)
		if j == i {
			return 0
		}
		i = j
	}
	return i
}

// digits is the index of the first byte at or after i that is not a digit.
func digits(data []byte, i int) int {
	for i < len(data) && data[i] >= '0' && data[i] <= '9' {
		i++
	}
	return i
}

// Valid reports whether data is one JSON value, exactly as
// encoding/json.Valid does (which it falls back on for what its one pass
// does not take: nesting past MaxDepth, and text that is not JSON). Unlike
// Compact it checks neither UTF-8 nor repeated keys.
func Valid(data []byte) bool {
	if rest, ok := checkedValue(skipSpace(data), 0); ok && len(skipSpace(rest)) == 0 {
		return true
	}
	return json.Valid(data)
}

// ValidString is Valid of the text s, read in place.
func ValidString(s string) bool {
	return Valid(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// checkedValue returns what follows the JSON value at the start of data;
// ok is false where there is none, or it nests deeper than MaxDepth.
func checkedValue(data []byte, depth int) (rest []byte, ok bool) {
	if len(data) == 0 {
		return nil, false
	}
	switch data[0] {
	case '"':
		_, rest, ok = checkedStr(data)
		return rest, ok
	case '{', '[':
	default:
		n := literalLen(data)
		return data[n:], n > 0
	}
	if depth >= MaxDepth {
		return nil, false
	}
	open, end := data[0], byte('}')
	if open == '[' {
		end = ']'
	}
	data = skipSpace(data[1:])
	if len(data) > 0 && data[0] == end {
		return data[1:], true
	}
	for {
		if open == '{' {
			if _, data, ok = checkedStr(data); !ok {
				return nil, false
			}
			if data = skipSpace(data); len(data) == 0 || data[0] != ':' {
				return nil, false
			}
			data = skipSpace(data[1:])
		}
		if data, ok = checkedValue(data, depth+1); !ok {
			return nil, false
		}
		if data = skipSpace(data); len(data) == 0 {
			return nil, false
		}
		switch data[0] {
		case ',':
			data = skipSpace(data[1:])
		case end:
			return data[1:], true
		default:
			return nil, false
		}
	}
}

// compactTrusting is Compact in passes: the grammar checked by
// encoding/json first, then the copy trusting it. It is what Compact
// falls back on to explain a refusal.
func compactTrusting(data []byte) ([]byte, error) {
	if !json.Valid(data) {
		return nil, ErrSyntax
	}
	data = skipSpace(data)
	if data[0] != '{' {
		return nil, ErrNotObject
	}
	if !utf8.Valid(data) {
		return nil, ErrUTF8
	}
	out, _, err := container(make([]byte, 0, len(data)), data, 0)
	return out, err
}

// container appends the compact form of the object or array at the start
// of data (valid JSON) and returns what follows it. Only nested containers
// recurse, and the frame stays small: a call's arguments are compacted on
// the stack of the goroutine serving the call, and a stack that outgrows
// its first 8 KB is copied, on every call.
func container(out, data []byte, depth int) ([]byte, []byte, error) {
	if depth >= MaxDepth {
		return nil, nil, ErrDepth
	}
	open, end := data[0], byte('}')
	if open == '[' {
		end = ']'
	}
	out = append(out, open)
	data = skipSpace(data[1:])
	if data[0] == end {
		return append(out, end), data[1:], nil
	}
	var keys objectKeys
	for {
		if open == '{' {
			var key []byte
			key, data = str(skipSpace(data))
			out = append(out, key...)
			if err := keys.add(out, len(out)-len(key)); err != nil {
				return nil, nil, err
			}
			data = skipSpace(data)[1:] // the colon
			out = append(out, ':')
		}
		data = skipSpace(data)
		switch data[0] {
		case '{', '[':
			var err error
			if out, data, err = container(out, data, depth+1); err != nil {
				return nil, nil, err
			}
		case '"':
			var s []byte
			s, data = str(data)
			out = append(out, s...)
		default: // a number, true, false or null: up to the next delimiter
			n := scalarLen(data)
			out, data = append(out, data[:n]...), data[n:]
		}
		data = skipSpace(data)
		if data[0] == ',' {
			out = append(out, ',')
			data = data[1:]
			continue
		}
		return append(out, end), data[1:], nil
	}
}

// objectKeys are the keys of one object so far, to refuse a repeat: where
// each is in the output (quotes included), or, past 16 keys or once a key
// has an escape, a set of the keys as their characters.
type objectKeys struct {
	n    int
	at   [16][2]int32
	many map[string]bool
}

// add records the key out[start:] (the last thing written), refusing it
// when the object has it already.
func (o *objectKeys) add(out []byte, start int) error {
	key := out[start:]
	escaped := bytes.IndexByte(key, '\\') >= 0
	if o.many == nil && !escaped && o.n < len(o.at) {
		for _, at := range o.at[:o.n] {
			if bytes.Equal(out[at[0]:at[1]], key) {
				return fmt.Errorf("%w: %s", ErrDuplicate, key)
			}
		}
		o.at[o.n] = [2]int32{int32(start), int32(len(out))}
		o.n++
		return nil
	}
	if o.many == nil {
		o.many = make(map[string]bool, 2*len(o.at))
		for _, at := range o.at[:o.n] {
			o.many[string(unescapeKey(out[at[0]:at[1]]))] = true
		}
	}
	k := key
	if escaped {
		k = unescapeKey(key)
	}
	if o.many[string(k)] {
		return fmt.Errorf("%w: %s", ErrDuplicate, key)
	}
	o.many[string(k)] = true
	return nil
}

// unescapeKey is a key with escapes written as the characters they stand
// for (and quoted), so that "a" and "\u0061" count as the same key.
func unescapeKey(key []byte) []byte {
	if bytes.IndexByte(key, '\\') < 0 {
		return key
	}
	var s string
	if json.Unmarshal(key, &s) != nil {
		return key
	}
	return []byte(`"` + s + `"`)
}

// scalarLen is the length of the number, true, false or null at the start
// of data: up to the next delimiter.
func scalarLen(data []byte) int {
	for n := 0; n < len(data); n++ {
		switch data[n] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return n
		}
	}
	return len(data)
}

// str returns the JSON string at the start of data (valid JSON), quotes
// included, and what follows it.
func str(data []byte) ([]byte, []byte) {
	for i := 1; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return data[:i+1], data[i+1:]
		}
	}
	return data, nil
}

func skipSpace(data []byte) []byte {
	for len(data) > 0 && (data[0] == ' ' || data[0] == '\t' || data[0] == '\n' || data[0] == '\r') {
		data = data[1:]
	}
	return data
}

// Member is one member of a JSON object: its key, as written between the
// quotes, and its value's text.
type Member struct {
	Key   []byte
	Value []byte
}

// Kind names the JSON type of a member's value as the registry's argument
// types do: "string", "number", "boolean", "object", "array" or "null".
func (m Member) Kind() string {
	switch m.Value[0] {
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	case '{':
		return "object"
	case '[':
		return "array"
	default:
		return "number"
	}
}

// IsInteger reports whether a number member's value is a whole number, as
// JSON Schema's "integer" reads it (1, -3, 1.0 and 1e3 are; 1.5 is not).
func (m Member) IsInteger() bool {
	if m.Kind() != "number" {
		return false
	}
	if !bytes.ContainsAny(m.Value, ".eE") {
		return true
	}
	f := json.Number(m.Value)
	if _, err := f.Int64(); err == nil {
		return true
	}
	v, err := f.Float64()
	return err == nil && v == float64(int64(v)) && v < 1e18 && v > -1e18
}

// Members appends the members of obj, a compact object from Compact, to
// dst. ok is false only when obj is not such an object.
func Members(obj []byte, dst []Member) ([]Member, bool) {
	if len(obj) < 2 || obj[0] != '{' {
		return dst, false
	}
	data := obj[1:]
	if data[0] == '}' {
		return dst, true
	}
	for {
		if len(data) == 0 || data[0] != '"' {
			return dst, false
		}
		key, rest := str(data)
		if len(rest) == 0 || rest[0] != ':' {
			return dst, false
		}
		v, after, ok := skipValue(rest[1:])
		if !ok {
			return dst, false
		}
		dst = append(dst, Member{Key: key[1 : len(key)-1], Value: v})
		switch {
		case len(after) > 0 && after[0] == ',':
			data = after[1:]
		case len(after) > 0 && after[0] == '}':
			return dst, true
		default:
			return dst, false
		}
	}
}

// skipValue splits compact JSON text after its first value.
func skipValue(data []byte) (v, rest []byte, ok bool) {
	if len(data) == 0 {
		return nil, nil, false
	}
	switch data[0] {
	case '"':
		s, rest := str(data)
		return s, rest, true
	case '{', '[':
		depth := 0
		for i := 0; i < len(data); i++ {
			switch data[i] {
			case '"':
				_, rest := str(data[i:])
				i = len(data) - len(rest) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return data[:i+1], data[i+1:], true
				}
			}
		}
		return nil, nil, false
	default:
		i := 0
		for i < len(data) && data[i] != ',' && data[i] != '}' && data[i] != ']' {
			i++
		}
		return data[:i], data[i:], i > 0
	}
}
