package toolcall

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/jsontext"
	"github.com/toolgate/toolgate/internal/registry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func tool(strict bool) *registry.Tool {
	return &registry.Tool{Name: "t", Strict: strict, Arguments: []registry.Argument{
		{Name: "s", Type: "string", Required: true},
		{Name: "n", Type: "number"},
		{Name: "i", Type: "integer"},
		{Name: "b", Type: "boolean"},
		{Name: "o", Type: "object"},
		{Name: "a", Type: "array"},
	}}
}

func TestCheckArguments(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		strict  bool
		args    string
		want    string
		mention string // non-empty: INVALID_ARGUMENT mentioning this
	}{
		{"all types", false, `{"s": "x", "n": 1.5, "i": 3, "b": true, "o": {"k": null}, "a": [1, "two"]}`,
			`{"s":"x","n":1.5,"i":3,"b":true,"o":{"k":null},"a":[1,"two"]}`, ""},
		{"numbers exactly as written", false, `{"s": "x", "big": 123456789012345678, "p": 9007199254740993, "z": -0.0, "tiny": 1e-400, "f": 1.10}`,
			`{"s":"x","big":123456789012345678,"p":9007199254740993,"z":-0.0,"tiny":1e-400,"f":1.10}`, ""},
		{"integer written with a fraction", false, `{"s": "x", "i": 3.0}`, `{"s":"x","i":3.0}`, ""},
		{"integer in exponent form", false, `{"s": "x", "i": 1e3}`, `{"s":"x","i":1e3}`, ""},
		{"extra passes when not strict", false, `{"s": "x", "extra": 1}`, `{"s":"x","extra":1}`, ""},
		{"extra rejected when strict", true, `{"s": "x", "extra": 1}`, "", `unknown argument "extra"`},
		{"escaped key matches", true, `{"\u0073": "x"}`, `{"\u0073":"x"}`, ""},
		{"missing required", false, `{"n": 1}`, "", `missing required argument "s"`},
		{"wrong type", false, `{"s": 5}`, "", `argument "s" must be of type string, got number`},
		{"integer with fraction", false, `{"s": "x", "i": 1.5}`, "", `argument "i" must be of type integer`},
		{"null is no type", false, `{"s": null}`, "", `argument "s" must be of type string, got null`},
		{"object for array", false, `{"s": "x", "a": {}}`, "", `argument "a" must be of type array, got object`},
		{"escapes kept", false, `{"s": "q\"\\\n\té\u0001"}`, `{"s":"q\"\\\n\té\u0001"}`, ""},
		{"repeated key", false, `{"s": "x", "s": "y"}`, "", "key twice"},
		{"repeated nested key", false, `{"s": "x", "o": {"k": 1, "k": 2}}`, "", "key twice"},
		{"not an object", false, `["s"]`, "", "must be a JSON object"},
		{"not JSON", false, `{"s": `, "", "not valid JSON"},
		{"too deep", false, `{"s": "x", "d": ` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`, "", "nests deeper"},
		{"invalid UTF-8", false, "{\"s\": \"\xff\"}", "", "UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := checkArguments(tool(c.strict), "t", []byte(c.args), false)
			// A door's compacted text, handed over as such, reads the same.
			if compact, cerr := jsontext.Compact([]byte(c.args)); cerr == nil {
				got2, err2 := checkArguments(tool(c.strict), "t", compact, true)
				if got2 != got || status.Code(err2) != status.Code(err) || (err != nil && err2.Error() != err.Error()) {
					t.Fatalf("compacted: got %q, %v; unchecked form gave %q, %v", got2, err2, got, err)
				}
			}
			if c.mention != "" {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), c.mention) {
					t.Fatalf("got %q, %v; want INVALID_ARGUMENT mentioning %q", got, err, c.mention)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %s, %v; want %s", got, err, c.want)
			}
			if !json.Valid([]byte(got)) {
				t.Fatalf("invalid JSON %s", got)
			}
		})
	}
	for _, empty := range []string{"", " ", "null"} {
		if got, err := checkArguments(&registry.Tool{Name: "t"}, "t", []byte(empty), false); err != nil || got != "{}" {
			t.Errorf("%q: %q, %v; want {}", empty, got, err)
		}
	}
}

// FuzzCheckArguments: whatever the text, the check either refuses it as
// the caller's mistake or passes on JSON that means what the caller sent.
func FuzzCheckArguments(f *testing.F) {
	for _, s := range []string{`{}`, `{"s":"x"}`, `{"s":"x","n":1e999}`, `{"a":[{"b":{}}]}`, `[1]`, `{"s":"\u00e9"}`, `{"s" : "x" , "i" : -0 }`} {
		f.Add(s)
	}
	t := tool(false)
	f.Fuzz(func(tt *testing.T, s string) {
		got, err := checkArguments(t, t.Name, []byte(s), false)
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument {
				tt.Fatalf("%q: %v, want INVALID_ARGUMENT", s, err)
			}
			return
		}
		if !json.Valid([]byte(got)) {
			tt.Fatalf("%q passed as invalid JSON %q", s, got)
		}
		if strings.TrimSpace(s) == "" || strings.TrimSpace(s) == "null" {
			return
		}
		if !json.Valid([]byte(s)) {
			tt.Fatalf("%q is not JSON, yet passed", s)
		}
		// Numbers as text (json.Number): the same text means the same.
		in, out := decodeNumbers(s), decodeNumbers(got)
		a, _ := json.Marshal(in)
		b, _ := json.Marshal(out)
		if string(a) != string(b) {
			tt.Fatalf("%q passed on as %q, which means something else", s, got)
		}
	})
}

func decodeNumbers(s string) any {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	_ = d.Decode(&v)
	return v
}
