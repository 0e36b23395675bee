package toolservice

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Text turns a handler's result into the reply text: strings as they are,
// nil as "", []byte as UTF-8 text, anything else as JSON formatted the way
// Python's json.dumps does by default (", " and ": " separators, non-ASCII
// escaped as \uXXXX), so Go and Python services answer alike.
func Text(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case []byte:
		return string(x), nil
	case fmt.Stringer:
		return x.String(), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	return pythonStyle(bytes.TrimRight(buf.Bytes(), "\n")), nil
}

// pythonStyle re-spaces compact JSON and escapes non-ASCII characters.
func pythonStyle(b []byte) string {
	out := make([]byte, 0, len(b)+len(b)/8)
	inString, escaped := false, false
	for i := 0; i < len(b); {
		c := b[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRune(b[i:])
			i += n
			if r > 0xFFFF {
				r -= 0x10000
				out = fmt.Appendf(out, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
			} else {
				out = fmt.Appendf(out, `\u%04x`, r)
			}
			continue
		}
		i++
		out = append(out, c)
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == ',' || c == ':':
			out = append(out, ' ')
		}
	}
	return string(out)
}
