package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/corebackend"
	"github.com/toolgate/toolgate/internal/echo"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/mcp"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/toolservice"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const testRegistry = `
tool-service:
  echo-service: {id: echo-service, topic: echo}
tool:
  echo: {type: tool-service, name: echo, description: Echoes its arguments, service: echo-service}
  greet:
    type: tool-service
    description: Greets someone
    service: echo-service
    strict: true
    arguments:
      - {name: msg, type: string, description: The greeting, required: true}
  hidden: {type: tool-service, description: Not for you, service: echo-service}
  extra-1: {type: tool-service, service: echo-service}
  extra-2: {type: tool-service, service: echo-service}
`

// recorder is the handler the endpoint is given: the real core, with the
// header of each call and the fate of its context noted.
type recorder struct {
	core      toolcall.Handler
	mu        sync.Mutex
	calls     []toolcall.Call
	cancelled chan struct{} // a call's context ended before it returned
}

func (r *recorder) handle(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
	r.mu.Lock()
	r.calls = append(r.calls, *c)
	r.mu.Unlock()
	res, err := r.core(ctx, c, emit)
	if ctx.Err() != nil {
		select {
		case r.cancelled <- struct{}{}:
		default:
		}
	}
	return res, err
}

func (r *recorder) last() toolcall.Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.calls) == 0 {
		return toolcall.Call{Header: toolcall.NoHeader}
	}
	return r.calls[len(r.calls)-1]
}

type fixture struct {
	srv *mcp.Server
	rec *recorder
	url string
}

// newFixture runs the echo service on an in-memory broker behind a real
// ToolService, and the MCP endpoint in front of it.
func newFixture(t *testing.T, opts mcp.Options) *fixture {
	t.Helper()
	return newServiceFixture(t, opts, testRegistry, echo.Handle)
}

// newServiceFixture is newFixture with another registry (whose service
// echo-service is on topic echo) and handler.
func newServiceFixture(t *testing.T, opts mcp.Options, reg string, handle toolservice.Handler) *fixture {
	t.Helper()
	snap, err := registry.Parse("t.yaml", []byte(reg), nil)
	if err != nil {
		t.Fatal(err)
	}
	mem := transport.NewMem()
	t.Cleanup(mem.Close)
	b := bridge.New(mem, bridge.Options{})
	t.Cleanup(b.Close)
	ctx, cancel := context.WithCancel(context.Background())
	svc, err := toolservice.New(toolservice.Config{ID: "echo-service", Topic: "echo", Logger: slog.New(slog.DiscardHandler)}, handle, toolservice.WithPulsarClient(transporttest.PulsarClient(mem)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("echo service: %v", err)
		}
	})
	if err := b.Listen(ctx, "non-persistent://tg/response/echo"); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 5*time.Second, "the echo service subscribed", func() bool { return mem.Subscribers("non-persistent://tg/request/echo") > 0 })
	core := toolcall.New(registry.New(snap), corebackend.Bridge(b), toolcall.Options{
		DefaultTimeout: 5 * time.Second, MaxTimeout: time.Minute,
		Visible: func(_ *toolcall.Call, tool string) bool { return tool != "hidden" },
	})
	rec := &recorder{core: core.Handle, cancelled: make(chan struct{}, 1)}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	f := &fixture{srv: mcp.New(rec.handle, opts), rec: rec}
	hs := httptest.NewServer(f.srv)
	t.Cleanup(hs.Close)
	f.url = hs.URL
	return f
}

// headerTransport adds fixed headers to every request.
type headerTransport map[string]string

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (f *fixture) connect(t *testing.T, headers map[string]string, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	cs, err := f.dial(t, headers, opts)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func (f *fixture) dial(t *testing.T, headers map[string]string, opts *sdk.ClientOptions) (*sdk.ClientSession, error) {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts)
	tr := &sdk.StreamableClientTransport{Endpoint: f.url, HTTPClient: &http.Client{Transport: headerTransport(headers)}, MaxRetries: -1}
	cs, err := c.Connect(t.Context(), tr, nil)
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

func text(t *testing.T, r *sdk.CallToolResult) string {
	t.Helper()
	if len(r.Content) != 1 {
		t.Fatalf("want one content, got %d", len(r.Content))
	}
	tc, ok := r.Content[0].(*sdk.TextContent)
	if !ok {
		t.Fatalf("want text content, got %T", r.Content[0])
	}
	return tc.Text
}

func TestListToolsPagesAndSchemas(t *testing.T) {
	f := newFixture(t, mcp.Options{PageSize: 2})
	cs := f.connect(t, nil, nil)
	var names []string
	var tools []*sdk.Tool
	pages := 0
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
		tools = append(tools, tool)
	}
	// Count the pages the iterator fetched, the hard way.
	cursor := ""
	for {
		res, err := cs.ListTools(t.Context(), &sdk.ListToolsParams{Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Tools) > 2 {
			t.Fatalf("page of %d tools, want at most 2", len(res.Tools))
		}
		pages++
		if cursor = res.NextCursor; cursor == "" {
			break
		}
	}
	slices.Sort(names)
	if want := []string{"echo", "extra-1", "extra-2", "greet"}; !slices.Equal(names, want) {
		t.Fatalf("tools = %v, want %v (hidden must be missing)", names, want)
	}
	if pages != 2 {
		t.Errorf("pages = %d, want 2", pages)
	}
	for _, tool := range tools {
		if tool.Name != "greet" {
			continue
		}
		if tool.Description != "Greets someone" {
			t.Errorf("description = %q", tool.Description)
		}
		b, _ := json.Marshal(tool.InputSchema)
		var schema struct {
			Type       string                     `json:"type"`
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if err := json.Unmarshal(b, &schema); err != nil {
			t.Fatal(err)
		}
		if schema.Type != "object" || schema.Properties["msg"] == nil || !slices.Equal(schema.Required, []string{"msg"}) {
			t.Errorf("greet's inputSchema = %s", b)
		}
	}
}

func TestCallTool(t *testing.T) {
	f := newFixture(t, mcp.Options{})
	cs := f.connect(t, nil, nil)
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "greet", Arguments: map[string]any{"msg": "hello"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || text(t, res) != "hello" || res.StructuredContent != nil {
		t.Fatalf("greet: isError=%v text=%q structured=%v", res.IsError, text(t, res), res.StructuredContent)
	}
	// echo without msg answers its arguments as JSON: an object.
	res, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"a": 1.5, "b": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	obj, ok := res.StructuredContent.(map[string]any)
	if res.IsError || !ok || obj["a"] != 1.5 || obj["b"] != "x" {
		t.Fatalf("echo: isError=%v structured=%#v text=%q", res.IsError, res.StructuredContent, text(t, res))
	}
}

func TestCallToolErrors(t *testing.T) {
	f := newFixture(t, mcp.Options{})
	cs := f.connect(t, nil, nil)
	ctx := t.Context()
	cases := []struct {
		name, tool string
		args       map[string]any
		meta       sdk.Meta
		want       string // prefix of the isError text
	}{
		{"missing required argument", "greet", map[string]any{}, nil, `INVALID_ARGUMENTS: tool "greet": missing required argument "msg"`},
		{"wrong type", "greet", map[string]any{"msg": 5}, nil, `INVALID_ARGUMENTS: tool "greet": argument "msg" must be of type string`},
		{"unknown argument", "greet", map[string]any{"msg": "x", "other": 1}, nil, `INVALID_ARGUMENTS: tool "greet": unknown argument "other"`},
		{"service error", "echo", map[string]any{"mode": "fail", "type": "not-found", "message": "no such thing"}, nil, "not-found: no such thing"},
		{"service catch-all", "echo", map[string]any{"mode": "fail", "message": "boom"}, nil, "tool-service-error: boom"},
		// The gateway's deadline (DEADLINE_EXCEEDED) or the service's own
		// "timeout" error, whichever arrives first: both DeadlineExceeded.
		{"deadline from _meta", "echo", map[string]any{"mode": "sleep", "ms": 3000}, sdk.Meta{"timeout": "150ms"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: c.tool, Arguments: c.args, Meta: c.meta})
			if err != nil {
				t.Fatal(err)
			}
			got := text(t, res)
			if !res.IsError || !strings.HasPrefix(got, c.want) {
				t.Fatalf("isError=%v text=%q, want prefix %q", res.IsError, got, c.want)
			}
			e, _ := res.StructuredContent.(map[string]any)["error"].(map[string]any)
			if e == nil || e["type"] == "" || e["message"] == "" || e["code"] == "" {
				t.Fatalf("structuredContent = %#v", res.StructuredContent)
			}
			if c.want == "" && e["code"] != "DeadlineExceeded" {
				t.Fatalf("code = %v, want DeadlineExceeded", e["code"])
			}

		})
	}
}

func TestCallToolRefusals(t *testing.T) {
	f := newFixture(t, mcp.Options{})
	cs := f.connect(t, nil, nil)
	cases := []struct {
		name   string
		params *sdk.CallToolParams
		want   string
	}{
		{"unknown tool", &sdk.CallToolParams{Name: "nope"}, `tool "nope" not found`},
		{"bad timeout", &sdk.CallToolParams{Name: "echo", Meta: sdk.Meta{"timeout": "soon"}}, `_meta.timeout "soon" is not a duration`},
		{"negative timeout", &sdk.CallToolParams{Name: "echo", Meta: sdk.Meta{"timeout": -1.0}}, "_meta.timeout must be positive"},
		{"arguments not an object", &sdk.CallToolParams{Name: "echo", Arguments: []int{1}}, "arguments must be a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := cs.CallTool(t.Context(), c.params)
			var we *jsonrpc.Error
			if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || !strings.Contains(we.Message, c.want) {
				t.Fatalf("err = %v, want JSON-RPC invalid params containing %q", err, c.want)
			}
		})
	}
}

func TestTimeoutAsSeconds(t *testing.T) {
	f := newFixture(t, mcp.Options{})
	cs := f.connect(t, nil, nil)
	// Without a timeout applied the echo would sleep and answer: no error.
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "echo",
		Arguments: map[string]any{"mode": "sleep", "ms": 3000}, Meta: sdk.Meta{"timeout": 0.2}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError {
		t.Fatalf("isError=%v: _meta.timeout of 0.2 s not applied", res.IsError)
	}
	// The default timeout applies without _meta.timeout.
	f = newFixture(t, mcp.Options{DefaultTimeout: 200 * time.Millisecond})
	cs = f.connect(t, nil, nil)
	res, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"mode": "sleep", "ms": 3000}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError {
		t.Fatalf("default timeout: isError=%v, not applied", res.IsError)
	}
}

func TestStreamAsProgress(t *testing.T) {
	f := newFixture(t, mcp.Options{})
	var mu sync.Mutex
	var got []*sdk.ProgressNotificationParams
	cs := f.connect(t, nil, &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		got = append(got, r.Params)
		mu.Unlock()
	}})
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "echo",
		Arguments: map[string]any{"mode": "stream", "n": 5}, Meta: sdk.Meta{"progressToken": "tok-1"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || text(t, res) != "0,1,2,3,4" {
		t.Fatalf("isError=%v text=%q", res.IsError, text(t, res))
	}
	// The client may hand notifications over after the result.
	eventually.True(t, 5*time.Second, "five notifications", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= 5 })
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 5 {
		t.Fatalf("%d progress notifications, want 5", len(got))
	}
	for i, p := range got {
		want := fmt.Sprintf("%d,", i)
		if i == 4 {
			want = "4"
		}
		if p.Progress != float64(i+1) || p.Message != want || p.ProgressToken != "tok-1" {
			t.Errorf("notification %d = progress %v message %q token %v", i, p.Progress, p.Message, p.ProgressToken)
		}
	}
}

func TestStreamError(t *testing.T) {
	f := newFixture(t, mcp.Options{})
	cs := f.connect(t, nil, nil)
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "echo",
		Arguments: map[string]any{"mode": "stream", "n": 0}, Meta: sdk.Meta{"progressToken": 7}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.IsError || !strings.HasPrefix(text(t, res), "invalid-argument: n must be at least 1") {
		t.Fatalf("isError=%v text=%q", res.IsError, text(t, res))
	}
}

// TestHeadersReachTheCall: the request's header is the call's, read by
// the HTTP doors' one rule, and the calls are named for MCP.
func TestHeadersReachTheCall(t *testing.T) {
	f := newFixture(t, mcp.Options{})
	cs := f.connect(t, map[string]string{"Authorization": "Bearer k1", "X-Api-Key": "k2", "X-Request-Id": "req-42",
		"Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "X-Other": "dropped"}, nil)
	if _, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"msg": "x"}}); err != nil {
		t.Fatal(err)
	}
	c := f.rec.last()
	for k, want := range map[string]string{"authorization": "Bearer k1", "x-api-key": "k2", "x-request-id": "req-42",
		"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"} {
		if v := c.Header.Values(k); len(v) != 1 || v[0] != want {
			t.Errorf("header %s = %v, want %q", k, v, want)
		}
	}
	if c.MethodName() != "mcp/InvokeTool" || c.Name != "echo" || string(c.Args) != `{"msg":"x"}` {
		t.Errorf("call %s %s %s, want mcp/InvokeTool echo {\"msg\":\"x\"}", c.MethodName(), c.Name, c.Args)
	}
}

func TestAuthenticate(t *testing.T) {
	var authentications atomic.Int32
	f := newFixture(t, mcp.Options{Authenticate: func(_ context.Context, c *toolcall.Call) error {
		authentications.Add(1)
		v := c.Header.Values("x-api-key")
		switch {
		case len(v) == 0:
			return status.Error(codes.Unauthenticated, "missing credentials")
		case v[0] != "good":
			return status.Error(codes.PermissionDenied, "not you")
		}
		c.Caller, c.Authenticated = toolcall.Caller{User: "good-user"}, true
		return nil
	}})
	if _, err := f.dial(t, nil, nil); err == nil {
		t.Fatal("connected without credentials")
	}
	for key, want := range map[string]int{"": http.StatusUnauthorized, "bad": http.StatusForbidden} {
		req, _ := http.NewRequest(http.MethodPost, f.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || !strings.Contains(string(body), `"code":-32001`) {
			t.Errorf("key %q: %d %s, want %d", key, resp.StatusCode, body, want)
		}
		if want == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("401 without WWW-Authenticate: Bearer")
		}
	}
	cs := f.connect(t, map[string]string{"X-Api-Key": "good"}, nil)
	before := authentications.Load()
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	// One authentication per request, and its calls carry the caller.
	if n := authentications.Load() - before; n != 1 {
		t.Errorf("tools/list authenticated %d times, want once", n)
	}
	if c := f.rec.last(); !c.Authenticated || c.Caller.User != "good-user" {
		t.Errorf("the call's caller: %+v (authenticated %v), want good-user", c.Caller, c.Authenticated)
	}
}

func TestClientCancelEndsCall(t *testing.T) {
	f := newFixture(t, mcp.Options{})
	cs := f.connect(t, nil, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	// The echo would sleep a minute, the fixture's default timeout ends
	// it after 5 s: only the client's going away ends it within 3 s.
	_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"mode": "sleep", "ms": 60000}})
	if err == nil {
		t.Fatal("call outlived its context")
	}
	select {
	case <-f.rec.cancelled:
	case <-time.After(3 * time.Second):
		t.Fatal("the server kept the call running after the client gave up")
	}
}

func TestToolsChangedReachesListeners(t *testing.T) {
	f := newFixture(t, mcp.Options{})
	changed := make(chan struct{}, 4)
	cs := f.connect(t, nil, &sdk.ClientOptions{ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
		changed <- struct{}{}
	}})
	_ = cs
	// The client opens its subscriptions/listen stream after connecting;
	// notify until it has.
	deadline := time.After(5 * time.Second)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		f.srv.ToolsChanged()
		select {
		case <-changed:
			return
		case <-tick.C:
		case <-deadline:
			t.Fatal("no notifications/tools/list_changed within 5s")
		}
	}
}

// TestQuietLog: a stateless request leaves no line in the log at Info (the
// SDK's per-session chatter is dropped), while warnings still pass.
func TestQuietLog(t *testing.T) {
	var buf syncBuffer
	f := newFixture(t, mcp.Options{Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	cs := f.connect(t, nil, nil)
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	if s := buf.String(); strings.Contains(s, "level=INFO") || strings.Contains(s, "level=DEBUG") {
		t.Fatalf("log at Info or below:\n%s", s)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
