// Package glob matches the names a policy's or a quota's rules give —
// subjects' names and tool names — against the text of a call's. Its
// syntax is path.Match's, but nothing is a separator: a '*' matches any
// text, '/' and ':' included, so that "jwt:*" names every token without an
// issuer, a URL-shaped sub ("https://issuer.example/users/alice") or a
// SPIFFE ID ("spiffe://example.org/ns/prod/sa/agent") as well as "alice".
//
//	'*'          any text, empty included
//	'?'          any one character
//	'[' ']'      one character of a class: "[abc]", ranges "[a-z0-9]",
//	             negated "[^a-z]"
//	'\' c        c itself ("\*" is a star)
//
// A pattern matches the whole text, not a part of it. Malformed patterns
// (a class left open, an empty one, a backwards range, a '\' that ends the
// pattern) are refused by Compile with the reason.
package glob

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Pattern is a compiled pattern.
type Pattern struct {
	text string
	toks []token
}

// kind is what a token matches.
type kind uint8

const (
	literal kind = iota // lit, exactly
	anyOne              // any one character
	class               // one character of ranges (or of none, negated)
	star                // any text
)

type token struct {
	kind    kind
	lit     string
	ranges  []runeRange
	negated bool
}

type runeRange struct{ lo, hi rune }

// Compile reads a pattern, or says what is wrong with it.
func Compile(pattern string) (Pattern, error) {
	if pattern == "" {
		return Pattern{}, errors.New("empty pattern")
	}
	p := Pattern{text: pattern}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			p.toks = append(p.toks, token{kind: literal, lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(pattern); {
		switch c := pattern[i]; c {
		case '*':
			flush()
			if n := len(p.toks); n == 0 || p.toks[n-1].kind != star { // "**" is "*"
				p.toks = append(p.toks, token{kind: star})
			}
			i++
		case '?':
			flush()
			p.toks = append(p.toks, token{kind: anyOne})
			i++
		case '[':
			flush()
			t, n, err := readClass(pattern[i+1:])
			if err != nil {
				return Pattern{}, fmt.Errorf("pattern %q: %w", pattern, err)
			}
			p.toks = append(p.toks, t)
			i += 1 + n
		case '\\':
			if i+1 == len(pattern) {
				return Pattern{}, fmt.Errorf("pattern %q: the \\ at its end escapes nothing (write \\\\ for a backslash)", pattern)
			}
			_, n := utf8.DecodeRuneInString(pattern[i+1:])
			lit.WriteString(pattern[i+1 : i+1+n])
			i += 1 + n
		default:
			lit.WriteByte(c)
			i++
		}
	}
	flush()
	return p, nil
}

// readClass reads a class from after its '[' to its ']', returning the
// token and the bytes read, ']' included.
func readClass(s string) (token, int, error) {
	t := token{kind: class}
	i := 0
	if strings.HasPrefix(s, "^") {
		t.negated = true
		i++
	}
	// char reads one character of the class, escaped or not.
	char := func() (rune, error) {
		if i == len(s) {
			return 0, errors.New("a [ class is not closed (write \\[ for a bracket)")
		}
		switch s[i] {
		case '\\':
			i++
			if i == len(s) {
				return 0, errors.New("a [ class is not closed (write \\[ for a bracket)")
			}
		case '-', ']':
			return 0, fmt.Errorf("%q out of place in a [ ] class (escape it: \\%c)", s[i], s[i])
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return 0, errors.New("a [ ] class holds text that is not UTF-8")
		}
		i += n
		return r, nil
	}
	for {
		if i < len(s) && s[i] == ']' {
			if len(t.ranges) == 0 {
				return token{}, 0, errors.New("an empty [ ] class matches nothing (write \\] for a bracket)")
			}
			return t, i + 1, nil
		}
		lo, err := char()
		if err != nil {
			return token{}, 0, err
		}
		hi := lo
		if i < len(s) && s[i] == '-' {
			i++
			if hi, err = char(); err != nil {
				return token{}, 0, err
			}
			if hi < lo {
				return token{}, 0, fmt.Errorf("the range %c-%c is backwards (write %c-%c)", lo, hi, hi, lo)
			}
		}
		t.ranges = append(t.ranges, runeRange{lo, hi})
	}
}

// String is the pattern as written.
func (p Pattern) String() string { return p.text }

// Match reports whether p matches the whole of s. A star takes as little
// as it must: when the rest does not match, the last star takes one more
// character and the rest is tried again (no pattern costs more than
// len(pattern) × len(s) steps).
func (p Pattern) Match(s string) bool {
	ti, si := 0, 0
	starT, starS := -1, 0 // the last star, and where its text ends
	for {
		if ti < len(p.toks) {
			t := &p.toks[ti]
			if t.kind == star {
				starT, starS = ti, si
				ti++
				continue
			}
			if n, ok := t.matchAt(s[si:]); ok {
				ti, si = ti+1, si+n
				continue
			}
		} else if si == len(s) {
			return true
		}
		if starT < 0 || starS == len(s) {
			return false
		}
		_, n := utf8.DecodeRuneInString(s[starS:])
		starS += n
		ti, si = starT+1, starS
	}
}

// matchAt reports whether t matches the start of s, and its length there.
func (t *token) matchAt(s string) (int, bool) {
	if t.kind == literal {
		return len(t.lit), strings.HasPrefix(s, t.lit)
	}
	if s == "" {
		return 0, false
	}
	r, n := utf8.DecodeRuneInString(s)
	if t.kind == anyOne {
		return n, true
	}
	in := false
	for _, rr := range t.ranges {
		if rr.lo <= r && r <= rr.hi {
			in = true
			break
		}
	}
	return n, in != t.negated
}

// Set is patterns compiled: it matches a text one of them matches.
type Set []Pattern

// CompileSet compiles patterns, or says what is wrong with the first
// malformed one.
func CompileSet(patterns []string) (Set, error) {
	s := make(Set, 0, len(patterns))
	for _, text := range patterns {
		p, err := Compile(text)
		if err != nil {
			return nil, err
		}
		s = append(s, p)
	}
	return s, nil
}

// Match reports whether one of the patterns matches s.
func (s Set) Match(text string) bool {
	for _, p := range s {
		if p.Match(text) {
			return true
		}
	}
	return false
}
