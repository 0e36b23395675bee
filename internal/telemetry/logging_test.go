package telemetry

import (
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/argsjson"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

var generatedID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// logServer serves the stub behind the call log, the fake auth and the
// call log's user interceptor, in the order the gateway uses.
func logServer(t *testing.T, level slog.Level) (*grpc.ClientConn, *logBuffer) {
	buf := &logBuffer{}
	cl := NewCallLog(slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: level})), WithUser(fakeUser))
	var a fakeAuth
	conn := startServer(t, newStub(),
		grpc.ChainUnaryInterceptor(cl.UnaryServerInterceptor(), a.unary, cl.UnaryUserInterceptor()),
		grpc.ChainStreamInterceptor(cl.StreamServerInterceptor(), a.stream, cl.StreamUserInterceptor()))
	return conn, buf
}

func TestCallLog(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 65)
	tests := []struct {
		name  string
		level slog.Level
		md    []string // outgoing metadata pairs
		call  func(ctx context.Context, conn *grpc.ClientConn) (metadata.MD, error)
		want  map[string]any // fields the line must have
		// wantID: the request id the line and the response header carry;
		// "" for a generated one.
		wantID  string
		absent  []string // fields the line must not have
		noLine  bool
		notSeen []string // text nowhere in the log
	}{
		{
			name: "invoke ok keeps the caller's request id", level: slog.LevelInfo,
			md:     []string{"user", "alice", RequestIDHeader, "req-1.2_3"},
			call:   invokeWithHeader("echo"),
			want:   map[string]any{"level": "INFO", "msg": "call", "method": mInvoke, "tool": "echo", "user": "alice", "code": "OK"},
			wantID: "req-1.2_3", absent: []string{"arguments", "error", "reason"}, notSeen: []string{"hunter2"},
		},
		{
			name: "request id with bad characters is replaced", level: slog.LevelInfo,
			md:   []string{"user", "alice", RequestIDHeader, "bad id/../!"},
			call: invokeWithHeader("echo"),
			want: map[string]any{"code": "OK"},
		},
		{
			name: "request id too long is replaced", level: slog.LevelInfo,
			md:   []string{"user", "alice", RequestIDHeader, long},
			call: invokeWithHeader("echo"),
			want: map[string]any{"code": "OK"}, notSeen: []string{long},
		},
		{
			name: "service failure warns with the reason", level: slog.LevelInfo,
			md:     []string{"user", "bob"},
			call:   invokeWithHeader("fail"),
			want:   map[string]any{"level": "WARN", "tool": "fail", "user": "bob", "code": "Unavailable", "reason": "BROKER_UNAVAILABLE"},
			absent: []string{"error"},
		},
		{
			name: "caller's mistake is info", level: slog.LevelInfo,
			md:   []string{"user", "bob"},
			call: invokeWithHeader("bad"),
			want: map[string]any{"level": "INFO", "code": "InvalidArgument"},
		},
		{
			name: "unauthenticated calls are logged", level: slog.LevelInfo,
			call: invokeWithHeader("echo"),
			want: map[string]any{"level": "INFO", "tool": "echo", "user": "", "code": "Unauthenticated"},
		},
		{
			name: "debug logs arguments and the status message", level: slog.LevelDebug,
			md:   []string{"user", "carol"},
			call: invokeWithHeader("bad"),
			want: map[string]any{
				"level": "INFO", "code": "InvalidArgument", "user": "carol",
				"arguments": map[string]any{"secret": "hunter2", "n": 3.0},
				"error":     `tool "bad": argument "x" must be of type number`,
			},
		},
		{
			name: "stream", level: slog.LevelInfo,
			md:     []string{"user", "dave", RequestIDHeader, "s-1"},
			call:   func(ctx context.Context, c *grpc.ClientConn) (metadata.MD, error) { return stream(ctx, c, "echo") },
			want:   map[string]any{"level": "INFO", "method": mStream, "tool": "echo", "user": "dave", "code": "OK"},
			wantID: "s-1", absent: []string{"arguments"}, notSeen: []string{"hunter2"},
		},
		{
			name: "stream debug logs arguments", level: slog.LevelDebug,
			md:   []string{"user", "dave"},
			call: func(ctx context.Context, c *grpc.ClientConn) (metadata.MD, error) { return stream(ctx, c, "echo") },
			want: map[string]any{"tool": "echo", "arguments": map[string]any{"secret": "hunter2"}},
		},
		{
			name: "stream refused before its first message", level: slog.LevelInfo,
			call: func(ctx context.Context, c *grpc.ClientConn) (metadata.MD, error) { return stream(ctx, c, "echo") },
			want: map[string]any{"method": mStream, "tool": "", "user": "", "code": "Unauthenticated"},
		},
		{
			name: "health checks are quiet at info", level: slog.LevelInfo,
			call: healthCheck, noLine: true,
		},
		{
			name: "health checks log at debug", level: slog.LevelDebug,
			call: healthCheck,
			want: map[string]any{"level": "DEBUG", "method": "/grpc.health.v1.Health/Check", "code": "OK"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn, buf := logServer(t, tt.level)
			ctx := t.Context()
			if len(tt.md) > 0 {
				ctx = metadata.AppendToOutgoingContext(ctx, tt.md...)
			}
			hdr, _ := tt.call(ctx, conn)
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
			if got := hdr.Get(RequestIDHeader); len(got) != 1 || got[0] != id {
				t.Errorf("response header %s = %q, want [%q]", RequestIDHeader, got, id)
			}
		})
	}
}

func invokeWithHeader(name string) func(ctx context.Context, conn *grpc.ClientConn) (metadata.MD, error) {
	return func(ctx context.Context, conn *grpc.ClientConn) (metadata.MD, error) {
		var hdr metadata.MD
		err := invoke(ctx, conn, name, grpc.Header(&hdr))
		return hdr, err
	}
}

func healthCheck(ctx context.Context, conn *grpc.ClientConn) (metadata.MD, error) {
	var hdr metadata.MD
	_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
	return hdr, err
}

// The call log may also come after authentication: then it asks the user
// function on its own context and needs no user interceptor.
func TestCallLogAfterAuth(t *testing.T) {
	t.Parallel()
	buf := &logBuffer{}
	cl := NewCallLog(slog.New(slog.NewJSONHandler(buf, nil)), WithUser(fakeUser))
	var a fakeAuth
	conn := startServer(t, newStub(),
		grpc.ChainUnaryInterceptor(a.unary, cl.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(a.stream, cl.StreamServerInterceptor()))
	ctx := metadata.AppendToOutgoingContext(t.Context(), "user", "erin")
	if err := invoke(ctx, conn, "echo"); err != nil {
		t.Fatal(err)
	}
	if _, err := stream(ctx, conn, "echo"); err != nil {
		t.Fatal(err)
	}
	lines := buf.lines(t)
	if len(lines) != 2 {
		t.Fatalf("want two lines, got:\n%s", buf)
	}
	for _, l := range lines {
		if l["user"] != "erin" {
			t.Errorf("user = %v, want erin", l["user"])
		}
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
	args := map[string]any{"text": strings.Repeat("é", 50)}
	s, _ := structpbStruct(args)
	raw, _ := json.Marshal(args)
	for name, got := range map[string]json.RawMessage{
		"Struct":    cl.argumentsJSON(context.Background(), s),
		"JSON text": cl.argumentsJSON(argsjson.NewContext(context.Background(), raw), nil),
	} {
		var str string
		if err := json.Unmarshal(got, &str); err != nil {
			t.Fatalf("%s: cut arguments are not a JSON string: %s", name, got)
		}
		if len(str) > 20+len("…") || !strings.HasSuffix(str, "…") {
			t.Errorf("%s: cut arguments = %q", name, str)
		}
	}
	if got := cl.argumentsJSON(argsjson.NewContext(context.Background(), []byte(`{"a":1}`)), nil); string(got) != `{"a":1}` {
		t.Errorf("arguments from JSON text = %s", got)
	}
}
