package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestErrorInfoOnEveryRefusal walks the refusals the gateway makes — of
// the request's form, its credentials, the policy, the rate limit, a
// route, a method, a media type, a tool, a tool service, a disabled
// feature, a stream failing midway — on REST, gRPC, Connect and MCP, and
// checks that each answer carries a google.rpc.ErrorInfo with a reason
// and a domain.
func TestErrorInfoOnEveryRefusal(t *testing.T) {
	t.Parallel()
	noOps := schemathesisGateway(t, false)
	sec := errorInfoSecuredGateway(t)
	long := `{"arguments": {"x": "` + strings.Repeat("a", 2<<20) + `"}}`

	type rest struct {
		name, base, method, path, body string
		header                         map[string]string
		want                           int
	}
	for _, tc := range []rest{
		{"page_size negative", env.httpBase, "GET", "/v1/tools?page_size=-1", "", nil, 400},
		{"page_size not a number", env.httpBase, "GET", "/v1/tools?page_size=x", "", nil, 400},
		{"page_token not issued", env.httpBase, "GET", "/v1/tools?page_token=zz!", "", nil, 400},
		{"page_token of services", env.httpBase, "GET", "/v1/tool-services?page_token=zz!", "", nil, 400},
		{"unknown tool", env.httpBase, "GET", "/v1/tools/no-such-tool", "", nil, 404},
		{"unknown tool service", env.httpBase, "GET", "/v1/tool-services/no-such-service", "", nil, 404},
		{"arguments and arguments_json", env.httpBase, "POST", "/v1/tools/echo:invoke", `{"arguments": {"a": 1}, "arguments_json": "{\"a\": 1}"}`, nil, 400},
		{"arguments_json not JSON", env.httpBase, "POST", "/v1/tools/echo:invoke", `{"arguments_json": "{"}`, nil, 400},
		{"arguments_json not an object", env.httpBase, "POST", "/v1/tools/echo:invoke", `{"arguments_json": "[1]"}`, nil, 400},
		{"body not JSON", env.httpBase, "POST", "/v1/tools/echo:invoke", `not json`, nil, 400},
		{"unknown member", env.httpBase, "POST", "/v1/tools/echo:invoke", `{"argument": {}}`, nil, 400},
		{"repeated key", env.httpBase, "POST", "/v1/tools/echo:invoke", `{"arguments": {}, "arguments": {}}`, nil, 400},
		{"bad timeout", env.httpBase, "POST", "/v1/tools/echo:invoke", `{"timeout": "soon"}`, nil, 400},
		{"missing required argument", env.httpBase, "POST", "/v1/tools/tell-dad-joke:invoke", `{}`, nil, 400},
		{"wrong argument type", env.httpBase, "POST", "/v1/tools/tell-joke:invoke", `{"arguments": {"topic": 1}}`, nil, 400},
		{"stream of an unknown tool", env.httpBase, "POST", "/v1/tools/no-such-tool:stream", `{}`, nil, 404},
		{"start with a bad body", env.httpBase, "POST", "/v1/tools/echo:start", `[]`, nil, 400},
		{"no listener", env.httpBase, "POST", "/v1/tools/nobody-home:invoke", `{}`, nil, 503},
		{"service error", env.httpBase, "POST", "/v1/tools/echo:invoke", `{"arguments": {"mode": "fail", "type": "not-found", "message": "gone"}}`, nil, 404},
		{"deadline", env.httpBase, "POST", "/v1/tools/echo:invoke", `{"arguments": {"mode": "sleep", "ms": 3000}, "timeout": "100ms"}`, nil, 504},
		{"media type", env.httpBase, "POST", "/v1/tools/echo:invoke", `<a/>`, map[string]string{"Content-Type": "application/xml"}, 415},
		{"not acceptable", env.httpBase, "GET", "/v1/tools", "", map[string]string{"Accept": "text/html"}, 406},
		{"stream not acceptable", env.httpBase, "POST", "/v1/tools/echo:stream", `{}`, map[string]string{"Accept": "text/html"}, 406},
		{"method", env.httpBase, "DELETE", "/v1/tools", "", nil, 405},
		{"verb", env.httpBase, "POST", "/v1/tools/echo:explode", `{}`, nil, 404},
		{"route", env.httpBase, "GET", "/no/such/path", "", nil, 404},
		{"docs page", env.httpBase, "GET", "/docs/no-such-page", "", nil, 404},
		{"headers too large", env.httpBase, "GET", "/v1/tools", "", map[string]string{"X-Big": strings.Repeat("b", 70<<10)}, 431},
		{"body too large", env.httpBase, "POST", "/v1/tools/echo:invoke", long, nil, 413},
		{"unknown operation", env.httpBase, "GET", "/v1/operations/no-such-operation", "", nil, 404},
		{"operations filter", env.httpBase, "GET", "/v1/operations?filter=maybe", "", nil, 400},
		{"operations from_chunk", env.httpBase, "GET", "/v1/operations/x:stream?from_chunk=-1", "", nil, 400},
		{"wait with a bad timeout", env.httpBase, "POST", "/v1/operations/x:wait", `{"timeout": "soon"}`, nil, 400},
		{"operations off: start", noOps, "POST", "/v1/tools/echo:start", `{}`, nil, 501},
		{"operations off: list", noOps, "GET", "/v1/operations", "", nil, 501},
		{"missing credentials", sec.base, "GET", "/v1/tools", "", nil, 401},
		{"invalid API key", sec.base, "GET", "/v1/tools", "", map[string]string{"X-Api-Key": "wrong"}, 401},
		{"not allowed", sec.base, "POST", "/v1/tools/secret-echo:invoke", `{}`, map[string]string{"X-Api-Key": sec.key}, 403},
	} {
		t.Run("REST "+tc.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, tc.base+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s %s: %s, want %d: %s", tc.method, tc.path, resp.Status, tc.want, b)
			}
			checkStatusJSON(t, b)
		})
	}

	t.Run("REST rate limit", func(t *testing.T) {
		for range 50 {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, sec.base+"/v1/tools", nil)
			req.Header.Set("X-Api-Key", sec.key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				checkStatusJSON(t, b)
				return
			}
		}
		t.Fatal("the rate limit never refused a call")
	})

	t.Run("REST stream failing midway", func(t *testing.T) {
		for _, accept := range []string{"application/x-ndjson", "text/event-stream"} {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, env.httpBase+"/v1/tools/echo:stream",
				strings.NewReader(`{"arguments": {"mode": "stream", "n": 50, "gap_ms": 50}, "timeout": "300ms"}`))
			req.Header.Set("Accept", accept)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var last string
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if line := strings.TrimPrefix(sc.Text(), "data: "); line != "" && !strings.HasPrefix(line, "event:") && !strings.HasPrefix(line, ":") {
					last = line
				}
			}
			_ = resp.Body.Close()
			checkStatusJSON(t, []byte(last))
		}
	})

	grpcCases := []struct {
		name string
		call func(c toolgatev1.ToolServiceClient, conn *grpc.ClientConn) error
	}{
		{"arguments and arguments_json", func(c toolgatev1.ToolServiceClient, _ *grpc.ClientConn) error {
			args, _ := structpb.NewStruct(map[string]any{"a": 1})
			_, err := c.InvokeTool(t.Context(), &toolgatev1.InvokeToolRequest{Name: "echo", Arguments: args, ArgumentsJson: `{"a": 1}`})
			return err
		}},
		{"arguments_json not JSON", func(c toolgatev1.ToolServiceClient, _ *grpc.ClientConn) error {
			_, err := c.InvokeTool(t.Context(), &toolgatev1.InvokeToolRequest{Name: "echo", ArgumentsJson: `{`})
			return err
		}},
		{"page_size negative", func(c toolgatev1.ToolServiceClient, _ *grpc.ClientConn) error {
			_, err := c.ListTools(t.Context(), &toolgatev1.ListToolsRequest{PageSize: -1})
			return err
		}},
		{"page_token not issued", func(c toolgatev1.ToolServiceClient, _ *grpc.ClientConn) error {
			_, err := c.ListToolServices(t.Context(), &toolgatev1.ListToolServicesRequest{PageToken: "zz!"})
			return err
		}},
		{"unknown tool", func(c toolgatev1.ToolServiceClient, _ *grpc.ClientConn) error {
			_, err := c.GetTool(t.Context(), &toolgatev1.GetToolRequest{Name: "no-such-tool"})
			return err
		}},
		{"stream of an unknown tool", func(c toolgatev1.ToolServiceClient, _ *grpc.ClientConn) error {
			s, err := c.StreamTool(t.Context(), &toolgatev1.StreamToolRequest{Name: "no-such-tool"})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}},
		{"unknown method", func(_ toolgatev1.ToolServiceClient, conn *grpc.ClientConn) error {
			return conn.Invoke(t.Context(), "/toolgate.v1.ToolService/Explode", &toolgatev1.GetToolRequest{}, &toolgatev1.GetToolResponse{})
		}},
	}
	for _, door := range []struct{ name, addr string }{{"gRPC", env.gw.GRPCAddr()}, {"gRPC on the HTTP listener", strings.TrimPrefix(env.httpBase, "http://")}} {
		conn, err := grpc.NewClient(door.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		c := toolgatev1.NewToolServiceClient(conn)
		for _, tc := range grpcCases {
			t.Run(door.name+" "+tc.name, func(t *testing.T) {
				err := tc.call(c, conn)
				st := status.Convert(err)
				if st.Code() == codes.OK {
					t.Fatal("no error")
				}
				if ei := errorInfo(st); ei == nil || ei.GetReason() == "" || ei.GetDomain() == "" {
					t.Errorf("%v: ErrorInfo %v", err, ei)
				}
			})
		}
	}
	t.Run("gRPC missing credentials", func(t *testing.T) {
		conn, err := grpc.NewClient(sec.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_, err = toolgatev1.NewToolServiceClient(conn).ListTools(t.Context(), &toolgatev1.ListToolsRequest{})
		st := status.Convert(err)
		if ei := errorInfo(st); st.Code() != codes.Unauthenticated || ei == nil || ei.GetReason() == "" || ei.GetDomain() == "" {
			t.Errorf("%v: ErrorInfo %v", err, ei)
		}
	})

	// Connect: the error's details name google.rpc.ErrorInfo.
	for _, tc := range []struct{ name, method, body string }{
		{"arguments and arguments_json", "InvokeTool", `{"name": "echo", "arguments": {"a": 1}, "arguments_json": "{}"}`},
		{"page_size negative", "ListTools", `{"page_size": -1}`},
		{"page_token not issued", "ListTools", `{"page_token": "zz!"}`},
		{"unknown tool", "GetTool", `{"name": "no-such-tool"}`},
	} {
		t.Run("Connect "+tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, env.httpBase+"/toolgate.v1.ToolService/"+tc.method, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			var ce struct {
				Code    string `json:"code"`
				Details []struct {
					Type string `json:"type"`
				} `json:"details"`
			}
			if err := json.Unmarshal(b, &ce); err != nil || ce.Code == "" {
				t.Fatalf("%s: %s", resp.Status, b)
			}
			found := false
			for _, d := range ce.Details {
				found = found || d.Type == "google.rpc.ErrorInfo"
			}
			if !found {
				t.Errorf("no ErrorInfo in %s", b)
			}
		})
	}

	// MCP: a refusal's JSON-RPC error data names the reason and domain.
	for _, tc := range []struct {
		name, base, body string
		header           map[string]string
	}{
		{"missing credentials", sec.base, `{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}`, nil},
		{"invalid API key", sec.base, `{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}`, map[string]string{"X-Api-Key": "wrong"}},
		{"origin not allowed", env.httpBase, `{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}`, map[string]string{"Origin": "http://elsewhere.example"}},
		{"batch", env.httpBase, `[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}]`, nil},
		{"unknown tool", env.httpBase, `{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "no-such-tool", "arguments": {}}}`, nil},
	} {
		t.Run("MCP "+tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, tc.base+"/mcp", strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			msg := bytes.TrimSpace(b)
			if i := bytes.Index(msg, []byte("data: ")); i >= 0 { // an event stream's one message
				msg = bytes.TrimSpace(msg[i+len("data: "):])
			}
			var rpc struct {
				Error struct {
					Data struct {
						Reason string `json:"reason"`
						Domain string `json:"domain"`
					} `json:"data"`
				} `json:"error"`
			}
			if err := json.Unmarshal(msg, &rpc); err != nil || rpc.Error.Data.Reason == "" || rpc.Error.Data.Domain == "" {
				t.Errorf("%s: %s", resp.Status, b)
			}
		})
	}
}

// checkStatusJSON fails the test unless b is a google.rpc.Status in JSON
// with an ErrorInfo that has a reason and a domain.
func checkStatusJSON(t *testing.T, b []byte) {
	t.Helper()
	var st struct {
		Code    *int `json:"code"`
		Details []struct {
			Type   string `json:"@type"`
			Reason string `json:"reason"`
			Domain string `json:"domain"`
		} `json:"details"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(b), &st); err != nil || st.Code == nil {
		t.Fatalf("not a Status: %.300s", b)
	}
	for _, d := range st.Details {
		if d.Type == "type.googleapis.com/google.rpc.ErrorInfo" && d.Reason != "" && d.Domain != "" {
			return
		}
	}
	t.Errorf("no ErrorInfo with a reason and a domain: %.300s", b)
}

type securedGateway struct{ base, grpc, key string }

// errorInfoSecuredGateway starts a gateway that asks for an API key, whose
// policy lets its one key list and invoke echo only, with a low rate limit.
func errorInfoSecuredGateway(t *testing.T) securedGateway {
	t.Helper()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const key = "errorinfo-key-0123456789"
	reg := write("registry.yaml", fmt.Sprintf(`tool-service:
  echo-service: {topic: %s}
tool:
  echo: {type: tool-service, service: echo-service}
  secret-echo: {type: tool-service, service: echo-service}
`, env.echoTopic))
	keys := write("keys.yaml", fmt.Sprintf("keys:\n  - {hash: %q, user: alice, roles: [user]}\n", auth.HashKey(key)))
	policy := write("policy.yaml", "rules:\n  - {roles: [user], tools: [\"echo\"], actions: [list, invoke]}\n")
	gw := runGateway(t, nil, "--registry", reg, "--announcements=false", "--api-keys", keys, "--policy", policy,
		"--rate-limit", "0.5", "--rate-burst", "10")
	return securedGateway{base: "http://" + gw.HTTPAddr(), grpc: gw.GRPCAddr(), key: key}
}
