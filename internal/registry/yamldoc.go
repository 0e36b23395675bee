package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"gopkg.in/yaml.v3"
)

// decodeYAML decodes a YAML document into the values encoding/json gives
// (with UseNumber) for what yaml.v3 decodes into an `any` (maps with string
// keys, slices, strings, json.Number, booleans, nil), in time linear in its
// size. yaml.v3's own decoding into a map compares
// every key of a mapping with every other one to find duplicates, which
// takes minutes for a mapping of 100,000 tools; here the document is
// parsed into nodes and converted with a set per mapping. Aliases are
// expanded within a budget (a document cannot grow more than twice its
// size plus 10,000 values by them) and may not refer to themselves.
func decodeYAML(data []byte) (any, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, err
	}
	c := yamlConv{active: map[*yaml.Node]bool{}}
	c.budget = 2*countNodes(&root) + 10000
	return c.value(&root)
}

// countNodes counts the nodes of the tree without following aliases.
func countNodes(n *yaml.Node) int {
	total := 1
	for _, k := range n.Content {
		total += countNodes(k)
	}
	return total
}

type yamlConv struct {
	budget int                 // values still allowed
	active map[*yaml.Node]bool // aliases being expanded
}

var errAliasBudget = errors.New("aliases expand the document too much")

// errKeyNotString: a mapping key that is not a string (JSON objects have
// only string keys). It is refused in a merged mapping too, where yaml.v3
// would quietly turn the key into a string.
var errKeyNotString = errors.New("a mapping key must be a string")

func (c *yamlConv) value(n *yaml.Node) (any, error) {
	if c.budget--; c.budget < 0 {
		return nil, errAliasBudget
	}
	switch n.Kind {
	case 0:
		return nil, nil // an empty document
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return c.value(n.Content[0])
	case yaml.AliasNode:
		if n.Alias == nil {
			return nil, fmt.Errorf("line %d: unknown alias", n.Line)
		}
		if c.active[n.Alias] {
			return nil, fmt.Errorf("line %d: alias %q refers to itself", n.Line, n.Value)
		}
		c.active[n.Alias] = true
		defer delete(c.active, n.Alias)
		return c.value(n.Alias)
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return n.Value, nil
		case "!!null":
			return nil, nil
		case "!!bool":
			var v bool
			if err := n.Decode(&v); err != nil {
				return nil, err
			}
			return v, nil
		default: // numbers, timestamps, binary: as yaml.v3 has them, as JSON has them
			var v any
			if err := n.Decode(&v); err != nil {
				return nil, err
			}
			return asJSON(v)
		}
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, e := range n.Content {
			v, err := c.value(e)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		return c.mapping(n)
	default:
		return nil, fmt.Errorf("line %d: unexpected YAML node", n.Line)
	}
}

// mapping converts a mapping. Its own keys win over merged ones ("<<"),
// and of merged mappings the earlier wins, as YAML's merge key says.
func (c *yamlConv) mapping(n *yaml.Node) (map[string]any, error) {
	if len(n.Content)%2 != 0 {
		return nil, fmt.Errorf("line %d: malformed mapping", n.Line)
	}
	out := make(map[string]any, len(n.Content)/2)
	line := make(map[string]int, len(n.Content)/2)
	var merges []*yaml.Node
	for i := 0; i < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			return nil, fmt.Errorf("line %d: %w", k.Line, errKeyNotString)
		}
		if l, dup := line[k.Value]; dup {
			return nil, fmt.Errorf("line %d: mapping key %q already defined at line %d", k.Line, k.Value, l)
		}
		line[k.Value] = k.Line
		val, err := c.value(v)
		if err != nil {
			return nil, err
		}
		out[k.Value] = val
	}
	for _, m := range merges {
		if err := c.merge(out, m); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// merge adds the keys of a merged mapping (or of each of a sequence of
// them) that out does not have yet.
func (c *yamlConv) merge(out map[string]any, m *yaml.Node) error {
	target := m
	if m.Kind == yaml.AliasNode && m.Alias != nil {
		target = m.Alias
	}
	var list []*yaml.Node
	switch target.Kind {
	case yaml.MappingNode:
		list = []*yaml.Node{m}
	case yaml.SequenceNode:
		list = target.Content
	default:
		return fmt.Errorf("line %d: a merge key (<<) takes a mapping or a list of mappings", m.Line)
	}
	for _, e := range list {
		v, err := c.value(e)
		if err != nil {
			return err
		}
		mm, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("line %d: a merge key (<<) takes a mapping or a list of mappings", e.Line)
		}
		for k, x := range mm {
			if _, has := out[k]; !has {
				out[k] = x
			}
		}
	}
	return nil
}

// asJSON turns a scalar as yaml.v3 decodes it (a number, a time, …) into
// what encoding/json gives for it, decoded with UseNumber.
func asJSON(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("YAML holds something JSON cannot: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}
