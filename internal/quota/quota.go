// Package quota enforces the quotas an operator writes for tool calls:
// for the callers a rule names (users and roles, as a policy names
// them), on the tools it names (names or globs), at most so many calls a
// window — a second, a minute, an hour or a day — and at most so many at
// once. The counts are kept in a Store: in this gateway's memory (one
// replica), or in Redis, shared by every replica. The Middleware refuses
// a call over a quota with RESOURCE_EXHAUSTED and a RetryInfo, which
// every door presents in its own form (HTTP doors as 429 with
// Retry-After).
package quota

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/auth/glob"
	"github.com/toolgate/toolgate/internal/toolcall"
	"gopkg.in/yaml.v3"
)

// Windows a rule may count calls over (Rule.Per).
var windows = map[string]time.Duration{
	"second": time.Second,
	"minute": time.Minute,
	"hour":   time.Hour,
	"day":    24 * time.Hour,
}

// Rule is one quota: the callers it applies to, the tools it covers, and
// its bounds. Each caller it applies to — each principal,
// toolcall.Caller.Key — has a budget of its own, shared by every tool of
// the rule: write a rule per tool for a budget per tool.
type Rule struct {
	// Name identifies the rule: in refusals, metrics, and the keys of its
	// counts (renaming a rule starts its counts afresh).
	Name string `yaml:"name"`
	// Users and Roles are who the rule applies to, written as a policy
	// writes them (auth.Rule): "api-key:alice",
	// "jwt(https://idp.example):svc-*", "*" for every caller. A glob's '*'
	// matches any text, '/' included (package glob): "jwt:*" is every
	// token without an issuer, whatever its sub.
	Users []string `yaml:"users"`
	Roles []string `yaml:"roles"`
	// Tools are the tool names or globs (package glob) the rule covers.
	Tools []string `yaml:"tools"`
	// Calls is how many calls a caller may make in a window of Per
	// (second, minute, hour or day); 0 with Per empty: no such bound. A
	// window starts at the caller's first call counted in it and ends
	// Per later; the calls refused in it do not count.
	Calls int    `yaml:"calls"`
	Per   string `yaml:"per"`
	// Concurrent is how many calls a caller may have running at once; 0:
	// no such bound. A stream counts until it ends; a call started as an
	// operation until the operation is started.
	Concurrent int `yaml:"concurrent"`
}

// rule is a Rule read.
type rule struct {
	Rule
	who    auth.Audience
	tools  glob.Set
	window time.Duration
}

// Rules are the quotas of a rules file, checked.
type Rules struct {
	rules []rule
}

type rulesFile struct {
	Rules []Rule `yaml:"rules"`
}

// Load reads a rules file (YAML or JSON):
//
//	rules:
//	  - name: alice-search
//	    users: ["api-key:alice"]
//	    tools: ["search"]
//	    calls: 10
//	    per: minute
//	  - name: interns
//	    roles: ["jwt(https://idp.example):intern"]
//	    tools: ["*"]
//	    calls: 1000
//	    per: day
//	    concurrent: 2
func Load(name string) (*Rules, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("quota: %w", err)
	}
	r, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("quota: rules %s: %w", name, err)
	}
	return r, nil
}

// Parse reads the contents of a rules file. Every problem is reported at
// once, with the rule it is in.
func Parse(data []byte) (*Rules, error) {
	var f rulesFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty")
		}
		return nil, err
	}
	return New(f.Rules...)
}

// New checks rules and returns them read.
func New(rules ...Rule) (*Rules, error) {
	var errs []error
	out := &Rules{}
	names := map[string]int{}
	for i, r := range rules {
		bad := func(format string, a ...any) {
			errs = append(errs, fmt.Errorf("rules[%d]: "+format, append([]any{i}, a...)...))
		}
		if r.Name == "" {
			bad("name is required: it names the rule in refusals, metrics and the keys of its counts")
		} else if prev, dup := names[r.Name]; dup {
			bad("name %q is also the name of rules[%d]", r.Name, prev)
		} else {
			names[r.Name] = i
		}
		who, _, err := auth.ParseAudience(r.Users, r.Roles)
		if err != nil {
			bad("%v", err)
		}
		if len(r.Users) == 0 && len(r.Roles) == 0 {
			bad("name users or roles (users: [\"*\"] is every caller)")
		}
		if len(r.Tools) == 0 {
			bad("tools is required (tools: [\"*\"] is every tool)")
		}
		tools, err := glob.CompileSet(r.Tools)
		if err != nil {
			bad("tools: %v", err)
		}
		c := rule{Rule: r, who: who, tools: tools}
		switch {
		case r.Calls < 0 || r.Concurrent < 0:
			bad("calls and concurrent must not be negative")
		case r.Calls == 0 && r.Concurrent == 0:
			bad("give calls (with per) or concurrent, or both")
		}
		if r.Calls > 0 || r.Per != "" {
			w, ok := windows[r.Per]
			switch {
			case !ok:
				bad("per %q: want second, minute, hour or day", r.Per)
			case r.Calls == 0:
				bad("per %s: calls is required (how many calls a %s)", r.Per, r.Per)
			}
			c.window = w
		}
		out.rules = append(out.rules, c)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// Len is the number of rules.
func (r *Rules) Len() int {
	if r == nil {
		return 0
	}
	return len(r.rules)
}

// matching are the rules that apply to a call of tool by caller.
func (r *Rules) matching(caller toolcall.Caller, tool string) []*rule {
	var out []*rule
	for i := range r.rules {
		ru := &r.rules[i]
		if ru.tools.Match(tool) && ru.who.Includes(caller) {
			out = append(out, ru)
		}
	}
	return out
}
