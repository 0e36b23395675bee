package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestEncodeRequest(t *testing.T) {
	got := EncodeRequest(Request{User: "alice"})
	if want := `{"user":"alice","config":"{}","arguments":"{}"}`; string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	got = EncodeRequest(Request{User: "u", Config: `{"style": "pun"}`, Arguments: `{"topic":"x"}`})
	if want := `{"user":"u","config":"{\"style\": \"pun\"}","arguments":"{\"topic\":\"x\"}"}`; string(got) != want {
		t.Fatalf("config and arguments must be strings holding JSON: got %s", got)
	}
}

func TestDecodeResponse(t *testing.T) {
	cases := []struct {
		name, in string
		want     Response
		bad      bool
	}{
		{"success", `{"error": null, "response": "hi", "end_of_stream": true}`, Response{Response: "hi", EndOfStream: true}, false},
		{"error", `{"error": {"type": "tool-service-error", "message": "boom"}, "response": "", "end_of_stream": true}`,
			Response{Error: &Error{Type: "tool-service-error", Message: "boom"}, EndOfStream: true}, false},
		{"missing end_of_stream is false", `{"response": "chunk"}`, Response{Response: "chunk"}, false},
		{"unknown keys ignored", `{"response": "x", "end_of_stream": true, "extra": [1]}`, Response{Response: "x", EndOfStream: true}, false},
		{"empty error object is no error", `{"error": {}, "response": "x", "end_of_stream": true}`, Response{Response: "x", EndOfStream: true}, false},
		{"not JSON", `oops`, Response{}, true},
		{"array", `[]`, Response{}, true},
		{"string", `"x"`, Response{}, true},
		{"wrong type", `{"response": 1}`, Response{}, true},
		{"error as string", `{"error": "boom"}`, Response{}, true},
		{"empty", ``, Response{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := DecodeResponse([]byte(c.in))
			if c.bad {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("got %+v, %v; want ErrMalformed", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(c.want)
			if string(gj) != string(wj) {
				t.Fatalf("got %s, want %s", gj, wj)
			}
		})
	}
}

func TestTopics(t *testing.T) {
	cases := []struct{ in, want, err string }{
		{"request:tg:joke", "non-persistent://tg/request/joke", ""},
		{"response:tg:joke", "non-persistent://tg/response/joke", ""},
		{"flow:tg:x", "persistent://tg/flow/x", ""},
		{"non-persistent://tg/request/joke", "non-persistent://tg/request/joke", ""},
		{"persistent://public/default/a-b.c", "persistent://public/default/a-b.c", ""},
		{"joke", "", "neither a full topic name"},
		{"http://a/b/c", "", "must start with persistent://"},
		{"non-persistent://tg/request", "", "tenant/namespace/topic"},
		{"non-persistent://tg/req uest/x", "", "invalid namespace"},
		{"request:tg:", "", "invalid topic"},
	}
	for _, c := range cases {
		got, err := ExpandQueue(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ExpandQueue(%q) = %q, %v; want error containing %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ExpandQueue(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	if RequestTopic("joke") != "non-persistent://tg/request/joke" || ResponseTopic("joke") != "non-persistent://tg/response/joke" {
		t.Fatal("short topic form")
	}
}

func TestDeadlineProperty(t *testing.T) {
	at := time.UnixMilli(1767000000123)
	got, ok := ParseDeadline(FormatDeadline(at))
	if !ok || !got.Equal(at) {
		t.Fatalf("round trip gave %v %v", got, ok)
	}
	for _, bad := range []string{"", "soon", "-5", "0"} {
		if _, ok := ParseDeadline(bad); ok {
			t.Errorf("ParseDeadline(%q) accepted", bad)
		}
	}
}

// FuzzDecodeResponse: arbitrary reply bytes give a value or an error, never
// a panic; what decodes re-encodes and decodes to the same thing.
func FuzzDecodeResponse(f *testing.F) {
	for _, s := range []string{`{"error": null, "response": "hi", "end_of_stream": true}`, `{"error": {"type": "x"}}`, `[]`, `{`, "\x00", `{"response": "\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeResponse(b)
		if err != nil {
			return
		}
		enc := EncodeResponse(r)
		r2, err := DecodeResponse(enc)
		if err != nil || r2.Response != r.Response || r2.EndOfStream != r.EndOfStream || (r2.Error == nil) != (r.Error == nil) {
			t.Fatalf("round trip changed %+v into %+v (%v)", r, r2, err)
		}
	})
}

// FuzzDecodeRequest: whatever decodes, encodes again to an envelope that
// decodes to the same request (empty config and arguments become "{}").
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"user": "a", "config": "{}", "arguments": "{}"}`))
	f.Add([]byte(`{"config": {}}`))
	f.Add([]byte(`{"user": "\u00e9\n", "arguments": "{\"q\": [1, 2]}"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRequest(b)
		if err != nil {
			return
		}
		enc := EncodeRequest(r)
		r2, err := DecodeRequest(enc)
		if err != nil {
			t.Fatalf("%q re-encoded as %q, which does not decode: %v", b, enc, err)
		}
		if r.Config == "" {
			r.Config = "{}"
		}
		if r.Arguments == "" {
			r.Arguments = "{}"
		}
		if r2 != r {
			t.Fatalf("round trip changed %+v into %+v", r, r2)
		}
	})
}

// FuzzEncodeRequest: whatever the strings hold, the envelope is valid JSON
// that decodes to what encoding/json's own encoding decodes to.
func FuzzEncodeRequest(f *testing.F) {
	f.Add("alice", `{"a":1}`, `{"q":"x"}`)
	f.Add("", "", "")
	f.Add("é\u2028<>&", "\x00\x1f\"\\\n\r\t", "\xff\xfe bad utf-8 \xc3")
	f.Fuzz(func(t *testing.T, user, config, args string) {
		r := Request{User: user, Config: config, Arguments: args}
		got := EncodeRequest(r)
		if !json.Valid(got) {
			t.Fatalf("not valid JSON: %q", got)
		}
		var mine, theirs Request
		if err := json.Unmarshal(got, &mine); err != nil {
			t.Fatal(err)
		}
		if r.Config == "" {
			r.Config = "{}"
		}
		if r.Arguments == "" {
			r.Arguments = "{}"
		}
		ref, _ := json.Marshal(r)
		_ = json.Unmarshal(ref, &theirs)
		if mine != theirs {
			t.Fatalf("decoded %+v, encoding/json's encoding decodes to %+v", mine, theirs)
		}
	})
}

// FuzzEncodeResponse: the reply envelope decodes to what encoding/json's
// own encoding of it decodes to, with and without an error.
func FuzzEncodeResponse(f *testing.F) {
	f.Add("chunk", false, "", "", false)
	f.Add("", true, "tool-service-error", "boom \"quoted\"\n", true)
	f.Add("\xff\x00<&>", true, "", "", false)
	f.Fuzz(func(t *testing.T, text string, hasErr bool, typ, msg string, eos bool) {
		r := Response{Response: text, EndOfStream: eos}
		if hasErr {
			r.Error = &Error{Type: typ, Message: msg}
		}
		got := EncodeResponse(r)
		if !json.Valid(got) {
			t.Fatalf("not valid JSON: %q", got)
		}
		ref, _ := json.Marshal(r)
		var mine, theirs map[string]any
		if err := json.Unmarshal(got, &mine); err != nil {
			t.Fatal(err)
		}
		_ = json.Unmarshal(ref, &theirs)
		mj, _ := json.Marshal(mine)
		tj, _ := json.Marshal(theirs)
		if string(mj) != string(tj) {
			t.Fatalf("decoded %s, encoding/json's encoding decodes to %s", mj, tj)
		}
	})
}
