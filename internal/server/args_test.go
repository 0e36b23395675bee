package server

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/registry"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
