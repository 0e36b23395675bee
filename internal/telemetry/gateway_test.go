package telemetry

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/toolcall"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"
)

// testDoor is a minimal HTTP door, as internal/httpapi is one: it builds
// a call from the request (its header through httpcall.Header, the
// arguments as JSON text), runs h, and answers the call's request id as
// X-Request-Id, the output as JSON, a stream's chunks as JSON lines.
//
//	POST /v1/tools/{name}:invoke   {"arguments": {...}}
//	POST /v1/tools/{name}:stream   {"arguments": {...}}
func testDoor(h toolcall.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tools/{call}", func(w http.ResponseWriter, r *http.Request) {
		name, verb, _ := strings.Cut(r.PathValue("call"), ":")
		c := &toolcall.Call{Op: toolcall.OpInvoke, Name: name, Header: httpcall.Header(r.Header), Peer: r.RemoteAddr}
		if verb == "stream" {
			c.Op = toolcall.OpStream
		}
		var body struct{ Arguments json.RawMessage }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.Args = body.Arguments
		setID := func() {
			if c.RequestID != "" {
				w.Header()["X-Request-Id"] = []string{c.RequestID}
			}
		}
		sent := false
		var emit toolcall.Emit
		if c.Op == toolcall.OpStream {
			emit = func(ch toolcall.Chunk) error {
				if !sent {
					sent = true
					setID()
					w.Header().Set("Content-Type", "application/x-ndjson")
				}
				return json.NewEncoder(w).Encode(map[string]any{"output": ch.Text, "index": ch.Index, "last": ch.Last})
			}
		}
		res, err := h(r.Context(), c, emit)
		if sent {
			return // a failure after the first chunk ends the stream
		}
		setID()
		if err != nil {
			http.Error(w, status.Convert(err).Message(), runtime.HTTPStatusFromCode(status.Code(err)))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"output": res.Output})
	})
	return mux
}

// The HTTP side as the gateway wires it: a door in front of the chain of
// every piece of this package, in the order internal/app uses (spans, the
// call log, metrics, then authentication), with the request id and the
// trace context in the request's header and the request id answered.
func TestThroughAnHTTPDoor(t *testing.T) {
	t.Parallel()
	tp, exp := inMemoryTracing(t)
	buf := &logBuffer{}
	cl := NewCallLog(slog.New(slog.NewJSONHandler(buf, nil)))
	m := NewMetrics(WithKnownTools(isKnown), WithoutRuntimeMetrics())
	h := toolcall.Chain(newStub().handle, SpanMiddleware(tp), cl.Middleware(), m.Middleware(), fakeAuth)
	hs := httptest.NewServer(testDoor(h))
	defer hs.Close()

	tests := []struct {
		name, path, requestID, user string
		lowerCase                   bool // send the header names in lower case
		wantStatus                  int
		wantCode                    string
		wantChunks                  int
	}{
		{"invoke", "/v1/tools/echo:invoke", "rest-1", "alice", false, http.StatusOK, "OK", 0},
		{"stream", "/v1/tools/echo:stream", "rest-2", "alice", false, http.StatusOK, "OK", 3},
		{"refused", "/v1/tools/echo:invoke", "rest-3", "", false, http.StatusUnauthorized, "Unauthenticated", 0},
		{"lower-case header names", "/v1/tools/echo:invoke", "rest-4", "bob", true, http.StatusOK, "OK", 0},
		{"refused stream", "/v1/tools/echo:stream", "rest-5", "", false, http.StatusUnauthorized, "Unauthenticated", 0},
	}
	for _, tt := range tests {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, hs.URL+tt.path, strings.NewReader(`{"arguments": {"secret": "hunter2"}}`))
		set := req.Header.Set
		if tt.lowerCase {
			set = func(k, v string) { req.Header[strings.ToLower(k)] = []string{v} }
		}
		set("X-Request-Id", tt.requestID)
		set("Traceparent", callerTraceparent)
		if tt.user != "" {
			set("User", tt.user)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		chunks := 0
		for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
			if resp.StatusCode == http.StatusOK && tt.wantChunks > 0 {
				chunks++
			}
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tt.wantStatus {
			t.Errorf("%s: HTTP %d, want %d", tt.name, resp.StatusCode, tt.wantStatus)
		}
		if got := resp.Header.Get("X-Request-Id"); got != tt.requestID {
			t.Errorf("%s: X-Request-Id %q, want %q", tt.name, got, tt.requestID)
		}
		if chunks != tt.wantChunks {
			t.Errorf("%s: %d chunks, want %d", tt.name, chunks, tt.wantChunks)
		}
	}

	lines := buf.lines(t)
	if len(lines) != len(tests) {
		t.Fatalf("want %d log lines, got:\n%s", len(tests), buf)
	}
	for i, tt := range tests {
		l := lines[i]
		if l["request_id"] != tt.requestID || l["user"] != tt.user || l["code"] != tt.wantCode || l["trace_id"] != callerTraceID {
			t.Errorf("%s: log line %v", tt.name, l)
		}
	}
	servers := 0
	for _, s := range exp.GetSpans() {
		if s.SpanKind != trace.SpanKindServer {
			continue
		}
		servers++
		if s.SpanContext.TraceID().String() != callerTraceID {
			t.Errorf("server span %q in trace %s, want the caller's", s.Name, s.SpanContext.TraceID())
		}
	}
	if servers != len(tests) {
		t.Errorf("%d server spans, want %d", servers, len(tests))
	}
	if got := testutil.ToFloat64(m.calls.WithLabelValues(mInvoke, "echo", "Unauthenticated")); got != 1 {
		t.Errorf("refused calls counted %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.calls.WithLabelValues(mStream, "echo", "Unauthenticated")); got != 1 {
		t.Errorf("refused streams counted %v, want 1", got)
	}
	if strings.Contains(buf.String(), "hunter2") {
		t.Error("arguments logged at Info")
	}
}
