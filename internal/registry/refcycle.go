package registry

import (
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// A schema may refer to itself: a tree node whose "children" items are
// "$ref": "#/$defs/node" is recursive, and validation of it ends, because
// each step goes down into the arguments (a property, an item). A chain
// of references that comes back to where it started without going down —
// "a" is "$ref": "#/$defs/b" and "b" is "allOf": [{"$ref": "#/$defs/a"}] —
// applies itself to the same value forever: the library stops it and
// fails the call ("reference cycle"), so that every call of the tool
// would fail. refCycle finds such a chain when the schema is compiled, so
// that the descriptor is refused at load instead.

// inPlace are the subschemas of s that apply to the very value s applies
// to (not to a property, an item or a property name of it): following
// only these, validation makes no progress. A $dynamicRef or
// $recursiveRef is followed to its static target (in a schema of one
// document, where the dynamic scope adds nothing, that is where it goes).
func inPlace(s *jsonschema.Schema) []*jsonschema.Schema {
	out := make([]*jsonschema.Schema, 0, 4)
	add := func(ss ...*jsonschema.Schema) {
		for _, x := range ss {
			if x != nil {
				out = append(out, x)
			}
		}
	}
	add(s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else)
	if s.DynamicRef != nil {
		add(s.DynamicRef.Ref)
	}
	add(s.AllOf...)
	add(s.AnyOf...)
	add(s.OneOf...)
	for _, x := range s.DependentSchemas {
		add(x)
	}
	for _, x := range s.Dependencies {
		if sch, ok := x.(*jsonschema.Schema); ok {
			add(sch)
		}
	}
	return out
}

// below are the subschemas of s that apply to a part of its value: its
// properties, items, property names, decoded content.
func below(s *jsonschema.Schema) []*jsonschema.Schema {
	out := make([]*jsonschema.Schema, 0, len(s.Properties)+4)
	add := func(ss ...*jsonschema.Schema) {
		for _, x := range ss {
			if x != nil {
				out = append(out, x)
			}
		}
	}
	for _, x := range s.Properties {
		add(x)
	}
	for _, x := range s.PatternProperties {
		add(x)
	}
	add(s.PropertyNames, s.UnevaluatedProperties, s.Contains, s.Items2020, s.UnevaluatedItems, s.ContentSchema)
	add(s.PrefixItems...)
	for _, x := range []any{s.AdditionalProperties, s.Items, s.AdditionalItems} {
		switch v := x.(type) {
		case *jsonschema.Schema:
			add(v)
		case []*jsonschema.Schema:
			add(v...)
		}
	}
	return out
}

// refCycle returns a chain of schemas, each applying the next to the same
// value, whose last is its first (validation would loop), or nil. Every
// schema reachable from root is considered.
func refCycle(root *jsonschema.Schema) []*jsonschema.Schema {
	const (
		unseen = iota
		onPath
		done
	)
	state := map[*jsonschema.Schema]int{}
	var path, found []*jsonschema.Schema
	// visit follows the in-place subschemas of s depth first; path holds
	// the chain that led to s.
	var visit func(s *jsonschema.Schema) bool
	visit = func(s *jsonschema.Schema) bool {
		state[s] = onPath
		path = append(path, s)
		for _, next := range inPlace(s) {
			switch state[next] {
			case onPath:
				for i, p := range path {
					if p == next {
						found = append(append(found, path[i:]...), next)
						return true
					}
				}
			case unseen:
				if visit(next) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		state[s] = done
		return false
	}
	// Every schema reachable at all, by any subschema, is a start.
	seen := map[*jsonschema.Schema]bool{root: true}
	queue := []*jsonschema.Schema{root}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		if state[s] == unseen && visit(s) {
			return found
		}
		for _, next := range append(inPlace(s), below(s)...) {
			if !seen[next] {
				seen[next] = true
				queue = append(queue, next)
			}
		}
	}
	return nil
}

// cyclePath names the schemas of a cycle by their place in the
// input-schema ("#/$defs/a → #/$defs/b → #/$defs/a").
func cyclePath(cycle []*jsonschema.Schema) string {
	names := make([]string, len(cycle))
	for i, s := range cycle {
		names[i] = strings.TrimPrefix(s.Location, schemaURL)
		if names[i] == "" {
			names[i] = "#"
		}
	}
	return strings.Join(names, " → ")
}
