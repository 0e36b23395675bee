package wire

import (
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// appendString appends s to b as a JSON string. It escapes what JSON
// requires (quote, backslash, control characters) and replaces invalid
// UTF-8 with U+FFFD, as encoding/json does; unlike encoding/json it leaves
// <, > and & alone, which JSON does not require escaping. It exists because
// envelopes are encoded on every call, and reflection-driven json.Marshal
// was a measurable share of the gateway's CPU.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendJSONString appends s to b as a JSON string, escaped as the
// envelope encoder escapes strings (see appendString).
func AppendJSONString(b []byte, s string) []byte { return appendString(b, s) }
