package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaDoc is a registry document with one tool whose descriptor has
// the given extra keys (JSON object members, without braces).
func schemaDoc(members string) []byte {
	return []byte(`{"tool-service": {"svc": {"topic": "t"}}, "tool": {"t": {"type": "tool-service", "service": "svc"` + members + `}}}`)
}

// contact is the conformance suite's JSON Schema 2020-12 example.
const contact = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "$defs": {"address": {"$anchor": "addressDef", "type": "object",
    "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
  "properties": {
    "name": {"type": "string"},
    "address": {"$ref": "#/$defs/address"},
    "contactMethod": {"type": "string", "enum": ["phone", "email"]},
    "phone": {"type": "string"},
    "email": {"type": "string"}
  },
  "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
  "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
  "then": {"required": ["phone"]},
  "else": {"required": ["email"]},
  "additionalProperties": false
}`

func TestInputSchemaKeptAsGiven(t *testing.T) {
	s, err := Parse("schema.json", schemaDoc(`, "input-schema": `+contact), nil)
	if err != nil {
		t.Fatal(err)
	}
	tool := mustTool(t, s, "t")
	if tool.InputSchema == nil {
		t.Fatal("input schema not compiled")
	}
	got, _ := json.Marshal(tool.Schema)
	var want, have any
	_ = json.Unmarshal([]byte(contact), &want)
	_ = json.Unmarshal(got, &have)
	if !reflect.DeepEqual(have, want) {
		t.Fatalf("schema served as\n%s\nwant\n%s", got, contact)
	}
}

func TestInputSchemaRefused(t *testing.T) {
	deep := strings.Repeat(`{"not": `, MaxInputSchemaDepth) + `{}` + strings.Repeat(`}`, MaxInputSchemaDepth)
	big := `{"type": "object", "description": "` + strings.Repeat("x", MaxInputSchemaBytes) + `"}`
	cases := []struct {
		name, members, want string
	}{
		{"not an object", `, "input-schema": "{}"`, `"input-schema" must be a JSON Schema object, not a string`},
		{"no object type", `, "input-schema": {"type": "string"}`, `must say "type": "object" at its root`},
		{"with arguments", `, "input-schema": {"type": "object"}, "arguments": []`, `give either "input-schema" or "arguments", not both`},
		{"with strict", `, "input-schema": {"type": "object"}, "strict": true`, `"additionalProperties": false`},
		{"too deep", `, "input-schema": {"type": "object", "not": ` + deep + `}`, "nests deeper than 32 levels"},
		{"too big", `, "input-schema": ` + big, "more than the 65536 allowed"},
		{"bad keyword value", `, "input-schema": {"type": "object", "minProperties": "two"}`, "is not a valid JSON Schema"},
		{"bad type", `, "input-schema": {"type": "object", "properties": {"a": {"type": "text"}}}`, "is not a valid JSON Schema"},
		{"bad pattern", `, "input-schema": {"type": "object", "properties": {"a": {"pattern": "("}}}`, "is not a valid JSON Schema"},
		{"dangling ref", `, "input-schema": {"type": "object", "properties": {"a": {"$ref": "#/$defs/none"}}}`, "is not a valid JSON Schema"},
		{"remote ref", `, "input-schema": {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}`, "a schema may refer only to itself"},
		{"file ref", `, "input-schema": {"type": "object", "properties": {"a": {"$ref": "file://` + schemaFile(t) + `"}}}`, "a schema may refer only to itself"},
		{"unknown draft", `, "input-schema": {"$schema": "https://example.com/my-draft", "type": "object"}`, "is not a valid JSON Schema"},
		{"empty header", `, "input-schema": {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": ""}}}`, `x-mcp-header must be a non-empty string`},
		{"header with space", `, "input-schema": {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "My Region"}}}`, "is not an HTTP header name"},
		{"header on an array", `, "input-schema": {"type": "object", "properties": {"a": {"type": "array", "x-mcp-header": "A"}}}`, "string, integer or boolean"},
		{"header twice", `, "input-schema": {"type": "object", "properties": {"a": {"type": "string", "x-mcp-header": "Region"}, "b": {"type": "string", "x-mcp-header": "region"}}}`, "is used twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("schema.json", schemaDoc(c.members), nil)
			var le *LoadError
			if !errors.As(err, &le) {
				t.Fatalf("accepted, or failed otherwise: %v", err)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "tool/t: ") {
				t.Fatalf("error\n%v\nwant it to name tool/t and say %q", err, c.want)
			}
		})
	}
}

// schemaFile is a valid schema in a file: a reference to it must still
// fail.
func schemaFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(p, []byte(`{"type": "string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestInputSchemaDraftDefault(t *testing.T) {
	// 2020-12 when $schema is absent: prefixItems is a keyword there.
	s, err := Parse("schema.json", schemaDoc(`, "input-schema": {"type": "object", "properties": {"p": {"prefixItems": [{"type": "integer"}]}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := mustTool(t, s, "t").InputSchema.Check([]byte(`{"p": ["x"]}`)); err == nil {
		t.Fatal("prefixItems not applied: the default draft is not 2020-12")
	}
}

func TestInputSchemaCheck(t *testing.T) {
	s, err := Parse("schema.json", schemaDoc(`, "input-schema": `+contact), nil)
	if err != nil {
		t.Fatal(err)
	}
	schema := mustTool(t, s, "t").InputSchema
	cases := []struct {
		name, args, want string
	}{
		{"valid phone", `{"name": "Ann", "contactMethod": "phone", "phone": "555"}`, ""},
		{"valid email", `{"email": "a@example.com", "address": {"city": "Oslo"}}`, ""},
		{"wrong type in a ref", `{"email": "a@b", "address": {"city": 7}}`, `argument /address/city: got number, want string (schema keyword "type")`},
		{"not in enum", `{"email": "a@b", "contactMethod": "fax"}`, `argument /contactMethod: value must be one of 'phone', 'email' (schema keyword "enum")`},
		{"unknown property", `{"email": "a@b", "fax": "1"}`, `additional properties 'fax' not allowed (schema keyword "additionalProperties")`},
		{"then fails", `{"contactMethod": "phone", "email": "a@b"}`, `missing property 'phone' (schema keyword "required")`},
		{"neither", `{}`, `the arguments: missing property`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := schema.Check([]byte(c.args))
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ae *ArgumentError
			if !errors.As(err, &ae) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

func TestHeaderParams(t *testing.T) {
	s, err := Parse("schema.json", schemaDoc(`, "input-schema": {"type": "object", "properties": {
		"region": {"type": "string", "x-mcp-header": "Region"},
		"priority": {"type": "integer", "x-mcp-header": "Priority"},
		"note": {"type": "string"}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []HeaderParam{{Header: "Priority", Argument: "priority", Type: "integer"}, {Header: "Region", Argument: "region", Type: "string"}}
	if got := mustTool(t, s, "t").HeaderParams; !reflect.DeepEqual(got, want) {
		t.Fatalf("header params %+v, want %+v", got, want)
	}
}

// FuzzInputSchema feeds untrusted schemas to the loader: it must refuse or
// compile them, never panic or hang, and a compiled schema must check any
// arguments without panicking or stopping in a reference cycle.
func FuzzInputSchema(f *testing.F) {
	f.Add([]byte(contact), []byte(`{"email": "a"}`))
	f.Add([]byte(`{"type": "object", "properties": {"a": {"$ref": "#"}}}`), []byte(`{"a": {"a": {}}}`))
	f.Add([]byte(`{"type": "object", "$defs": {"x": {"$ref": "#/$defs/x"}}, "properties": {"a": {"$ref": "#/$defs/x"}}}`), []byte(`{"a": 1}`))
	f.Add([]byte(`{"type": "object", "patternProperties": {"^a+$": {"pattern": "(a|b)*c"}}}`), []byte(`{"aaa": "abab"}`))
	f.Add([]byte(`{"type": "object", "$dynamicAnchor": "n", "properties": {"a": {"$dynamicRef": "#n"}}}`), []byte(`{"a": {}}`))
	f.Add([]byte(`{"type": "object", "$defs": {"a": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/b"}]}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}, "properties": {"p": {"$ref": "#/$defs/a"}}}`), []byte(`{"p": 1}`))
	f.Add([]byte(`{"type": "object", "$dynamicAnchor": "n", "allOf": [{"$dynamicRef": "#n"}]}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, schema, args []byte) {
		var v any
		if json.Unmarshal(schema, &v) != nil {
			return
		}
		doc := fmt.Sprintf(`{"tool-service": {"svc": {"topic": "t"}}, "tool": {"t": {"type": "tool-service", "service": "svc", "input-schema": %s}}}`, schema)
		s, err := Parse("fuzz", []byte(doc), nil)
		if err != nil {
			return
		}
		tool, ok := s.Tool("t")
		if !ok || tool.InputSchema == nil || tool.Schema["type"] != "object" {
			t.Fatalf("accepted without a compiled object schema: %+v", tool)
		}
		if json.Valid(args) {
			// A schema that loads has no cycle for validation to stop in.
			if err := tool.InputSchema.Check(args); err != nil && strings.Contains(err.Error(), "reference cycle") {
				t.Fatalf("schema %s loaded, but checking %s: %v", schema, args, err)
			}
		}
	})
}

// A reference cycle that never goes into the arguments (a → b → a) would
// fail every call: the descriptor is refused when it is loaded, naming
// the tool and the cycle — whichever source it came from (a file goes
// through Parse, announcements and the configuration service through
// ParseDocument). A schema recursive through properties or items is no
// such cycle: it loads, and checks arguments.
func TestInputSchemaReferenceCycle(t *testing.T) {
	t.Parallel()
	refused := []struct {
		name, schema, cycle string
		loops               string // arguments the library's validation stops in the cycle
	}{
		{"a to b to a", `{"type": "object", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "properties": {"x": {"$ref": "#/$defs/a"}}}`,
			"#/$defs/a → #/$defs/b → #/$defs/a", `{"x": 1}`},
		{"itself", `{"type": "object", "$defs": {"x": {"$ref": "#/$defs/x"}}, "properties": {"a": {"$ref": "#/$defs/x"}}}`, "#/$defs/x → #/$defs/x", `{"a": 1}`},
		{"root through allOf", `{"type": "object", "allOf": [{"$ref": "#"}]}`, "# → #/allOf/0 → #", `{}`},
		{"through anyOf", `{"type": "object", "$defs": {"a": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/b"}]}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}, "properties": {"p": {"$ref": "#/$defs/a"}}}`,
			"#/$defs/a → #/$defs/a/anyOf/1 → #/$defs/b → #/$defs/b/allOf/0 → #/$defs/a", `{"p": 1}`},
		// Under "not" the library's cycle error is a failure that not
		// turns into success: the schema (a value that is not itself) has
		// no meaning, and is refused all the same.
		{"through not", `{"type": "object", "$defs": {"a": {"not": {"$ref": "#/$defs/a"}}}, "properties": {"p": {"$ref": "#/$defs/a"}}}`,
			"#/$defs/a → #/$defs/a/not → #/$defs/a", ""},
		{"through if and then", `{"type": "object", "if": {"required": ["k"]}, "then": {"$ref": "#"}}`, "# → #/then → #", `{"k": 1}`},
		{"through dependentSchemas", `{"type": "object", "dependentSchemas": {"k": {"$ref": "#"}}}`, "# → #/dependentSchemas/k → #", `{"k": 1}`},
		{"draft 7 definitions", `{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "definitions": {"a": {"allOf": [{"$ref": "#/definitions/a"}]}}, "properties": {"p": {"$ref": "#/definitions/a"}}}`,
			"#/definitions/a → #/definitions/a/allOf/0 → #/definitions/a", `{"p": 1}`},
	}
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// What the library makes of it, compiled as it stands: every
			// call of such arguments fails with its reference cycle error.
			if err := libraryValidate(t, c.schema, c.loops); c.loops != "" && (!errors.As(err, new(*jsonschema.ValidationError)) ||
				!strings.Contains(fmt.Sprintf("%#v", err), "reference cycle")) {
				t.Fatalf("the library validates %s against it: %v, want its reference cycle error", c.loops, err)
			}
			_, err := Parse("schema.json", schemaDoc(`, "input-schema": `+c.schema), nil)
			var le *LoadError
			if !errors.As(err, &le) {
				t.Fatalf("accepted at load, or failed otherwise: %v", err)
			}
			for _, want := range []string{"tool/t: ", "reference cycle", c.cycle} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error\n%v\nwant it to say %q", err, want)
				}
			}
			var doc map[string]any
			if err := json.Unmarshal(schemaDoc(`, "input-schema": `+c.schema), &doc); err != nil {
				t.Fatal(err)
			}
			_, tools, problems := ParseDocument("announcement", doc, nil)
			if _, ok := tools["t"]; ok || len(problems) == 0 || !strings.Contains(fmt.Sprint(problems), c.cycle) {
				t.Errorf("ParseDocument: tool kept %v, problems %v", ok, problems)
			}
		})
	}

	accepted := []struct {
		name, schema, valid, invalid, why string
	}{
		{"tree through items", `{"type": "object", "$defs": {"node": {"type": "object", "required": ["name"],
			"properties": {"name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
			"properties": {"root": {"$ref": "#/$defs/node"}}}`,
			`{"root": {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]}}`,
			`{"root": {"name": "a", "children": [{"name": "b", "children": [{"name": 3}]}]}}`, "/root/children/0/children/0/name"},
		{"root through a property", `{"type": "object", "properties": {"next": {"$ref": "#"}, "v": {"type": "integer"}}}`,
			`{"next": {"next": {"v": 1}}}`, `{"next": {"next": {"v": "x"}}}`, "/next/next/v"},
		{"dynamic tree", `{"type": "object", "$dynamicAnchor": "node", "properties": {"kids": {"type": "array", "items": {"$dynamicRef": "#node"}}, "n": {"type": "integer"}}}`,
			`{"kids": [{"kids": [{"n": 1}]}]}`, `{"kids": [{"kids": [{"n": "1"}]}]}`, "/kids/0/kids/0/n"},
		{"shared definition, no cycle", `{"type": "object", "$defs": {"s": {"type": "string"}, "pair": {"allOf": [{"$ref": "#/$defs/s"}, {"$ref": "#/$defs/s"}]}},
			"properties": {"a": {"$ref": "#/$defs/pair"}, "b": {"$ref": "#/$defs/pair"}}}`, `{"a": "x", "b": "y"}`, `{"a": "x", "b": 2}`, "/b"},
	}
	for _, c := range accepted {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, err := Parse("schema.json", schemaDoc(`, "input-schema": `+c.schema), nil)
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			schema := mustTool(t, s, "t").InputSchema
			if err := schema.Check([]byte(c.valid)); err != nil {
				t.Errorf("valid arguments refused: %v", err)
			}
			var ae *ArgumentError
			if err := schema.Check([]byte(c.invalid)); !errors.As(err, &ae) || ae.Path != c.why {
				t.Errorf("invalid arguments: %v, want an argument error at %s", err, c.why)
			}
		})
	}
}

// libraryValidate compiles schema as parseInputSchema does, without its
// checks, and validates args against it.
func libraryValidate(t *testing.T, schema, args string) error {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		t.Fatal(err)
	}
	compiled, err := c.Compile(schemaURL)
	if err != nil {
		t.Fatal(err)
	}
	if args == "" {
		return nil
	}
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(args))
	if err != nil {
		t.Fatal(err)
	}
	return compiled.Validate(v)
}
