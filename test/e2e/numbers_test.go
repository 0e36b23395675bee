package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// exactNumbers are JSON numbers a float64 would change: past 2^53, a
// negative zero, one below the smallest double, a trailing zero.
var exactNumbers = []string{"9007199254740993", "123456789012345678", "-0.0", "1e-400", "1.10"}

// TestNumbersExactly: JSON numbers reach the tool service exactly as the
// caller wrote them through the JSON doors (REST and MCP), and the Go
// SDK hands them to the handler unchanged (the echo service answers with
// its arguments). gRPC and Connect carry arguments as a
// google.protobuf.Struct, whose numbers are doubles: not tested here.
func TestNumbersExactly(t *testing.T) {
	t.Parallel()
	var args strings.Builder
	args.WriteString("{")
	for i, n := range exactNumbers {
		if i > 0 {
			args.WriteString(", ")
		}
		args.WriteString(`"n` + string(rune('a'+i)) + `": ` + n)
	}
	args.WriteString("}")

	check := func(t *testing.T, door, output string) {
		t.Helper()
		for i, n := range exactNumbers {
			if want := `"n` + string(rune('a'+i)) + `": ` + n; !strings.Contains(output, want) {
				t.Errorf("%s: the service answered %s; want %s in it", door, output, want)
			}
		}
	}
	t.Run("rest", func(t *testing.T) {
		resp, err := http.Post(env.httpBase+"/v1/tools/echo:invoke", "application/json", strings.NewReader(`{"arguments": `+args.String()+`}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		var out struct{ Output string }
		if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &out) != nil {
			t.Fatalf("HTTP %d %s", resp.StatusCode, raw)
		}
		check(t, "REST", out.Output)
	})
	t.Run("mcp", func(t *testing.T) {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":` + args.String() + `}}`
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, env.httpBase+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		_, data, ok := bytes.Cut(raw, []byte("data: "))
		var msg struct {
			Result struct {
				Content []struct{ Text string } `json:"content"`
			} `json:"result"`
		}
		if !ok || json.Unmarshal(bytes.TrimSpace(data), &msg) != nil || len(msg.Result.Content) != 1 {
			t.Fatalf("MCP answer %s", raw)
		}
		check(t, "MCP", msg.Result.Content[0].Text)
	})
}
