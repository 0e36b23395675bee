package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// toolSetsRegistry has two tool sets over the shared services: alpha
// (echo, and tell-joke shown as alpha-joke) and beta (echo shown as
// repeat).
func toolSetsRegistry(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "registry.yaml")
	doc := fmt.Sprintf(`tool-service:
  echo-service: {topic: %s}
  joke-service: {topic: %s, config-params: [{name: style}]}
tool:
  echo: {type: tool-service, service: echo-service, description: Echoes its arguments.}
  tell-joke: {type: tool-service, service: joke-service, style: pun, description: Tell a joke.,
    arguments: [{name: topic, type: string}]}
  hidden: {type: tool-service, service: echo-service}
tool-set:
  alpha:
    title: Alpha desk
    instructions: "Alpha: echo and jokes."
    tools: [echo, {tool: tell-joke, name: alpha-joke, description: A joke for the alpha desk.}]
  beta:
    title: Beta desk
    instructions: "Beta: repeat only."
    tools: [{tool: echo, name: repeat}]
`, env.echoTopic, env.jokeTopic)
	if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestToolSetsMCPClients: a gateway with two tool sets; the official
// Python MCP SDK (both eras) and the TypeScript SDKs (v2 both eras, v1)
// each see exactly their set's tools, name and instructions at
// /mcp/{set}, call a tool of the set, and are refused a tool outside it
// as unknown.
func TestToolSetsMCPClients(t *testing.T) {
	root := repoRoot(t)
	gw := runGateway(t, nil, "--registry", toolSetsRegistry(t), "--allow-anonymous")
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	t.Run("python", func(t *testing.T) {
		venv := pythonVenv(t, root)
		cmd := exec.CommandContext(ctx, filepath.Join(venv, "bin", "python"), "-m", "pytest", "-q", "-rfEs",
			"-p", "no:cacheprovider", "test/python/test_mcp_sets.py")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "TOOLGATE_SETS_BASE="+base, "PYTHONDONTWRITEBYTECODE=1",
			// conftest.py reads these; its fixtures are unused here.
			"TOOLGATE_GRPC_ADDR="+gw.GRPCAddr(), "TOOLGATE_HTTP_BASE="+base, "TOOLGATE_ADMIN_BASE=http://"+gw.AdminAddr())
		out, err := cmd.CombinedOutput()
		t.Logf("%s:\n%s", strings.Join(cmd.Args, " "), out)
		if err != nil || !strings.Contains(string(out), "passed") || strings.Contains(string(out), "skipped") {
			t.Fatalf("pytest: %v", err)
		}
	})
	t.Run("typescript", func(t *testing.T) {
		tools := npmInstall(t, ctx, root, "mcp-clients.sh")
		dir := t.TempDir()
		b, err := os.ReadFile(filepath.Join(root, "test", "e2e", "testdata", "mcp-clients", "sets.mjs"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "sets.mjs"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(tools, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
			t.Fatal(err)
		}
		for _, client := range []string{"v2-auto", "v2-legacy", "v1"} {
			t.Run(client, func(t *testing.T) {
				out := runTool(t, ctx, dir, []string{"TOOLGATE_SETS_BASE=" + base}, "node", "sets.mjs", client)
				t.Log(out)
				if !strings.Contains(out, "PASS "+client) {
					t.Errorf("%s did not pass", client)
				}
			})
		}
	})
}

// TestToolSetsFilters: REST's ?set= and the tool-set metadata key of
// gRPC agree with the sets' MCP endpoints: the same tools, as the set
// shows them; a tool outside the set is NOT_FOUND; an unknown set too.
func TestToolSetsFilters(t *testing.T) {
	gw := runGateway(t, nil, "--registry", toolSetsRegistry(t), "--allow-anonymous")
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cli := toolgatev1.NewToolServiceClient(conn)
	inSet := func(set string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "tool-set", set)
	}
	restList := func(query string) (int, map[string]string) {
		resp, err := http.Get(base + "/v1/tools" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Tools []struct{ Name, Description string }
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		got := map[string]string{}
		for _, tl := range body.Tools {
			got[tl.Name] = tl.Description
		}
		return resp.StatusCode, got
	}
	grpcList := func(set string) map[string]string {
		res, err := cli.ListTools(inSet(set), &toolgatev1.ListToolsRequest{})
		if err != nil {
			t.Fatalf("gRPC ListTools in %s: %v", set, err)
		}
		got := map[string]string{}
		for _, tl := range res.GetTools() {
			got[tl.GetName()] = tl.GetDescription()
		}
		return got
	}
	want := map[string][]string{"alpha": {"alpha-joke", "echo"}, "beta": {"repeat"}}
	for set, names := range want {
		code, rest := restList("?set=" + set)
		if code != http.StatusOK || !slices.Equal(sortedNames(rest), names) {
			t.Errorf("REST ?set=%s: HTTP %d %v, want %v", set, code, sortedNames(rest), names)
		}
		if g := grpcList(set); !slices.Equal(sortedNames(g), names) {
			t.Errorf("gRPC tool-set %s: %v, want %v", set, sortedNames(g), names)
		}
	}
	if _, rest := restList("?set=alpha"); rest["alpha-joke"] != "A joke for the alpha desk." || rest["echo"] != "Echoes its arguments." {
		t.Errorf("alpha's descriptions: %v", rest)
	}
	if _, all := restList(""); len(all) != 3 {
		t.Errorf("without a set: %v, want the whole registry", sortedNames(all))
	}
	if code, _ := restList("?set=nope"); code != http.StatusNotFound {
		t.Errorf("an unknown set: HTTP %d, want 404", code)
	}

	args, _ := structpb.NewStruct(map[string]any{"mode": "user"})
	if res, err := cli.InvokeTool(inSet("beta"), &toolgatev1.InvokeToolRequest{Name: "repeat", Arguments: args}); err != nil || res.GetOutput() != "anonymous" {
		t.Errorf("gRPC repeat in beta: %v, %v", res, err)
	}
	for _, c := range []struct{ set, tool string }{{"beta", "echo"}, {"alpha", "repeat"}, {"beta", "hidden"}} {
		_, err := cli.InvokeTool(inSet(c.set), &toolgatev1.InvokeToolRequest{Name: c.tool, Arguments: args})
		if st := status.Convert(err); st.Code() != codes.NotFound || !strings.Contains(st.Message(), "not found") {
			t.Errorf("gRPC %s in %s: %v, want NOT_FOUND", c.tool, c.set, err)
		}
	}
	// Counted under the registry's name.
	resp0, err := http.Get("http://" + gw.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	exposition, _ := io.ReadAll(resp0.Body)
	_ = resp0.Body.Close()
	if !strings.Contains(string(exposition), `toolgate_calls_total{code="OK",method="/toolgate.v1.ToolService/InvokeTool",tool="echo"} 1`) {
		t.Errorf("repeat in beta is not counted as echo:\n%s", grepLines(string(exposition), "toolgate_calls_total"))
	}
	if _, err := cli.GetTool(inSet("beta"), &toolgatev1.GetToolRequest{Name: "repeat"}); err != nil {
		t.Errorf("gRPC GetTool repeat in beta: %v", err)
	}
	if _, err := cli.ListTools(inSet("nope"), &toolgatev1.ListToolsRequest{}); status.Code(err) != codes.NotFound {
		t.Errorf("gRPC unknown set: %v, want NOT_FOUND", err)
	}
	// REST invoke in a set by the header.
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/tools/repeat:invoke", strings.NewReader(`{"arguments": {"mode": "user"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Tool-Set", "beta")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("REST repeat:invoke with Tool-Set: beta: HTTP %d", resp.StatusCode)
	}
}

func sortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestToolSetsPolicy: the policy applies on top of a set, by the
// registry's names: alice may list and invoke echo alone, so alpha shows
// her echo only, beta shows her repeat (which is echo), alpha-joke is
// refused; the sets' MCP lists are private to the caller (cacheScope) with
// a ttlMs.
func TestToolSetsPolicy(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys.yaml")
	policy := filepath.Join(dir, "policy.yaml")
	const key = "toolset-alice-key-0123456789"
	if err := os.WriteFile(keys, []byte(fmt.Sprintf("keys:\n  - {hash: %q, user: alice}\n", auth.HashKey(key))), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(policy, []byte("rules:\n  - {users: [\"api-key:alice\"], tools: [echo], actions: [list, invoke]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := runGateway(t, nil, "--registry", toolSetsRegistry(t), "--api-keys", keys, "--policy", policy)
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	mcpPost := func(set, method, params string, name ...string) map[string]any {
		body := `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{` + params +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/mcp/"+set, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", method)
		req.Header.Set("X-Api-Key", key)
		if len(name) > 0 {
			req.Header.Set("Mcp-Name", name[0])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			for _, line := range strings.Split(string(raw), "\n") {
				if d, ok := strings.CutPrefix(line, "data: "); ok {
					raw = []byte(d)
				}
			}
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("MCP %s %s: HTTP %d %s", set, method, resp.StatusCode, raw)
		}
		return m
	}
	names := func(set string) []string {
		res, _ := mcpPost(set, "tools/list", "")["result"].(map[string]any)
		if res["cacheScope"] != "private" {
			t.Errorf("%s: cacheScope %v, want private (the list is the caller's)", set, res["cacheScope"])
		}
		if _, ok := res["ttlMs"].(float64); !ok {
			t.Errorf("%s: ttlMs %v, want a number", set, res["ttlMs"])
		}
		var out []string
		tools, _ := res["tools"].([]any)
		for _, tl := range tools {
			out = append(out, tl.(map[string]any)["name"].(string))
		}
		slices.Sort(out)
		return out
	}
	if got := names("alpha"); !slices.Equal(got, []string{"echo"}) {
		t.Errorf("alice in alpha: %v, want [echo]", got)
	}
	if got := names("beta"); !slices.Equal(got, []string{"repeat"}) {
		t.Errorf("alice in beta: %v, want [repeat] (the policy's echo)", got)
	}
	call := func(set, tool string) map[string]any {
		return mcpPost(set, "tools/call", `"name":"`+tool+`","arguments":{"mode":"user"},`, tool)
	}
	if r, _ := call("beta", "repeat")["result"].(map[string]any); r == nil || r["isError"] == true {
		t.Errorf("alice calls repeat in beta: %v", r)
	}
	if e, _ := call("alpha", "alpha-joke")["error"].(map[string]any); e == nil || !strings.Contains(fmt.Sprint(e["data"]), "PermissionDenied") {
		t.Errorf("alice calls alpha-joke in alpha: %v, want refused by the policy", e)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/tools?set=alpha", nil)
	req.Header.Set("X-Api-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Tools []struct{ Name string } }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if len(body.Tools) != 1 || body.Tools[0].Name != "echo" {
		t.Errorf("REST ?set=alpha for alice: %+v, want echo alone", body.Tools)
	}
}

func grepLines(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
