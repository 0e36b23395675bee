package server

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/argsjson"
	"github.com/toolgate/toolgate/internal/registry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
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

func TestEncodeArguments(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		strict  bool
		args    map[string]any
		want    string
		mention string // non-empty: INVALID_ARGUMENT mentioning this
	}{
		{"all types", false, map[string]any{"s": "x", "n": 1.5, "i": 3.0, "b": true, "o": map[string]any{"k": nil}, "a": []any{1.0, "two"}},
			`{"a":[1,"two"],"b":true,"i":3,"n":1.5,"o":{"k":null},"s":"x"}`, ""},
		{"extra passes when not strict", false, map[string]any{"s": "x", "extra": 1.0}, `{"extra":1,"s":"x"}`, ""},
		{"extra rejected when strict", true, map[string]any{"s": "x", "extra": 1.0}, "", `unknown argument "extra"`},
		{"missing required", false, map[string]any{"n": 1.0}, "", `missing required argument "s"`},
		{"wrong type", false, map[string]any{"s": 5.0}, "", `argument "s" must be of type string, got number`},
		{"integer with fraction", false, map[string]any{"s": "x", "i": 1.5}, "", `argument "i" must be of type integer`},
		{"null is no type", false, map[string]any{"s": nil}, "", `argument "s" must be of type string, got null`},
		{"escapes", false, map[string]any{"s": "q\"\\\n\t\x01é"}, `{"s":"q\"\\\n\t\u0001é"}`, ""},
		{"large integers stay integers", false, map[string]any{"s": "x", "n": 1e6}, `{"n":1000000,"s":"x"}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, err := structpb.NewStruct(c.args)
			if err != nil {
				t.Fatal(err)
			}
			got, err := encodeArguments(tool(c.strict), s)
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
}

func TestEncodeArgumentsRejectsNonFiniteAndDeepNesting(t *testing.T) {
	t.Parallel()
	nan := &structpb.Struct{Fields: map[string]*structpb.Value{"s": structpb.NewStringValue("x"), "n": structpb.NewNumberValue(math.NaN())}}
	if _, err := encodeArguments(tool(false), nan); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("NaN: %v", err)
	}
	v := structpb.NewStringValue("leaf")
	for range maxDepth + 5 {
		v = structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{v}})
	}
	deep := &structpb.Struct{Fields: map[string]*structpb.Value{"s": structpb.NewStringValue("x"), "d": v}}
	if _, err := encodeArguments(tool(false), deep); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "nest deeper") {
		t.Fatalf("deep nesting: %v", err)
	}
}

// FuzzAppendString: any string encodes to valid JSON that decodes back to
// the same text (invalid UTF-8 becomes U+FFFD, as json.Marshal does).
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "\"\\\n", "\xff\xfe", "é😀", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendString(nil, s)
		var back string
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("invalid JSON %q: %v", b, err)
		}
		want, _ := json.Marshal(s)
		var wantBack string
		_ = json.Unmarshal(want, &wantBack)
		if back != wantBack {
			t.Fatalf("round trip %q → %q, want %q", s, back, wantBack)
		}
	})
}

func TestPage(t *testing.T) {
	t.Parallel()
	keys := []string{"a", "b", "c", "d", "e"}
	key := func(i int) string { return keys[i] }
	var got []string
	token := ""
	for range 10 {
		start, end, next, err := page(len(keys), key, 2, token)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, keys[start:end]...)
		if next == "" {
			break
		}
		token = next
	}
	if strings.Join(got, "") != "abcde" {
		t.Fatalf("pages joined to %v", got)
	}
	if _, _, _, err := page(5, key, -1, ""); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("negative size: %v", err)
	}
	if _, _, _, err := page(5, key, 1, "!!"); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad token: %v", err)
	}
}

func TestParseJSONValue(t *testing.T) {
	t.Parallel()
	for text, isJSON := range map[string]bool{
		`{"a": 1}`: true, ` [1, 2]`: true, `"s"`: true, `-1.5`: true, `true`: true, `null`: true,
		`plain words`: false, ``: false, `{not json`: false, `12 monkeys`: false, `[1,]`: false, `tru`: false,
	} {
		if got := parseJSONValue(text) != nil; got != isJSON {
			t.Errorf("parseJSONValue(%q) parsed=%v, want %v", text, got, isJSON)
		}
	}
}

// TestEncodeArgumentsJSONMatchesStruct feeds the same JSON text to both
// paths — as JSON text (argsjson, REST and MCP) and as a decoded Struct
// (gRPC) — and wants the same outcome: the same error, or arguments that
// mean the same JSON.
func TestEncodeArgumentsJSONMatchesStruct(t *testing.T) {
	t.Parallel()
	deep := `{"s":"x","d":` + strings.Repeat("[", maxDepth+5) + strings.Repeat("]", maxDepth+5) + `}`
	refused := 0
	for _, text := range []string{
		`{}`,
		`{"s": "x", "n": 1.5, "i": 3, "b": true, "o": {"k": null}, "a": [1, "two"]}`,
		`{"s": "x", "i": 3.0}`,
		`{"s": "x", "i": 1.5}`,
		`{"s": "x", "n": 7, "extra": [1, {"y": 2}]}`,
		`{"n": 1}`,
		`{"s": 5}`,
		`{"s": null}`,
		`{"s": true}`,
		`{"s": "x", "o": []}`,
		`{"s": "x", "a": {}}`,
		`{"s": "q\"\\\n\té\u0001"}`,
		`{"s": "x", "big": 12345678901234567890}`,
		`{"s": "x", "s": "y"}`,
		`{"s": "x", "o": {"k": 1, "k": 2}}`,
		`{"\u0073": "escaped key"}`,
		deep,
	} {
		for _, strict := range []bool{false, true} {
			var st structpb.Struct
			serr := protojson.Unmarshal([]byte(text), &st)
			want, werr := "", serr
			if serr == nil {
				want, werr = encodeArguments(tool(strict), &st)
			}
			// Only text Compact takes reaches the JSON path; the rest
			// is decoded in full by the front door, as Struct.
			raw, ok := argsjson.Compact([]byte(text))
			if !ok {
				refused++
				continue
			}
			got, gerr := encodeArgumentsJSON(tool(strict), raw)
			if (werr == nil) != (gerr == nil) {
				t.Errorf("%s (strict %v): Struct path %q, %v; JSON path %q, %v", text, strict, want, werr, got, gerr)
				continue
			}
			if werr != nil {
				if serr == nil && gerr.Error() != werr.Error() {
					t.Errorf("%s (strict %v): errors differ:\n Struct %v\n JSON   %v", text, strict, werr, gerr)
				}
				if status.Code(gerr) != codes.InvalidArgument {
					t.Errorf("%s: JSON path error %v is not INVALID_ARGUMENT", text, gerr)
				}
				continue
			}
			var w, g any
			if json.Unmarshal([]byte(want), &w) != nil || json.Unmarshal([]byte(got), &g) != nil || !reflect.DeepEqual(w, g) {
				t.Errorf("%s (strict %v): Struct path %s, JSON path %s", text, strict, want, got)
			}
		}
	}
	if refused != 2*8 {
		t.Errorf("Compact refused %d of the cases, want 16 (8 texts, twice)", refused)
	}
	// Text that is not a compact object cannot have come from a front
	// door: an internal error, not the caller's.
	if _, err := encodeArgumentsJSON(tool(false), []byte(`["s"]`)); status.Code(err) != codes.Internal {
		t.Errorf("not an object: %v, want INTERNAL", err)
	}
}
