package wire

import (
	"encoding/json"
	"reflect"
	"testing"
)

// The fast path of DecodeResponse gives what encoding/json gives, for
// what EncodeResponse writes and for look-alikes it must leave alone.
func TestDecodeChunkMatchesJSON(t *testing.T) {
	var payloads [][]byte
	for _, text := range []string{"", "0,", "12345,", "hello world", `a "quote"`, `back\slash`, "tab\there", "é ✓ 😀", "\x7f", "\u2028", "</script>"} {
		for _, last := range []bool{false, true} {
			payloads = append(payloads, EncodeResponse(Response{Response: text, EndOfStream: last}))
		}
		payloads = append(payloads, EncodeResponse(Response{Error: &Error{Type: "t", Message: text}, Response: text, EndOfStream: true}))
	}
	for _, p := range []string{
		`{"error":null,"response":"x","end_of_stream":false}","end_of_stream":false}`,
		`{"error":null,"response":"x","end_of_stream":true}   `,
		`{"error":null,"response":"x","end_of_stream":true,"extra":1}`,
		`{"error":null,"response":"x\u0041","end_of_stream":true}`,
		`{"error":null,"response":"x","end_of_stream":false}` + "\n",
	} {
		payloads = append(payloads, []byte(p))
	}
	fast := 0
	for _, p := range payloads {
		var want Response
		wantErr := json.Unmarshal(p, &want)
		got, err := DecodeResponse(p)
		if (err != nil) != (wantErr != nil) || (err == nil && !reflect.DeepEqual(got, want)) {
			t.Errorf("%s: got %+v %v, encoding/json %+v %v", p, got, err, want, wantErr)
		}
		if _, ok := decodeChunk(p); ok {
			fast++
		}
	}
	if fast != 10 { // "", "0,", "12345,", "hello world", "</script>"; last or not
		t.Errorf("%d payloads took the fast path, want 10", fast)
	}
}
