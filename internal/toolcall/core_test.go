package toolcall

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/transport"
	"github.com/toolgate/toolgate/internal/transport/transporttest"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// answering is a broker that answers every request at once, inside
// Publish, with replies (one message each, in order) on the request
// topic's response topic.
func answering(replies ...[]byte) *transporttest.Fake {
	f := &transporttest.Fake{}
	f.OnPublish = func(topic string, m transport.Message) error {
		resp := strings.Replace(topic, "/request/", "/response/", 1)
		for _, r := range replies {
			f.DeliverTo(resp, transport.Message{Payload: r, Properties: map[string]string{wire.PropID: m.Properties[wire.PropID]}})
		}
		return nil
	}
	return f
}

const testRegistry = `
tool-service:
  slow: {id: slow, topic: slow, config-params: [], timeout: 3}
  plain: {id: plain, topic: plain, config-params: []}
tool:
  slow: {type: tool-service, name: slow, description: d, service: slow, arguments: []}
  plain: {type: tool-service, name: plain, description: d, service: plain, arguments: []}
  typed: {type: tool-service, name: typed, description: d, service: plain, arguments: [{name: s, type: string, description: s}]}
`

func newCore(t testing.TB, br transport.Broker, opts Options) *Core {
	t.Helper()
	snap, err := registry.Parse("t.yaml", []byte(testRegistry), nil)
	if err != nil {
		t.Fatal(err)
	}
	b := bridge.New(br, bridge.Options{})
	t.Cleanup(b.Close)
	return New(registry.New(snap), viaBridge(b), opts)
}

// The deadline a call gets: the caller's when within --max-timeout, capped
// by it otherwise; the call's timeout capped the same way; the service's
// timeout or the default when the caller sets none.
func TestCallDeadlines(t *testing.T) {
	reply := wire.EncodeResponse(wire.Response{Response: "ok", EndOfStream: true})
	// Answers at once and records each request's deadline property.
	var mu sync.Mutex
	var deadlines []time.Time
	br := answering(reply)
	answer := br.OnPublish
	br.OnPublish = func(topic string, m transport.Message) error {
		ms, err := strconv.ParseInt(wire.ExpandCall(m.Properties)[wire.PropDeadline], 10, 64)
		mu.Lock()
		if err == nil {
			deadlines = append(deadlines, time.UnixMilli(ms))
		} else {
			deadlines = append(deadlines, time.Time{})
		}
		mu.Unlock()
		return answer(topic, m)
	}
	core := newCore(t, br, Options{DefaultTimeout: 7 * time.Second, MaxTimeout: 60 * time.Second})

	cases := []struct {
		name     string
		tool     string
		callerDL time.Duration // 0: none
		timeout  time.Duration // 0: none
		want     time.Duration
	}{
		{"caller's deadline within the cap", "plain", 2 * time.Second, 0, 2 * time.Second},
		{"caller's deadline capped", "plain", time.Hour, 0, 60 * time.Second},
		{"call timeout", "plain", 0, 5 * time.Second, 5 * time.Second},
		{"call timeout capped", "plain", 0, time.Hour, 60 * time.Second},
		{"service timeout", "slow", 0, 0, 3 * time.Second},
		{"default timeout", "plain", 0, 0, 7 * time.Second},
	}
	for i, c := range cases {
		ctx := t.Context()
		if c.callerDL > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.callerDL)
			defer cancel()
		}
		call := &Call{Op: OpInvoke, Name: c.tool, Header: NoHeader}
		if c.timeout > 0 {
			call.Timeout, call.TimeoutSet = c.timeout, true
		}
		start := time.Now()
		if _, err := core.Handle(ctx, call, nil); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		mu.Lock()
		got := deadlines[i].Sub(start)
		mu.Unlock()
		if got < c.want-time.Second || got > c.want+time.Second {
			t.Errorf("%s: deadline %v after the call, want about %v", c.name, got.Round(time.Millisecond), c.want)
		}
	}
	// A timeout given but not positive is the caller's mistake.
	if _, err := core.Handle(t.Context(), &Call{Op: OpInvoke, Name: "plain", TimeoutSet: true}, nil); status.Code(err) != codes.InvalidArgument {
		t.Errorf("zero timeout: %v, want INVALID_ARGUMENT", err)
	}
}

// TestHandleOps drives every op through the core: what each answers, the
// envelope it sends, and its errors.
func TestHandleOps(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sent []wire.Request
	br := answering(
		wire.EncodeResponse(wire.Response{Response: "a"}),
		wire.EncodeResponse(wire.Response{Response: "b", EndOfStream: true}),
	)
	answer := br.OnPublish
	br.OnPublish = func(topic string, m transport.Message) error {
		var req wire.Request
		if err := json.Unmarshal(m.Payload, &req); err != nil {
			t.Errorf("envelope %s: %v", m.Payload, err)
		}
		mu.Lock()
		sent = append(sent, req)
		mu.Unlock()
		return answer(topic, m)
	}
	hidden := "slow"
	core := newCore(t, br, Options{Visible: func(_ *Call, tool string) bool { return tool != hidden }})
	ctx := t.Context()

	res, err := core.Handle(ctx, &Call{Op: OpInvoke, Name: "typed", Args: []byte(` {"s": "x", "big": 123456789012345678, "z": -0.0, "f": 1.10} `),
		Caller: Caller{User: "alice"}, Authenticated: true}, nil)
	if err != nil || res.Output != "ab" {
		t.Fatalf("invoke: %q, %v", res.Output, err)
	}
	mu.Lock()
	env := sent[len(sent)-1]
	mu.Unlock()
	if env.Arguments != `{"s":"x","big":123456789012345678,"z":-0.0,"f":1.10}` || env.User != "alice" {
		t.Errorf("envelope arguments %s user %q: want the caller's text exactly, and alice", env.Arguments, env.User)
	}
	if _, err := core.Handle(ctx, &Call{Op: OpInvoke, Name: "plain"}, nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	env = sent[len(sent)-1]
	mu.Unlock()
	if env.Arguments != "{}" || env.User != DefaultUser {
		t.Errorf("no arguments, anonymous: %s %q", env.Arguments, env.User)
	}

	var chunks []Chunk
	if _, err := core.Handle(ctx, &Call{Op: OpStream, Name: "plain"}, func(c Chunk) error { chunks = append(chunks, c); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 2 || chunks[0] != (Chunk{Text: "a", Index: 0}) || chunks[1] != (Chunk{Text: "b", Index: 1, Last: true}) {
		t.Errorf("stream chunks %+v", chunks)
	}
	stop := errors.New("client gone")
	if _, err := core.Handle(ctx, &Call{Op: OpStream, Name: "plain"}, func(Chunk) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("emit error: %v, want it back", err)
	}

	res, err = core.Handle(ctx, &Call{Op: OpListTools}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "plain,typed" || res.RegistryVersion == 0 {
		t.Errorf("listed %v (version %d), want plain,typed: slow is hidden", names, res.RegistryVersion)
	}
	if res, err = core.Handle(ctx, &Call{Op: OpListTools, PageSize: 1}, nil); err != nil || len(res.Tools) != 1 || res.NextPageToken == "" {
		t.Errorf("page of one: %d tools, next %q, %v", len(res.Tools), res.NextPageToken, err)
	} else if res, err = core.Handle(ctx, &Call{Op: OpListTools, PageToken: res.NextPageToken}, nil); err != nil || len(res.Tools) != 1 || res.Tools[0].Name != "typed" {
		t.Errorf("second page: %v, %v", res.Tools, err)
	}
	// A token of the right form that names no tool is a page past it.
	if res, err = core.Handle(ctx, &Call{Op: OpListTools, PageToken: "cGxhaW5lcw"}, nil); err != nil || len(res.Tools) != 1 || res.Tools[0].Name != "typed" {
		t.Errorf("page after %q: %v, %v", "plaines", res.Tools, err)
	}
	if res, err = core.Handle(ctx, &Call{Op: OpGetTool, Name: "typed"}, nil); err != nil || res.Tool.Name != "typed" {
		t.Errorf("get tool: %+v, %v", res.Tool, err)
	}
	if res, err = core.Handle(ctx, &Call{Op: OpListServices}, nil); err != nil || len(res.Services) != 2 {
		t.Errorf("list services: %d, %v", len(res.Services), err)
	}
	if res, err = core.Handle(ctx, &Call{Op: OpGetService, Name: "slow"}, nil); err != nil || res.Service.ID != "slow" {
		t.Errorf("get service: %+v, %v", res.Service, err)
	}

	for _, c := range []struct {
		call   *Call
		code   codes.Code
		reason string
	}{
		{&Call{Op: OpInvoke, Name: "nope"}, codes.NotFound, ReasonToolNotFound},
		{&Call{Op: OpStream, Name: "nope"}, codes.NotFound, ReasonToolNotFound},
		{&Call{Op: OpGetTool, Name: "nope"}, codes.NotFound, ReasonToolNotFound},
		{&Call{Op: OpGetService, Name: "nope"}, codes.NotFound, ReasonToolServiceMissing},
		{&Call{Op: OpInvoke, Name: "typed", Args: []byte(`{"s": 1}`)}, codes.InvalidArgument, ""},
		{&Call{Op: OpInvoke, Name: "typed", Args: []byte(`[1]`)}, codes.InvalidArgument, ""},
		{&Call{Op: OpListTools, PageSize: -1}, codes.InvalidArgument, ""},
		{&Call{Op: OpListTools, PageToken: "zzz"}, codes.InvalidArgument, ""}, // not canonical base64url
		{&Call{Op: OpListTools, PageToken: "cGxhaW4="}, codes.InvalidArgument, ""},
		{&Call{Op: OpListServices, PageToken: "cGxh\naW4"}, codes.InvalidArgument, ""},
		{&Call{Op: 99}, codes.Unimplemented, ""},
	} {
		var emit Emit
		if c.call.Op == OpStream {
			emit = func(Chunk) error { return nil }
		}
		_, err := core.Handle(ctx, c.call, emit)
		if status.Code(err) != c.code || (c.reason != "" && reasonOf(err) != c.reason) {
			t.Errorf("%+v: %v, want %v %s", c.call, err, c.code, c.reason)
		}
	}
}

func TestChainOrder(t *testing.T) {
	t.Parallel()
	var order []string
	mw := func(name string) Middleware {
		return func(next Handler) Handler {
			return func(ctx context.Context, c *Call, emit Emit) (Result, error) {
				order = append(order, name)
				return next(ctx, c, emit)
			}
		}
	}
	h := Chain(func(context.Context, *Call, Emit) (Result, error) {
		order = append(order, "core")
		return Result{Output: "x"}, nil
	}, mw("a"), nil, mw("b"))
	res, err := h(t.Context(), &Call{}, nil)
	if err != nil || res.Output != "x" || strings.Join(order, ",") != "a,b,core" {
		t.Fatalf("order %v, result %q, %v", order, res.Output, err)
	}
}

func TestMethodNames(t *testing.T) {
	t.Parallel()
	for op := OpInvoke; op <= OpGetService; op++ {
		if !strings.HasPrefix(op.Method(), "/toolgate.v1.ToolService/") {
			t.Errorf("op %d: method %q", op, op.Method())
		}
	}
	if (&Call{Op: OpInvoke, Method: "mcp/InvokeTool"}).MethodName() != "mcp/InvokeTool" || (&Call{Op: OpStream}).MethodName() != MethodStream {
		t.Error("MethodName does not prefer the door's name")
	}
}

func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(interface{ GetReason() string }); ok {
			return ei.GetReason()
		}
	}
	return ""
}
