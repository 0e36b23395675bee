package toolcall

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Sources of an identity: how the authentication middleware established
// it (Caller.Method, Subject.Source).
const (
	SourceAPIKey    = "api-key"
	SourceJWT       = "jwt"
	SourceMTLS      = "mtls"
	SourceAnonymous = "anonymous"
)

// Subject names an identity together with where it comes from, so that
// the same name given by two sources — the API key of user alice, a JWT
// whose sub is alice — names two subjects. Operations are owned by a
// subject, rate-limit buckets are a subject's, and a policy names
// subjects.
type Subject struct {
	// Source is how the identity was established: SourceAPIKey,
	// SourceJWT, SourceMTLS or SourceAnonymous.
	Source string
	// Issuer is the JWT's issuer (iss); "" for the other sources and for
	// a token without one.
	Issuer string
	// Name is the user the credential names.
	Name string
}

// ErrUnqualified is ParseSubject's error for text that names no source.
var ErrUnqualified = errors.New("names no source")

// String writes s as "source:name" — "api-key:alice", "mtls:svc.example",
// "anonymous:anonymous" — or, with an issuer, "source(issuer):name" —
// "jwt(https://idp.example):alice". The issuer is written as a Go string
// literal when it holds ")", begins with a quote or is not printable
// (jwt("a)b"):alice), so that no two subjects have the same text:
// ParseSubject reads it back.
func (s Subject) String() string {
	return s.Origin() + ":" + s.Name
}

// Origin is where s comes from, its text without the name: "api-key",
// "jwt(https://idp.example)".
func (s Subject) Origin() string {
	if s.Issuer == "" {
		return s.Source
	}
	return s.Source + "(" + quoteIssuer(s.Issuer) + ")"
}

func quoteIssuer(iss string) string {
	if strings.ContainsRune(iss, ')') || strings.HasPrefix(iss, `"`) ||
		strings.IndexFunc(iss, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return strconv.Quote(iss)
	}
	return iss
}

// knownSource reports whether src is one of the sources.
func knownSource(src string) bool {
	switch src {
	case SourceAPIKey, SourceJWT, SourceMTLS, SourceAnonymous:
		return true
	}
	return false
}

// ParseSubject reads a subject as String writes it. Text with neither ":"
// nor "(" names no source: the error wraps ErrUnqualified. Only JWT
// subjects name an issuer; the name must not be empty.
func ParseSubject(text string) (Subject, error) {
	i := strings.IndexAny(text, ":(")
	if i < 0 {
		return Subject{}, fmt.Errorf("%q %w: write it as api-key:%s, jwt(<issuer>):%s, mtls:%s or anonymous:%s", text, ErrUnqualified, text, text, text, text)
	}
	s := Subject{Source: text[:i]}
	if !knownSource(s.Source) {
		return Subject{}, fmt.Errorf("%q: unknown source %q: want api-key, jwt, jwt(<issuer>), mtls or anonymous before the \":\"", text, s.Source)
	}
	rest := text[i:]
	if rest[0] == '(' {
		if s.Source != SourceJWT {
			return Subject{}, fmt.Errorf("%q: only jwt subjects name an issuer", text)
		}
		iss, after, err := cutIssuer(rest[1:])
		if err != nil {
			return Subject{}, fmt.Errorf("%q: %w", text, err)
		}
		s.Issuer, rest = iss, after
	}
	name, ok := strings.CutPrefix(rest, ":")
	if !ok || name == "" {
		return Subject{}, fmt.Errorf("%q: want a name after the \":\"", text)
	}
	s.Name = name
	return s, nil
}

// cutIssuer reads an issuer and its closing ")" from the start of text:
// a Go string literal when text starts with a quote, else everything up
// to the first ")".
func cutIssuer(text string) (iss, rest string, err error) {
	if strings.HasPrefix(text, `"`) {
		q, err := strconv.QuotedPrefix(text)
		if err != nil {
			return "", "", errors.New("the quoted issuer does not end")
		}
		iss, _ = strconv.Unquote(q)
		rest = text[len(q):]
	} else {
		j := strings.IndexByte(text, ')')
		if j < 0 {
			return "", "", errors.New("the issuer has no closing \")\"")
		}
		iss, rest = text[:j], text[j:]
	}
	rest, ok := strings.CutPrefix(rest, ")")
	if !ok {
		return "", "", errors.New("want \")\" after the quoted issuer")
	}
	if iss == "" {
		return "", "", errors.New("empty issuer: a token without iss is jwt:<name>")
	}
	return iss, rest, nil
}

// Subject is the caller's own identity, as its credential names it.
func (c Caller) Subject() Subject {
	return Subject{Source: c.Method, Issuer: c.Issuer, Name: c.User}
}

// Principal is the identity the caller acts as: As when the operator
// joined the caller's own identity to another, else its own.
func (c Caller) Principal() Subject {
	if c.As.Source != "" {
		return c.As
	}
	return c.Subject()
}

// Key names the caller's principal one-to-one (Subject.String): what
// operations are owned by and rate-limit buckets are kept for.
func (c Caller) Key() string { return c.Principal().String() }
