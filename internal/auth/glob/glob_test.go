package glob

import (
	"path"
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, text string
		want          bool
	}{
		{"*", "", true},
		{"*", "alice", true},
		{"*", "https://issuer.example/users/alice", true},
		{"*", "spiffe://example.org/ns/prod/sa/agent", true},
		{"alice", "alice", true},
		{"alice", "alice2", false},
		{"alice", "xalice", false},
		{"svc-*", "svc-bob", true},
		{"svc-*", "svc-", true},
		{"svc-*", "bob", false},
		{"https://issuer.example/users/*", "https://issuer.example/users/alice", true},
		{"https://issuer.example/users/*", "https://issuer.example/users/team/alice", true},
		{"https://issuer.example/users/*", "https://issuer.example/groups/alice", false},
		{"https://issuer.example/*/alice", "https://issuer.example/users/alice", true},
		{"spiffe://example.org/ns/prod/*", "spiffe://example.org/ns/prod/sa/agent", true},
		{"spiffe://example.org/ns/*/sa/agent", "spiffe://example.org/ns/prod/sa/agent", true},
		{"spiffe://example.org/ns/*/sa/agent", "spiffe://example.org/ns/prod/sa/other", false},
		{"spiffe://example.org/ns/prod/*", "spiffe://example.org/ns/staging/sa/agent", false},
		{"*/sa/agent", "spiffe://example.org/ns/prod/sa/agent", true},
		{"a?c", "a/c", true},
		{"a?c", "abbc", false},
		{"a?c", "aéc", true},
		{"[a-c]x", "bx", true},
		{"[a-c]x", "dx", false},
		{"[^a-c]x", "dx", true},
		{"[^a-c]x", "/x", true},
		{"[^a-c]x", "ax", false},
		{"[\\]]", "]", true},
		{"\\*", "*", true},
		{"\\*", "a", false},
		{"a*b*c", "a/b/c", true},
		{"a*b*c", "abxbxc", true},
		{"a*b*c", "acb", false},
		{"a**b", "a/x/b", true},
		{"*a", "aaaa", true},
		{"*ab", "aaab", true},
		{"*ab", "aaba", false},
		{"query-*", "query-orders", true},
		{"query-*", "xquery-orders", false},
	}
	for _, tc := range tests {
		p, err := Compile(tc.pattern)
		if err != nil {
			t.Errorf("Compile(%q): %v", tc.pattern, err)
			continue
		}
		if got := p.Match(tc.text); got != tc.want {
			t.Errorf("%q matches %q: %v, want %v", tc.pattern, tc.text, got, tc.want)
		}
	}
}

// TestCompileRefuses: a malformed pattern is refused, saying what is wrong.
func TestCompileRefuses(t *testing.T) {
	t.Parallel()
	for pattern, want := range map[string]string{
		"":       "empty pattern",
		"[x":     "not closed",
		"q-[":    "not closed",
		"[]":     "empty [ ] class",
		"[^]":    "empty [ ] class",
		"[-a]":   "'-' out of place",
		"[a-]":   "']' out of place",
		"[z-a]":  "the range z-a is backwards (write a-z)",
		"a\\":    "escapes nothing",
		"[a\\":   "not closed",
		"[\xff]": "not UTF-8",
	} {
		_, err := Compile(pattern)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile(%q) = %v, want an error saying %q", pattern, err, want)
		}
		if pattern != "" && (err == nil || !strings.Contains(err.Error(), "pattern ")) {
			t.Errorf("Compile(%q) = %v: the error does not quote the pattern", pattern, err)
		}
	}
}

func TestSet(t *testing.T) {
	t.Parallel()
	s, err := CompileSet([]string{"alpha", "query-*"})
	if err != nil {
		t.Fatal(err)
	}
	for text, want := range map[string]bool{"alpha": true, "query-x": true, "beta": false} {
		if s.Match(text) != want {
			t.Errorf("set matches %q: %v, want %v", text, !want, want)
		}
	}
	if _, err := CompileSet([]string{"ok", "[bad"}); err == nil || !strings.Contains(err.Error(), `"[bad"`) {
		t.Errorf("a set with a malformed pattern: %v", err)
	}
}

// FuzzSameAsPathMatch: on text without '/' (where '*' and '?' are
// path.Match's), every pattern path.Match takes is taken — but for a
// backwards range, which is refused — and matches what path.Match says.
func FuzzSameAsPathMatch(f *testing.F) {
	for _, s := range [][2]string{{"*", "abc"}, {"a*b?c", "axxbyc"}, {"[a-c]*", "b"}, {"[^x]", "y"}, {"\\*", "*"},
		{"*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}, {"é?", "éé"}, {"[é-ü]", "ö"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, text string) {
		p, err := Compile(pattern)
		want, perr := path.Match(pattern, strings.ReplaceAll(text, "/", ""))
		if perr != nil {
			return // path.Match stops at the first problem it meets, or none
		}
		if err != nil {
			if !strings.Contains(err.Error(), "backwards") && pattern != "" {
				t.Fatalf("Compile(%q): %v; path.Match takes it", pattern, err)
			}
			return
		}
		if got := p.Match(strings.ReplaceAll(text, "/", "")); got != want {
			if want && strings.Contains(pattern, "*") && !isASCII(text) {
				// path.Match's '*' tries the rest at every byte, not every
				// character: a '?' after it can then match half a character
				// ("*??" takes "苝", one character). Match counts characters.
				return
			}
			t.Fatalf("%q matches %q: %v, path.Match says %v", pattern, text, got, want)
		}
	})
}

// isASCII reports whether s is ASCII alone.
func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
