package toolcall

import (
	"errors"
	"strings"
	"testing"
)

// TestSubjectText: a subject's text names its source, is read back as the
// same subject, and no two subjects share one — not even when a name or
// an issuer holds the characters that separate them.
func TestSubjectText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    Subject
		text string
	}{
		{Subject{Source: SourceAPIKey, Name: "alice"}, "api-key:alice"},
		{Subject{Source: SourceMTLS, Name: "spiffe://example.org/svc/a"}, "mtls:spiffe://example.org/svc/a"},
		{Subject{Source: SourceAnonymous, Name: "anonymous"}, "anonymous:anonymous"},
		{Subject{Source: SourceJWT, Name: "alice"}, "jwt:alice"},
		{Subject{Source: SourceJWT, Issuer: "https://idp.example/realms/x", Name: "alice"}, "jwt(https://idp.example/realms/x):alice"},
		{Subject{Source: SourceAPIKey, Name: "a:b(c)"}, "api-key:a:b(c)"},
		// An issuer that could end early is quoted.
		{Subject{Source: SourceJWT, Issuer: "x):y", Name: "z"}, `jwt("x):y"):z`},
		{Subject{Source: SourceJWT, Issuer: "x", Name: "y):z"}, "jwt(x):y):z"},
		{Subject{Source: SourceJWT, Issuer: `"q"`, Name: "z"}, `jwt("\"q\""):z`},
		{Subject{Source: SourceJWT, Issuer: "a b\x00", Name: "z"}, `jwt("a b\x00"):z`},
		{Subject{Source: SourceJWT, Issuer: "a b", Name: "z"}, "jwt(a b):z"},
	}
	seen := map[string]Subject{}
	for _, tc := range tests {
		if got := tc.s.String(); got != tc.text {
			t.Errorf("%#v.String() = %q, want %q", tc.s, got, tc.text)
		}
		back, err := ParseSubject(tc.text)
		if err != nil || back != tc.s {
			t.Errorf("ParseSubject(%q) = %#v, %v; want %#v", tc.text, back, err, tc.s)
		}
		if prev, dup := seen[tc.text]; dup {
			t.Errorf("%#v and %#v are both %q", prev, tc.s, tc.text)
		}
		seen[tc.text] = tc.s
	}
}

func TestParseSubjectErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text string
		want string
	}{
		{"alice", "names no source"},
		{"svc-*", "write it as api-key:svc-*"},
		{"spiffe://x/y", `unknown source "spiffe"`},
		{"API-KEY:alice", `unknown source "API-KEY"`},
		{"mtls(ca):x", "only jwt subjects name an issuer"},
		{"jwt(https://idp:alice", `no closing ")"`},
		{`jwt("idp:alice`, "does not end"},
		{`jwt("idp"x):alice`, `want ")" after the quoted issuer`},
		{"jwt():alice", "empty issuer"},
		{"jwt(idp)alice", "want a name"},
		{"api-key:", "want a name"},
	}
	for _, tc := range tests {
		_, err := ParseSubject(tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSubject(%q): %v, want an error mentioning %q", tc.text, err, tc.want)
		}
	}
	if _, err := ParseSubject("alice"); !errors.Is(err, ErrUnqualified) {
		t.Errorf("a bare name: %v, want ErrUnqualified", err)
	}
}

// TestCallerKey: a caller's key is its own subject, or the one the
// operator joined it to.
func TestCallerKey(t *testing.T) {
	t.Parallel()
	own := Caller{User: "alice", Method: SourceJWT, Issuer: "https://idp.example"}
	if got := own.Key(); got != "jwt(https://idp.example):alice" {
		t.Errorf("own key %q", got)
	}
	joined := own
	joined.As = Subject{Source: SourceAPIKey, Name: "alice"}
	if got := joined.Key(); got != "api-key:alice" || joined.Subject() != own.Subject() {
		t.Errorf("joined: key %q, subject %v", got, joined.Subject())
	}
}
