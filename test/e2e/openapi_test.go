package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/api"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/test/e2e/oapiclient"
)

// repoRoot is the repository's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// liveSpec returns the OpenAPI document the gateway serves, also written to
// a file for the generators.
func liveSpec(t *testing.T) (doc []byte, path string) {
	t.Helper()
	resp, err := http.Get(env.httpBase + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	doc, err = io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("GET /openapi.json: %s %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	path = filepath.Join(t.TempDir(), "toolgate.openapi.json")
	if err := os.WriteFile(path, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	return doc, path
}

// runTool runs name with args in dir and returns its combined output; a
// non-zero exit fails the test.
func runTool(t *testing.T, ctx context.Context, dir string, extraEnv []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), extraEnv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	t.Logf("%s (%s)", strings.Join(cmd.Args, " "), time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out.String())
	}
	return out.String()
}

// TestOpenAPIServedDocument: /openapi.json is the committed OpenAPI 3.1
// document.
func TestOpenAPIServedDocument(t *testing.T) {
	doc, _ := liveSpec(t)
	committed, err := os.ReadFile(filepath.Join(repoRoot(t), "api", "openapi", "toolgate.openapi.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, committed) || !bytes.Equal(doc, api.Spec) {
		t.Fatal("the served /openapi.json differs from api/openapi/toolgate.openapi.json")
	}
	var head struct {
		OpenAPI string `json:"openapi"`
	}
	if err := json.Unmarshal(doc, &head); err != nil || head.OpenAPI != "3.1.0" {
		t.Fatalf("openapi = %q (%v)", head.OpenAPI, err)
	}
}

// TestOpenAPIOapiCodegen generates the Go client from the served document
// with oapi-codegen (pinned in tools/go.mod) and checks it is the committed
// test/e2e/oapiclient, which TestOpenAPIGoClient uses.
func TestOpenAPIOapiCodegen(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	_, spec := liveSpec(t)
	out := filepath.Join(t.TempDir(), "client.gen.go")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	runTool(t, ctx, root, nil, "go", "tool", "-modfile=tools/go.mod", "oapi-codegen",
		"-config", "test/e2e/oapiclient/oapi-codegen.yaml", "-o", out, spec)
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(root, "test", "e2e", "oapiclient", "client.gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("oapi-codegen's client of the served document differs from test/e2e/oapiclient/client.gen.go; run scripts/generate.sh")
	}
	for _, m := range []string{"func (c *Client) InvokeTool(", "func (c *Client) StreamTool(", "func (c *Client) ListTools(",
		"func (c *Client) GetTool(", "func (c *Client) ListToolServices(", "func (c *Client) GetToolService("} {
		if !bytes.Contains(got, []byte(m)) {
			t.Errorf("generated client has no %s…", m)
		}
	}
}

func oapiClient(t *testing.T) *oapiclient.ClientWithResponses {
	t.Helper()
	c, err := oapiclient.NewClientWithResponses(env.httpBase)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func accept(mediaType string) oapiclient.RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Accept", mediaType)
		return nil
	}
}

// statusErrorInfo returns the ErrorInfo among st's details.
func statusErrorInfo(t *testing.T, st *oapiclient.Status) oapiclient.ErrorInfo {
	t.Helper()
	if st == nil || st.Details == nil {
		t.Fatalf("status without details: %+v", st)
	}
	for _, d := range *st.Details {
		if ei, err := d.AsErrorInfo(); err == nil && ei.Type == oapiclient.TypeGoogleapisComgoogleRpcErrorInfo {
			return ei
		}
	}
	t.Fatalf("no ErrorInfo in %+v", *st.Details)
	return oapiclient.ErrorInfo{}
}

// decodeStrict decodes data into v, refusing members v does not declare.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// TestOpenAPIGoClient calls the gateway through the oapi-codegen client of
// its OpenAPI document.
func TestOpenAPIGoClient(t *testing.T) {
	t.Parallel()
	c := oapiClient(t)
	args := func(m map[string]any) *map[string]any { return &m }

	t.Run("invoke", func(t *testing.T) {
		t.Parallel()
		resp, err := c.InvokeToolWithResponse(t.Context(), "tell-joke", oapiclient.InvokeToolJSONRequestBody{
			Arguments: args(map[string]any{"topic": "programming"}), Timeout: new("5s"),
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != http.StatusOK || resp.JSON200 == nil || resp.JSON200.Output == "" {
			t.Fatalf("%d %s", resp.StatusCode(), resp.Body)
		}
	})

	t.Run("arguments_json keeps numbers exact", func(t *testing.T) {
		t.Parallel()
		// The document's arguments_json is text (a string with
		// contentMediaType, which oapi-codegen would otherwise take for a
		// file and send base64-encoded).
		text := `{"n": 123456789012345678, "x": 1.10}`
		resp, err := c.InvokeToolWithResponse(t.Context(), "echo", oapiclient.InvokeToolJSONRequestBody{ArgumentsJson: &text})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != http.StatusOK || resp.JSON200 == nil ||
			!strings.Contains(resp.JSON200.Output, "123456789012345678") || !strings.Contains(resp.JSON200.Output, "1.10") {
			t.Fatalf("%d %s", resp.StatusCode(), resp.Body)
		}
	})

	t.Run("Go duration timeout", func(t *testing.T) {
		t.Parallel()
		resp, err := c.InvokeToolWithResponse(t.Context(), "echo", oapiclient.InvokeToolJSONRequestBody{
			Arguments: args(map[string]any{"mode": "sleep", "ms": 5000}), Timeout: new("200ms"),
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != http.StatusGatewayTimeout || resp.JSON504 == nil || resp.JSON504.Code != 4 {
			t.Fatalf("want 504 with DEADLINE_EXCEEDED, got %d %s", resp.StatusCode(), resp.Body)
		}
	})

	t.Run("unknown tool is a typed 404", func(t *testing.T) {
		t.Parallel()
		resp, err := c.InvokeToolWithResponse(t.Context(), "no-such-tool", oapiclient.InvokeToolJSONRequestBody{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != http.StatusNotFound || resp.JSON404 == nil || resp.JSON404.Code != 5 {
			t.Fatalf("%d %s", resp.StatusCode(), resp.Body)
		}
		ei := statusErrorInfo(t, resp.JSON404)
		if ei.Reason != "TOOL_NOT_FOUND" || ei.Domain == nil || *ei.Domain != "toolgate" {
			t.Fatalf("ErrorInfo %+v", ei)
		}
	})

	t.Run("bad arguments are a typed 400", func(t *testing.T) {
		t.Parallel()
		resp, err := c.InvokeToolWithResponse(t.Context(), "tell-dad-joke", oapiclient.InvokeToolJSONRequestBody{
			Arguments: args(map[string]any{}),
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != http.StatusBadRequest || resp.JSON400 == nil || resp.JSON400.Code != 3 || resp.JSON400.Message == "" {
			t.Fatalf("%d %s", resp.StatusCode(), resp.Body)
		}
	})

	t.Run("service error carries ErrorInfo metadata", func(t *testing.T) {
		t.Parallel()
		resp, err := c.InvokeToolWithResponse(t.Context(), "echo", oapiclient.InvokeToolJSONRequestBody{
			Arguments: args(map[string]any{"mode": "fail", "type": "tool-service-error", "message": "broken"}),
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != http.StatusInternalServerError || resp.JSON500 == nil || resp.JSON500.Message != "broken" {
			t.Fatalf("%d %s", resp.StatusCode(), resp.Body)
		}
		ei := statusErrorInfo(t, resp.JSON500)
		if ei.Reason != "tool-service-error" || ei.Metadata == nil || (*ei.Metadata)["tool"] != "echo" || (*ei.Metadata)["service"] != "echo-service" {
			t.Fatalf("ErrorInfo %+v", ei)
		}
	})

	t.Run("body too large is a typed 413", func(t *testing.T) {
		t.Parallel()
		resp, err := c.InvokeToolWithResponse(t.Context(), "echo", oapiclient.InvokeToolJSONRequestBody{
			Arguments: args(map[string]any{"msg": strings.Repeat("x", 2<<20)}),
		})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != http.StatusRequestEntityTooLarge || resp.JSON413 == nil || resp.JSON413.Code == 0 {
			t.Fatalf("%d %.300s", resp.StatusCode(), resp.Body)
		}
	})

	t.Run("wrong method is a typed 405 with Allow", func(t *testing.T) {
		t.Parallel()
		resp, err := http.Get(env.httpBase + "/v1/tools/echo:invoke")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var st oapiclient.Status
		if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(resp.Header.Get("Allow"), "POST") {
			t.Fatalf("%s Allow=%q %s", resp.Status, resp.Header.Get("Allow"), body)
		}
		if err := json.Unmarshal(body, &st); err != nil || st.Code == 0 {
			t.Fatalf("405 body is not a Status: %v %s", err, body)
		}
	})

	t.Run("stream as NDJSON, line by line", func(t *testing.T) {
		t.Parallel()
		const n = 20
		// No Accept header: NDJSON is the default.
		resp, err := c.StreamTool(t.Context(), "echo", oapiclient.StreamToolJSONRequestBody{
			Arguments: args(map[string]any{"mode": "stream", "n": n, "gap_ms": 20}),
		})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s %q %s", resp.Status, resp.Header.Get("Content-Type"), b)
		}
		sc := bufio.NewScanner(resp.Body)
		var chunks []oapiclient.StreamToolResponse
		var first, last time.Time
		for sc.Scan() {
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue
			}
			if first.IsZero() {
				first = time.Now()
			}
			last = time.Now()
			var chunk oapiclient.StreamToolResponse
			if err := decodeStrict(sc.Bytes(), &chunk); err != nil {
				t.Fatalf("line %d is not a StreamToolResponse: %v: %s", len(chunks), err, sc.Text())
			}
			chunks = append(chunks, chunk)
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		checkChunks(t, chunks, n)
		// Chunks are flushed as they come: the first arrives long before
		// the last (the service waits 20 ms between chunks).
		if d := last.Sub(first); d < 150*time.Millisecond {
			t.Fatalf("all %d chunks arrived within %s: not streamed", n, d)
		}
	})

	t.Run("stream as server-sent events", func(t *testing.T) {
		t.Parallel()
		const n = 5
		resp, err := c.StreamTool(t.Context(), "echo", oapiclient.StreamToolJSONRequestBody{
			Arguments: args(map[string]any{"mode": "stream", "n": n}),
		}, accept("text/event-stream"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("%s %q %s", resp.Status, resp.Header.Get("Content-Type"), b)
		}
		var chunks []oapiclient.StreamToolResponse
		var events []string
		event := ""
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "" || strings.HasPrefix(line, ":"):
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
				events = append(events, event)
			case strings.HasPrefix(line, "data: ") && event == "chunk":
				var chunk oapiclient.StreamToolResponse
				if err := decodeStrict([]byte(strings.TrimPrefix(line, "data: ")), &chunk); err != nil {
					t.Fatalf("chunk data: %v: %s", err, line)
				}
				chunks = append(chunks, chunk)
			case strings.HasPrefix(line, "data: ") && event == "done":
				if d := strings.TrimPrefix(line, "data: "); d != "{}" {
					t.Fatalf("done data %q", d)
				}
			default:
				t.Fatalf("unexpected line %q after event %q", line, event)
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		checkChunks(t, chunks, n)
		if len(events) != n+1 || events[n] != "done" {
			t.Fatalf("events %v", events)
		}
	})

	t.Run("stream failing after chunks ends in a Status line", func(t *testing.T) {
		t.Parallel()
		resp, err := c.StreamTool(t.Context(), "echo", oapiclient.StreamToolJSONRequestBody{
			Arguments: args(map[string]any{"mode": "stream", "n": 50, "gap_ms": 50}), Timeout: new("1s"),
		}, accept("application/x-ndjson"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var lines [][]byte
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if len(bytes.TrimSpace(sc.Bytes())) > 0 {
				lines = append(lines, bytes.Clone(sc.Bytes()))
			}
		}
		if resp.StatusCode != http.StatusOK || len(lines) < 2 {
			t.Fatalf("%s, %d lines", resp.Status, len(lines))
		}
		for i, l := range lines[:len(lines)-1] {
			var chunk oapiclient.StreamToolResponse
			if err := decodeStrict(l, &chunk); err != nil || chunk.Output != strconv.Itoa(i)+"," {
				t.Fatalf("line %d: %v %s", i, err, l)
			}
		}
		var line oapiclient.StreamLine
		if err := json.Unmarshal(lines[len(lines)-1], &line); err != nil {
			t.Fatal(err)
		}
		st, err := line.AsStatus()
		// DEADLINE_EXCEEDED, or UNKNOWN when the service's own deadline
		// error wins the race.
		if err != nil || (st.Code != 4 && st.Code != 2) {
			t.Fatalf("last line %s: %v", lines[len(lines)-1], err)
		}
	})

	t.Run("stream of an unknown tool is a typed 404", func(t *testing.T) {
		t.Parallel()
		resp, err := c.StreamToolWithResponse(t.Context(), "no-such-tool", oapiclient.StreamToolJSONRequestBody{})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != http.StatusNotFound || resp.JSON404 == nil {
			t.Fatalf("%d %s", resp.StatusCode(), resp.Body)
		}
		if ei := statusErrorInfo(t, resp.JSON404); ei.Reason != "TOOL_NOT_FOUND" {
			t.Fatalf("ErrorInfo %+v", ei)
		}
	})

	t.Run("an operation: start, poll, wait, read", func(t *testing.T) {
		t.Parallel()
		resp, err := c.StartToolWithResponse(t.Context(), "echo", oapiclient.StartToolJSONRequestBody{
			Arguments: args(map[string]any{"mode": "sleep", "ms": 300, "msg": "op-go"}), Timeout: new("20s"),
		})
		if err != nil {
			t.Fatal(err)
		}
		op := resp.JSON200
		if resp.StatusCode() != http.StatusOK || op == nil || op.Name == nil || !strings.HasPrefix(*op.Name, "operations/") {
			t.Fatalf("start: %d %s", resp.StatusCode(), resp.Body)
		}
		if op.Done != nil && *op.Done {
			t.Fatalf("a 300 ms call is done at its start: %s", resp.Body)
		}
		if op.Metadata == nil || op.Metadata.Tool == nil || *op.Metadata.Tool != "echo" || op.Metadata.State == nil || *op.Metadata.State != oapiclient.RUNNING {
			t.Fatalf("start: metadata %s", resp.Body)
		}
		id := strings.TrimPrefix(*op.Name, "operations/")
		// Poll until done, as a generated client's user would.
		var got *oapiclient.Operation
		eventually.True(t, 20*time.Second, "the operation done", func() bool {
			g, err := c.GetOperationWithResponse(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			if g.StatusCode() != http.StatusOK || g.JSON200 == nil {
				t.Fatalf("get: %d %s", g.StatusCode(), g.Body)
			}
			got = g.JSON200
			return got.Done != nil && *got.Done
		})
		if got.Error != nil || got.Response == nil || got.Response.Output != "op-go" || *got.Metadata.State != oapiclient.DONE || got.Metadata.EndTime == nil {
			t.Fatalf("done operation: error %+v, response %+v, metadata %+v", got.Error, got.Response, got.Metadata)
		}
		// :wait on a done operation answers at once with the same.
		w, err := c.WaitOperationWithResponse(t.Context(), id, oapiclient.WaitOperationJSONRequestBody{Timeout: new("5s")})
		if err != nil {
			t.Fatal(err)
		}
		if w.StatusCode() != http.StatusOK || w.JSON200 == nil || w.JSON200.Response == nil || w.JSON200.Response.Output != "op-go" {
			t.Fatalf("wait: %d %s", w.StatusCode(), w.Body)
		}
		// A failed operation carries the typed Status.
		f, err := c.StartToolWithResponse(t.Context(), "echo", oapiclient.StartToolJSONRequestBody{
			Arguments: args(map[string]any{"mode": "fail", "type": "no-luck", "message": "not today"}),
		})
		if err != nil || f.JSON200 == nil || f.JSON200.Name == nil {
			t.Fatalf("start: %v %s", err, f.Body)
		}
		fw, err := c.WaitOperationWithResponse(t.Context(), strings.TrimPrefix(*f.JSON200.Name, "operations/"), oapiclient.WaitOperationJSONRequestBody{Timeout: new("10s")})
		if err != nil {
			t.Fatal(err)
		}
		if fw.JSON200 == nil || fw.JSON200.Error == nil || fw.JSON200.Response != nil || *fw.JSON200.Metadata.State != oapiclient.FAILED {
			t.Fatalf("failed operation: %d %s", fw.StatusCode(), fw.Body)
		}
		if ei := statusErrorInfo(t, fw.JSON200.Error); ei.Reason != "no-luck" {
			t.Fatalf("failed operation's ErrorInfo reason %q, want no-luck: %s", ei.Reason, fw.Body)
		}
	})

	t.Run("list and get", func(t *testing.T) {
		t.Parallel()
		list, err := c.ListToolsWithResponse(t.Context(), &oapiclient.ListToolsParams{PageSize: new(int32(1000))})
		if err != nil {
			t.Fatal(err)
		}
		if list.JSON200 == nil || list.JSON200.Tools == nil {
			t.Fatalf("%d %s", list.StatusCode(), list.Body)
		}
		found := false
		for _, tool := range *list.JSON200.Tools {
			found = found || (tool.Name != nil && *tool.Name == "tell-joke")
		}
		if !found {
			t.Fatalf("tell-joke not listed: %s", list.Body)
		}
		tool, err := c.GetToolWithResponse(t.Context(), "tell-dad-joke")
		if err != nil {
			t.Fatal(err)
		}
		if tool.JSON200 == nil || tool.JSON200.ArgumentsSchema == nil || (*tool.JSON200.ArgumentsSchema)["type"] != "object" {
			t.Fatalf("%d %s", tool.StatusCode(), tool.Body)
		}
		svc, err := c.GetToolServiceWithResponse(t.Context(), "no-such-service")
		if err != nil {
			t.Fatal(err)
		}
		if svc.JSON404 == nil {
			t.Fatalf("%d %s", svc.StatusCode(), svc.Body)
		}
	})
}

func checkChunks(t *testing.T, chunks []oapiclient.StreamToolResponse, n int) {
	t.Helper()
	if len(chunks) != n {
		t.Fatalf("%d chunks, want %d: %+v", len(chunks), n, chunks)
	}
	for i, c := range chunks {
		want := strconv.Itoa(i) + ","
		if i == n-1 {
			want = strconv.Itoa(i)
		}
		if c.Output != want || c.Index != strconv.Itoa(i) || c.Last != (i == n-1) {
			t.Fatalf("chunk %d = %+v, want output %q index %q last %v", i, c, want, strconv.Itoa(i), i == n-1)
		}
	}
}

// knownGeneratorWarnings are the warnings openapi-generator 7.25.0 prints
// for every OpenAPI 3.1 document, even a minimal one.
var knownGeneratorWarnings = regexp.MustCompile(`OpenAPI 3\.1 support is still in beta|Failed to get the schema name: null`)

// TestOpenAPIGeneratorCLI generates clients from the served document with
// openapi-generator (scripts/openapi-generator.sh; pinned npm wrapper and
// jar). Any error, and any warning beyond the generator's standing ones,
// fails the test.
func TestOpenAPIGeneratorCLI(t *testing.T) {
	// Not parallel: the JVM would crowd the timing-sensitive tests.
	root := repoRoot(t)
	_, spec := liveSpec(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	for _, g := range []struct{ generator, check string }{
		{"python", "toolgate_openapi/api/tool_service_api.py"},
		{"typescript-fetch", "apis/ToolServiceApi.ts"},
	} {
		out := filepath.Join(t.TempDir(), g.generator)
		log := runTool(t, ctx, root, nil, filepath.Join(root, "scripts", "openapi-generator.sh"),
			"generate", "-i", spec, "-g", g.generator, "-o", out, "--package-name", "toolgate_openapi")
		for _, line := range strings.Split(log, "\n") {
			if (strings.Contains(line, "WARN") || strings.Contains(line, "ERROR")) && !knownGeneratorWarnings.MatchString(line) {
				t.Errorf("%s: %s", g.generator, line)
			}
		}
		src, err := os.ReadFile(filepath.Join(out, g.check))
		if err != nil {
			t.Fatalf("%s: %v\n%s", g.generator, err, log)
		}
		for _, op := range []string{"invoke", "stream", "list", "get"} {
			if !strings.Contains(strings.ToLower(string(src)), op+"tool") && !strings.Contains(string(src), op+"_tool") {
				t.Errorf("%s: %s has no %s operation", g.generator, g.check, op)
			}
		}
	}
}

// TestOpenAPIPythonClient runs test/python/test_generated_python_client.py:
// openapi-python-client (pinned in scripts/python/requirements.txt)
// generates a client from the served document, and the test calls the
// gateway with it.
func TestOpenAPIPythonClient(t *testing.T) {
	root := repoRoot(t)
	venv := pythonVenv(t, root)
	python := filepath.Join(venv, "bin", "python")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider",
		"test/python/test_generated_python_client.py")
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"TOOLGATE_GRPC_ADDR="+env.gw.GRPCAddr(),
		"TOOLGATE_HTTP_BASE="+env.httpBase,
		"PYTHONDONTWRITEBYTECODE=1",
		// openapi-python-client runs ruff from the venv.
		"PATH="+filepath.Join(venv, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"),
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
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
		t.Fatal("pytest skipped tests")
	}
}
