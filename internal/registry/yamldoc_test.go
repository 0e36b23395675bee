package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var yamlSeeds = []string{
	"a: 1\nb: [x, 2.5, true, null, ~]\nc: {d: '3', e: \"\"}\n",
	"base: &b {x: 1, y: 2}\nm:\n  <<: *b\n  y: 3\n",
	"a: &a {p: 1}\nb: &b {p: 2, q: 2}\nm:\n  <<: [*a, *b]\n",
	"a: 1\na: 2\n",
	"1: x\n",
	"a: &a [*a]\n",
	"t: 2001-12-14t21:59:43.10-05:00\nn: 0x1F\no: 0o17\nf: 1e3\nbig: 123456789012345678901234567890\n",
	"a: !!binary aGVsbG8=\ns: !!str 12\n",
	"- a\n- b\n",
	"",
	"a: .inf\n",
}

// yamlV3JSON is what the registry decoded before: yaml.v3 into an `any`,
// as JSON.
func yamlV3JSON(data []byte) ([]byte, bool) {
	var y any
	if err := yaml.Unmarshal(data, &y); err != nil {
		return nil, false
	}
	b, err := json.Marshal(y)
	return b, err == nil
}

// FuzzDecodeYAML: the linear decoder gives what yaml.v3 gives for every
// document yaml.v3 decodes into something JSON can hold, and refuses the
// rest without panicking.
func FuzzDecodeYAML(f *testing.F) {
	for _, s := range yamlSeeds {
		f.Add([]byte(s))
	}
	if seed, err := os.ReadFile(filepath.Join("testdata", "seed.yaml")); err == nil {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeYAML(data)
		want, ok := yamlV3JSON(data)
		if err != nil {
			// yaml.v3 turns the keys of a merged mapping into strings
			// ("<<: {0: x}" gives {"0": "x"}, "0: x" an error); the
			// registry refuses a non-string key wherever it stands.
			merged := errors.Is(err, errKeyNotString) && bytes.Contains(data, []byte("<<"))
			if ok && !errors.Is(err, errAliasBudget) && !merged {
				t.Fatalf("refused %q (%v), yaml.v3 gives %s", data, err, want)
			}
			return
		}
		_, jerr := json.Marshal(got)
		if !ok {
			if jerr == nil && bytes.Count(data, []byte("<<")) == 0 {
				// yaml.v3 refused what we took: only its alias limits may do that.
				var y any
				if e := yaml.Unmarshal(data, &y); e != nil && !strings.Contains(e.Error(), "alias") && !strings.Contains(e.Error(), "already defined") {
					t.Fatalf("took %q, yaml.v3 refuses it: %v", data, e)
				}
			}
			return
		}
		if jerr != nil {
			t.Fatalf("%q: got %#v, which JSON cannot hold (%v); yaml.v3 gives %s", data, got, jerr, want)
		}
		// The very values, json.Number and all, that JSON decoding gives.
		dec := json.NewDecoder(bytes.NewReader(want))
		dec.UseNumber()
		var wantVal any
		if err := dec.Decode(&wantVal); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, wantVal) {
			t.Fatalf("%q: got %#v, want %#v", data, got, wantVal)
		}
	})
}

func TestDecodeYAMLRefuses(t *testing.T) {
	cases := map[string]string{
		"duplicate key":   "a: 1\na: 2\n",
		"alias to itself": "a: &a [*a]\n",
		"alias bomb": `a: &a ["x","x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
`,
		"non-string key":                     "1: x\n",
		"non-string key in a merged mapping": "<<: {0: x}\n",
	}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			if v, err := decodeYAML([]byte(doc)); err == nil {
				t.Fatalf("took it: %v", v)
			}
		})
	}
}
