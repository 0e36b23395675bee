package e2e

import (
	"bufio"
	"bytes"
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
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	parityKey    = "parity-alice-key-0123456789"
	parityLimKey = "parity-lim-key-0123456789"
)

// outcome is what a call came to, in terms every door can express: the
// gRPC code, the reason (ErrorInfo, or the error type MCP reports; empty
// when it only restates the code), the output (chunks joined).
type outcome struct {
	code   codes.Code
	reason string
	output string
}

func (o outcome) String() string {
	out := o.output
	if len(out) > 200 {
		out = out[:200] + "…"
	}
	return fmt.Sprintf("%v/%s %q", o.code, o.reason, out)
}

// normReason drops a reason that only restates the code in kebab case
// (what MCP's error type is when there is no ErrorInfo).
func normReason(c codes.Code, reason string) string {
	if reason == kebabCode(c) {
		return ""
	}
	return reason
}

func kebabCode(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// parityCall is one row of the table: who calls what, how.
type parityCall struct {
	name    string
	key     string            // API key; "" for none
	headers map[string]string // more request headers (metadata on gRPC)
	tool    string
	args    string
	timeout time.Duration
	stream  bool
	want    outcome
}

// TestDoorParity sends one table of calls through every door — gRPC, REST,
// MCP, Connect and gRPC-Web — and wants the same outcome from each: the same code, the same
// reason, and the same user at the tool service. A second table
// (limitsTable) does the same with the request limits: hostile and
// oversized requests.
func TestDoorParity(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	reg := write("registry.yaml", fmt.Sprintf(`tool-service:
  echo-service: {topic: %s}
tool:
  echo: {type: tool-service, service: echo-service}
  hidden-echo: {type: tool-service, service: echo-service}
  strict-echo:
    type: tool-service
    service: echo-service
    strict: true
    arguments: [{name: mode, type: string, description: m, required: true}]
  schema-echo:
    type: tool-service
    service: echo-service
    input-schema:
      type: object
      $defs: {mode: {type: string, enum: [user, echo]}}
      properties: {mode: {$ref: "#/$defs/mode"}}
      required: [mode]
      additionalProperties: false
`, env.echoTopic))
	keys := write("keys.yaml", fmt.Sprintf("keys:\n  - {hash: %q, user: alice, roles: [user]}\n  - {hash: %q, user: lim, roles: [user]}\n",
		auth.HashKey(parityKey), auth.HashKey(parityLimKey)))
	policy := write("policy.yaml", "rules:\n  - {roles: [user], tools: [\"echo\", \"strict-echo\", \"schema-echo\", \"missing-*\"], actions: [list, invoke]}\n")
	gw := runGateway(t, nil, "--registry", reg, "--api-keys", keys, "--policy", policy, "--rate-limit", "0.2", "--rate-burst", "60")
	base := "http://" + gw.HTTPAddr()
	if err := waitReady(base, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	grpcCli := toolgatev1.NewToolServiceClient(conn)
	connectCli := toolgatev1connect.NewToolServiceClient(http.DefaultClient, base)
	grpcWebCli := toolgatev1connect.NewToolServiceClient(http.DefaultClient, base, connect.WithGRPCWeb())

	// lim spends its whole burst on listing, so that its calls are refused.
	limCtx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", parityLimKey)
	for i := 0; ; i++ {
		_, err := grpcCli.ListTools(limCtx, &toolgatev1.ListToolsRequest{})
		if status.Code(err) == codes.ResourceExhausted {
			break
		}
		if err != nil || i > 200 {
			t.Fatalf("exhausting lim's burst: %d calls, %v", i, err)
		}
	}

	rows := []parityCall{
		{name: "ok", key: parityKey, tool: "echo", args: `{"mode": "user"}`, want: outcome{codes.OK, "", "alice"}},
		{name: "unknown tool", key: parityKey, tool: "missing-tool", args: `{}`, want: outcome{codes.NotFound, "TOOL_NOT_FOUND", ""}},
		// A name the policy does not grant is refused before it is looked
		// up: whether it exists is not the caller's to learn.
		{name: "unknown tool outside the policy", key: parityKey, tool: "no-such-tool", args: `{}`, want: outcome{codes.PermissionDenied, "NOT_ALLOWED", ""}},
		{name: "policy-hidden tool", key: parityKey, tool: "hidden-echo", args: `{"mode": "user"}`, want: outcome{codes.PermissionDenied, "NOT_ALLOWED", ""}},
		{name: "bad arguments", key: parityKey, tool: "strict-echo", args: `{"mode": 5}`, want: outcome{codes.InvalidArgument, "INVALID_ARGUMENTS", ""}},
		// A tool's input schema is checked by the core, for every door.
		{name: "arguments the input schema refuses", key: parityKey, tool: "schema-echo", args: `{"mode": "sleep"}`, want: outcome{codes.InvalidArgument, "INVALID_ARGUMENTS", ""}},
		{name: "arguments the input schema takes", key: parityKey, tool: "schema-echo", args: `{"mode": "user"}`, want: outcome{codes.OK, "", "alice"}},
		{name: "deadline exceeded", key: parityKey, tool: "echo", args: `{"mode": "sleep", "ms": 3000}`, timeout: 300 * time.Millisecond,
			want: outcome{codes.DeadlineExceeded, "DEADLINE_EXCEEDED", ""}},
		{name: "stream", key: parityKey, tool: "echo", args: `{"mode": "stream", "n": 3}`, stream: true, want: outcome{codes.OK, "", "0,1,2"}},
		{name: "service error", key: parityKey, tool: "echo", args: `{"mode": "fail", "type": "not-found", "message": "nope"}`,
			want: outcome{codes.NotFound, "", ""}},
		{name: "rate limited", key: parityLimKey, tool: "echo", args: `{"mode": "user"}`, want: outcome{codes.ResourceExhausted, "RATE_LIMITED", ""}},
		{name: "unauthenticated", tool: "echo", args: `{"mode": "user"}`, want: outcome{codes.Unauthenticated, "MISSING_CREDENTIALS", ""}},
		{name: "spoofed identity header", key: parityKey, headers: map[string]string{"User": "mallory", "X-Forwarded-User": "mallory", "X-Auth-Request-User": "mallory"},
			tool: "echo", args: `{"mode": "user"}`, want: outcome{codes.OK, "", "alice"}},
	}
	doors := []struct {
		name string
		call func(t *testing.T, c parityCall) outcome
	}{
		{"grpc", func(t *testing.T, c parityCall) outcome { return grpcParity(t, grpcCli, c) }},
		{"rest", func(t *testing.T, c parityCall) outcome { return restParity(t, base, c) }},
		{"mcp", func(t *testing.T, c parityCall) outcome { return mcpParity(t, base, c) }},
		{"connect", func(t *testing.T, c parityCall) outcome { return connectParity(t, connectCli, c) }},
		{"grpc-web", func(t *testing.T, c parityCall) outcome { return connectParity(t, grpcWebCli, c) }},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			for _, d := range doors {
				got := d.call(t, row)
				got.reason = normReason(got.code, got.reason)
				if got.code != row.want.code || got.reason != row.want.reason || (row.want.code == codes.OK && got.output != row.want.output) {
					t.Errorf("%s: %v, want %v", d.name, got, row.want)
				}
			}
		})
	}
	// The second table: the request limits, on a gateway of their own.
	t.Run("limits", limitsTable)
}

func grpcParity(t *testing.T, cli toolgatev1.ToolServiceClient, c parityCall) outcome {
	t.Helper()
	md := metadata.MD{}
	if c.key != "" {
		md.Set("x-api-key", c.key)
	}
	for k, v := range c.headers {
		md.Set(strings.ToLower(k), v)
	}
	ctx := metadata.NewOutgoingContext(t.Context(), md)
	var args structpb.Struct
	if err := args.UnmarshalJSON([]byte(c.args)); err != nil {
		t.Fatal(err)
	}
	var timeout *durationpb.Duration
	if c.timeout > 0 {
		timeout = durationpb.New(c.timeout)
	}
	fail := func(err error) outcome {
		st := status.Convert(err)
		reason := ""
		if ei := errorInfo(st); ei != nil {
			reason = ei.GetReason()
		}
		return outcome{code: st.Code(), reason: reason}
	}
	if !c.stream {
		resp, err := cli.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: c.tool, Arguments: &args, Timeout: timeout})
		if err != nil {
			return fail(err)
		}
		return outcome{output: resp.GetOutput()}
	}
	st, err := cli.StreamTool(ctx, &toolgatev1.StreamToolRequest{Name: c.tool, Arguments: &args, Timeout: timeout})
	if err != nil {
		return fail(err)
	}
	var out strings.Builder
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return outcome{output: out.String()}
		}
		if err != nil {
			return fail(err)
		}
		out.WriteString(m.GetOutput())
	}
}

// statusBody is a google.rpc.Status as the REST door writes it.
type statusBody struct {
	Code    codes.Code `json:"code"`
	Message string     `json:"message"`
	Details []struct {
		Reason string `json:"reason"`
	} `json:"details"`
}

func (s statusBody) outcome() outcome {
	o := outcome{code: s.Code}
	for _, d := range s.Details {
		if d.Reason != "" {
			o.reason = d.Reason
		}
	}
	return o
}

func restParity(t *testing.T, base string, c parityCall) outcome {
	t.Helper()
	body := `{"arguments": ` + c.args
	if c.timeout > 0 {
		body += fmt.Sprintf(`, "timeout": %q`, c.timeout.String())
	}
	body += "}"
	verb := ":invoke"
	if c.stream {
		verb = ":stream"
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/tools/"+c.tool+verb, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("X-Api-Key", c.key)
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		var st statusBody
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatalf("REST %d %s: %v", resp.StatusCode, raw, err)
		}
		return st.outcome()
	}
	if !c.stream {
		var out struct{ Output string }
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("REST answer %s: %v", raw, err)
		}
		return outcome{output: out.Output}
	}
	var out strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		var line struct {
			Output *string `json:"output"`
			statusBody
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("NDJSON line %s: %v", sc.Bytes(), err)
		}
		if line.Output == nil {
			return line.outcome() // the error line
		}
		out.WriteString(*line.Output)
	}
	return outcome{output: out.String()}
}

func mcpParity(t *testing.T, base string, c parityCall) outcome {
	t.Helper()
	params := map[string]any{"name": c.tool, "arguments": json.RawMessage(c.args)}
	meta := map[string]any{}
	if c.timeout > 0 {
		meta["timeout"] = c.timeout.String()
	}
	if c.stream {
		meta["progressToken"] = "p1"
	}
	if len(meta) > 0 {
		params["_meta"] = meta
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/mcp", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.key != "" {
		req.Header.Set("X-Api-Key", c.key)
	}
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	type rpcError struct {
		Data struct {
			Code   string `json:"code"`
			Reason string `json:"reason"`
		} `json:"data"`
	}
	type message struct {
		ID     any       `json:"id"`
		Method string    `json:"method"`
		Error  *rpcError `json:"error"`
		Params struct {
			Message string `json:"message"`
		} `json:"params"`
		Result *struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
			StructuredContent struct {
				Error struct {
					Type string `json:"type"`
					Code string `json:"code"`
				} `json:"error"`
			} `json:"structuredContent"`
		} `json:"result"`
	}
	var msgs []message
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		for _, line := range strings.Split(string(raw), "\n") {
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				var m message
				if err := json.Unmarshal([]byte(data), &m); err != nil {
					t.Fatalf("MCP event %s: %v", data, err)
				}
				msgs = append(msgs, m)
			}
		}
	} else {
		var m message
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("MCP %d %s: %v", resp.StatusCode, raw, err)
		}
		msgs = append(msgs, m)
	}
	code := func(name string) codes.Code {
		for c := codes.OK; c <= codes.Unauthenticated; c++ {
			if c.String() == name {
				return c
			}
		}
		t.Fatalf("MCP code %q", name)
		return codes.Unknown
	}
	var progress strings.Builder
	for _, m := range msgs {
		switch {
		case m.Method == "notifications/progress":
			progress.WriteString(m.Params.Message)
		case m.Error != nil:
			return outcome{code: code(m.Error.Data.Code), reason: m.Error.Data.Reason}
		case m.Result != nil && m.Result.IsError:
			e := m.Result.StructuredContent.Error
			return outcome{code: code(e.Code), reason: e.Type}
		case m.Result != nil:
			if c.stream && progress.String() != m.Result.Content[0].Text {
				t.Errorf("MCP progress %q, result %q", progress.String(), m.Result.Content[0].Text)
			}
			return outcome{output: m.Result.Content[0].Text}
		}
	}
	t.Fatalf("MCP %d: no answer in %s", resp.StatusCode, raw)
	return outcome{}
}

func connectParity(t *testing.T, cli toolgatev1connect.ToolServiceClient, c parityCall) outcome {
	t.Helper()
	var args structpb.Struct
	if err := args.UnmarshalJSON([]byte(c.args)); err != nil {
		t.Fatal(err)
	}
	var timeout *durationpb.Duration
	if c.timeout > 0 {
		timeout = durationpb.New(c.timeout)
	}
	header := func(h http.Header) {
		if c.key != "" {
			h.Set("X-Api-Key", c.key)
		}
		for k, v := range c.headers {
			h.Set(k, v)
		}
	}
	fail := connectOutcome
	if !c.stream {
		req := connect.NewRequest(&toolgatev1.InvokeToolRequest{Name: c.tool, Arguments: &args, Timeout: timeout})
		header(req.Header())
		resp, err := cli.InvokeTool(t.Context(), req)
		if err != nil {
			return fail(err)
		}
		if resp.Header().Get("X-Request-Id") == "" {
			t.Errorf("no X-Request-Id in the answer")
		}
		return outcome{output: resp.Msg.GetOutput()}
	}
	req := connect.NewRequest(&toolgatev1.StreamToolRequest{Name: c.tool, Arguments: &args, Timeout: timeout})
	header(req.Header())
	st, err := cli.StreamTool(t.Context(), req)
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	var out strings.Builder
	for st.Receive() {
		out.WriteString(st.Msg().GetOutput())
	}
	if err := st.Err(); err != nil {
		return fail(err)
	}
	return outcome{output: out.String()}
}

// connectOutcome is what a Connect or gRPC-Web call's error came to: its
// code, and its ErrorInfo's reason when it has one.
func connectOutcome(err error) outcome {
	o := outcome{code: codes.Code(connect.CodeOf(err))}
	var ce *connect.Error
	if errors.As(err, &ce) {
		for _, d := range ce.Details() {
			if v, derr := d.Value(); derr == nil {
				if ei, ok := v.(*errdetails.ErrorInfo); ok {
					o.reason = ei.GetReason()
				}
			}
		}
	}
	return o
}
