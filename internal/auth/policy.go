package auth

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/internal/auth/glob"
	"github.com/toolgate/toolgate/internal/toolcall"
)

// Actions a policy grants.
const (
	ActionList   = "list"   // ListTools, GetTool, ListToolServices, GetToolService
	ActionInvoke = "invoke" // InvokeTool, StreamTool
)

// Policy says who may do what to which tools, and which identities are one.
// Rules only grant: a call is allowed when some rule allows it, and denied
// otherwise. A nil *Policy allows every authenticated call.
type Policy struct {
	rules []rule
	// joined maps a subject's text to the subject it was joined to.
	joined map[string]Subject
	// unqualified are the users and roles written without a source, read
	// as API-key users and roles ("rules[1].users: svc-*").
	unqualified []string
}

// Rule grants its actions on its tools to the subjects it names.
// Names may be globs (package glob: "query-*", "*"), whose '*' matches
// any text, '/' included: "jwt:*" names every token without an issuer,
// "jwt:https://issuer.example/users/*" every user under that URL, and
// "mtls:spiffe://example.org/ns/prod/*" every workload of the namespace.
type Rule struct {
	// Users and Roles name who the rule applies to: a caller whose
	// subject matches one of Users, or one of whose roles matches one of
	// Roles. Each is a subject: a source, then a name or glob —
	// "api-key:alice", "jwt(https://idp.example):svc-*", "mtls:carol",
	// "anonymous:guest"; a role's source is that of the credential stating
	// it ("jwt(https://idp.example):admin", "mtls:ops" for an OU). Written
	// without a source ("alice"), a user or role is the API key's; "*"
	// alone is everyone authenticated, from any source, anonymous included.
	Users []string `yaml:"users"`
	Roles []string `yaml:"roles"`
	// Tools are the tool names or globs the rule covers.
	Tools []string `yaml:"tools"`
	// Actions are "list", "invoke", or "*" for every action.
	Actions []string `yaml:"actions"`
}

// Join makes identities one on purpose: a caller authenticated as one of
// Aliases acts as Subject — the same operations, the same rate-limit
// bucket, the envelope's user Subject's name — and the rules naming
// Subject apply to it too (its roles stay those of its own credential).
// Both are exact subjects, with their source: "api-key:alice",
// "jwt(https://idp.example):alice".
type Join struct {
	Subject string   `yaml:"subject"`
	Aliases []string `yaml:"aliases"`
}

type policyFile struct {
	Identities []Join `yaml:"identities"`
	Rules      []Rule `yaml:"rules"`
}

// rule is a Rule with its subjects and tools read.
type rule struct {
	Rule
	who   Audience
	tools glob.Set
}

// subjectPattern matches subjects: everyone, or a source and issuer
// exactly with a name glob.
type subjectPattern struct {
	everyone bool
	of       Subject // Name is the glob as written
	name     glob.Pattern
}

func (p subjectPattern) match(s Subject) bool {
	if p.everyone {
		return true
	}
	return p.of.Source == s.Source && p.of.Issuer == s.Issuer && p.name.Match(s.Name)
}

// LoadPolicy reads a policy file (YAML or JSON):
//
//	identities:
//	  - subject: "api-key:alice"
//	    aliases: ["jwt(https://idp.example):alice"]
//	rules:
//	  - {roles: ["api-key:admin"], tools: ["*"], actions: ["*"]}
//	  - {users: ["jwt(https://idp.example):svc-*"], tools: ["query-*"], actions: [list, invoke]}
func LoadPolicy(name string) (*Policy, error) {
	data, err := readFile("policy", name)
	if err != nil {
		return nil, err
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("auth: policy %s: %w", name, err)
	}
	return p, nil
}

// ParsePolicy parses the contents of a policy file. Every problem is
// reported at once, with the rule or identity it is in.
func ParsePolicy(data []byte) (*Policy, error) {
	var f policyFile
	if err := decodeStrict(data, &f); err != nil {
		return nil, err
	}
	p, err := NewPolicy(f.Rules...)
	joined, jerr := readJoins(f.Identities)
	if err = errors.Join(err, jerr); err != nil {
		return nil, err
	}
	p.joined = joined
	return p, nil
}

// NewPolicy builds a policy from rules, checking each.
func NewPolicy(rules ...Rule) (*Policy, error) {
	if len(rules) == 0 {
		return nil, errors.New("no rules: a policy with no rules denies everything; leave the policy out to allow everything")
	}
	var errs []error
	p := &Policy{}
	for i, r := range rules {
		bad := func(format string, a ...any) {
			errs = append(errs, fmt.Errorf("rules[%d]: "+format, append([]any{i}, a...)...))
		}
		if len(r.Users) == 0 && len(r.Roles) == 0 {
			bad("name users or roles (users: [\"*\"] is everyone)")
		}
		if len(r.Tools) == 0 {
			bad("tools is required (tools: [\"*\"] is every tool)")
		}
		if len(r.Actions) == 0 {
			bad("actions is required: list, invoke or \"*\"")
		}
		for _, a := range r.Actions {
			if a != ActionList && a != ActionInvoke && a != "*" {
				bad("action %q: want list, invoke or \"*\"", a)
			}
		}
		tools, err := glob.CompileSet(r.Tools)
		if err != nil {
			bad("tools: %v", err)
		}
		who, unqualified, err := ParseAudience(r.Users, r.Roles)
		if j := (interface{ Unwrap() []error })(nil); errors.As(err, &j) {
			for _, e := range j.Unwrap() {
				bad("%v", e)
			}
		}
		for _, u := range unqualified {
			p.unqualified = append(p.unqualified, fmt.Sprintf("rules[%d].%s", i, u))
		}
		p.rules = append(p.rules, rule{Rule: r, who: who, tools: tools})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// readSubjectPattern reads a rule's user or role: "*", a subject whose
// name is a glob, or a bare name or glob, which is the API key's
// (qualified false).
func readSubjectPattern(text string) (p subjectPattern, qualified bool, err error) {
	if text == "*" {
		return subjectPattern{everyone: true}, true, nil
	}
	s, err := toolcall.ParseSubject(text)
	switch {
	case errors.Is(err, toolcall.ErrUnqualified):
		s, qualified = Subject{Source: MethodAPIKey, Name: text}, false
	case err != nil:
		return subjectPattern{}, false, err
	default:
		qualified = true
	}
	name, err := glob.Compile(s.Name)
	if err != nil {
		return subjectPattern{}, false, err
	}
	return subjectPattern{of: s, name: name}, qualified, nil
}

// readJoins reads the identities section: each alias's subject, checking
// that every subject is exact and qualified, that no alias is joined
// twice, and that joins do not chain.
func readJoins(joins []Join) (map[string]Subject, error) {
	var errs []error
	joined := map[string]Subject{}
	where := map[string]int{}
	targets := map[string]int{}
	exact := func(field, text string) (Subject, bool) {
		s, err := toolcall.ParseSubject(text)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
			return Subject{}, false
		case strings.ContainsAny(s.Name, `*?[\`):
			errs = append(errs, fmt.Errorf("%s: %q: identities name exact subjects, not patterns", field, text))
			return Subject{}, false
		}
		return s, true
	}
	for i, j := range joins {
		field := fmt.Sprintf("identities[%d]", i)
		target, ok := exact(field+".subject", j.Subject)
		if ok {
			targets[target.String()] = i
		}
		if len(j.Aliases) == 0 {
			errs = append(errs, fmt.Errorf("%s: aliases is required: the subjects that act as %q", field, j.Subject))
		}
		for k, text := range j.Aliases {
			af := fmt.Sprintf("%s.aliases[%d]", field, k)
			a, aok := exact(af, text)
			switch {
			case !aok:
				continue
			case a.Source == MethodAnonymous:
				errs = append(errs, fmt.Errorf("%s: %q: anonymous callers cannot act as another identity", af, text))
				continue
			case ok && a == target:
				errs = append(errs, fmt.Errorf("%s: %q is the subject itself", af, text))
				continue
			}
			key := a.String()
			if prev, dup := where[key]; dup {
				errs = append(errs, fmt.Errorf("%s: %q is already an alias in identities[%d]", af, text, prev))
				continue
			}
			where[key] = i
			if ok {
				joined[key] = target
			}
		}
	}
	for key, i := range where {
		if t, chained := targets[key]; chained {
			errs = append(errs, fmt.Errorf("identities[%d]: %q is an alias and also the subject of identities[%d]: join every alias to the one subject", i, key, t))
		}
	}
	if len(errs) > 0 {
		slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return nil, errors.Join(errs...)
	}
	return joined, nil
}

// Allowed reports whether id may perform action on tool. An empty tool
// means "some tool": it is allowed when a rule grants the action on any
// tool, which is what listing (not filtered per tool) needs.
func (p *Policy) Allowed(id Identity, action, tool string) bool {
	if p == nil {
		return true
	}
	for _, r := range p.rules {
		if r.who.Includes(id) && (slices.Contains(r.Actions, action) || slices.Contains(r.Actions, "*")) &&
			(tool == "" || r.tools.Match(tool)) {
			return true
		}
	}
	return false
}

// join sets id.As when the policy joins id's subject to another.
func (p *Policy) join(id *Identity) {
	if p == nil || len(p.joined) == 0 {
		return
	}
	if as, ok := p.joined[id.Subject().String()]; ok {
		id.As = as
	}
}

// Unqualified lists the rules' users and roles written without a source,
// which name API-key users and roles only ("rules[1].users: svc-*").
func (p *Policy) Unqualified() []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.unqualified)
}
