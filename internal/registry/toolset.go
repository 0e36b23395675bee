package registry

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
)

// ToolSet is a named selection of the registry's tools for one audience
// (a "virtual server"): served over MCP as a server of its own, with its
// own name and instructions, and as a filter of the other doors' lists. A
// set may show a tool under another name and description; its members
// are still the registry's tools, which the policy names.
type ToolSet struct {
	// Name is the set's key in the "tool-set" section, and its path
	// (/mcp/{name}).
	Name string
	// Title is the name the set's MCP server gives (default: Name).
	Title string
	// Instructions are what the set's MCP server tells clients.
	Instructions string
	// Members are the set's tools as written, in order.
	Members []SetMember
	// Origin says which kind of source defined it.
	Origin Origin

	// Resolved against the snapshot the set is in.
	shown  []*Tool              // sorted by the name shown
	byName map[string]*setEntry // name shown → entry
	byTool map[string]*setEntry // registry name → entry
}

// SetMember is one entry of a set's "tools": a tool's name or a glob of
// names (Match), or one tool (Tool) shown under Name and Description when
// given.
type SetMember struct {
	Match       string
	Tool        string
	Name        string
	Description string
}

type setEntry struct {
	shown, tool *Tool
}

// setNameRE is what a set's name may be: one path segment.
var setNameRE = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,64}$`)

// toolNameRE is what a set may rename a tool to: a name every MCP client
// takes.
var toolNameRE = regexp.MustCompile(`^[A-Za-z0-9_.\-]{1,128}$`)

// parseSets reads the "tool-set" section:
//
//	tool-set:
//	  research:
//	    title: Research tools
//	    instructions: Search the papers, then summarise.
//	    tools:
//	      - search                 # a tool
//	      - "query-*"              # every tool the glob matches
//	      - {tool: echo, name: repeat, description: Repeats what it is given.}
func parseSets(doc map[string]any) (map[string]*ToolSet, []Problem) {
	var probs []Problem
	add := func(key, format string, args ...any) {
		probs = append(probs, Problem{Section: "tool-set", Key: key, Reason: fmt.Sprintf(format, args...)})
	}
	sec, err := section(doc, "tool-set")
	if err != nil {
		add("", "%v", err)
	}
	sets := map[string]*ToolSet{}
	for _, key := range sortedKeys(sec) {
		d, err := descriptor(sec[key])
		if err != nil {
			add(key, "%v", err)
			continue
		}
		if !setNameRE.MatchString(key) {
			add(key, "a set's name is a path segment: 1 to 64 letters, digits and . _ -")
			continue
		}
		ts := &ToolSet{Name: key, Title: key}
		bad := false
		for k, v := range d {
			switch k {
			case "title", "instructions":
				s, ok := v.(string)
				if !ok {
					add(key, "%s must be a string", k)
					bad = true
				} else if k == "title" && s != "" {
					ts.Title = s
				} else if k == "instructions" {
					ts.Instructions = s
				}
			case "tools":
			default:
				add(key, "unknown key %q (want title, instructions, tools)", k)
				bad = true
			}
		}
		list, ok := d["tools"].([]any)
		if !ok || len(list) == 0 {
			add(key, "tools must be a list of tool names, globs or {tool, name, description}")
			continue
		}
		for i, m := range list {
			sm, err := parseMember(m)
			if err != nil {
				add(key, "tools[%d]: %v", i, err)
				bad = true
				continue
			}
			ts.Members = append(ts.Members, sm)
		}
		if !bad {
			sets[key] = ts
		}
	}
	return sets, probs
}

func parseMember(v any) (SetMember, error) {
	switch x := v.(type) {
	case string:
		if x == "" {
			return SetMember{}, fmt.Errorf("empty name")
		}
		if _, err := path.Match(x, ""); err != nil {
			return SetMember{}, fmt.Errorf("%q is not a name or glob: %w", x, err)
		}
		return SetMember{Match: x}, nil
	case map[string]any:
		var m SetMember
		for k, f := range x {
			s, ok := f.(string)
			if !ok {
				return SetMember{}, fmt.Errorf("%s must be a string", k)
			}
			switch k {
			case "tool":
				m.Tool = s
			case "name":
				m.Name = s
			case "description":
				m.Description = s
			default:
				return SetMember{}, fmt.Errorf("unknown key %q (want tool, name, description)", k)
			}
		}
		if m.Tool == "" {
			return SetMember{}, fmt.Errorf("tool is required: the registry's name of the tool")
		}
		if strings.ContainsAny(m.Tool, `*?[\`) {
			return SetMember{}, fmt.Errorf("tool %q: one tool, not a glob (a glob is written alone)", m.Tool)
		}
		if m.Name != "" && !toolNameRE.MatchString(m.Name) {
			return SetMember{}, fmt.Errorf("name %q is not a tool name", m.Name)
		}
		return m, nil
	default:
		return SetMember{}, fmt.Errorf("want a tool name, a glob or {tool, name, description}, not %s", jsonType(v))
	}
}

// resolve works out the set's tools in snapshot tools: members in order,
// a tool already in the set, or a name already shown, skipped. Tools a
// member names that the registry lacks (yet) are left out.
func (ts *ToolSet) resolve(tools []*Tool) *ToolSet {
	r := *ts
	r.byName, r.byTool, r.shown = map[string]*setEntry{}, map[string]*setEntry{}, nil
	put := func(t *Tool, name, desc string) {
		if _, in := r.byTool[t.Name]; in {
			return
		}
		if _, taken := r.byName[name]; taken {
			return
		}
		shown := t
		if name != t.Name || (desc != "" && desc != t.Description) {
			c := *t
			c.Name = name
			if desc != "" {
				c.Description = desc
			}
			shown = &c
		}
		e := &setEntry{shown: shown, tool: t}
		r.byName[name], r.byTool[t.Name] = e, e
		r.shown = append(r.shown, shown)
	}
	byName := make(map[string]*Tool, len(tools))
	for _, t := range tools {
		byName[t.Name] = t
	}
	for _, m := range ts.Members {
		if m.Tool != "" {
			if t, ok := byName[m.Tool]; ok {
				put(t, cmpOr(m.Name, t.Name), m.Description)
			}
			continue
		}
		for _, t := range tools {
			if ok, _ := path.Match(m.Match, t.Name); ok {
				put(t, t.Name, "")
			}
		}
	}
	sort.Slice(r.shown, func(i, j int) bool { return r.shown[i].Name < r.shown[j].Name })
	return &r
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Tools are the set's tools as it shows them, ordered by the name shown.
// The slice must not be changed.
func (ts *ToolSet) Tools() []*Tool { return ts.shown }

// Lookup finds the tool the set shows as name: as shown, and the
// registry's own.
func (ts *ToolSet) Lookup(name string) (shown, tool *Tool, ok bool) {
	e, ok := ts.byName[name]
	if !ok {
		return nil, nil, false
	}
	return e.shown, e.tool, true
}

// Shown is how the set shows the registry's tool name, if it holds it.
func (ts *ToolSet) Shown(name string) (*Tool, bool) {
	e, ok := ts.byTool[name]
	if !ok {
		return nil, false
	}
	return e.shown, true
}

// Set returns the tool set of the given name.
func (s *Snapshot) Set(name string) (*ToolSet, bool) {
	ts, ok := s.sets[name]
	return ts, ok
}

// Sets returns every tool set, ordered by name.
func (s *Snapshot) Sets() []*ToolSet {
	out := make([]*ToolSet, 0, len(s.sets))
	for _, ts := range s.sets {
		out = append(out, ts)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// withSets resolves sets against the snapshot's tools and keeps them.
func (s *Snapshot) withSets(sets map[string]*ToolSet) *Snapshot {
	s.sets = make(map[string]*ToolSet, len(sets))
	for name, ts := range sets {
		s.sets[name] = ts.resolve(s.toolList)
	}
	return s
}
