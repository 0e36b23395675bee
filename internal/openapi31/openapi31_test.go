package openapi31

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func readFile(t *testing.T, rel ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(append([]string{"..", ".."}, rel...)...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// converted is the document Convert makes of the committed Swagger one,
// decoded into plain maps for the assertions.
func converted(t *testing.T) (raw []byte, doc map[string]any) {
	t.Helper()
	raw, err := Convert(readFile(t, "api", "openapi", "toolgate.swagger.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return raw, doc
}

// at walks doc along keys; it fails the test when a key is missing.
func at(t *testing.T, doc any, keys ...string) any {
	t.Helper()
	cur := doc
	for i, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("%s is not an object", strings.Join(keys[:i], "."))
		}
		if cur, ok = m[k]; !ok {
			t.Fatalf("%s has no %q", strings.Join(keys[:i], "."), k)
		}
	}
	return cur
}

func TestCommittedDocumentIsCurrent(t *testing.T) {
	raw, _ := converted(t)
	if committed := readFile(t, "api", "openapi", "toolgate.openapi.json"); !bytes.Equal(raw, committed) {
		t.Fatal("api/openapi/toolgate.openapi.json is not what Convert makes of toolgate.swagger.json; run scripts/generate.sh")
	}
}

func TestConvertIsReproducible(t *testing.T) {
	in := readFile(t, "api", "openapi", "toolgate.swagger.json")
	a, err := Convert(in)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		b, err := Convert(in)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Fatal("two conversions of the same input differ")
		}
	}
	if !bytes.HasSuffix(a, []byte("}\n")) {
		t.Fatal("output does not end in a newline")
	}
}

func TestDocumentShape(t *testing.T) {
	raw, doc := converted(t)
	if v := at(t, doc, "openapi"); v != "3.1.0" {
		t.Fatalf("openapi = %v", v)
	}
	if bytes.Contains(raw, []byte("#/definitions/")) {
		t.Fatal("a Swagger reference is left")
	}
	for _, want := range []string{"swagger", "definitions", "consumes", "produces"} {
		if _, ok := doc[want]; ok {
			t.Errorf("Swagger member %q is left", want)
		}
	}
	// Proto names, as the gateway writes them.
	for _, p := range []string{"arguments_schema", "next_page_token", "output_json", "default_timeout", "retry_delay"} {
		if !bytes.Contains(raw, []byte(`"`+p+`"`)) {
			t.Errorf("no property %q", p)
		}
	}
	for _, p := range []string{"argumentsSchema", "nextPageToken", "outputJson"} {
		if bytes.Contains(raw, []byte(`"`+p+`"`)) {
			t.Errorf("camelCase name %q", p)
		}
	}
	// Unused messages are pruned; the typed details are there.
	schemas := at(t, doc, "components", "schemas").(map[string]any)
	for _, gone := range []string{"Any", "NullValue", "GetToolResponse", "GetToolServiceResponse"} {
		if _, ok := schemas[gone]; ok {
			t.Errorf("schema %s should be pruned", gone)
		}
	}
	for _, want := range []string{"Status", "StatusDetail", "ErrorInfo", "RetryInfo", "OtherDetail", "StreamLine", "StreamToolResponse"} {
		if _, ok := schemas[want]; !ok {
			t.Errorf("schema %s missing", want)
		}
	}
	if v := at(t, doc, "components", "schemas", "StreamToolResponse", "properties", "index", "type"); v != "string" {
		t.Errorf("index (int64) has type %v, want string", v)
	}
	if v := at(t, doc, "components", "schemas", "Tool", "properties", "arguments_schema", "additionalProperties"); v != true {
		t.Errorf("arguments_schema additionalProperties = %v", v)
	}
}

func TestOperations(t *testing.T) {
	_, doc := converted(t)
	want := map[string]string{
		"ListTools":        "get /v1/tools",
		"GetTool":          "get /v1/tools/{name}",
		"InvokeTool":       "post /v1/tools/{name}:invoke",
		"StreamTool":       "post /v1/tools/{name}:stream",
		"StartTool":        "post /v1/tools/{name}:start",
		"ListOperations":   "get /v1/operations",
		"GetOperation":     "get /v1/operations/{id}",
		"DeleteOperation":  "delete /v1/operations/{id}",
		"CancelOperation":  "post /v1/operations/{id}:cancel",
		"WaitOperation":    "post /v1/operations/{id}:wait",
		"StreamOperation":  "get /v1/operations/{id}:stream",
		"ListToolServices": "get /v1/tool-services",
		"GetToolService":   "get /v1/tool-services/{id}",
	}
	got := map[string]string{}
	responses := at(t, doc, "components", "responses").(map[string]any)
	for path, item := range at(t, doc, "paths").(map[string]any) {
		for method, op := range item.(map[string]any) {
			id := at(t, op, "operationId").(string)
			got[id] = method + " " + path
			rs := at(t, op, "responses").(map[string]any)
			for _, code := range opErrors[id] {
				r, ok := rs[itoa(code)]
				if !ok {
					t.Errorf("%s: no %d response", id, code)
					continue
				}
				ref := at(t, r, "$ref").(string)
				name := strings.TrimPrefix(ref, "#/components/responses/")
				if s := at(t, responses, name, "content", "application/json", "schema", "$ref"); s != "#/components/schemas/Status" {
					t.Errorf("%s %d: schema %v", id, code, s)
				}
			}
			for _, common := range []string{"401", "403", "405", "429", "500", "503", "default"} {
				if _, ok := rs[common]; !ok {
					t.Errorf("%s: no %s response", id, common)
				}
			}
			if strings.HasPrefix(path, "/v1/tools/{name}:") {
				for _, c := range []string{"400", "404", "406", "413", "415", "504"} {
					if _, ok := rs[c]; !ok && (c != "504" || id != "StartTool") {
						t.Errorf("%s: no %s response", id, c)
					}
				}
				// An empty body is an empty request.
				if at(t, op, "requestBody", "required") != false {
					t.Errorf("%s: body required", id)
				}
			}
		}
	}
	if len(got) != len(want) {
		t.Fatalf("operations %v, want %v", got, want)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("operation %s at %q, want %q", id, got[id], w)
		}
	}
	if v := at(t, responses, "TooManyRequests", "headers", "Retry-After", "schema", "type"); v != "integer" {
		t.Errorf("Retry-After schema type %v", v)
	}
	if _, ok := at(t, responses, "MethodNotAllowed", "headers").(map[string]any)["Allow"]; !ok {
		t.Error("405 has no Allow header")
	}
}

func TestStreamResponse(t *testing.T) {
	_, doc := converted(t)
	content := at(t, doc, "paths", "/v1/tools/{name}:stream", "post", "responses", "200", "content").(map[string]any)
	keys := make([]string, 0, len(content))
	for k := range content {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{MediaNDJSON, MediaSSE}) {
		t.Fatalf("stream media types %v", keys)
	}
	if ref := at(t, content, MediaNDJSON, "schema", "$ref"); ref != "#/components/schemas/StreamLine" {
		t.Errorf("ndjson schema %v", ref)
	}
	line := at(t, doc, "components", "schemas", "StreamLine", "oneOf").([]any)
	if len(line) != 2 || at(t, line[0], "$ref") != "#/components/schemas/StreamToolResponse" || at(t, line[1], "$ref") != "#/components/schemas/Status" {
		t.Errorf("StreamLine = %v", line)
	}
	// The two shapes of a line are disjoint: each requires members the
	// other does not allow.
	shapes := map[string]map[string]any{}
	for _, name := range []string{"StreamToolResponse", "Status"} {
		shape := at(t, doc, "components", "schemas", name).(map[string]any)
		if shape["additionalProperties"] != false {
			t.Errorf("%s allows members it does not declare", name)
		}
		shapes[name] = shape
	}
	for a, b := range map[string]string{"StreamToolResponse": "Status", "Status": "StreamToolResponse"} {
		props := shapes[b]["properties"].(map[string]any)
		for _, r := range shapes[a]["required"].([]any) {
			if _, ok := props[r.(string)]; ok {
				t.Errorf("%s's required member %v is a member of %s too", a, r, b)
			}
		}
	}
	// Examples are values of the schema (one line each), not text.
	for name, ex := range at(t, content, MediaNDJSON, "examples").(map[string]any) {
		if _, ok := at(t, ex, "value").(map[string]any); !ok {
			t.Errorf("ndjson example %s is not a JSON object", name)
		}
	}
	desc := at(t, doc, "paths", "/v1/tools/{name}:stream", "post", "description").(string)
	for _, w := range []string{"event `chunk`", "event `done`", "event `error`", "keep-alive", "application/x-ndjson"} {
		if !strings.Contains(desc, w) {
			t.Errorf("stream description lacks %q", w)
		}
	}
}

func TestTimeoutAndArguments(t *testing.T) {
	_, doc := converted(t)
	for _, body := range []string{"InvokeToolBody", "StreamToolBody"} {
		timeout := at(t, doc, "components", "schemas", body, "properties", "timeout")
		// null is "not set", as protobuf's JSON mapping has it.
		if ty := at(t, timeout, "type").([]any); !slices.Equal(ty, []any{"string", "null"}) {
			t.Errorf("%s.timeout type %v", body, ty)
		}
		if at(t, timeout, "pattern") != DurationPattern {
			t.Errorf("%s.timeout has no pattern", body)
		}
		ex := at(t, timeout, "examples").([]any)
		if !slices.Contains(ex, any("5s")) || !slices.Contains(ex, any("200ms")) {
			t.Errorf("%s.timeout examples %v", body, ex)
		}
		args := at(t, doc, "components", "schemas", body, "properties", "arguments")
		if ty := at(t, args, "type").([]any); !slices.Equal(ty, []any{"object", "null"}) || at(t, args, "additionalProperties") != true {
			t.Errorf("%s.arguments = %v", body, args)
		}
		if at(t, doc, "components", "schemas", body, "additionalProperties") != false {
			t.Errorf("%s accepts unknown members", body)
		}
	}
}

func TestDetailsAndSecurity(t *testing.T) {
	_, doc := converted(t)
	items := at(t, doc, "components", "schemas", "Status", "properties", "details", "items", "$ref")
	if items != "#/components/schemas/StatusDetail" {
		t.Fatalf("details items %v", items)
	}
	if e := at(t, doc, "components", "schemas", "ErrorInfo", "properties", "@type", "enum").([]any); len(e) != 1 || e[0] != typeErrorInfo {
		t.Errorf("ErrorInfo @type enum %v", e)
	}
	if e := at(t, doc, "components", "schemas", "RetryInfo", "properties", "@type", "enum").([]any); len(e) != 1 || e[0] != typeRetryInfo {
		t.Errorf("RetryInfo @type enum %v", e)
	}
	sec := at(t, doc, "security").([]any)
	if len(sec) != 3 || len(sec[0].(map[string]any)) != 0 {
		t.Errorf("security %v: want an empty (anonymous) alternative first", sec)
	}
	if at(t, doc, "components", "securitySchemes", "bearerAuth", "scheme") != "bearer" ||
		at(t, doc, "components", "securitySchemes", "apiKeyAuth", "name") != "X-Api-Key" {
		t.Error("security schemes wrong")
	}
}

func TestConvertRejects(t *testing.T) {
	swagger := string(readFile(t, "api", "openapi", "toolgate.swagger.json"))
	for _, tc := range []struct{ name, in, want string }{
		{"not JSON", "{", "reading"},
		{"trailing data", `{"swagger":"2.0"} {}`, "after the top-level"},
		{"array", `[]`, "not a JSON object"},
		{"OpenAPI 3", `{"openapi":"3.0.0"}`, "not a Swagger 2.0"},
		{"no paths", `{"swagger":"2.0","definitions":{}}`, "no paths"},
		{"unknown operation", strings.Replace(swagger, "ToolService_GetTool\"", "ToolService_GetToolNew\"", 1), "no error table"},
		{"operationId twice", strings.Replace(swagger, "\"ToolService_GetTool\"", "\"ToolService_ListTools\"", 1), "used twice"},
		{"missing schema", strings.Replace(swagger, "\"StreamToolResponse\": {", "\"StreamToolChunk\": {", 1), "StreamToolResponse"},
		{"form parameter", strings.Replace(swagger, "\"in\": \"query\"", "\"in\": \"formData\"", 1), "formData"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Convert([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestUnwrapAndSummary(t *testing.T) {
	for _, tc := range []struct{ in, unwrapped, summary string }{
		{"One line.", "One line.", "One line."},
		{"A call. It waits\nfor the answer.", "A call. It waits for the answer.", "A call."},
		{"Intro:\n\n- one\n- two", "Intro:\n\n- one\n- two", "Intro:"},
	} {
		if got := unwrap(tc.in); got != tc.unwrapped {
			t.Errorf("unwrap(%q) = %q, want %q", tc.in, got, tc.unwrapped)
		}
		if got := firstSentence(tc.in); got != tc.summary {
			t.Errorf("firstSentence(%q) = %q, want %q", tc.in, got, tc.summary)
		}
	}
}

func TestObjectKeepsOrder(t *testing.T) {
	v, err := decode([]byte(`{"b":1,"a":{"z":[1,"x",null,true],"y":2},"c":"<&>"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"b":1,"a":{"z":[1,"x",null,true],"y":2},"c":"<&>"}`; string(b) != want {
		t.Fatalf("got %s, want %s", b, want)
	}
	if _, err := decode([]byte(`{"a":1,"a":2}`)); err == nil {
		t.Fatal("duplicate key accepted")
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

func TestPatterns(t *testing.T) {
	for _, c := range []struct {
		pattern string
		good    []string
		bad     []string
	}{
		{DurationPattern,
			[]string{"5s", "0.25s", "200ms", "1m30s", "1m0s", "1h", "1ns", "0.000000001s", "0.001us", "0.000001ms", "0s1ns", "1.5ns", "99999999999999999999h"},
			[]string{"", "0s", "0ms0s", "0.1ns", "0.0000000001s", "0.0001us", "-5s", "+5s", " 5s", "5s ", "5s\n", "5", "5 s", ".5s", "5.s", "5d", "1e3s", "zzz"}},
		{PageTokenPattern,
			[]string{"", "ZWNobw", "dGVsbC1qb2tl", "YQ", "YWI", "_-_-"},
			[]string{"zzz", "z", "YR", "YWJ", "ZWNobw==", "ab+/", "ab\n", "a b"}},
	} {
		re := regexp.MustCompile(c.pattern)
		for _, s := range c.good {
			if !re.MatchString(s) {
				t.Errorf("%s does not match %q", c.pattern, s)
			}
		}
		for _, s := range c.bad {
			if re.MatchString(s) {
				t.Errorf("%s matches %q", c.pattern, s)
			}
		}
	}
	// Every string the token pattern takes is a token base64url decodes
	// strictly, and the other way round (checked over short strings).
	re := regexp.MustCompile(PageTokenPattern)
	alphabet := "AQgwzY_-="
	var walk func(s string)
	walk = func(s string) {
		_, err := base64.RawURLEncoding.Strict().DecodeString(s)
		if re.MatchString(s) != (err == nil) {
			t.Errorf("%q: pattern %v, strict decoding error %v", s, re.MatchString(s), err)
		}
		if len(s) < 5 {
			for _, r := range alphabet {
				walk(s + string(r))
			}
		}
	}
	walk("")
}

func TestServersAndComments(t *testing.T) {
	raw, doc := converted(t)
	srv := at(t, doc, "servers").([]any)
	// First the gateway serving the document, wherever it runs; then the
	// template of one elsewhere.
	if len(srv) != 2 || at(t, srv[0], "url") != "/" ||
		at(t, srv[1], "url") != "{scheme}://{host}" || at(t, srv[1], "variables", "host", "default") != DefaultHost {
		t.Errorf("servers %v", srv)
	}
	// Generated clients copy descriptions into comments: "*/" would end a
	// C-style comment.
	if bytes.Contains(raw, []byte("*/")) {
		t.Error(`the document contains "*/"`)
	}
	for _, p := range []string{"/v1/tools", "/v1/tool-services"} {
		for _, param := range at(t, doc, "paths", p, "get", "parameters").([]any) {
			switch at(t, param, "name") {
			case "page_size":
				if at(t, param, "schema", "minimum") != float64(0) {
					t.Errorf("%s page_size has no minimum 0", p)
				}
			case "page_token":
				if at(t, param, "schema", "pattern") != PageTokenPattern {
					t.Errorf("%s page_token has no pattern", p)
				}
			}
		}
	}
}

// TestWithoutOperations: the document of a gateway without --operations
// lists neither StartTool nor the operations' routes, nor their tag and
// schemas, and keeps the rest as it is.
func TestWithoutOperations(t *testing.T) {
	raw, _ := converted(t)
	out, err := WithoutOperations(raw)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	paths := at(t, doc, "paths").(map[string]any)
	for p := range paths {
		if strings.HasPrefix(p, "/v1/operations") || strings.HasSuffix(p, ":start") {
			t.Errorf("path %s is listed", p)
		}
	}
	for _, p := range []string{"/v1/tools", "/v1/tools/{name}", "/v1/tools/{name}:invoke", "/v1/tools/{name}:stream", "/v1/tool-services", "/v1/tool-services/{id}"} {
		if _, ok := paths[p]; !ok {
			t.Errorf("path %s is missing", p)
		}
	}
	for _, tag := range at(t, doc, "tags").([]any) {
		if at(t, tag, "name") == "Operations" {
			t.Error("the Operations tag is listed")
		}
	}
	schemas := at(t, doc, "components", "schemas").(map[string]any)
	for _, s := range []string{"ListOperationsResponse", "WaitOperationBody", "StartToolBody"} {
		if _, ok := schemas[s]; ok {
			t.Errorf("schema %s is listed", s)
		}
	}
	if _, ok := schemas["InvokeToolResponse"]; !ok {
		t.Error("schema InvokeToolResponse is missing")
	}
}
