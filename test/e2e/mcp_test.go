package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolgate/toolgate/internal/auth"
	"github.com/toolgate/toolgate/internal/eventually"
)

const mcpKey = "mcp-test-key-0123456789"

// mcpSecured is a gateway with API keys and a policy, in plain HTTP, in
// front of the shared echo and joke services.
type mcpSecured struct {
	base    string
	regPath string
}

func startMCPSecured(t *testing.T) *mcpSecured {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	s := &mcpSecured{regPath: write("registry.yaml", mcpRegistry(""))}
	keys := write("keys.yaml", fmt.Sprintf("keys:\n  - {hash: %q, user: mia, roles: [user]}\n", auth.HashKey(mcpKey)))
	policy := write("policy.yaml", `rules:
  - {roles: [user], tools: ["echo", "tell-joke", "new-*"], actions: [list, invoke]}
`)
	gw := runGateway(t, nil, "--registry", s.regPath, "--api-keys", keys, "--policy", policy)
	s.base = "http://" + gw.HTTPAddr()
	if err := waitReady(s.base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return s
}

// mcpRegistry is the secured gateway's registry, with extra appended.
func mcpRegistry(extra string) string {
	return fmt.Sprintf(`tool-service:
  echo-service: {topic: %s}
  joke-service: {topic: %s, config-params: [style]}
tool:
  echo: {type: tool-service, description: Echoes, service: echo-service}
  secret-echo: {type: tool-service, description: Not for everyone, service: echo-service}
  tell-joke:
    type: tool-service
    description: Tell a joke on a given topic
    service: joke-service
    style: pun
    arguments: [{name: topic, type: string}]
%s`, env.echoTopic, env.jokeTopic, extra)
}

// TestMCPPythonClient runs test/python/test_mcp_client.py (the official
// Python MCP SDK) and test/python/test_fastmcp_client.py (fastmcp's Client,
// built on that SDK), over Streamable HTTP, against the shared gateway and a
// secured one; then checks that the calls were counted as MCP calls.
func TestMCPPythonClient(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	venv := pythonVenv(t, root)
	sec := startMCPSecured(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(venv, "bin", "python"), "-m", "pytest", "-q", "-rfEs",
		"-p", "no:cacheprovider", "test/python/test_mcp_client.py", "test/python/test_fastmcp_client.py")
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"TOOLGATE_MCP_URL="+env.httpBase+"/mcp",
		"TOOLGATE_MCP_SECURED_URL="+sec.base+"/mcp",
		"TOOLGATE_MCP_KEY="+mcpKey,
		// conftest.py's gRPC fixtures are unused here but read these.
		"TOOLGATE_GRPC_ADDR="+env.gw.GRPCAddr(),
		"TOOLGATE_HTTP_BASE="+env.httpBase,
		"TOOLGATE_ADMIN_BASE="+env.adminBase, // its /metrics
		"PYTHONDONTWRITEBYTECODE=1",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("%s:\n%s", strings.Join(cmd.Args, " "), out.String())
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && exit.ExitCode() == 5:
		t.Fatal("pytest collected no tests")
	default:
		t.Fatalf("pytest: %v", err)
	}
	if strings.Contains(out.String(), " skipped") {
		t.Fatal("pytest skipped tests; every MCP client test must run")
	}

	// The calls went through the interceptors, counted as MCP calls.
	resp, err := http.Get(env.adminBase + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`toolgate_calls_total{code="OK",method="mcp/InvokeTool",tool="tell-joke"}`,
		`toolgate_calls_total{code="OK",method="mcp/ListTools",tool=""}`,
	} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}

// TestMCPToolsChanged: a registry reload reaches an MCP client listening
// for tool list changes (the Go SDK's client, protocol 2026-07-28's
// subscriptions/listen), and the new tool is then listed.
func TestMCPToolsChanged(t *testing.T) {
	sec := startMCPSecured(t)
	changed := make(chan struct{}, 8)
	c := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, &sdk.ClientOptions{
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) { changed <- struct{}{} },
	})
	hc := &http.Client{Transport: bearer(mcpKey)}
	cs, err := c.Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: sec.base + "/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	// The client opens its listening stream in the background, and a
	// change made before that is not notified: change the registry (new-echo
	// and one more tool each time) until a notification comes.
	changes := 0
	eventually.True(t, 20*time.Second, "notifications/tools/list_changed after a registry change", func() bool {
		changes++
		extra := fmt.Sprintf("  new-echo: {type: tool-service, service: echo-service}\n  marker-%d: {type: tool-service, service: echo-service}\n", changes)
		if err := os.WriteFile(sec.regPath, []byte(mcpRegistry(extra)), 0o600); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changed:
			return true
		case <-time.After(time.Second):
			return false
		}
	})
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "new-echo") {
		t.Fatalf("tools after the reload: %v", names)
	}
}

type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPInspector: the MCP Inspector's CLI (npm, pinned, installed by
// scripts/mcp-inspector.sh into .cache/), in the protocol eras legacy (its
// default) and auto (which reaches 2026-07-28), lists the gateway's tools
// with their schemas, calls one, gets a tool error as a result, and is
// refused by a gateway that wants credentials.
func TestMCPInspector(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	sec := startMCPSecured(t)
	run := func(url string, args ...string) ([]byte, string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "mcp-inspector.sh"),
			append([]string{"--cli", url, "--transport", "http"}, args...)...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "HOME="+home, "MCP_CATALOG_PATH="+filepath.Join(home, "mcp.json"), "NO_COLOR=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		t.Logf("mcp-inspector %s:\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
		return stdout.Bytes(), stderr.String(), err
	}
	for _, era := range []string{"legacy", "auto"} {
		t.Run(era, func(t *testing.T) {
			inspect := func(args ...string) []byte {
				t.Helper()
				out, _, err := run(env.httpBase+"/mcp", append([]string{"--protocol-era", era}, args...)...)
				if err != nil {
					t.Fatalf("mcp-inspector %s: %v", strings.Join(args, " "), err)
				}
				return out
			}
			var list struct {
				Tools []struct {
					Name        string         `json:"name"`
					InputSchema map[string]any `json:"inputSchema"`
				} `json:"tools"`
			}
			if err := json.Unmarshal(inspect("--method", "tools/list"), &list); err != nil {
				t.Fatalf("tools/list output is not the JSON result: %v", err)
			}
			found := false
			for _, tool := range list.Tools {
				if tool.Name == "tell-joke" {
					found = true
					if props, _ := tool.InputSchema["properties"].(map[string]any); props["topic"] == nil {
						t.Errorf("tell-joke's inputSchema has no topic: %v", tool.InputSchema)
					}
				}
			}
			if !found {
				t.Fatalf("tell-joke not listed; tools: %+v", list.Tools)
			}

			type result struct {
				Content []struct {
					Type string `json:"type"`
					Text string `json:"text"`
				} `json:"content"`
				IsError bool           `json:"isError"`
				Meta    map[string]any `json:"_meta"`
			}
			var call result
			if err := json.Unmarshal(inspect("--method", "tools/call", "--tool-name", "tell-joke", "--tool-arg", "topic=cats"), &call); err != nil {
				t.Fatalf("tools/call output is not the JSON result: %v", err)
			}
			if call.IsError || len(call.Content) != 1 || call.Content[0].Type != "text" || len(call.Content[0].Text) < 10 {
				t.Fatalf("tools/call result: %+v", call)
			}
			// Only 2026-07-28 results carry the server's identity in _meta:
			// auto must have reached it.
			if modern := call.Meta["io.modelcontextprotocol/serverInfo"] != nil; modern != (era == "auto") {
				t.Errorf("era %s: tools/call result _meta %v", era, call.Meta)
			}
			// A tool's error: the result, and exit status 5 (the CLI's for isError).
			out, _, err := run(env.httpBase+"/mcp", "--protocol-era", era, "--method", "tools/call", "--tool-name", "echo",
				"--tool-arg", "mode=fail", "--tool-arg", "type=not-found", "--tool-arg", "message=no such joke")
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 5 {
				t.Errorf("mcp-inspector on a tool error: %v, want exit status 5", err)
			}
			var failed result
			if err := json.Unmarshal(out, &failed); err != nil {
				t.Fatalf("tools/call output is not the JSON result: %v", err)
			}
			if !failed.IsError || len(failed.Content) != 1 || failed.Content[0].Text != "not-found: no such joke" {
				t.Errorf("the tool's error: %+v; want isError with not-found: no such joke", failed)
			}

			// Refused with 401, which the CLI reports as auth_required.
			out, stderr, err := run(sec.base+"/mcp", "--protocol-era", era, "--method", "tools/list")
			if err == nil || !strings.Contains(stderr+string(out), `"auth_required"`) {
				t.Errorf("without credentials: %v; want a refusal (auth_required)", err)
			}
		})
	}
}

// TestMCPClientCertificate: over HTTPS, the client certificate's identity
// reaches the MCP calls as it reaches REST's (the policy lets carol list
// every tool), and a call without any credential is refused with 401.
func TestMCPClientCertificate(t *testing.T) {
	s := startSecured(t)
	post := func(client *http.Client, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.base+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const list = `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
	if code, body := post(s.http, list); code != http.StatusUnauthorized {
		t.Fatalf("without credentials: %d %s", code, body)
	}
	code, body := post(s.certHTTP, list)
	if code != http.StatusOK || !strings.Contains(body, `"name":"secret-echo"`) || !strings.Contains(body, `"name":"echo"`) {
		t.Fatalf("with carol's certificate: %d %s", code, body)
	}
	code, body = post(s.certHTTP, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"mode":"user"}}}`)
	if code != http.StatusOK || !strings.Contains(body, `"text":"carol"`) {
		t.Fatalf("tools/call as carol: %d %s", code, body)
	}
	// A streamed call carries the identity too.
	code, body = post(s.certHTTP, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo",`+
		`"arguments":{"mode":"stream","n":3},"_meta":{"progressToken":"p"}}}`)
	if code != http.StatusOK || strings.Count(body, "notifications/progress") != 3 || !strings.Contains(body, `"text":"0,1,2"`) {
		t.Fatalf("streamed tools/call as carol: %d %s", code, body)
	}
}
