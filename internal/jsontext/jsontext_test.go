package jsontext

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

func TestCompact(t *testing.T) {
	deep := strings.Repeat(`{"a":`, MaxDepth) + "1" + strings.Repeat("}", MaxDepth)
	tooDeep := strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1)
	var many, manyDup strings.Builder
	many.WriteString("{")
	manyDup.WriteString("{")
	for i := range 40 {
		if i > 0 {
			many.WriteString(",")
			manyDup.WriteString(",")
		}
		fmt.Fprintf(&many, `"k%02d":1`, i)
		fmt.Fprintf(&manyDup, `"k%02d":1`, i%30)
	}
	many.WriteString("}")
	manyDup.WriteString("}")
	for _, tc := range []struct {
		in, want string // want "" = refused, with err
		err      error
	}{
		{`{}`, `{}`, nil},
		{" \n{ } ", `{}`, nil},
		{`{"msg": "hi there", "n": 3, "ok": true, "x": null}`, `{"msg":"hi there","n":3,"ok":true,"x":null}`, nil},
		{`{"a": [1, -2, {"b": [ ]}, "c\"d"], "e": {}}`, `{"a":[1,-2,{"b":[]},"c\"d"],"e":{}}`, nil},
		{`{"s": "tab\tand é and \u00e9"}`, `{"s":"tab\tand é and \u00e9"}`, nil},
		// numbers exactly as written
		{`{"big": 123456789012345678, "p": 9007199254740993}`, `{"big":123456789012345678,"p":9007199254740993}`, nil},
		{`{"f": 1.10, "z": -0.0, "e": 1E3, "t": 1e-400, "h": 1e999}`, `{"f":1.10,"z":-0.0,"e":1E3,"t":1e-400,"h":1e999}`, nil},
		{`{"\u0061": 1}`, `{"\u0061":1}`, nil},
		{`{"a": {"a": 1}, "b": {"a": 1}, "c": [{"a": 1}, {"a": 2}]}`, `{"a":{"a":1},"b":{"a":1},"c":[{"a":1},{"a":2}]}`, nil},
		{`{"s": "\ud83d\ude00"}`, `{"s":"\ud83d\ude00"}`, nil},
		{deep, deep, nil},
		{many.String(), many.String(), nil},
		// refused
		{`{"a": 1, "a": 2}`, "", ErrDuplicate},
		{`{"a": 1, "\u0061": 2}`, "", ErrDuplicate},
		{`{"\u0061": 1, "b": 2, "a": 3}`, "", ErrDuplicate},
		{`{"a": {"x": 1}, "b": {"y": 1, "y": 2}}`, "", ErrDuplicate},
		{`{"o": {"a": 1, "a": 2}}`, "", ErrDuplicate},
		{manyDup.String(), "", ErrDuplicate},
		{"{\"s\": \"\xff\"}", "", ErrUTF8},
		{`[1, 2]`, "", ErrNotObject},
		{`"text"`, "", ErrNotObject},
		{`{"a": 1`, "", ErrSyntax},
		{`{"a": 1} {}`, "", ErrSyntax},
		{``, "", ErrSyntax},
		{tooDeep, "", ErrDepth},
	} {
		out, err := Compact([]byte(tc.in))
		if got := string(out); got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("Compact(%.40q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestMembers(t *testing.T) {
	obj, err := Compact([]byte(`{"msg": "a,b}", "list": [1, {"x": "]"}], "o": {"k": [true]}, "n": -4, "z": null, "f": 2.50}`))
	if err != nil {
		t.Fatal(err)
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
	want := map[string]string{"msg": `"a,b}"`, "list": `[1,{"x":"]"}]`, "o": `{"k":[true]}`, "n": "-4", "z": "null", "f": "2.50"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("members = %v, want %v", got, want)
	}
	wantKinds := map[string]string{"msg": "string", "list": "array", "o": "object", "n": "number", "z": "null", "f": "number"}
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

func TestIsInteger(t *testing.T) {
	for v, want := range map[string]bool{"1": true, "-3": true, "1.0": true, "1e3": true, "123456789012345678901": true,
		"1.5": false, "1e-3": false, `"1"`: false, "true": false} {
		if got := (Member{Value: []byte(v)}).IsInteger(); got != want {
			t.Errorf("IsInteger(%s) = %v, want %v", v, got, want)
		}
	}
}

// FuzzCompact: whatever Compact accepts is the same JSON (numbers compared
// as text), and the top-level members are the object's.
func FuzzCompact(f *testing.F) {
	for _, s := range []string{`{}`, `{"a": [1, {"b": "c"}], "d": null, "e": true}`, `{"a": 1.5}`, `{"a":1,"a":1}`, `{"s":"\u00e9\n"}`, `[]`, `{"x": {"y": -0}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := Compact(data)
		if err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("Compact accepted %q, which is not JSON", data)
		}
		want, got := decode(t, data), decode(t, out)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("Compact(%q) = %q (%v); the input reads %v", data, out, got, want)
		}
		if bytes.ContainsAny(out, "\n\t") && !bytes.Contains(data, out) {
			// white space may only remain inside strings, as escapes
			var dummy any
			if json.Unmarshal(out, &dummy) != nil {
				t.Fatalf("Compact(%q) = %q", data, out)
			}
		}
		obj, _ := got.(map[string]any)
		ms, ok := Members(out, nil)
		if !ok || len(ms) != len(obj) {
			t.Fatalf("Members(%q) = %d members, %v; want %d", out, len(ms), ok, len(obj))
		}
	})
}

func decode(t *testing.T, data []byte) any {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%q: %v", data, err)
	}
	return v
}

// FuzzCompactOnePass: the one pass accepts exactly what the passes it
// falls back on accept, and writes the same text.
func FuzzCompactOnePass(f *testing.F) {
	for _, s := range []string{`{}`, ` {"a" : [1, -2.5e+3, {"b": "c\"\u00e9\/"}], "d": null, "e": true, "f": false} `,
		`{"a":1,"a":1}`, `{"\u0061":1,"a":2}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":1e}`, `{"a":tru}`, `{"a":[1,]}`, `{"a":1,}`,
		`{"a":"\x"}`, `{"a":"\u12"}`, "{\"a\":\"\t\"}", "{\"a\":\"\xff\"}", `{"a":1}x`, `{"a":1} `, `[1]`, `{"a" 1}`, `{,}`, `{"a":[[[]]]}`} {
		f.Add([]byte(s))
	}
	f.Add([]byte(strings.Repeat(`{"a":`, MaxDepth) + "1" + strings.Repeat("}", MaxDepth)))
	f.Add([]byte(strings.Repeat(`[`, MaxDepth) + strings.Repeat("]", MaxDepth)))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := compactChecked(data)
		want, err := compactTrusting(data)
		if ok != (err == nil) || !bytes.Equal(got, want) {
			t.Fatalf("%q: one pass %q, %v; in passes %q, %v", data, got, ok, want, err)
		}
	})
}

// The one pass takes the common bodies (and Compact does not fall back).
func TestCompactOnePassTakes(t *testing.T) {
	for _, s := range []string{`{}`, `{"arguments":{"msg":"hello"}}`, ` {"a" : [1, -0.5E-3, {"b": "c\"\u00e9\/\b\f\n\r\t"}], "d": null, "e": true, "f": false} `,
		strings.Repeat(`{"a":`, MaxDepth) + "1" + strings.Repeat("}", MaxDepth)} {
		if _, ok := compactChecked([]byte(s)); !ok {
			t.Errorf("one pass refused %q", s)
		}
	}
}

// BenchmarkCompact: a REST call's body, in one pass and in the passes
// Compact falls back on.
func BenchmarkCompact(b *testing.B) {
	body := []byte(`{"arguments": {"msg": "` + strings.Repeat("x", 32) + `", "n": 12, "ok": true}}`)
	b.Run("one-pass", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := compactChecked(body); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("passes", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := compactTrusting(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzValid: Valid says what encoding/json.Valid says, and its one pass
// takes nothing encoding/json refuses.
func FuzzValid(f *testing.F) {
	for _, s := range []string{`{}`, ` [1, -2.5e+3, {"b": "c\"\u00e9\/"}, null, true, false] `, `"x"`, `12`, `-0.0e-0`, `01`, `1.`, `-`, `1e`,
		`tru`, `[1,]`, `{"a":1,}`, `"\x"`, `"\u12"`, "\"\t\"", "\"\xff\"", `{"a":1}x`, `{"a" 1}`, `{,}`, `[[[]]]`, ``, ` `, `{"a":1,"a":2}`} {
		f.Add([]byte(s))
	}
	f.Add([]byte(strings.Repeat(`[`, MaxDepth+1) + strings.Repeat("]", MaxDepth+1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := Valid(data), json.Valid(data); got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", data, got, want)
		}
		if got := ValidString(string(data)); got != json.Valid(data) {
			t.Fatalf("ValidString(%q) = %v", data, got)
		}
		if rest, ok := checkedValue(skipSpace(data), 0); ok && len(skipSpace(rest)) == 0 && !json.Valid(data) {
			t.Fatalf("the one pass took %q, which is not JSON", data)
		}
	})
}

// BenchmarkValid: a tool's JSON output, in one pass and by encoding/json.
func BenchmarkValid(b *testing.B) {
	out := []byte(`{"msg": "` + strings.Repeat("x", 32) + `", "n": [1, 2.5, true, null]}`)
	for _, v := range []struct {
		name  string
		valid func([]byte) bool
	}{{"one-pass", Valid}, {"encoding-json", json.Valid}} {
		b.Run(v.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !v.valid(out) {
					b.Fatal("refused")
				}
			}
		})
	}
}
