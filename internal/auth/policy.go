package auth

import (
	"errors"
	"fmt"
	"slices"
)

// Actions a policy grants.
const (
	ActionList   = "list"   // ListTools, GetTool, ListToolServices, GetToolService
	ActionInvoke = "invoke" // InvokeTool, StreamTool
)

// Policy says who may do what to which tools. Rules only grant: a call is
// allowed when some rule allows it, and denied otherwise. A nil *Policy
// allows every authenticated call.
type Policy struct {
	rules []Rule
}

// Rule grants its actions on its tools to the identities it names.
// Patterns are path.Match globs ("query-*", "*"); note that "*" does not
// match "/".
type Rule struct {
	// Users and Roles name who the rule applies to: an identity whose
	// user matches one of Users, or one of whose roles matches one of
	// Roles. users: ["*"] is everyone authenticated, anonymous included.
	Users []string `yaml:"users"`
	Roles []string `yaml:"roles"`
	// Tools are the tool names the rule covers.
	Tools []string `yaml:"tools"`
	// Actions are "list", "invoke", or "*" for every action.
	Actions []string `yaml:"actions"`
}

type policyFile struct {
	Rules []Rule `yaml:"rules"`
}

// LoadPolicy reads a policy file (YAML or JSON):
//
//	rules:
//	  - {roles: [admin], tools: ["*"], actions: ["*"]}
//	  - {users: ["svc-*"], tools: ["query-*"], actions: [list, invoke]}
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
// reported at once, with the rule it is in.
func ParsePolicy(data []byte) (*Policy, error) {
	var f policyFile
	if err := decodeStrict(data, &f); err != nil {
		return nil, err
	}
	return NewPolicy(f.Rules...)
}

// NewPolicy builds a policy from rules, checking each.
func NewPolicy(rules ...Rule) (*Policy, error) {
	if len(rules) == 0 {
		return nil, errors.New("no rules: a policy with no rules denies everything; leave the policy out to allow everything")
	}
	var errs []error
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
		for _, ps := range []struct {
			field    string
			patterns []string
		}{{"users", r.Users}, {"roles", r.Roles}, {"tools", r.Tools}} {
			if err := checkPatterns(ps.patterns); err != nil {
				bad("%s: %v", ps.field, err)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Policy{rules: slices.Clone(rules)}, nil
}

// Allowed reports whether id may perform action on tool. An empty tool
// means "some tool": it is allowed when a rule grants the action on any
// tool, which is what listing (not filtered per tool) needs.
func (p *Policy) Allowed(id Identity, action, tool string) bool {
	if p == nil {
		return true
	}
	for _, r := range p.rules {
		if r.appliesTo(id) && (slices.Contains(r.Actions, action) || slices.Contains(r.Actions, "*")) &&
			(tool == "" || matchAny(r.Tools, tool)) {
			return true
		}
	}
	return false
}

func (r Rule) appliesTo(id Identity) bool {
	if matchAny(r.Users, id.User) {
		return true
	}
	for _, role := range id.Roles {
		if matchAny(r.Roles, role) {
			return true
		}
	}
	return false
}
