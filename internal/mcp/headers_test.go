package mcp

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/registry"
)

func TestParamHeadersMatch(t *testing.T) {
	t.Parallel()
	params := []registry.HeaderParam{
		{Header: "Region", Argument: "region", Type: "string"},
		{Header: "Priority", Argument: "priority", Type: "integer"},
		{Header: "Verbose", Argument: "verbose", Type: "boolean"},
	}
	cases := []struct {
		name    string
		header  map[string][]string
		args    string
		mention string // "": accepted
	}{
		{"all present", map[string][]string{"Mcp-Param-Region": {"us-west1"}, "Mcp-Param-Priority": {"42"}, "Mcp-Param-Verbose": {"false"}},
			`{"region": "us-west1", "priority": 42, "verbose": false}`, ""},
		{"none given, none sent", nil, `{"other": 1}`, ""},
		{"null argument, no header", nil, `{"region": null}`, ""},
		{"base64", map[string][]string{"Mcp-Param-Region": {"=?base64?SGVsbG8=?="}}, `{"region": "Hello"}`, ""},
		{"base64 of non-ASCII", map[string][]string{"Mcp-Param-Region": {"=?base64?SGVsbG8sIOS4lueVjA==?="}}, `{"region": "Hello, 世界"}`, ""},
		{"no prefix is literal", map[string][]string{"Mcp-Param-Region": {"SGVsbG8="}}, `{"region": "SGVsbG8="}`, ""},
		{"no suffix is literal", map[string][]string{"Mcp-Param-Region": {"=?base64?SGVsbG8="}}, `{"region": "=?base64?SGVsbG8="}`, ""},
		{"integer written otherwise", map[string][]string{"Mcp-Param-Priority": {"42"}}, `{"priority": 42.0}`, ""},
		{"missing", nil, `{"region": "us-west1"}`, "the Mcp-Param-Region header must carry its value"},
		{"unexpected", map[string][]string{"Mcp-Param-Region": {"us-west1"}}, `{}`, "is sent but argument \"region\" is not given"},
		{"mismatch", map[string][]string{"Mcp-Param-Region": {"eu-west1"}}, `{"region": "us-west1"}`, "does not carry the value"},
		{"twice", map[string][]string{"Mcp-Param-Region": {"a", "a"}}, `{"region": "a"}`, "more than once"},
		{"base64 without padding", map[string][]string{"Mcp-Param-Region": {"=?base64?SGVsbG8?="}}, `{"region": "Hello"}`, "not valid Base64"},
		{"base64 off the alphabet", map[string][]string{"Mcp-Param-Region": {"=?base64?SGVs!!!bG8=?="}}, `{"region": "Hello"}`, "not valid Base64"},
		{"base64 of a mismatch", map[string][]string{"Mcp-Param-Region": {"=?base64?SGVsbG8=?="}}, `{"region": "Hi"}`, "does not carry the value"},
		{"integer mismatch", map[string][]string{"Mcp-Param-Priority": {"41"}}, `{"priority": 42}`, "does not carry the value"},
		{"integer in hex", map[string][]string{"Mcp-Param-Priority": {"0x2A"}}, `{"priority": 42}`, "does not carry the value"},
		{"boolean mismatch", map[string][]string{"Mcp-Param-Verbose": {"True"}}, `{"verbose": true}`, "does not carry the value"},
		{"string for a number", map[string][]string{"Mcp-Param-Region": {"5"}}, `{"region": 5}`, "does not carry the value"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, vs := range c.header {
				for _, v := range vs {
					h.Add(k, v)
				}
			}
			var args map[string]json.RawMessage
			if err := json.Unmarshal([]byte(c.args), &args); err != nil {
				t.Fatal(err)
			}
			err := paramHeadersMatch(h, params, args)
			switch {
			case c.mention == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.mention != "" && (err == nil || !strings.Contains(err.Error(), c.mention)):
				t.Fatalf("error %v, want one saying %q", err, c.mention)
			}
		})
	}
}
