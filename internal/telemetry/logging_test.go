package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
)

var generatedID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// logChain is the stub behind the call log and the fake auth, in the
// order the gateway uses, and the buffer the log writes to.
func logChain(level slog.Level) (toolcall.Handler, *logBuffer) {
	buf := &logBuffer{}
	cl := NewCallLog(slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: level})))
	return toolcall.Chain(newStub().handle, cl.Middleware(), fakeAuth), buf
}

func TestCallLog(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 65)
	tests := []struct {
		name  string
		level slog.Level
		call  *toolcall.Call
		want  map[string]any // fields the line must have
		// wantID: the request id the line and the call (which the door
		// answers as x-request-id) carry; "" for a generated one.
		wantID  string
		absent  []string // fields the line must not have
		noLine  bool
		notSeen []string // text nowhere in the log
	}{
		{
			name: "invoke ok keeps the caller's request id", level: slog.LevelInfo,
			call:   invokeCall("echo", header("user", "alice", RequestIDHeader, "req-1.2_3")),
			want:   map[string]any{"level": "INFO", "msg": "call", "method": mInvoke, "tool": "echo", "user": "alice", "source": "fake", "code": "OK"},
			wantID: "req-1.2_3", absent: []string{"arguments", "error", "reason"}, notSeen: []string{"hunter2"},
		},
		{
			name: "request id from gRPC metadata", level: slog.LevelInfo,
			call:   invokeCall("echo", mdHeader{"user": {"alice"}, RequestIDHeader: {"md-7"}}),
			want:   map[string]any{"code": "OK", "user": "alice"},
			wantID: "md-7",
		},
		{
			name: "first of several request ids", level: slog.LevelInfo,
			call:   invokeCall("echo", header("user", "alice", RequestIDHeader, "first", RequestIDHeader, "second")),
			want:   map[string]any{"code": "OK"},
			wantID: "first", notSeen: []string{"second"},
		},
		{
			name: "request id with bad characters is replaced", level: slog.LevelInfo,
			call: invokeCall("echo", header("user", "alice", RequestIDHeader, "bad id/../!")),
			want: map[string]any{"code": "OK"}, notSeen: []string{"bad id"},
		},
		{
			name: "request id too long is replaced", level: slog.LevelInfo,
			call: invokeCall("echo", header("user", "alice", RequestIDHeader, long)),
			want: map[string]any{"code": "OK"}, notSeen: []string{long},
		},
		{
			name: "empty request id is replaced", level: slog.LevelInfo,
			call: invokeCall("echo", header("user", "alice", RequestIDHeader, "")),
			want: map[string]any{"code": "OK"},
		},
		{
			name: "service failure warns with the reason", level: slog.LevelInfo,
			call:   invokeCall("fail", header("user", "bob")),
			want:   map[string]any{"level": "WARN", "tool": "fail", "user": "bob", "code": "Unavailable", "reason": "BROKER_UNAVAILABLE"},
			absent: []string{"error"},
		},
		{
			name: "caller's mistake is info", level: slog.LevelInfo,
			call: invokeCall("bad", header("user", "bob")),
			want: map[string]any{"level": "INFO", "code": "InvalidArgument"},
		},
		{
			name: "bare context error is Canceled", level: slog.LevelInfo,
			call: invokeCall("cancelled", header("user", "bob")),
			want: map[string]any{"level": "INFO", "code": "Canceled"},
		},
		{
			name: "unauthenticated calls are logged", level: slog.LevelInfo,
			call: invokeCall("echo", nil),
			want: map[string]any{"level": "INFO", "tool": "echo", "user": "", "source": "", "code": "Unauthenticated"},
		},
		{
			name: "debug logs arguments and the status message", level: slog.LevelDebug,
			call: invokeCall("bad", header("user", "carol")),
			want: map[string]any{
				"level": "INFO", "code": "InvalidArgument", "user": "carol",
				"arguments": map[string]any{"secret": "hunter2", "n": 3.0},
				"error":     `tool "bad": argument "x" must be of type number`,
			},
		},
		{
			name: "stream", level: slog.LevelInfo,
			call:   streamCall("echo", header("user", "dave", RequestIDHeader, "s-1")),
			want:   map[string]any{"level": "INFO", "method": mStream, "tool": "echo", "user": "dave", "code": "OK"},
			wantID: "s-1", absent: []string{"arguments"}, notSeen: []string{"hunter2"},
		},
		{
			name: "stream debug logs arguments", level: slog.LevelDebug,
			call: streamCall("echo", header("user", "dave")),
			want: map[string]any{"tool": "echo", "arguments": map[string]any{"secret": "hunter2"}},
		},
		{
			// A door decodes the whole request before the chain runs, so a
			// refused stream is logged with the tool it named.
			name: "stream refused", level: slog.LevelInfo,
			call: streamCall("echo", nil),
			want: map[string]any{"method": mStream, "tool": "echo", "user": "", "code": "Unauthenticated"},
		},
		{
			name: "registry call has no arguments", level: slog.LevelDebug,
			call:   &toolcall.Call{Op: toolcall.OpListTools, Header: header("user", "erin")},
			want:   map[string]any{"method": mList, "tool": "", "user": "erin", "code": "Unimplemented"},
			absent: []string{"arguments"},
		},
		{
			name: "a door's method name", level: slog.LevelInfo,
			call: &toolcall.Call{Op: toolcall.OpInvoke, Method: "mcp/InvokeTool", Name: "echo", Header: header("user", "frank")},
			want: map[string]any{"method": "mcp/InvokeTool", "tool": "echo", "code": "OK"},
		},
		{
			name: "long tool names are cut", level: slog.LevelInfo,
			call: invokeCall(strings.Repeat("t", 300), header("user", "bob")),
			want: map[string]any{"tool": strings.Repeat("t", maxToolLen) + "…", "code": "NotFound"},
		},
		{
			// Successful calls are logged at Info: not at all by a logger
			// at Warn (as at --log-level warn).
			name: "successes are quiet at warn", level: slog.LevelWarn,
			call: invokeCall("echo", header("user", "alice")), noLine: true,
		},
		{
			name: "failures still warn at warn", level: slog.LevelWarn,
			call: invokeCall("fail", header("user", "alice")),
			want: map[string]any{"level": "WARN", "code": "Unavailable"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, buf := logChain(tt.level)
			_, _, _ = serve(t.Context(), h, tt.call)
			lines := buf.lines(t)
			for _, s := range tt.notSeen {
				if strings.Contains(buf.String(), s) {
					t.Errorf("log contains %q:\n%s", s, buf)
				}
			}
			if tt.noLine {
				if len(lines) != 0 {
					t.Fatalf("want no line, got %v", lines)
				}
				return
			}
			if len(lines) != 1 {
				t.Fatalf("want one line, got %d:\n%s", len(lines), buf)
			}
			line := lines[0]
			for k, v := range tt.want {
				if !reflect.DeepEqual(line[k], v) {
					t.Errorf("%s = %#v, want %#v", k, line[k], v)
				}
			}
			for _, k := range tt.absent {
				if _, ok := line[k]; ok {
					t.Errorf("line has %s = %v", k, line[k])
				}
			}
			if _, ok := line["duration_ms"].(float64); !ok {
				t.Errorf("duration_ms = %#v, want a number", line["duration_ms"])
			}
			id, _ := line["request_id"].(string)
			switch {
			case tt.wantID != "" && id != tt.wantID:
				t.Errorf("request_id = %q, want %q", id, tt.wantID)
			case tt.wantID == "" && !generatedID.MatchString(id):
				t.Errorf("request_id = %q, want a generated one", id)
			}
			// What the door answers as x-request-id.
			if tt.call.RequestID != id {
				t.Errorf("Call.RequestID = %q, want the logged %q", tt.call.RequestID, id)
			}
		})
	}
}

// The call log gives every call its request id, whether or not it writes
// a line, before the rest of the chain runs (so that a refused call has
// one too), and a new one per call.
func TestCallLogSetsRequestID(t *testing.T) {
	t.Parallel()
	cl := NewCallLog(slog.New(slog.NewJSONHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelError})))
	var seen string
	h := toolcall.Chain(func(_ context.Context, c *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
		seen = c.RequestID
		return toolcall.Result{}, nil
	}, cl.Middleware())

	c := invokeCall("echo", header(RequestIDHeader, "abc-1"))
	if _, _, err := serve(t.Context(), h, c); err != nil {
		t.Fatal(err)
	}
	if c.RequestID != "abc-1" || seen != "abc-1" {
		t.Errorf("RequestID = %q (handler saw %q), want the caller's abc-1", c.RequestID, seen)
	}

	ids := map[string]bool{}
	for range 3 {
		c := invokeCall("echo", nil)
		if _, _, err := serve(t.Context(), h, c); err != nil {
			t.Fatal(err)
		}
		if !generatedID.MatchString(c.RequestID) || seen != c.RequestID {
			t.Errorf("RequestID = %q (handler saw %q), want a generated one", c.RequestID, seen)
		}
		ids[c.RequestID] = true
	}
	if len(ids) != 3 {
		t.Errorf("generated ids %v, want three different", ids)
	}

	// A refused call has one too.
	c = invokeCall("echo", header(RequestIDHeader, "refused-1"))
	_, _, _ = serve(t.Context(), toolcall.Chain(newStub().handle, cl.Middleware(), fakeAuth), c)
	if c.RequestID != "refused-1" {
		t.Errorf("refused call's RequestID = %q, want refused-1", c.RequestID)
	}
}

// The call log names the caller the authentication established, whether
// it runs before authentication (as the gateway has it) or after; a
// caller not marked authenticated is not named.
func TestCallLogUser(t *testing.T) {
	t.Parallel()
	buf := &logBuffer{}
	cl := NewCallLog(slog.New(slog.NewJSONHandler(buf, nil)))
	stub := newStub()
	for _, h := range []toolcall.Handler{
		toolcall.Chain(stub.handle, cl.Middleware(), fakeAuth),
		toolcall.Chain(stub.handle, fakeAuth, cl.Middleware()),
	} {
		if _, _, err := serve(t.Context(), h, invokeCall("echo", header("user", "erin"))); err != nil {
			t.Fatal(err)
		}
		if _, _, err := serve(t.Context(), h, streamCall("echo", header("user", "erin"))); err != nil {
			t.Fatal(err)
		}
	}
	unmarked := invokeCall("echo", nil)
	unmarked.Caller = toolcall.Caller{User: "mallory"}
	if _, _, err := serve(t.Context(), toolcall.Chain(stub.handle, cl.Middleware()), unmarked); err != nil {
		t.Fatal(err)
	}
	lines := buf.lines(t)
	if len(lines) != 5 {
		t.Fatalf("want five lines, got:\n%s", buf)
	}
	for _, l := range lines[:4] {
		if l["user"] != "erin" {
			t.Errorf("user = %v, want erin", l["user"])
		}
	}
	if l := lines[4]; l["user"] != "" {
		t.Errorf("caller not authenticated: user = %v, want none", l["user"])
	}
}

func TestCallLogLevels(t *testing.T) {
	t.Parallel()
	warn := []codes.Code{codes.Unknown, codes.DeadlineExceeded, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss}
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		want := slog.LevelInfo
		for _, w := range warn {
			if c == w {
				want = slog.LevelWarn
			}
		}
		if got := DefaultCodeLevel(c); got != want {
			t.Errorf("DefaultCodeLevel(%v) = %v, want %v", c, got, want)
		}
	}
}

func TestSaneRequestID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id   string
		want bool
	}{
		{"abc", true},
		{"A-b_c.9", true},
		{strings.Repeat("x", 64), true},
		{"", false},
		{strings.Repeat("x", 65), false},
		{"a b", false},
		{"a/b", false},
		{"é", false},
		{"a\nb", false},
	}
	for _, tt := range tests {
		if got := saneRequestID(tt.id); got != tt.want {
			t.Errorf("saneRequestID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestArgumentsJSONIsBounded(t *testing.T) {
	t.Parallel()
	cl := NewCallLog(nil, WithMaxLoggedArguments(20))
	long, _ := json.Marshal(map[string]any{"text": strings.Repeat("é", 50)})
	for name, args := range map[string][]byte{
		"long JSON text": long,
		"not JSON":       []byte(`{"text": "` + strings.Repeat("é", 50)),
	} {
		got := cl.arguments(&toolcall.Call{Op: toolcall.OpInvoke, Args: args})
		var str string
		if err := json.Unmarshal(got, &str); err != nil {
			t.Fatalf("%s: cut arguments are not a JSON string: %s", name, got)
		}
		if len(str) > 20+len("…") || !strings.HasSuffix(str, "…") {
			t.Errorf("%s: cut arguments = %q", name, str)
		}
	}
	for _, tt := range []struct {
		call *toolcall.Call
		want string
	}{
		{&toolcall.Call{Op: toolcall.OpInvoke, Args: []byte(`{"a":1}`)}, `{"a":1}`},
		{&toolcall.Call{Op: toolcall.OpStream, Args: []byte(`{"a":1}`)}, `{"a":1}`},
		{&toolcall.Call{Op: toolcall.OpInvoke}, `{}`},
		{&toolcall.Call{Op: toolcall.OpStream, Args: []byte{}}, `{}`},
		{&toolcall.Call{Op: toolcall.OpListTools, Args: []byte(`{"a":1}`)}, ``},
		{&toolcall.Call{Op: toolcall.OpGetTool, Name: "echo"}, ``},
	} {
		if got := cl.arguments(tt.call); string(got) != tt.want {
			t.Errorf("arguments of op %d with %q = %s, want %s", tt.call.Op, tt.call.Args, got, tt.want)
		}
	}
}

// At Debug, arguments that are not JSON are logged as a string, and the
// line stays valid JSON.
func TestCallLogArgumentsNotJSON(t *testing.T) {
	t.Parallel()
	h, buf := logChain(slog.LevelDebug)
	c := &toolcall.Call{Op: toolcall.OpInvoke, Name: "echo", Args: []byte(`{"a": `), Header: header("user", "alice")}
	if _, _, err := serve(t.Context(), h, c); err != nil {
		t.Fatal(err)
	}
	lines := buf.lines(t)
	if len(lines) != 1 || lines[0]["arguments"] != `{"a": ` {
		t.Errorf("lines %v, want one with the arguments as a string", lines)
	}
}
