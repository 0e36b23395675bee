package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/jsontext"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/rootmux"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// fakeService is the call handler: it answers from its fields; a stream
// sends chunks, then fails with failErr when set.
type fakeService struct {
	chunks  int
	gap     time.Duration
	failErr error // returned after the chunks
	mu      sync.Mutex
	last    toolcall.Call
	lastArg any        // the arguments the last call carried, decoded
	ended   chan error // a stream's context error when it returns
}

func (f *fakeService) handle(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
	switch c.Op {
	case toolcall.OpInvoke:
		var args any
		if len(c.Args) > 0 {
			if err := json.Unmarshal(c.Args, &args); err != nil {
				return toolcall.Result{}, status.Errorf(codes.Internal, "arguments are not JSON: %v", err)
			}
		}
		f.mu.Lock()
		f.last, f.lastArg = *c, args
		f.mu.Unlock()
		c.RequestID = "rid-" + strings.Join(c.Header.Values("x-api-key"), ",")
		if c.Name == "missing" {
			return toolcall.Result{}, status.Error(codes.NotFound, `tool "missing" not found`)
		}
		return toolcall.Result{Output: "ok"}, nil
	case toolcall.OpListTools:
		return toolcall.Result{Detail: &toolcall.Detail{Tools: []*registry.Tool{{Name: "t", Service: &registry.Service{ID: "s"}}}}}, nil
	case toolcall.OpStream:
		c.RequestID = "rid-1"
		defer func() {
			if f.ended != nil {
				f.ended <- ctx.Err()
			}
		}()
		for i := range f.chunks {
			if i > 0 && f.gap > 0 {
				select {
				case <-time.After(f.gap):
				case <-ctx.Done():
					return toolcall.Result{}, status.FromContextError(ctx.Err()).Err()
				}
			}
			if err := emit(toolcall.Chunk{Text: c.Name + "\n\"" + string(rune('a'+i%26)), Index: int64(i), Last: i == f.chunks-1 && f.failErr == nil}); err != nil {
				return toolcall.Result{}, err
			}
		}
		return toolcall.Result{}, f.failErr
	}
	return toolcall.Result{}, status.Error(codes.Unimplemented, "not in this fake")
}

func newServer(t *testing.T, f *fakeService, mod func(*Options), root ...func(*rootmux.Options)) *httptest.Server {
	t.Helper()
	opts := Options{Handler: f.handle, SSEHeartbeat: -1}
	if mod != nil {
		mod(&opts)
	}
	a, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ropts := rootmux.Options{Routes: a.Routes()}
	for _, mod := range root {
		mod(&ropts)
	}
	h, err := rootmux.New(ropts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func do(t *testing.T, srv *httptest.Server, method, path, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, raw
}

func TestStreamFormats(t *testing.T) {
	t.Parallel()
	f := &fakeService{chunks: 3}
	srv := newServer(t, f, nil)
	resp, raw := do(t, srv, "POST", "/v1/tools/x:stream", `{"arguments": {"a": 1}}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != ContentTypeNDJSON || resp.Header.Get("X-Request-Id") != "rid-1" {
		t.Fatalf("HTTP %d %v", resp.StatusCode, resp.Header)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines: %q", len(lines), raw)
	}
	for i, l := range lines {
		var c toolgatev1.StreamToolResponse
		if err := protojson.Unmarshal([]byte(l), &c); err != nil || c.GetIndex() != int64(i) || c.GetOutput() != "x\n\""+string(rune('a'+i)) {
			t.Fatalf("line %d %q: %v", i, l, err)
		}
	}
	resp, raw = do(t, srv, "POST", "/v1/tools/x:stream", `{}`, "Accept", "text/event-stream")
	if resp.Header.Get("Content-Type") != ContentTypeSSE || !strings.HasSuffix(string(raw), "event: done\ndata: {}\n\n") ||
		strings.Count(string(raw), "event: chunk\ndata: {") != 3 {
		t.Fatalf("SSE body %q", raw)
	}
}

func TestStreamErrors(t *testing.T) {
	t.Parallel()
	early := newServer(t, &fakeService{failErr: status.Error(codes.PermissionDenied, "no")}, nil)
	for _, accept := range []string{"", ContentTypeSSE} {
		resp, raw := do(t, early, "POST", "/v1/tools/x:stream", `{}`, "Accept", accept)
		var st map[string]any
		if resp.StatusCode != http.StatusForbidden || json.Unmarshal(raw, &st) != nil || st["code"] != float64(codes.PermissionDenied) || st["message"] != "no" {
			t.Fatalf("Accept %q: HTTP %d %q, want 403 and a bare Status", accept, resp.StatusCode, raw)
		}
	}
	late := newServer(t, &fakeService{chunks: 2, failErr: status.Error(codes.Unavailable, "gone")}, nil)
	_, raw := do(t, late, "POST", "/v1/tools/x:stream", `{}`)
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], `"code":14`) || !strings.Contains(lines[2], `"message":"gone"`) {
		t.Fatalf("NDJSON after chunks: %q", raw)
	}
	_, raw = do(t, late, "POST", "/v1/tools/x:stream", `{}`, "Accept", ContentTypeSSE)
	if !strings.HasSuffix(string(raw), "\n\n") || !strings.Contains(string(raw), "event: error\ndata: {\"code\":14") {
		t.Fatalf("SSE after chunks: %q", raw)
	}
}

func TestStreamHeartbeatAndDisconnect(t *testing.T) {
	t.Parallel()
	f := &fakeService{chunks: 100, gap: 100 * time.Millisecond, ended: make(chan error, 1)}
	srv := newServer(t, f, func(o *Options) { o.SSEHeartbeat = 30 * time.Millisecond })
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/v1/tools/x:stream", strings.NewReader(`{}`))
	req.Header.Set("Accept", ContentTypeSSE)
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	chunks, beats := 0, 0
	for chunks < 2 || beats == 0 {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d chunks and %d keep-alives: %v", chunks, beats, err)
		}
		switch {
		case strings.HasPrefix(line, "event: chunk"):
			chunks++
		case strings.HasPrefix(line, ": keep-alive"):
			beats++
		}
	}
	_ = resp.Body.Close() // the client goes away: the call must end
	select {
	case err := <-f.ended:
		if err == nil {
			t.Fatal("the service's context was not cancelled")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the call went on after the client left")
	}
}

func TestRequestBodies(t *testing.T) {
	t.Parallel()
	f := &fakeService{}
	srv := newServer(t, f, nil)
	tests := []struct {
		name, body string
		code       int
		msg        string
		timeout    time.Duration
		args       string // the arguments the call carries, as JSON ("" = none: the core sends {})
	}{
		{"protobuf duration", `{"timeout": "0.25s"}`, 200, "", 250 * time.Millisecond, ``},
		{"Go duration", `{"arguments": {"a": [1]}, "timeout": "1m30s"}`, 200, "", 90 * time.Second, `{"a": [1]}`},
		{"milliseconds", `{"timeout": "200ms"}`, 200, "", 200 * time.Millisecond, ``},
		{"numbers as written", `{"arguments": {"big": 123456789012345678}}`, 200, "", 0, `{"big": 123456789012345678}`},
		{"empty body", ``, 200, "", 0, ``},
		{"arguments only", ` {"arguments": {"msg": "hi", "n": 3, "o": {"x": [true, null]}}} `, 200, "", 0, `{"msg": "hi", "n": 3, "o": {"x": [true, null]}}`},
		{"fractions go the full way", `{"arguments": {"n": 1.5, "big": 1e300}, "name": "ignored"}`, 200, "", 0, `{"n": 1.5, "big": 1e300}`},
		{"null arguments", `{"arguments": null}`, 200, "", 0, ``},
		{"null timeout", `{"timeout": null, "arguments": {}}`, 200, "", 0, `{}`},
		{"unknown null member", `{"": null}`, 400, `unknown field ""`, 0, ""},
		{"bad duration", `{"timeout": "later"}`, 400, `"timeout" must be a duration such as "5s", "0.2s" or "200ms"; "later" is not one`, 0, ""},
		{"negative Go duration", `{"timeout": "-1ms"}`, 400, `"timeout" must be a duration`, 0, ""},
		{"zero duration", `{"timeout": "0s"}`, 400, `"timeout" must be a duration`, 0, ""},
		{"less than a nanosecond", `{"timeout": "0.1ns"}`, 400, `"timeout" must be a duration`, 0, ""},
		{"spaces around a duration", `{"timeout": " 5s"}`, 400, `"timeout" must be a duration`, 0, ""},
		{"a nanosecond", `{"timeout": "0m1ns"}`, 200, "", time.Nanosecond, ``},
		{"longer than time.Duration holds", `{"timeout": "99999999999999h"}`, 200, "", math.MaxInt64, ``},
		{"number duration", `{"timeout": 3}`, 400, `as a JSON string`, 0, ""},
		{"array arguments", `{"arguments": ["a"]}`, 400, `"arguments" must be a JSON object, such as {"topic": "cats"}, not an array`, 0, ""},
		{"string arguments", `{"arguments": "a"}`, 400, `not a string`, 0, ""},
		{"unknown field", `{"user": "root"}`, 400, `unknown field "user" in the request body; it may hold "arguments", "arguments_json", "timeout"`, 0, ""},
		{"arguments as JSON text", `{"arguments_json": "{\"big\": 123456789012345678}"}`, 200, "", 0, `{"big": 123456789012345678}`},
		{"empty arguments_json", `{"arguments_json": "", "arguments": {"a": 1}}`, 200, "", 0, `{"a": 1}`},
		{"both arguments", `{"arguments": {"a": 1}, "arguments_json": "{}"}`, 400, "set arguments or arguments_json, not both", 0, ""},
		{"arguments_json not a string", `{"arguments_json": {"a": 1}}`, 400, "arguments_json", 0, ""},
		{"not an object", `[1]`, 400, "must be a JSON object", 0, ""},
		{"broken JSON", `{"arguments": {`, 400, "not valid JSON", 0, ""},
	}
	for _, tc := range tests {
		resp, raw := do(t, srv, "POST", "/v1/tools/x:invoke", tc.body)
		if resp.StatusCode != tc.code {
			t.Fatalf("%s: HTTP %d %s, want %d", tc.name, resp.StatusCode, raw, tc.code)
		}
		if tc.code != 200 {
			var st struct{ Message string }
			if json.Unmarshal(raw, &st) != nil || !strings.Contains(st.Message, tc.msg) {
				t.Fatalf("%s: message %q, want %q", tc.name, raw, tc.msg)
			}
			continue
		}
		f.mu.Lock()
		got, args := f.last.Timeout, f.lastArg
		f.mu.Unlock()
		if got != tc.timeout {
			t.Fatalf("%s: timeout %v, want %v", tc.name, got, tc.timeout)
		}
		var want any
		if tc.args != "" {
			_ = json.Unmarshal([]byte(tc.args), &want)
		}
		if !reflect.DeepEqual(args, want) {
			t.Fatalf("%s: arguments %v, want %v", tc.name, args, want)
		}
	}
}

func TestRoutes(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &fakeService{}, nil, func(o *rootmux.Options) {
		o.Routes = append(o.Routes, rootmux.Docs(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "docs") }))...)
		o.MaxHeaderBytes = 1024
	})
	tests := []struct {
		method, path string
		hdr          []string
		code         int
		allow        string
	}{
		{"GET", "/v1/tools", nil, 200, ""},
		{"HEAD", "/v1/tools", nil, 200, ""},
		{"POST", "/v1/tools", nil, 405, "GET, HEAD"},
		{"GET", "/v1/tools/a:invoke", nil, 405, "POST"},
		{"PUT", "/v1/tools/a:stream", nil, 405, "POST"},
		{"DELETE", "/v1/tool-services/s", nil, 405, "GET, HEAD"},
		{"GET", "/v1/tools/a/b", nil, 404, ""},
		{"GET", "/v1/tools/", nil, 404, ""},
		{"GET", "/elsewhere", nil, 404, ""},
		{"GET", "/docs/x", nil, 200, ""},
		{"GET", "/favicon.ico", nil, 200, ""},
		{"POST", "/favicon.ico", nil, 405, "GET, HEAD"},
		{"GET", "/openapi.json", nil, 200, ""},
		{"GET", "/openapi.v2.json", nil, 200, ""},
		{"GET", "/readyz", nil, 200, ""},
		{"GET", "/metrics", nil, 404, ""},
		{"GET", "/v1/tools", []string{"X-Big", strings.Repeat("b", 2000)}, 431, ""},
		{"POST", "/v1/tools/missing:invoke", nil, 404, ""},
	}
	for _, tc := range tests {
		resp, raw := do(t, srv, tc.method, tc.path, "", tc.hdr...)
		if resp.StatusCode != tc.code || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: HTTP %d Allow %q, want %d %q (%s)", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), tc.code, tc.allow, raw)
		}
		if tc.code >= 400 && (!json.Valid(raw) || resp.Header.Get("Content-Type") != "application/json") {
			t.Errorf("%s %s: error body %q is not JSON", tc.method, tc.path, raw)
		}
	}
	// / leads a person to the docs.
	c := *srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/docs" {
		t.Errorf("GET / = %d %q, want a redirect to /docs", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestStreamFormatNegotiation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		accept  string
		sse, ok bool
	}{
		{"", false, true},
		{"*/*", false, true},
		{"application/json", false, true},
		{"application/x-ndjson", false, true},
		{"text/event-stream", true, true},
		{"text/event-stream;q=0.5, application/x-ndjson", false, true},
		{"application/x-ndjson;q=0.1, text/event-stream", true, true},
		{"text/*", true, true},
		{"application/xml", false, false},
		{"text/event-stream;q=0", false, false},
		// Equal weights: the first the header names.
		{"application/x-ndjson, text/event-stream", false, true},
		{"text/event-stream, application/x-ndjson", true, true},
		{"application/x-ndjson, text/event-stream, application/json", false, true},
		// A range that names a type exactly outranks a wildcard.
		{"*/*, text/event-stream", true, true},
		{"application/*", false, true},
		{"application/x-ndjson;q=0, */*", true, true},
		{"text/html", false, false},
		{"not a media type", false, false},
	}
	for _, tc := range tests {
		sse, ok := streamFormat(tc.accept)
		if sse != tc.sse || ok != tc.ok {
			t.Errorf("streamFormat(%q) = %v, %v; want %v, %v", tc.accept, sse, ok, tc.sse, tc.ok)
		}
	}
}

// appendChunk must write exactly what the gateway's protojson marshaler
// would, for any text.
func FuzzAppendChunk(f *testing.F) {
	for _, s := range []string{"", "plain", "quote\" backslash\\ tab\t nl\n", "\x00\x1f\u2028<>&", "caf\xc3\xa9 \xff"} {
		f.Add(s, int64(3), true)
	}
	m := newMarshaler()
	f.Fuzz(func(t *testing.T, out string, index int64, last bool) {
		c := &toolgatev1.StreamToolResponse{Output: out, Index: index, Last: last}
		got := appendChunk(nil, toolcall.Chunk{Text: out, Index: index, Last: last})
		if !utf8.ValidString(out) {
			// protojson refuses such text; the chunk is still valid JSON,
			// with U+FFFD for each bad byte, as encoding/json writes it.
			var v struct{ Output string }
			if err := json.Unmarshal(got, &v); err != nil || !utf8.ValidString(v.Output) {
				t.Fatalf("%q: %v", got, err)
			}
			return
		}
		var back toolgatev1.StreamToolResponse
		if err := protojson.Unmarshal(got, &back); err != nil {
			t.Fatalf("%q does not decode: %v", got, err)
		}
		want, err := m.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		var w toolgatev1.StreamToolResponse
		if err := protojson.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if back.GetOutput() != w.GetOutput() || back.GetIndex() != index || back.GetLast() != last {
			t.Fatalf("appendChunk %q decodes to %v, protojson's to %v", got, &back, &w)
		}
	})
}

// Request bodies are untrusted: decoding never panics, and whatever it
// accepts decodes to a request whose fields protojson would accept too.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{`{}`, `{"arguments": {"a": 1}, "timeout": "200ms"}`, `{"timeout": "1.5s"}`, `{"arguments": []}`, `[`, `{"timeout": "9999999999h"}`, `{"name": "x"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req toolgatev1.InvokeToolRequest
		if err := decodeRequest(data, &req); err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		b, err := protojson.Marshal(&req)
		if err != nil {
			t.Fatalf("accepted %q into a request protojson cannot write: %v", data, err)
		}
		var again toolgatev1.InvokeToolRequest
		if err := protojson.Unmarshal(b, &again); err != nil {
			t.Fatalf("round trip of %q: %v", data, err)
		}
	})
}

// FuzzCallBody: whatever body the one pass takes, the full decoder reads
// the same way — the same arguments, the same timeout.
func FuzzCallBody(f *testing.F) {
	for _, s := range []string{`{}`, `{"arguments": {"a": 1}, "timeout": "200ms"}`, `{"timeout": "1.5s", "name": "x"}`, `{"arguments": []}`, `{"arguments": {"a": {"b": [1, "c"]}}}`, `{"timeout": "1h"}`, `{"arguments": {"n": 1.5e3}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c toolcall.Call
		ok, err := callBody(data, &c)
		if err != nil || !ok {
			return
		}
		if c.ArgsCompact {
			// The core takes such arguments without reading them again:
			// they must be exactly what Compact makes of them.
			again, err := jsontext.Compact(c.Args)
			if err != nil || !bytes.Equal(again, c.Args) {
				t.Fatalf("%q: arguments %q marked compact, Compact gives %q, %v", data, c.Args, again, err)
			}
		}
		var req toolgatev1.InvokeToolRequest
		if err := decodeRequest(data, &req); err != nil {
			t.Fatalf("the one pass took %q, the full decoder refuses it: %v", data, err)
		}
		var got any = map[string]any{}
		if len(c.Args) > 0 {
			if err := json.Unmarshal(c.Args, &got); err != nil {
				t.Fatalf("arguments %q are not JSON: %v", c.Args, err)
			}
		}
		want := map[string]any{}
		if req.GetArguments() != nil {
			want = req.GetArguments().AsMap()
		}
		if !reflect.DeepEqual(got, any(want)) {
			t.Fatalf("%q: arguments %v, full decoder %v", data, got, want)
		}
		if c.Timeout != req.GetTimeout().AsDuration() || c.TimeoutSet != (req.GetTimeout() != nil) {
			t.Fatalf("%q: timeout %v (%v), full decoder %v", data, c.Timeout, c.TimeoutSet, req.GetTimeout())
		}
	})
}

// The invoke route answers what protojson would, gives the call the
// request's header, and answers its request id.
func TestInvokeResponse(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &fakeService{}, nil)
	resp, raw := do(t, srv, http.MethodPost, "/v1/tools/x:invoke", `{}`, "X-Api-Key", "k1")
	if resp.StatusCode != http.StatusOK || string(raw) != `{"output":"ok"}` || resp.Header.Get("X-Request-Id") != "rid-k1" ||
		resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("HTTP %d %q %v", resp.StatusCode, raw, resp.Header)
	}
	for _, out := range []string{`{"a": [1, 2.5, "x"], "b": null}`, ` [true, {"c": {}}] `, `42`, `"text"`, "plain text", ""} {
		r := &toolgatev1.InvokeToolResponse{Output: out}
		var v structpb.Value
		if protojson.Unmarshal([]byte(out), &v) == nil {
			r.OutputJson = &v
		}
		got := appendInvokeResponse(nil, out)
		want, err := newMarshaler().Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%q: %q is not JSON: %v", out, got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%q: wrote %s, protojson writes %s", out, got, want)
		}
	}
}

// A call's header is the request's, read by the one rule of the HTTP
// doors: every value of the headers the middleware reads.
func TestCallHeader(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest(http.MethodPost, "/v1/tools/t:invoke", nil)
	r.Header.Add("Authorization", "Bearer a")
	r.Header.Add("X-Api-Key", "k1")
	r.Header.Add("X-Api-Key", "k2")
	r.Header.Add("X-Request-Id", "rid")
	c := newCall(r, toolcall.OpInvoke)
	if got := c.Header.Values("authorization"); !slices.Equal(got, []string{"Bearer a"}) {
		t.Fatalf("authorization = %q", got)
	}
	if got := c.Header.Values("x-api-key"); !slices.Equal(got, []string{"k1", "k2"}) {
		t.Fatalf("x-api-key = %q", got)
	}
	if got := c.Header.Values("x-request-id"); !slices.Equal(got, []string{"rid"}) {
		t.Fatalf("x-request-id = %q", got)
	}
	if c.Op != toolcall.OpInvoke || c.Peer == "" {
		t.Fatalf("call %+v", c)
	}
}

// The arguments reach the call as the caller wrote them, numbers included.
func TestArgumentsExactly(t *testing.T) {
	t.Parallel()
	f := &fakeService{}
	srv := newServer(t, f, nil)
	for _, args := range []string{`{"big":123456789012345678}`, `{"p":9007199254740993,"z":-0.0,"t":1e-400,"f":1.10}`} {
		if resp, raw := do(t, srv, "POST", "/v1/tools/x:invoke", `{"arguments": `+args+`}`); resp.StatusCode != http.StatusOK {
			t.Fatalf("HTTP %d %s", resp.StatusCode, raw)
		}
		f.mu.Lock()
		got := string(f.last.Args)
		f.mu.Unlock()
		if got != args {
			t.Errorf("arguments %s, want %s exactly", got, args)
		}
		text, _ := json.Marshal(args)
		if resp, raw := do(t, srv, "POST", "/v1/tools/x:invoke", `{"arguments_json": `+string(text)+`}`); resp.StatusCode != http.StatusOK {
			t.Fatalf("arguments_json: HTTP %d %s", resp.StatusCode, raw)
		}
		f.mu.Lock()
		got = string(f.last.Args)
		f.mu.Unlock()
		if got != args {
			t.Errorf("arguments_json: arguments %s, want %s exactly", got, args)
		}
	}
}

// TestMediaTypes: one Accept rule for every API endpoint (406 with a
// Status and ErrorInfo when it allows nothing the endpoint answers), and
// 415 for a body that says it is not JSON.
func TestMediaTypes(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &fakeService{chunks: 1}, nil)
	tests := []struct {
		name, method, path, body string
		hdr                      []string
		code                     int
		reason                   string // of the ErrorInfo
		contentType              string // of a 200
	}{
		{"invoke, no Accept", "POST", "/v1/tools/x:invoke", `{}`, nil, 200, "", "application/json"},
		{"invoke, browser Accept", "POST", "/v1/tools/x:invoke", `{}`, []string{"Accept", "text/html,application/xhtml+xml,*/*;q=0.8"}, 200, "", "application/json"},
		{"invoke, HTML only", "POST", "/v1/tools/x:invoke", `{}`, []string{"Accept", "text/html"}, 406, "NOT_ACCEPTABLE", ""},
		{"stream, HTML only", "POST", "/v1/tools/x:stream", `{}`, []string{"Accept", "text/html"}, 406, "NOT_ACCEPTABLE", ""},
		{"invoke, NDJSON only", "POST", "/v1/tools/x:invoke", `{}`, []string{"Accept", "application/x-ndjson"}, 406, "NOT_ACCEPTABLE", ""},
		{"list, HTML only", "GET", "/v1/tools", ``, []string{"Accept", "text/html"}, 406, "NOT_ACCEPTABLE", ""},
		{"stream, generated clients' Accept", "POST", "/v1/tools/x:stream", `{}`, []string{"Accept", "application/x-ndjson, text/event-stream"}, 200, "", "application/x-ndjson"},
		{"JSON body", "POST", "/v1/tools/x:invoke", `{"arguments": {}}`, []string{"Content-Type", "application/json; charset=utf-8"}, 200, "", "application/json"},
		{"+json body", "POST", "/v1/tools/x:invoke", `{"arguments": {}}`, []string{"Content-Type", "application/merge-patch+json"}, 200, "", "application/json"},
		{"curl -d with JSON", "POST", "/v1/tools/x:invoke", `{"arguments": {}}`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 200, "", "application/json"},
		{"fetch with a JSON string", "POST", "/v1/tools/x:stream", `{"arguments": {}}`, []string{"Content-Type", "text/plain;charset=UTF-8"}, 200, "", "application/x-ndjson"},
		{"form body", "POST", "/v1/tools/x:invoke", `topic=cats`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "UNSUPPORTED_MEDIA_TYPE", ""},
		{"form body, stream", "POST", "/v1/tools/x:stream", `topic=cats`, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "UNSUPPORTED_MEDIA_TYPE", ""},
		{"XML body", "POST", "/v1/tools/x:invoke", `{"arguments": {}}`, []string{"Content-Type", "application/xml"}, 415, "UNSUPPORTED_MEDIA_TYPE", ""},
		{"multipart without boundary", "POST", "/v1/tools/x:invoke", ``, []string{"Content-Type", "multipart/form-data"}, 415, "UNSUPPORTED_MEDIA_TYPE", ""},
		{"unknown verb", "POST", "/v1/tools/x:call", `{}`, nil, 404, "ROUTE_NOT_FOUND", ""},
	}
	for _, tc := range tests {
		resp, raw := do(t, srv, tc.method, tc.path, tc.body, tc.hdr...)
		if resp.StatusCode != tc.code {
			t.Errorf("%s: HTTP %d %s, want %d", tc.name, resp.StatusCode, raw, tc.code)
			continue
		}
		if tc.code == 200 {
			if ct := resp.Header.Get("Content-Type"); ct != tc.contentType {
				t.Errorf("%s: Content-Type %q, want %q", tc.name, ct, tc.contentType)
			}
			continue
		}
		var st struct {
			Code    int
			Message string
			Details []struct {
				Type   string `json:"@type"`
				Reason string
				Domain string
			}
		}
		if err := json.Unmarshal(raw, &st); err != nil || st.Code != int(codes.InvalidArgument) && st.Code != int(codes.NotFound) || st.Message == "" {
			t.Errorf("%s: body %s is not a Status (%v)", tc.name, raw, err)
			continue
		}
		if len(st.Details) != 1 || st.Details[0].Reason != tc.reason || st.Details[0].Domain != ErrorDomain {
			t.Errorf("%s: details %+v, want ErrorInfo %s", tc.name, st.Details, tc.reason)
		}
	}
}

func TestPageParams(t *testing.T) {
	t.Parallel()
	srv := newServer(t, &fakeService{}, nil)
	for _, tc := range []struct {
		query string
		code  int
	}{
		{"", 200},
		{"?page_size=5&page_token=abc", 200},
		{"?pageSize=5&pageToken=abc", 200},
		{"?page_token=", 200},
		{"?page_size=", 400},
		{"?page_size=x", 400},
		{"?page_size=99999999999", 400},
		{"?page_size=&page_size=x", 400},
		{"?page_size=1&pageSize=2", 400},
		{"?page_token=a&page_token=b", 400},
	} {
		resp, raw := do(t, srv, "GET", "/v1/tools"+tc.query, "")
		if resp.StatusCode != tc.code {
			t.Errorf("GET /v1/tools%s: HTTP %d %s, want %d", tc.query, resp.StatusCode, raw, tc.code)
		}
	}
}

// setRecorder is a call handler that records the tool set of each call it
// serves.
type setRecorder struct {
	mu   sync.Mutex
	seen []string // "Op set"
}

func (s *setRecorder) handle(_ context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
	s.mu.Lock()
	s.seen = append(s.seen, c.Op.Method()+" "+c.Set)
	s.mu.Unlock()
	switch c.Op {
	case toolcall.OpStream:
		return toolcall.Result{}, emit(toolcall.Chunk{Text: "ok", Last: true})
	case toolcall.OpStartTool:
		return toolcall.Result{Detail: &toolcall.Detail{Operation: &toolcall.Operation{ID: "op", Tool: c.Name, State: "running"}}}, nil
	case toolcall.OpGetTool:
		return toolcall.Result{Detail: &toolcall.Detail{Tool: &registry.Tool{Name: c.Name, Service: &registry.Service{ID: "s"}}}}, nil
	case toolcall.OpListTools:
		return toolcall.Result{Detail: &toolcall.Detail{}}, nil
	}
	return toolcall.Result{Output: "ok"}, nil
}

func (s *setRecorder) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.seen
	s.seen = nil
	return out
}

// TestQuerySet: ?set= names the tool set of every route that names tools
// — :invoke, :stream, :start, GET of a tool, the list — as the Tool-Set
// header does; given twice, empty, or unlike the header it is 400, and on
// the routes of tool services and operations, where no set applies, 400
// too: never ignored.
func TestQuerySet(t *testing.T) {
	t.Parallel()
	rec := &setRecorder{}
	srv := newServer(t, &fakeService{}, func(o *Options) { o.Handler, o.Operations = rec.handle, true })
	body := `{"arguments": {}}`
	for _, tc := range []struct{ method, path, want string }{
		{"POST", "/v1/tools/x:invoke?set=desk", "/toolgate.v1.ToolService/InvokeTool desk"},
		{"POST", "/v1/tools/x:stream?set=desk", "/toolgate.v1.ToolService/StreamTool desk"},
		{"POST", "/v1/tools/x:start?set=desk", "/toolgate.v1.ToolService/StartTool desk"},
		{"GET", "/v1/tools/x?set=desk", "/toolgate.v1.ToolService/GetTool desk"},
		{"GET", "/v1/tools?set=desk&page_size=5", "/toolgate.v1.ToolService/ListTools desk"},
		{"POST", "/v1/tools/x:invoke", "/toolgate.v1.ToolService/InvokeTool "},
	} {
		resp, raw := do(t, srv, tc.method, tc.path, body)
		if got := rec.take(); resp.StatusCode != http.StatusOK || len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s %s: HTTP %d %s; the core saw %q, want %q", tc.method, tc.path, resp.StatusCode, raw, got, tc.want)
		}
	}
	// The header alike: one set.
	if resp, raw := do(t, srv, "POST", "/v1/tools/x:invoke?set=desk", body, "Tool-Set", "desk"); resp.StatusCode != http.StatusOK {
		t.Errorf("?set=desk with Tool-Set: desk: HTTP %d %s", resp.StatusCode, raw)
	}
	rec.take()
	for _, tc := range []struct {
		method, path string
		hdr          []string
		reason, msg  string
	}{
		{"POST", "/v1/tools/x:invoke?set=desk", []string{"Tool-Set", "other"}, toolcall.ReasonToolSetConflict, `the query's set "desk" and the Tool-Set header's "other" are different tool sets`},
		{"POST", "/v1/tools/x:stream?set=desk&set=other", nil, toolcall.ReasonToolSetConflict, "?set= is given 2 times"},
		{"GET", "/v1/tools/x?set=", nil, "INVALID_ARGUMENT", "?set= is empty"},
		{"GET", "/v1/tools?set=", nil, "INVALID_ARGUMENT", "?set= is empty"},
		{"GET", "/v1/tool-services?set=desk", nil, toolcall.ReasonToolSetNotApplicable, "GET /v1/tool-services takes none"},
		{"GET", "/v1/tool-services/s?set=desk", nil, toolcall.ReasonToolSetNotApplicable, "takes none"},
		{"GET", "/v1/operations?set=desk", nil, toolcall.ReasonToolSetNotApplicable, "takes none"},
		{"GET", "/v1/operations/op?set=desk", nil, toolcall.ReasonToolSetNotApplicable, "takes none"},
		{"GET", "/v1/operations/op:stream?set=desk", nil, toolcall.ReasonToolSetNotApplicable, "takes none"},
		{"DELETE", "/v1/operations/op?set=desk", nil, toolcall.ReasonToolSetNotApplicable, "takes none"},
		{"POST", "/v1/operations/op:cancel?set=desk", nil, toolcall.ReasonToolSetNotApplicable, "takes none"},
		{"POST", "/v1/operations/op:wait?set=desk", nil, toolcall.ReasonToolSetNotApplicable, "takes none"},
	} {
		resp, raw := do(t, srv, tc.method, tc.path, "{}", tc.hdr...)
		var st struct {
			Message string
			Details []struct{ Reason string }
		}
		_ = json.Unmarshal(raw, &st)
		if resp.StatusCode != http.StatusBadRequest || len(st.Details) == 0 || st.Details[0].Reason != tc.reason || !strings.Contains(st.Message, tc.msg) {
			t.Errorf("%s %s %v: HTTP %d %s; want 400 %s saying %q", tc.method, tc.path, tc.hdr, resp.StatusCode, raw, tc.reason, tc.msg)
		}
		if got := rec.take(); len(got) != 0 {
			t.Errorf("%s %s: the core saw %q; want the door to refuse it", tc.method, tc.path, got)
		}
	}
}
