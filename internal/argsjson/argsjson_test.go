package argsjson

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestCompact(t *testing.T) {
	deep := strings.Repeat(`{"a":`, MaxDepth) + "1" + strings.Repeat("}", MaxDepth)
	tooDeep := strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1)
	for _, tc := range []struct {
		in, want string // want "" = refused
	}{
		{`{}`, `{}`},
		{" \n{ } ", `{}`},
		{`{"msg": "hi there", "n": 3, "ok": true, "x": null}`, `{"msg":"hi there","n":3,"ok":true,"x":null}`},
		{`{"a": [1, -2, {"b": [ ]}, "c\"d"], "e": {}}`, `{"a":[1,-2,{"b":[]},"c\"d"],"e":{}}`},
		{`{"s": "tab\tand é and \u00e9"}`, `{"s":"tab\tand é and \u00e9"}`},
		{`{"big": 999999999999999}`, `{"big":999999999999999}`},
		{deep, deep},
		// refused: the full decoder decides
		{`{"big": 1000000000000000}`, ""},
		{`{"f": 1.5}`, ""},
		{`{"e": 1e3}`, ""},
		{`{"e": [2E3]}`, ""},
		{`{"a": 1, "a": 2}`, ""},
		{`{"o": {"a": 1, "a": 2}}`, ""},
		{`{"\u0061": 1}`, ""},
		{`{"s": "\ud83d\ude00"}`, ""},
		{"{\"s\": \"\xff\"}", ""},
		{`[1, 2]`, ""},
		{`"text"`, ""},
		{`{"a": 1`, ""},
		{`{"a": 1} {}`, ""},
		{``, ""},
		{tooDeep, ""},
	} {
		out, ok := Compact([]byte(tc.in))
		if got := string(out); ok != (tc.want != "") || got != tc.want {
			t.Errorf("Compact(%.40q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
}

func TestMembers(t *testing.T) {
	obj, ok := Compact([]byte(`{"msg": "a,b}", "list": [1, {"x": "]"}], "o": {"k": [true]}, "n": -4, "z": null}`))
	if !ok {
		t.Fatal("Compact refused")
	}
	ms, ok := Members(obj, nil)
	if !ok {
		t.Fatal("Members refused")
	}
	got := map[string]string{}
	kinds := map[string]string{}
	for _, m := range ms {
		got[string(m.Key)] = string(m.Value)
		kinds[string(m.Key)] = m.Kind()
	}
	want := map[string]string{"msg": `"a,b}"`, "list": `[1,{"x":"]"}]`, "o": `{"k":[true]}`, "n": "-4", "z": "null"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("members = %v, want %v", got, want)
	}
	wantKinds := map[string]string{"msg": "string", "list": "array", "o": "object", "n": "number", "z": "null"}
	if !reflect.DeepEqual(kinds, wantKinds) {
		t.Errorf("kinds = %v, want %v", kinds, wantKinds)
	}
	if ms, ok := Members([]byte(`{}`), nil); !ok || len(ms) != 0 {
		t.Errorf("Members({}) = %v, %v", ms, ok)
	}
	for _, bad := range []string{`[1]`, ``, `{"a"}`, `{"a":1`} {
		if _, ok := Members([]byte(bad), nil); ok {
			t.Errorf("Members(%q) accepted", bad)
		}
	}
}

func TestContext(t *testing.T) {
	if _, ok := FromContext(context.Background()); ok {
		t.Error("empty context has arguments")
	}
	raw, ok := FromContext(NewContext(context.Background(), []byte(`{"a":1}`)))
	if !ok || string(raw) != `{"a":1}` {
		t.Errorf("FromContext = %q, %v", raw, ok)
	}
}

// FuzzCompact checks the fast path against the full one: whatever Compact
// accepts, protojson accepts as a Struct with the same content, and the
// top-level members are the Struct's fields.
func FuzzCompact(f *testing.F) {
	for _, s := range []string{`{}`, `{"a": [1, {"b": "c"}], "d": null, "e": true}`, `{"a": 1.5}`, `{"a":1,"a":1}`, `{"s":"\u00e9\n"}`, `[]`, `{"x": {"y": -0}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, ok := Compact(data)
		if !ok {
			return
		}
		var st structpb.Struct
		if err := protojson.Unmarshal(data, &st); err != nil {
			t.Fatalf("Compact accepted %q, protojson refuses it: %v", data, err)
		}
		var got map[string]any
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("Compact(%q) = %q, not JSON: %v", data, out, err)
		}
		if want := st.AsMap(); !reflect.DeepEqual(got, want) {
			t.Fatalf("Compact(%q) = %q (%v); protojson reads %v", data, out, got, want)
		}
		ms, ok := Members(out, nil)
		if !ok || len(ms) != len(got) {
			t.Fatalf("Members(%q) = %d members, %v; want %d", out, len(ms), ok, len(got))
		}
		for _, m := range ms {
			var v any
			if err := json.Unmarshal(m.Value, &v); err != nil || !reflect.DeepEqual(v, got[string(m.Key)]) {
				t.Fatalf("member %q = %s, want %v (%v)", m.Key, m.Value, got[string(m.Key)], err)
			}
		}
	})
}
