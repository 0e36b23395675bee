package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/gen/toolgate/v1/toolgatev1connect"
	"github.com/toolgate/toolgate/internal/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestToolSetNamesOnEveryDoor: a set "swap" shows the registry's fancy
// under the name echo (which the registry gives another tool) and
// secret-echo as desk-echo. REST's ?set= is the tool-set header's equal on
// :invoke, :stream and GET of a tool — the set's echo runs, not the
// registry's — and is 400 where it disagrees with the header; a call the
// policy refuses in the set names desk-echo on every door, never
// secret-echo.
func TestToolSetNamesOnEveryDoor(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	reg := write("registry.yaml", fmt.Sprintf(`tool-service:
  echo-service: {topic: %s, config-params: [{name: flavour}]}
tool:
  echo: {type: tool-service, service: echo-service, flavour: plain, description: Plain.}
  fancy: {type: tool-service, service: echo-service, flavour: fancy, description: Fancy.}
  secret-echo: {type: tool-service, service: echo-service, flavour: secret}
tool-set:
  swap: {tools: [{tool: fancy, name: echo}, {tool: secret-echo, name: desk-echo}]}
`, env.echoTopic))
	const key = "toolset-names-key-0123456789"
	keys := write("keys.yaml", fmt.Sprintf("keys:\n  - {hash: %q, user: alice}\n", auth.HashKey(key)))
	policy := write("policy.yaml", "rules:\n  - {users: [\"api-key:alice\"], tools: [echo, fancy], actions: [list, invoke]}\n")
	gw := runGateway(t, nil, "--registry", reg, "--api-keys", keys, "--policy", policy, "--mcp")
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	rest := func(method, path, body string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		req.Header.Set("X-Api-Key", key)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	config := `{"arguments": {"mode": "config"}}`

	// ?set= on every route that names a tool: the set's echo (fancy) runs.
	for _, tc := range []struct{ method, path, body, want string }{
		{"POST", "/v1/tools/echo:invoke?set=swap", config, "fancy"},
		{"POST", "/v1/tools/echo:stream?set=swap", config, "fancy"},
		{"GET", "/v1/tools/echo?set=swap", "", "Fancy."},
		{"POST", "/v1/tools/echo:invoke", config, "plain"}, // the registry's, without a set
	} {
		code, body := rest(tc.method, tc.path, tc.body)
		if code != http.StatusOK || !strings.Contains(body, tc.want) {
			t.Errorf("%s %s: HTTP %d %s; want %q", tc.method, tc.path, code, body, tc.want)
		}
	}
	if code, body := rest("POST", "/v1/tools/echo:invoke?set=swap", config, "Tool-Set", "other"); code != http.StatusBadRequest || !strings.Contains(body, "TOOL_SET_CONFLICT") {
		t.Errorf("?set=swap with Tool-Set: other: HTTP %d %s; want 400 TOOL_SET_CONFLICT", code, body)
	}
	if code, body := rest("GET", "/v1/operations?set=swap", ""); code != http.StatusBadRequest || !strings.Contains(body, "TOOL_SET_NOT_APPLICABLE") {
		t.Errorf("?set= on /v1/operations: HTTP %d %s; want 400 TOOL_SET_NOT_APPLICABLE", code, body)
	}

	// The policy refuses desk-echo (secret-echo): every door says desk-echo.
	names := func(door, msg string) {
		t.Helper()
		if !strings.Contains(msg, `"desk-echo"`) || strings.Contains(msg, "secret-echo") {
			t.Errorf("%s: the refusal %q; want it to name desk-echo, never secret-echo", door, msg)
		}
	}
	for _, r := range []struct {
		door, path string
		hdr        []string
	}{{"REST ?set=", "/v1/tools/desk-echo:invoke?set=swap", nil}, {"REST Tool-Set", "/v1/tools/desk-echo:invoke", []string{"Tool-Set", "swap"}}} {
		code, body := rest("POST", r.path, config, r.hdr...)
		var st struct{ Message string }
		_ = json.Unmarshal([]byte(body), &st)
		if code != http.StatusForbidden {
			t.Errorf("%s: HTTP %d %s; want 403", r.door, code, body)
		}
		names(r.door, st.Message+" "+body)
	}
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", key, "tool-set", "swap")
	_, err = toolgatev1.NewToolServiceClient(conn).InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: "desk-echo", ArgumentsJson: `{"mode": "config"}`})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("gRPC: %v; want PERMISSION_DENIED", err)
	}
	names("gRPC", fmt.Sprint(status.Convert(err).Message(), status.Convert(err).Details()))
	for door, opts := range map[string][]connect.ClientOption{"Connect": nil, "gRPC-Web": {connect.WithGRPCWeb()}} {
		req := connect.NewRequest(&toolgatev1.InvokeToolRequest{Name: "desk-echo", ArgumentsJson: `{"mode": "config"}`})
		req.Header().Set("X-Api-Key", key)
		req.Header().Set("Tool-Set", "swap")
		_, err := toolgatev1connect.NewToolServiceClient(http.DefaultClient, base, opts...).InvokeTool(t.Context(), req)
		if connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("%s: %v; want permission_denied", door, err)
		}
		msg := fmt.Sprint(err)
		if ce := (*connect.Error)(nil); errors.As(err, &ce) {
			msg = ce.Message()
			for _, d := range ce.Details() {
				if v, derr := d.Value(); derr == nil {
					msg += fmt.Sprint(" ", v)
				}
			}
		}
		names(door, msg)
	}
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"desk-echo","arguments":{"mode":"config"},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	code, raw := rest("POST", "/mcp/swap", body, "Content-Type", "application/json", "Accept", "application/json, text/event-stream",
		"Mcp-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "desk-echo")
	var answer struct {
		Error struct {
			Message string
			Data    struct{ Code string }
		}
	}
	if err := json.Unmarshal([]byte(raw), &answer); err != nil || answer.Error.Data.Code != "PermissionDenied" {
		t.Errorf("MCP: HTTP %d %s; want the call refused by the policy", code, raw)
	}
	names("MCP", answer.Error.Message)
}
