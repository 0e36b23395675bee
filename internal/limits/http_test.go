package limits

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
)

// restDoor serves POST /v1/tools/{name}:invoke the way the gateway's
// REST door does: MaxBody in front, the body read into a toolcall.Call,
// the call run through l's middleware, and an error answered by
// runtime.HTTPError with ErrorHandler as the mux's error handler. The
// X-User header names the bucket (userKey).
func restDoor(t *testing.T, l *Limiter, maxBody int64) string {
	t.Helper()
	h := toolcall.Chain(ok, l.Middleware())
	gw := runtime.NewServeMux(runtime.WithErrorHandler(ErrorHandler))
	m := &runtime.JSONPb{MarshalOptions: protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tools/{call}", func(w http.ResponseWriter, r *http.Request) {
		name, isInvoke := strings.CutSuffix(r.PathValue("call"), ":invoke")
		if !isInvoke {
			http.NotFound(w, r)
			return
		}
		c := &toolcall.Call{Op: toolcall.OpInvoke, Name: name, Header: httpcall.Header(r.Header), TLS: r.TLS, Peer: r.RemoteAddr}
		if err := decodeBody(r.Body, c); err != nil {
			runtime.HTTPError(r.Context(), gw, m, w, r, err)
			return
		}
		res, err := h(r.Context(), c, nil)
		if err != nil {
			runtime.HTTPError(r.Context(), gw, m, w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"output": res.Output})
	})
	srv := httptest.NewServer(MaxBody(maxBody, mux))
	t.Cleanup(srv.Close)
	t.Cleanup(srv.Client().CloseIdleConnections)
	return srv.URL
}

// decodeBody reads {"arguments": {...}} into c; what it cannot read is
// InvalidArgument, as the REST door answers it (a body cut off by
// MaxBody included).
func decodeBody(body io.Reader, c *toolcall.Call) error {
	data, err := io.ReadAll(body)
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	var req struct {
		Arguments json.RawMessage `json:"arguments"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return status.Error(codes.InvalidArgument, "invalid request body: "+err.Error())
	}
	c.Args = req.Arguments
	return nil
}

type httpStep struct {
	path       string
	body       io.Reader
	code       int
	retryAfter string
	status     string // JSON google.rpc.Status expected, when set (details ignored)
}

func bigJSON(n int) string {
	return `{"arguments": {"x": "` + strings.Repeat("a", n) + `"}}`
}

// chunked hides a body's length, so it is sent without Content-Length.
type chunked struct{ io.Reader }

func TestHTTP(t *testing.T) {
	t.Parallel()
	l, err := New(1.0/60, 1, WithKey(userKey))
	if err != nil {
		t.Fatal(err)
	}
	url := restDoor(t, l, 0)
	const invoke = "/v1/tools/t:invoke"
	tooLarge := `{"code":8,"message":"request body larger than 1048576 bytes","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"BODY_TOO_LARGE","domain":"toolgate","metadata":{}}]}`
	tests := []struct {
		name  string
		steps []httpStep
	}{
		{"rate limit: 429 with Retry-After", []httpStep{
			{path: invoke, body: strings.NewReader(`{}`), code: http.StatusOK},
			{path: invoke, body: strings.NewReader(`{}`), code: http.StatusTooManyRequests, retryAfter: "60"},
		}},
		{"body at the limit passes", []httpStep{
			{path: invoke, body: strings.NewReader(bigJSON(1<<20 - len(bigJSON(0)))), code: http.StatusOK},
		}},
		{"body over the limit, by Content-Length", []httpStep{
			{path: invoke, body: strings.NewReader(bigJSON(1 << 20)), code: http.StatusRequestEntityTooLarge, status: tooLarge},
		}},
		{"body over the limit, chunked", []httpStep{
			{path: invoke, body: chunked{strings.NewReader(bigJSON(1 << 20))}, code: http.StatusRequestEntityTooLarge, status: tooLarge},
		}},
		{"body over the limit costs no token", []httpStep{
			{path: invoke, body: chunked{strings.NewReader(bigJSON(1 << 20))}, code: http.StatusRequestEntityTooLarge},
			{path: invoke, body: strings.NewReader(`{}`), code: http.StatusOK},
		}},
		{"other errors are unchanged", []httpStep{
			{path: invoke, body: strings.NewReader(`{"nope": 1}`), code: http.StatusBadRequest},
		}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			user := string(rune('a' + i))
			for j, s := range tc.steps {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+s.path, s.body)
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("X-User", user)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != s.code {
					t.Fatalf("step %d: HTTP %d %s, want %d", j, resp.StatusCode, body, s.code)
				}
				if got := resp.Header.Get("Retry-After"); got != s.retryAfter {
					t.Fatalf("step %d: Retry-After %q, want %q", j, got, s.retryAfter)
				}
				if s.status != "" {
					var got, want map[string]any
					if err := json.Unmarshal(body, &got); err != nil {
						t.Fatalf("step %d: %v in %s", j, err, body)
					}
					_ = json.Unmarshal([]byte(s.status), &want)
					if g, w := canon(got), canon(want); g != w {
						t.Fatalf("step %d: body %s, want %s", j, g, w)
					}
				}
			}
		})
	}
	http.DefaultClient.CloseIdleConnections()
}

func canon(v any) string { b, _ := json.Marshal(v); return string(bytes.TrimSpace(b)) }

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	withDelay := func(d time.Duration) error {
		st, _ := status.New(codes.ResourceExhausted, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
		return st.Err()
	}
	tests := []struct {
		name string
		err  error
		secs int64
		ok   bool
	}{
		{"whole seconds", withDelay(60 * time.Second), 60, true},
		{"rounded up", withDelay(1200 * time.Millisecond), 2, true},
		{"at least one", withDelay(time.Millisecond), 1, true},
		{"zero is one", withDelay(0), 1, true},
		{"no RetryInfo", status.Error(codes.ResourceExhausted, "x"), 0, false},
		{"not a status", errors.New("x"), 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			secs, ok := RetryAfter(tc.err)
			if secs != tc.secs || ok != tc.ok {
				t.Fatalf("RetryAfter = %d, %v; want %d, %v", secs, ok, tc.secs, tc.ok)
			}
		})
	}
}

// TestMaxBodyPlainHandler checks the middleware without grpc-gateway: a
// handler reading the body sees *http.MaxBytesError.
func TestMaxBodyPlainHandler(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limit  int64
		body   io.Reader
		code   int
		gotErr bool
	}{
		{"under", 10, strings.NewReader("12345"), http.StatusOK, false},
		{"exactly", 5, strings.NewReader("12345"), http.StatusOK, false},
		// Read up to the limit, so that each door answers in its own form.
		{"over by Content-Length", 4, strings.NewReader("12345"), http.StatusAccepted, true},
		{"over, chunked", 4, chunked{strings.NewReader("12345")}, http.StatusAccepted, true},
		{"no body", 4, nil, http.StatusOK, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var readErr error
			h := MaxBody(tc.limit, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, readErr = io.ReadAll(r.Body)
				if readErr != nil {
					w.WriteHeader(http.StatusAccepted)
				}
			}))
			req := httptest.NewRequest(http.MethodPost, "/", tc.body)
			if _, ok := tc.body.(chunked); ok {
				req.ContentLength = -1
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.code {
				t.Fatalf("HTTP %d %s, want %d", rec.Code, rec.Body, tc.code)
			}
			var mbe *http.MaxBytesError
			if errors.As(readErr, &mbe) != tc.gotErr {
				t.Fatalf("read error %v, want a MaxBytesError: %v", readErr, tc.gotErr)
			}
		})
	}
}
