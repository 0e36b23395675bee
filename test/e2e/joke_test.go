package e2e

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/jokes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

func expectedJoke(t *testing.T, style, topic string) string {
	t.Helper()
	j, err := jokes.Pick(style, topic)
	if err != nil {
		t.Fatal(err)
	}
	return "Here's a " + style + " for you:\n\n" + j
}

func post(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(env.httpBase+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: body is not a JSON object: %q", path, raw)
	}
	return resp.StatusCode, out
}

func TestInvokeOverHTTP(t *testing.T) {
	t.Parallel()
	code, body := post(t, "/v1/tools/tell-joke:invoke", `{"arguments": {"topic": "pulsar"}}`)
	if code != http.StatusOK {
		t.Fatalf("status %d, body %v", code, body)
	}
	if want := expectedJoke(t, "pun", "pulsar"); body["output"] != want {
		t.Fatalf("output %q, want %q", body["output"], want)
	}
}

func TestInvokeOverGRPC(t *testing.T) {
	t.Parallel()
	args, _ := structpb.NewStruct(map[string]any{"topic": "gophers"})
	resp, err := env.grpc.InvokeTool(t.Context(), &toolgatev1.InvokeToolRequest{Name: "tell-dad-joke", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	if want := expectedJoke(t, "dad-joke", "gophers"); resp.GetOutput() != want {
		t.Fatalf("output %q, want %q", resp.GetOutput(), want)
	}
}

func TestStreamOverGRPCAndHTTP(t *testing.T) {
	t.Parallel()
	args, _ := structpb.NewStruct(map[string]any{"topic": "streams"})
	st, err := env.grpc.StreamTool(t.Context(), &toolgatev1.StreamToolRequest{Name: "tell-joke", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	n := 0
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got.WriteString(m.GetOutput())
		n++
	}
	want := expectedJoke(t, "pun", "streams")
	if got.String() != want || n != 1 {
		t.Fatalf("stream gave %d chunks %q, want 1 chunk %q", n, got.String(), want)
	}

	resp, err := http.Post(env.httpBase+"/v1/tools/tell-joke:stream", "application/json", strings.NewReader(`{"arguments":{"topic":"streams"}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	var line struct {
		Output string `json:"output"`
		Last   bool   `json:"last"`
	}
	if err := dec.Decode(&line); err != nil {
		t.Fatal(err)
	}
	if line.Output != want || !line.Last {
		t.Fatalf("REST stream chunk %+v, want %q (last)", line, want)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Errorf("Content-Type %q, want application/x-ndjson", ct)
	}
}

func TestUnknownTool(t *testing.T) {
	t.Parallel()
	code, body := post(t, "/v1/tools/no-such-tool:invoke", `{"arguments": {}}`)
	if code != http.StatusNotFound || body["code"] != float64(codes.NotFound) || !strings.Contains(body["message"].(string), "no-such-tool") {
		t.Fatalf("HTTP: status %d body %v, want 404 with a NOT_FOUND status naming the tool", code, body)
	}
	_, err := env.grpc.InvokeTool(t.Context(), &toolgatev1.InvokeToolRequest{Name: "no-such-tool"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("gRPC: %v, want NOT_FOUND", err)
	}
	// A tool of another TrustGraph type is skipped by the registry.
	_, err = env.grpc.InvokeTool(t.Context(), &toolgatev1.InvokeToolRequest{Name: "knowledge"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("gRPC knowledge tool: %v, want NOT_FOUND", err)
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, path, body string
		code             int
		mention          string
	}{
		{"malformed JSON", "/v1/tools/tell-joke:invoke", `{"arguments": {`, http.StatusBadRequest, ""},
		{"arguments not an object", "/v1/tools/tell-joke:invoke", `{"arguments": 5}`, http.StatusBadRequest, ""},
		{"wrong argument type", "/v1/tools/tell-joke:invoke", `{"arguments": {"topic": 5}}`, http.StatusBadRequest, "topic"},
		{"missing required argument", "/v1/tools/tell-dad-joke:invoke", `{"arguments": {}}`, http.StatusBadRequest, "topic"},
		{"bad timeout", "/v1/tools/tell-joke:invoke", `{"arguments": {}, "timeout": "soon"}`, http.StatusBadRequest, ""},
		{"unknown field", "/v1/tools/tell-joke:invoke", `{"argumnets": {}}`, http.StatusBadRequest, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := post(t, c.path, c.body)
			msg, _ := body["message"].(string)
			if code != c.code || body["code"] != float64(codes.InvalidArgument) || !strings.Contains(msg, c.mention) {
				t.Fatalf("status %d body %v; want %d, INVALID_ARGUMENT mentioning %q", code, body, c.code, c.mention)
			}
		})
	}
}
