// Package argsjson carries a call's arguments as JSON object text, the form
// the envelope needs, from the front doors that receive JSON (REST, MCP) to
// the service, so the common call is never turned into a
// google.protobuf.Struct and back.
//
// The fast path is deliberately narrow: Compact accepts only text that
// every later step would carry unchanged (integers of at most 15 digits,
// valid UTF-8, bounded nesting). Anything else reports !ok, and the caller
// decodes the text in full as before, so results and error messages are
// those of the full decoder.
package argsjson

import (
	"bytes"
	"context"
	"encoding/json"
	"unicode/utf8"
)

// MaxDepth bounds the nesting the fast path accepts; deeper text goes to
// the full decoder, which names the limit.
const MaxDepth = 60

// maxKeys bounds the keys of one object on the fast path (repeats are
// looked for pairwise).
const maxKeys = 64

// maxIntDigits is the longest integer the fast path carries: a float64
// holds it exactly and the full path would write it the same way.
const maxIntDigits = 15

type ctxKey struct{}

// NewContext returns ctx carrying raw, a compact JSON object (from
// Compact) holding a call's arguments. The request message's own
// arguments field is then left empty.
func NewContext(ctx context.Context, raw []byte) context.Context {
	return context.WithValue(ctx, ctxKey{}, raw)
}

// FromContext returns the arguments NewContext put in ctx.
func FromContext(ctx context.Context) ([]byte, bool) {
	raw, ok := ctx.Value(ctxKey{}).([]byte)
	return raw, ok
}

// Compact returns data, which must be valid JSON, without insignificant
// white space. ok is false when the fast path must not carry it: data is
// not a JSON object, holds a number that is not a plain integer of at most
// 15 digits, holds invalid UTF-8 or an escaped UTF-16 surrogate, has an
// object key with an escape or a key twice in one object, or nests deeper
// than MaxDepth.
func Compact(data []byte) (out []byte, ok bool) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' || !utf8.Valid(data) || !json.Valid(data) {
		return nil, false
	}
	out = make([]byte, 0, len(data))
	out, rest, ok := value(out, data, 0)
	if !ok || len(bytes.TrimSpace(rest)) != 0 {
		return nil, false
	}
	return out, true
}

// value appends the compact form of the JSON value at the start of data
// (valid JSON, leading white space skipped) and returns what follows it.
func value(out, data []byte, depth int) ([]byte, []byte, bool) {
	data = skipSpace(data)
	if len(data) == 0 {
		return nil, nil, false
	}
	switch c := data[0]; c {
	case '{', '[':
		if depth >= MaxDepth {
			return nil, nil, false
		}
		end := byte('}')
		if c == '[' {
			end = ']'
		}
		out = append(out, c)
		data = skipSpace(data[1:])
		if len(data) > 0 && data[0] == end {
			return append(out, end), data[1:], true
		}
		var seen [16][]byte // this object's keys so far, to refuse repeats
		keys := seen[:0]
		for {
			var ok bool
			if c == '{' {
				var key []byte
				if key, data, ok = str(skipSpace(data)); !ok || bytes.IndexByte(key, '\\') >= 0 || len(keys) >= maxKeys {
					return nil, nil, false
				}
				for _, k := range keys {
					if bytes.Equal(k, key) {
						return nil, nil, false
					}
				}
				keys = append(keys, key)
				out = append(out, key...)
				data = skipSpace(data)
				if len(data) == 0 || data[0] != ':' {
					return nil, nil, false
				}
				out = append(out, ':')
				data = data[1:]
			}
			if out, data, ok = value(out, data, depth+1); !ok {
				return nil, nil, false
			}
			data = skipSpace(data)
			if len(data) == 0 {
				return nil, nil, false
			}
			switch data[0] {
			case ',':
				out = append(out, ',')
				data = data[1:]
			case end:
				return append(out, end), data[1:], true
			default:
				return nil, nil, false
			}
		}
	case '"':
		s, rest, ok := str(data)
		if ok && hasSurrogateEscape(s) {
			return nil, nil, false
		}
		return append(out, s...), rest, ok
	case 't', 'f', 'n':
		n := 4
		if c == 'f' {
			n = 5
		}
		if len(data) < n {
			return nil, nil, false
		}
		return append(out, data[:n]...), data[n:], true
	default:
		n, digits := 0, 0
		for n < len(data) {
			b := data[n]
			if b >= '0' && b <= '9' {
				digits++
			} else if b != '-' {
				break
			}
			n++
		}
		if digits == 0 || digits > maxIntDigits || (n < len(data) && (data[n] == '.' || data[n] == 'e' || data[n] == 'E')) {
			return nil, nil, false
		}
		return append(out, data[:n]...), data[n:], true
	}
}

// str returns the JSON string at the start of data, quotes included, and
// what follows it.
func str(data []byte) ([]byte, []byte, bool) {
	if len(data) == 0 || data[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return data[:i+1], data[i+1:], true
		}
	}
	return nil, nil, false
}

// hasSurrogateEscape reports whether the JSON string s holds a \u escape
// of a UTF-16 surrogate, which decoders treat differently.
func hasSurrogateEscape(s []byte) bool {
	for i := 0; i+2 < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		if s[i+1] == 'u' && (s[i+2] == 'd' || s[i+2] == 'D') {
			return true
		}
		i++
	}
	return false
}

func skipSpace(data []byte) []byte {
	for len(data) > 0 && (data[0] == ' ' || data[0] == '\t' || data[0] == '\n' || data[0] == '\r') {
		data = data[1:]
	}
	return data
}

// Member is one member of a JSON object: its key, unquoted, and its value's
// text.
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

// Members appends the members of obj, a compact object from Compact, to
// dst: their keys need no unescaping and none repeats, as Compact checked.
// ok is false only when obj is not such an object.
func Members(obj []byte, dst []Member) ([]Member, bool) {
	if len(obj) < 2 || obj[0] != '{' {
		return dst, false
	}
	data := obj[1:]
	if data[0] == '}' {
		return dst, true
	}
	for {
		key, rest, ok := str(data)
		if !ok || len(rest) == 0 || rest[0] != ':' {
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
		s, rest, ok := str(data)
		return s, rest, ok
	case '{', '[':
		depth := 0
		for i := 0; i < len(data); i++ {
			switch data[i] {
			case '"':
				_, rest, ok := str(data[i:])
				if !ok {
					return nil, nil, false
				}
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
