package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// TestSpecStatesArgumentRules: the body schemas of the served document
// say what the gateway enforces of arguments and arguments_json — both
// set is refused, null or an empty arguments_json is not set, an empty
// arguments object beside arguments_json is none (as on gRPC) — so a body
// the document allows is accepted, and one it refuses is answered 400
// ARGUMENTS_CONFLICT, on :invoke, :stream and :start.
func TestSpecStatesArgumentRules(t *testing.T) {
	t.Parallel()
	doc, _ := liveSpec(t)
	var parsed any
	if err := json.Unmarshal(doc, &parsed); err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("urn:toolgate:openapi", parsed); err != nil {
		t.Fatal(err)
	}
	for _, verb := range []struct{ verb, schema string }{{"invoke", "InvokeToolBody"}, {"stream", "StreamToolBody"}, {"start", "StartToolBody"}} {
		schema, err := c.Compile("urn:toolgate:openapi#/components/schemas/" + verb.schema)
		if err != nil {
			t.Fatal(err)
		}
		desc := ""
		if p, ok := parsed.(map[string]any)["components"].(map[string]any)["schemas"].(map[string]any)[verb.schema].(map[string]any)["properties"].(map[string]any)["arguments_json"].(map[string]any); ok {
			desc, _ = p["description"].(string)
		}
		if !strings.Contains(desc, "JSON object") {
			t.Errorf("%s.arguments_json does not say it is a JSON object's text: %q", verb.schema, desc)
		}
		for _, body := range []string{
			`{"arguments": {"a": 1}, "arguments_json": "{\"a\": 1}"}`,
			`{"arguments": {}, "arguments_json": "{}"}`,
			`{"arguments": {}, "arguments_json": "{\"a\": 1}"}`,
			`{"arguments_json": "{\"a\": 1}", "arguments": {}}`,
			`{"arguments": null, "arguments_json": "{\"a\": 1}"}`,
			`{"arguments": {"a": 1}, "arguments_json": ""}`,
			`{"arguments": {"a": 1}, "arguments_json": null}`,
			`{"arguments_json": "{\"a\": 1}"}`,
			`{"arguments": {"a": 1}}`,
		} {
			var v any
			if err := json.Unmarshal([]byte(body), &v); err != nil {
				t.Fatal(err)
			}
			allowed := schema.Validate(v) == nil
			resp, err := http.Post(env.httpBase+"/v1/tools/echo:"+verb.verb, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			accepted := resp.StatusCode == http.StatusOK
			if allowed != accepted {
				t.Errorf(":%s %s: the document allows it: %v; the gateway answers %s %s", verb.verb, body, allowed, resp.Status, b)
			}
			if accepted && verb.verb == "invoke" && strings.Contains(body, `\"a\": 1`) && !bytes.Contains(b, []byte(`\"a\":`)) && !bytes.Contains(b, []byte(`"a":`)) {
				t.Errorf(":invoke %s: %s, want arguments_json's arguments echoed, whatever the order", body, b)
			}
			if !accepted && (resp.StatusCode != http.StatusBadRequest || !bytes.Contains(b, []byte("ARGUMENTS_CONFLICT"))) {
				t.Errorf(":%s %s: %s %s, want 400 ARGUMENTS_CONFLICT", verb.verb, body, resp.Status, b)
			}
		}
	}
}
