package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Bounds of a descriptor's "input-schema": announcements come from the bus,
// so a schema is untrusted input until it has been measured and compiled.
const (
	// MaxInputSchemaBytes bounds the schema's JSON encoding.
	MaxInputSchemaBytes = 64 << 10
	// MaxInputSchemaDepth bounds the nesting of its objects and lists.
	MaxInputSchemaDepth = 32
)

// schemaURL names a schema while it is compiled.
const schemaURL = "https://toolgate.invalid/input-schema.json"

// noLoader refuses every document a schema refers to besides itself and
// the drafts' metaschemas (which the library embeds): the library's
// default would read files, and a schema from the bus must neither read
// the gateway's files nor make it reach the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, errors.New("a schema may refer only to itself")
}

// english prints the messages of failed keywords.
var english = message.NewPrinter(language.English)

// InputSchema is a tool's JSON Schema of its arguments object, given in
// full by the descriptor (key "input-schema") and compiled once.
type InputSchema struct {
	compiled *jsonschema.Schema
}

// HeaderParam is an argument whose value an MCP client mirrors into an
// HTTP header (the "x-mcp-header" annotation of a top-level property of
// the input schema, SEP-2243): the header is "Mcp-Param-" + Header.
type HeaderParam struct {
	Header   string
	Argument string
	// Type is the property's JSON type: string, integer or boolean.
	Type string
}

// ArgumentError says how a call's arguments fail the tool's input schema:
// which keyword failed at which place of the arguments object.
type ArgumentError struct {
	// Path is a JSON Pointer into the arguments object ("" for the object
	// itself), Keyword the schema keyword that failed, Message what it
	// says.
	Path, Keyword, Message string
}

func (e *ArgumentError) Error() string {
	at := "the arguments"
	if e.Path != "" {
		at = "argument " + e.Path
	}
	return fmt.Sprintf("%s: %s (schema keyword %q)", at, e.Message, e.Keyword)
}

// Check validates a call's arguments, JSON object text, against the
// schema. It returns an *ArgumentError when they fail it.
func (s *InputSchema) Check(args []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return &ArgumentError{Keyword: "type", Message: "not a JSON value"}
	}
	err = s.compiled.Validate(v)
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	leaf := deepest(ve)
	e := &ArgumentError{Path: pointer(leaf.InstanceLocation), Message: leaf.ErrorKind.LocalizedString(english)}
	if kw := leaf.ErrorKind.KeywordPath(); len(kw) > 0 {
		e.Keyword = kw[len(kw)-1]
	}
	return e
}

// deepest is the first cause at the end of the longest chain of causes:
// the most specific thing wrong ("at /address/city: got number, want
// string" rather than "allOf failed").
func deepest(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	best, depth := e, 0
	var walk func(e *jsonschema.ValidationError, d int)
	walk = func(e *jsonschema.ValidationError, d int) {
		if len(e.Causes) == 0 {
			if d > depth {
				best, depth = e, d
			}
			return
		}
		for _, c := range e.Causes {
			walk(c, d+1)
		}
	}
	walk(e, 0)
	return best
}

// pointer is the JSON Pointer of an instance location.
func pointer(loc []string) string {
	var sb strings.Builder
	for _, tok := range loc {
		sb.WriteByte('/')
		sb.WriteString(strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1"))
	}
	return sb.String()
}

// parseInputSchema checks a descriptor's "input-schema" — an object, within
// the bounds, with "type": "object" at its root, that compiles (JSON Schema
// 2020-12 when it names no "$schema"), without a reference cycle that
// validation would loop in (refCycle), with valid x-mcp-header annotations
// — and returns it compiled, as it was given, and its header parameters.
func parseInputSchema(v any) (*InputSchema, map[string]any, []HeaderParam, error) {
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, nil, nil, fmt.Errorf(`"input-schema" must be a JSON Schema object, not %s`, jsonType(v))
	}
	if d := depth(doc, 0); d > MaxInputSchemaDepth {
		return nil, nil, nil, fmt.Errorf(`"input-schema" nests deeper than %d levels`, MaxInputSchemaDepth)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf(`"input-schema" cannot be encoded as JSON: %w`, err)
	}
	if len(b) > MaxInputSchemaBytes {
		return nil, nil, nil, fmt.Errorf(`"input-schema" is %d bytes, more than the %d allowed`, len(b), MaxInputSchemaBytes)
	}
	if doc["type"] != "object" {
		return nil, nil, nil, errors.New(`"input-schema" must say "type": "object" at its root (a call's arguments are an object)`)
	}
	// Compile a copy as the library reads it (json.Number for numbers), so
	// that the descriptor's own map stays as it was given.
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return nil, nil, nil, fmt.Errorf(`"input-schema" cannot be read back: %w`, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, inst); err != nil {
		return nil, nil, nil, fmt.Errorf(`"input-schema" is not a valid JSON Schema: %s`, schemaErr(err))
	}
	compiled, err := c.Compile(schemaURL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf(`"input-schema" is not a valid JSON Schema: %s`, schemaErr(err))
	}
	if cycle := refCycle(compiled); cycle != nil {
		return nil, nil, nil, fmt.Errorf(`"input-schema" has a reference cycle that validation would follow forever, never going into the arguments: %s `+
			`(a schema may refer to itself only through properties or items, as a tree node does)`, cyclePath(cycle))
	}
	headers, err := headerParams(doc)
	if err != nil {
		return nil, nil, nil, fmt.Errorf(`"input-schema": %w`, err)
	}
	return &InputSchema{compiled: compiled}, doc, headers, nil
}

// schemaErr is a compile error without the made-up location of the
// schema, on one line.
func schemaErr(err error) string {
	msg := strings.ReplaceAll(err.Error(), schemaURL, "input-schema")
	return strings.Join(strings.Fields(msg), " ")
}

// depth is how deeply v nests objects and lists.
func depth(v any, d int) int {
	if d > MaxInputSchemaDepth {
		return d // deep enough to refuse: stop counting
	}
	deepest := d
	switch x := v.(type) {
	case map[string]any:
		for _, e := range x {
			deepest = max(deepest, depth(e, d+1))
		}
	case []any:
		for _, e := range x {
			deepest = max(deepest, depth(e, d+1))
		}
	}
	return deepest
}

// headerParams reads the x-mcp-header annotations of the schema's
// top-level properties and checks them as SEP-2243 asks: a non-empty
// HTTP token, on a property of type string, integer or boolean, no two
// alike ignoring case.
func headerParams(doc map[string]any) ([]HeaderParam, error) {
	props, _ := doc["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for name := range props {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []HeaderParam
	seen := map[string]string{}
	for _, name := range names {
		p, _ := props[name].(map[string]any)
		h, ok := p["x-mcp-header"]
		if !ok {
			continue
		}
		header, isStr := h.(string)
		if !isStr || header == "" {
			return nil, fmt.Errorf("property %q: x-mcp-header must be a non-empty string", name)
		}
		if !token(header) {
			return nil, fmt.Errorf("property %q: x-mcp-header %q is not an HTTP header name (letters, digits and !#$%%&'*+-.^_`|~ only)", name, header)
		}
		typ, _ := p["type"].(string)
		if typ != "string" && typ != "integer" && typ != "boolean" {
			return nil, fmt.Errorf("property %q: x-mcp-header needs \"type\" string, integer or boolean", name)
		}
		if other, dup := seen[strings.ToLower(header)]; dup {
			return nil, fmt.Errorf("properties %q and %q: x-mcp-header %q is used twice (header names ignore case)", other, name, header)
		}
		seen[strings.ToLower(header)] = name
		out = append(out, HeaderParam{Header: header, Argument: name, Type: typ})
	}
	return out, nil
}

// token reports whether s is an HTTP token (RFC 9110 tchar).
func token(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return s != ""
}
