package auth

import (
	"errors"
	"fmt"
)

// Audience is who a rule names: users and roles written as a policy
// writes them (Rule.Users, Rule.Roles), read once. Policies and quotas
// name the callers they apply to alike.
type Audience struct {
	users, roles []subjectPattern
}

// ParseAudience reads users and roles: each "*" (everyone
// authenticated), a subject whose name may be a glob
// ("jwt(https://idp.example):svc-*", "mtls:carol"), or a bare name or
// glob, which is the API key's. unqualified lists those written without a
// source, as "users: svc-*"; every problem is reported at once.
func ParseAudience(users, roles []string) (a Audience, unqualified []string, err error) {
	var errs []error
	for _, f := range []struct {
		field    string
		patterns []string
		into     *[]subjectPattern
	}{{"users", users, &a.users}, {"roles", roles, &a.roles}} {
		for _, text := range f.patterns {
			sp, qualified, err := readSubjectPattern(text)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", f.field, err))
				continue
			}
			if !qualified {
				unqualified = append(unqualified, f.field+": "+text)
			}
			*f.into = append(*f.into, sp)
		}
	}
	return a, unqualified, errors.Join(errs...)
}

// Includes reports whether a names id: its own subject, the one it was
// joined to, or one of its roles (qualified by its own source).
func (a Audience) Includes(id Identity) bool {
	own, principal := id.Subject(), id.Principal()
	for _, u := range a.users {
		if u.match(own) || u.match(principal) {
			return true
		}
	}
	for _, role := range id.Roles {
		s := Subject{Source: own.Source, Issuer: own.Issuer, Name: role}
		for _, p := range a.roles {
			if p.match(s) {
				return true
			}
		}
	}
	return false
}

// Empty reports whether a names nobody.
func (a Audience) Empty() bool { return len(a.users) == 0 && len(a.roles) == 0 }
