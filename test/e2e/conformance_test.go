package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/toolservice"
)

// conformanceRuns are the runs of the official conformance suite against
// the gateway: the active suite at each revision the gateway serves
// (--spec-version), and exactly what revision 2026-07-28 requires, frozen
// at its release (--requirements: adds its stateless-protocol, caching
// and input-required scenarios, which the active suite leaves out).
var conformanceRuns = []conformanceRun{
	{"spec-2025-11-25", "2025-11-25", []string{"--spec-version", "2025-11-25"}},
	{"spec-2026-07-28", "2026-07-28", []string{"--spec-version", "2026-07-28"}},
	{"requirements-2026-07-28", "2026-07-28", []string{"--requirements", "2026-07-28"}},
}

// conformanceRun is one run of the suite: its arguments, and the revision
// whose expected failures apply.
type conformanceRun struct {
	name, version string
	args          []string
}

// conformanceExtensions are the suite's scenarios of the protocol's
// extensions, which no revision's run includes: each runs on its own
// (--scenario, and --force: an extension is on no revision's timeline) at
// 2026-07-28, the revision that defines the extension,
// against that revision's expected failures. The tasks extension
// (io.modelcontextprotocol/tasks) is served with --operations.
var conformanceExtensions = []string{
	"tasks-lifecycle", "tasks-capability-negotiation", "tasks-wire-fields", "tasks-request-state-removal",
	"tasks-mrtr-input", "tasks-request-headers", "tasks-dispatch-and-envelope", "tasks-status-notifications",
	"tasks-required-task-error", "tasks-mrtr-composition",
}

// TestMCPConformance runs the official MCP conformance suite
// (scripts/mcp-conformance.sh, @modelcontextprotocol/conformance) against
// a gateway on the real broker, whose only tools are the suite's fixture
// tools, served by an ordinary tool service (conformanceService) that
// announces them. Each spec revision must pass but for the scenarios
// listed, each with its reason, in testdata/mcp-conformance/<revision>.yaml:
// the suite itself fails the run on any other failure, and on a listed
// scenario that passes.
func TestMCPConformance(t *testing.T) {
	root := repoRoot(t)
	entry := conformanceSuite(t, root)
	announce := "persistent://tg/config/" + brokertest.UniqueTopic("conformance-announce")
	startConformanceService(t, announce)
	// With --operations: the tasks extension of 2026-07-28 is served.
	gw := runGateway(t, nil, append([]string{"--announce-topic", announce, "--allow-anonymous", "--default-timeout", "10s"}, brokertest.TestOperations(t).Flags()...)...)
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitTool(t, base, "test_simple_text", 30*time.Second)
	restSeesContentAsText(t, base)
	runs := conformanceRuns
	for _, sc := range conformanceExtensions {
		runs = append(runs, conformanceRun{sc, "2026-07-28", []string{"--scenario", sc, "--spec-version", "2026-07-28", "--force"}})
	}
	for _, run := range runs {
		t.Run(run.name, func(t *testing.T) {
			out := t.TempDir()
			ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, entry[0], append(append(append(entry[1:], "server", "--url", base+"/mcp"), run.args...),
				"--expected-failures", filepath.Join(root, "test", "e2e", "testdata", "mcp-conformance", run.version+".yaml"),
				"-o", out)...)
			cmd.Dir = root
			var buf bytes.Buffer
			cmd.Stdout, cmd.Stderr = &buf, &buf
			err := cmd.Run()
			t.Logf("%s:\n%s", strings.Join(cmd.Args, " "), buf.String())
			logFailedChecks(t, out)
			if err != nil {
				t.Fatalf("conformance suite, %s: %v (see the output above)", strings.Join(run.args, " "), err)
			}
			if !strings.Contains(buf.String(), "passed") {
				t.Fatal("the conformance suite reported no passed checks")
			}
		})
	}
}

// restSeesContentAsText: the REST door returns a tool of MCP content's
// reply as it is, the JSON text of its blocks (the MCP door's content).
func restSeesContentAsText(t *testing.T, base string) {
	t.Helper()
	resp, err := http.Post(base+"/v1/tools/test_embedded_resource:invoke", "application/json", strings.NewReader(`{"arguments": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct{ Output string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("REST invoke of test_embedded_resource: %d, %v", resp.StatusCode, err)
	}
	want, _ := toolservice.Content(toolservice.ResourceContent("test://embedded-resource", "text/plain", "This is an embedded resource content."))
	if body.Output != want {
		t.Errorf("REST output %q, want the tool's reply %q", body.Output, want)
	}
}

// logFailedChecks logs every check the suite reports as failed or as a
// warning in its results under dir (<scenario>/checks.json), with the
// suite's own message.
func logFailedChecks(t *testing.T, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*", "checks.json"))
	if len(files) == 0 {
		t.Errorf("no checks.json under %s", dir)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Error(err)
			continue
		}
		var checks []struct {
			ID, Status, ErrorMessage string
			Details                  json.RawMessage
		}
		if err := json.Unmarshal(b, &checks); err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		for _, c := range checks {
			if c.Status == "FAILURE" || c.Status == "WARNING" {
				t.Logf("%s %s %s: %s\n\tdetails: %.600s", filepath.Base(filepath.Dir(f)), c.Status, c.ID, c.ErrorMessage, c.Details)
			}
		}
	}
}

// conformanceSuite installs the pinned suite and Node (first use) and
// returns the command that runs it.
func conformanceSuite(t *testing.T, root string) []string {
	t.Helper()
	path := func(script string) string {
		cmd := exec.CommandContext(t.Context(), filepath.Join(root, "scripts", script))
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("scripts/%s: %v\n%s", script, err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	return []string{path("node.sh"), path("mcp-conformance.sh")}
}

// waitTool waits until the gateway at base lists tool.
func waitTool(t *testing.T, base, tool string, d time.Duration) {
	t.Helper()
	eventually.Succeeds(t, d, "tool "+tool+" served", func() error {
		code, err := httpGet(base + "/v1/tools/" + tool)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("HTTP %d", code)
		}
		return err
	})
}

func httpGet(url string) (int, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// conformanceTools are the suite's fixture tools that a tool service can
// serve. A tool service learns which tool was called from the tool's
// config values: each fixture tool sets "fixture".
var conformanceTools = []toolservice.Tool{
	{Name: "test_simple_text", Description: "Returns simple text content", Config: map[string]any{"fixture": "simple-text"}},
	{Name: "test_error_handling", Description: "Always fails", Config: map[string]any{"fixture": "error"}},
	{Name: "test_tool_with_progress", Description: "Streams three chunks 50 ms apart", Config: map[string]any{"fixture": "progress"}},
	{Name: "test_trigger_tool_change", Description: "Changes this service's tool list (adds or removes test_changed_tool)", Config: map[string]any{"fixture": "change"}},
	// Tools of MCP content (result: mcp-content): their replies are content
	// blocks, their log records notifications/message.
	{Name: "test_image_content", Description: "Returns an image (a red pixel)", Config: map[string]any{"fixture": "image"}, Result: toolservice.ResultMCPContent},
	{Name: "test_audio_content", Description: "Returns audio (a moment of silence)", Config: map[string]any{"fixture": "audio"}, Result: toolservice.ResultMCPContent},
	{Name: "test_embedded_resource", Description: "Returns an embedded text resource", Config: map[string]any{"fixture": "resource"}, Result: toolservice.ResultMCPContent},
	{Name: "test_multiple_content_types", Description: "Returns text, an image and a resource", Config: map[string]any{"fixture": "mixed"}, Result: toolservice.ResultMCPContent},
	{Name: "test_tool_with_logging", Description: "Logs three records at info, 50 ms apart", Config: map[string]any{"fixture": "logging"}, Result: toolservice.ResultMCPContent},
	{Name: "test_logging_tool", Description: "Logs three records at info, 50 ms apart", Config: map[string]any{"fixture": "logging"}, Result: toolservice.ResultMCPContent},
	// The tasks extension's fixtures (2026-07-28, SEP-2663): greet runs
	// as a plain call; slow_compute may run as a task (the gateway runs
	// with --operations), failing_job only as one.
	{Name: "greet", Description: "Says hello to name", Config: map[string]any{"fixture": "greet"},
		Arguments: []toolservice.Argument{{Name: "name", Required: true}}},
	{Name: "slow_compute", Description: "Answers after the given seconds", Config: map[string]any{"fixture": "slow"}, TaskSupport: "optional",
		Arguments: []toolservice.Argument{{Name: "seconds", Type: "number", Required: true}, {Name: "label"}}},
	{Name: "failing_job", Description: "Fails after a second", Config: map[string]any{"fixture": "failing"}, TaskSupport: "required"},
	// A failure of the protocol rather than of the tool: a reply larger
	// than an operation keeps, which the gateway refuses (the task fails,
	// OUTPUT_TOO_LARGE).
	{Name: "protocol_error_job", Description: "Replies with more than an operation keeps", Config: map[string]any{"fixture": "too-large"}, TaskSupport: "optional"},
	// Tools described by an input schema of their own: JSON Schema 2020-12
	// keywords listed as given (SEP-1613, SEP-2106), and arguments mirrored
	// into Mcp-Param headers (SEP-2243).
	{Name: "json_schema_2020_12_tool", Description: "Tool with JSON Schema 2020-12 features", Config: map[string]any{"fixture": "echo-arguments"},
		InputSchema: json.RawMessage(`{
			"$schema": "https://json-schema.org/draft/2020-12/schema",
			"type": "object",
			"$defs": {"address": {"$anchor": "addressDef", "type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
			"properties": {
				"name": {"type": "string"},
				"address": {"$ref": "#/$defs/address"},
				"contactMethod": {"type": "string", "enum": ["phone", "email"]},
				"phone": {"type": "string"},
				"email": {"type": "string"}
			},
			"allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
			"if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
			"then": {"required": ["phone"]},
			"else": {"required": ["email"]},
			"additionalProperties": false
		}`)},
	{Name: "test_custom_headers", Description: "Echoes its arguments; region and priority travel in Mcp-Param headers too", Config: map[string]any{"fixture": "echo-arguments"},
		InputSchema: json.RawMessage(`{
			"type": "object",
			"properties": {
				"region": {"type": "string", "x-mcp-header": "Region"},
				"priority": {"type": "integer", "x-mcp-header": "Priority"}
			},
			"required": ["region"]
		}`)},
}

// startConformanceService runs the fixture tool service until the test
// ends, announcing its tools on topic.
func startConformanceService(t *testing.T, topic string) {
	t.Helper()
	var (
		mu      sync.Mutex
		changed bool
		svc     *toolservice.Service
	)
	pixel, wav := redPixel(t), silence()
	announcement := func() *toolservice.Announcement {
		tools := append([]toolservice.Tool(nil), conformanceTools...)
		if changed {
			tools = append(tools, toolservice.Tool{Name: "test_changed_tool", Description: "Comes and goes with test_trigger_tool_change",
				Config: map[string]any{"fixture": "simple-text"}})
		}
		return &toolservice.Announcement{Topic: topic, ConfigParams: []toolservice.ConfigParam{{Name: "fixture", Required: true}}, Tools: tools}
	}
	handle := func(ctx context.Context, req *toolservice.Request) (any, error) {
		switch req.Config["fixture"] {
		case "simple-text":
			return "This is a simple text response for testing.", nil
		case "error":
			return nil, &toolservice.Error{Type: "test-error", Message: "This tool intentionally returns an error for testing"}
		case "progress":
			for i, chunk := range []string{"0%", " 50%", " 100%"} {
				if i > 0 {
					select {
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-time.After(50 * time.Millisecond):
					}
				}
				if err := req.Send(chunk); err != nil {
					return nil, err
				}
			}
			return "", nil
		case "image":
			return toolservice.Content(toolservice.ImageContent(pixel, "image/png"))
		case "audio":
			return toolservice.Content(toolservice.AudioContent(wav, "audio/wav"))
		case "resource":
			return toolservice.Content(toolservice.ResourceContent("test://embedded-resource", "text/plain", "This is an embedded resource content."))
		case "mixed":
			return toolservice.Content(toolservice.TextContent("Multiple content types test:"),
				toolservice.ImageContent(pixel, "image/png"),
				toolservice.ResourceContent("test://mixed-content-resource", "application/json", `{"test":"data","value":123}`))
		case "logging":
			for i, msg := range []string{"Tool execution started", "Tool processing data", "Tool execution completed"} {
				if i > 0 {
					select {
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-time.After(50 * time.Millisecond):
					}
				}
				if err := req.Log(toolservice.LogInfo, msg); err != nil {
					return nil, err
				}
			}
			return toolservice.Content(toolservice.TextContent("Tool with logging executed successfully"))
		case "echo-arguments":
			b, err := json.Marshal(req.Arguments)
			return string(b), err
		case "greet":
			return fmt.Sprintf("Hello, %v!", req.Arguments["name"]), nil
		case "slow", "failing":
			d := time.Second
			if req.Config["fixture"] == "slow" {
				n, _ := req.Arguments["seconds"].(json.Number)
				f, err := n.Float64()
				if err != nil || f < 0 {
					return nil, &toolservice.Error{Type: "invalid-argument", Message: "seconds must be a number ≥ 0"}
				}
				d = time.Duration(f * float64(time.Second))
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(d):
			}
			if req.Config["fixture"] == "failing" {
				return nil, &toolservice.Error{Type: "job-failed", Message: "the job failed, as it always does"}
			}
			return fmt.Sprintf("computed %v after %v", req.Arguments["label"], d), nil
		case "too-large":
			chunk := strings.Repeat("x", 1<<20)
			for range 5 { // 5 MiB: past the 4 MiB an operation keeps
				if err := req.Send(chunk); err != nil {
					return nil, err
				}
			}
			return "", nil
		case "change":
			mu.Lock()
			defer mu.Unlock()
			changed = !changed
			if err := svc.Announce(ctx, announcement()); err != nil {
				return nil, err
			}
			return "tool list changed", nil
		}
		return nil, fmt.Errorf("no fixture %v", req.Config["fixture"])
	}
	var err error
	svc, err = toolservice.New(toolservice.Config{
		ID: brokertest.UniqueTopic("conformance-service"), Topic: brokertest.UniqueTopic("conformance"),
		PulsarURL: brokertest.PulsarURL(), Announce: announcement(),
	}, handle)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("conformance service: %v", err)
		}
	})
}

// redPixel is a PNG of one red pixel.
func redPixel(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 1, 1))
	img.Set(0, 0, color.RGBA{R: 255, A: 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// silence is a WAV file of a millisecond of silence: 8 kHz, 8-bit mono.
func silence() []byte {
	samples := bytes.Repeat([]byte{128}, 8)
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	le(uint32(36 + len(samples)))
	b.WriteString("WAVEfmt ")
	le(uint32(16))   // the format chunk's size
	le(uint16(1))    // PCM
	le(uint16(1))    // channels
	le(uint32(8000)) // sample rate
	le(uint32(8000)) // bytes per second
	le(uint16(1))    // bytes per frame
	le(uint16(8))    // bits per sample
	b.WriteString("data")
	le(uint32(len(samples)))
	b.Write(samples)
	return b.Bytes()
}
