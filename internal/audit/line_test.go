package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
)

// TestCallLine: a call's line is one line of JSON with every field, the
// caller's texts escaped whatever they hold.
func TestCallLine(t *testing.T) {
	nasty := "a\"b\\c\nd\te\x01f\xffg</script>\u2028"
	r := &record{kind: kindCall, start: time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC), dur: 1500 * time.Microsecond,
		requestID: "req-1", door: DoorREST, method: toolcall.MethodInvoke, tool: nasty + strings.Repeat("é", 200), set: "desk",
		subject: toolcall.Subject{Source: toolcall.SourceJWT, Issuer: "https://idp.example", Name: nasty}, authenticated: true,
		as:       toolcall.Subject{Source: toolcall.SourceAPIKey, Name: "alice"},
		peerAddr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 4242},
		err:      toolcall.GatewayError(codes.PermissionDenied, "TOOL_DENIED", "no", nil),
		bytesIn:  12, bytesOut: 34, digest: ArgumentsDigest([]byte(`{"a": 1}`)), hasDigest: true,
		args: []byte("{\"a\":\n 1}")}
	var prev Digest
	prev[0] = 0xab
	b := appendLine(nil, r, prev, 7)
	if bytes.ContainsAny(b, "\n\r") {
		t.Fatalf("the line holds a line break:\n%s", b)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	want := map[string]any{
		"prev": prev.String(), "seq": 7.0, "time": "2026-01-02T03:04:05.0000006Z", "event": EventCall,
		"request_id": "req-1", "door": DoorREST, "method": toolcall.MethodInvoke, "set": "desk",
		"subject": "jwt(https://idp.example):" + strings.ToValidUTF8(nasty, "\ufffd"), "as": "api-key:alice",
		"source": "10.0.0.1:4242", "code": "PermissionDenied", "reason": "TOOL_DENIED", "duration_us": 1500.0,
		"bytes_in": 12.0, "bytes_out": 34.0, "args_sha256": ArgumentsDigest([]byte(`{"a":1}`)).String(),
		"arguments": map[string]any{"a": 1.0},
	}
	tool, _ := got["tool"].(string)
	delete(got, "tool")
	if !strings.HasPrefix(tool, strings.ToValidUTF8(nasty, "\ufffd")) || !strings.HasSuffix(tool, "…") || len(tool) > maxText+8 { // the cut, and U+FFFD for the invalid byte
		t.Errorf("tool %q: want the name cut at %d bytes, marked", tool, maxText)
	}
	for k, v := range want {
		if g, err := json.Marshal(got[k]); err != nil || string(g) != string(must(json.Marshal(v))) {
			t.Errorf("%s = %s, want %s", k, g, must(json.Marshal(v)))
		}
		delete(got, k)
	}
	if len(got) > 0 {
		t.Errorf("fields not expected: %v", got)
	}
}

// TestOutcome: the code and reason of what a call returned.
func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{nil, codes.OK, ""},
		{toolcall.HeadersTooLarge(2, 1), codes.ResourceExhausted, toolcall.ReasonHeadersTooLarge},
		{errors.New("boom"), codes.Unknown, ""},
		{context.Canceled, codes.Canceled, ""},
	} {
		code, reason := outcome(c.err)
		if code != c.code || reason != c.reason {
			t.Errorf("outcome(%v) = %s %q, want %s %q", c.err, code, reason, c.code, c.reason)
		}
	}
}

// TestArgumentsDigest: the digest is the compact text's, whatever the
// white space outside strings; the text within strings counts.
func TestArgumentsDigest(t *testing.T) {
	compact := sha256.Sum256([]byte(`{"a":[1,2],"b":"x y\"\t"}`))
	for _, in := range []string{`{"a":[1,2],"b":"x y\"\t"}`, "{ \"a\" : [ 1 ,\n2 ] ,\r\n\t\"b\" : \"x y\\\"\\t\" }"} {
		if got := ArgumentsDigest([]byte(in)); got != compact {
			t.Errorf("ArgumentsDigest(%q) = %s, want %s", in, got, Digest(compact))
		}
	}
	if got := ArgumentsDigest([]byte(`{"b":"x  y"}`)); got == ArgumentsDigest([]byte(`{"b":"x y"}`)) {
		t.Error("white space within a string changed nothing")
	}
	if got, want := ArgumentsDigest(nil), Digest(sha256.Sum256([]byte("{}"))); got != want {
		t.Errorf("no arguments: %s, want the digest of {} %s", got, want)
	}
}

// FuzzAppendString: appendString writes what encoding/json reads back as
// the string json.Marshal writes, on one line.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "a\"b\\c", "\n\r\t\x00\x1f", "\xff\xfe", "é\u2028", "\xe2\x82"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendString(nil, s)
		if bytes.ContainsAny(b, "\n\r") {
			t.Fatalf("%q: a line break in %q", s, b)
		}
		var got, want string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q: %q is not a JSON string: %v", s, b, err)
		}
		_ = json.Unmarshal(must(json.Marshal(s)), &want)
		if got != want {
			t.Fatalf("%q: reads back %q, json.Marshal's %q", s, got, want)
		}
	})
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
