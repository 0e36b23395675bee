package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// restStream posts a :stream call with the given Accept header.
func restStream(t *testing.T, tool, body, accept string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, env.httpBase+"/v1/tools/"+tool+":stream", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

// streamLine is one NDJSON line: a chunk, or a Status.
type streamLine struct {
	Output  *string          `json:"output"`
	Index   string           `json:"index"`
	Last    bool             `json:"last"`
	Code    *int             `json:"code"`
	Message string           `json:"message"`
	Details []map[string]any `json:"details"`
}

// sseEvent is one Server-Sent Event; comments count as heartbeats.
type sseEvent struct {
	event, data string
	at          time.Duration
}

// readSSE reads every event of an SSE body, and the number of comment
// (keep-alive) lines among them.
func readSSE(t *testing.T, r io.Reader, start time.Time) (events []sseEvent, comments int) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.event != "" || cur.data != "" {
				cur.at = time.Since(start)
				events = append(events, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
			comments++
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data += strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return events, comments
}

func echoChunk(i, n int) string {
	if i == n-1 {
		return fmt.Sprint(i)
	}
	return fmt.Sprintf("%d,", i)
}

// 1,000 chunks over NDJSON, in order, each line a bare StreamToolResponse;
// the first arrives long before the last.
func TestRESTStreamNDJSON(t *testing.T) {
	t.Parallel()
	const n = 1000
	start := time.Now()
	resp := restStream(t, "echo", fmt.Sprintf(`{"arguments": {"mode": "stream", "n": %d}}`, n), "")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("HTTP %d %q, want 200 application/x-ndjson", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	var first time.Duration
	i := 0
	for ; sc.Scan(); i++ {
		if i == 0 {
			first = time.Since(start)
		}
		var l streamLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %d %q: %v", i, sc.Text(), err)
		}
		if l.Output == nil || *l.Output != echoChunk(i, n) || l.Index != fmt.Sprint(i) || l.Last != (i == n-1) {
			t.Fatalf("line %d = %s, want chunk %q", i, sc.Text(), echoChunk(i, n))
		}
	}
	if i != n {
		t.Fatalf("%d lines, want %d", i, n)
	}
	t.Logf("NDJSON: first of %d chunks after %v, all after %v", n, first, time.Since(start))
}

// The same over SSE: one "chunk" event per chunk, then "done".
func TestRESTStreamSSE(t *testing.T) {
	t.Parallel()
	const n = 1000
	start := time.Now()
	resp := restStream(t, "echo", fmt.Sprintf(`{"arguments": {"mode": "stream", "n": %d}}`, n), "text/event-stream")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("HTTP %d %q, want 200 text/event-stream", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events, _ := readSSE(t, resp.Body, start)
	if len(events) != n+1 || events[n].event != "done" {
		t.Fatalf("%d events, last %+v; want %d chunks and done", len(events), events[len(events)-1], n)
	}
	for i, e := range events[:n] {
		var l streamLine
		if err := json.Unmarshal([]byte(e.data), &l); err != nil || e.event != "chunk" {
			t.Fatalf("event %d = %+v (%v)", i, e, err)
		}
		if l.Output == nil || *l.Output != echoChunk(i, n) || l.Index != fmt.Sprint(i) {
			t.Fatalf("event %d = %s, want chunk %q", i, e.data, echoChunk(i, n))
		}
	}
	t.Logf("SSE: first of %d chunks after %v, all after %v", n, events[0].at, events[n].at)
}

// Chunks reach the client as the service sends them, never held back until
// the stream ends; a quiet SSE stream gets keep-alive comments.
func TestRESTStreamChunksArriveLive(t *testing.T) {
	t.Parallel()
	const gap = 450 * time.Millisecond // under the e2e gateway's 1 s stream idle timeout
	body := fmt.Sprintf(`{"arguments": {"mode": "stream", "n": 3, "gap_ms": %d}}`, gap.Milliseconds())
	for _, accept := range []string{"", "text/event-stream"} {
		t.Run("accept="+accept, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			resp := restStream(t, "echo", body, accept)
			var times []time.Duration
			comments := 0
			if accept == "" {
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					times = append(times, time.Since(start))
				}
			} else {
				var events []sseEvent
				events, comments = readSSE(t, resp.Body, start)
				for _, e := range events {
					if e.event == "chunk" {
						times = append(times, e.at)
					}
				}
				if comments == 0 {
					t.Errorf("no keep-alive comment in a stream quiet for %v at a time (heartbeat 200ms)", gap)
				}
			}
			if len(times) != 3 {
				t.Fatalf("%d chunks, want 3", len(times))
			}
			// The service waits gap after each of the first two chunks: the
			// first must be read well before the last was sent.
			if times[2]-times[0] < gap {
				t.Fatalf("chunks read at %v: the first was held back until the end", times)
			}
		})
	}
}

// Errors: before the first chunk an HTTP error status and the bare Status,
// exactly like unary calls; after it, the stream's last line (NDJSON) or
// an "error" event (SSE).
func TestRESTStreamErrors(t *testing.T) {
	t.Parallel()
	failing := `{"arguments": {"mode": "fail", "type": "not-found", "message": "gone"}}`
	slow := `{"arguments": {"mode": "stream", "n": 50, "gap_ms": 100}, "timeout": "0.5s"}`
	for _, accept := range []string{"", "text/event-stream"} {
		t.Run("before the first chunk/"+accept, func(t *testing.T) {
			t.Parallel()
			for _, tc := range []struct {
				tool, body string
				code       int
				reason     string
			}{
				{"echo", failing, http.StatusNotFound, "not-found"},
				{"no-such-tool", `{}`, http.StatusNotFound, "TOOL_NOT_FOUND"},
				{"tell-joke", `{"arguments": {"topic": 5}}`, http.StatusBadRequest, ""},
				{"echo", `{"arguments": [1, 2]}`, http.StatusBadRequest, ""},
			} {
				resp := restStream(t, tc.tool, tc.body, accept)
				raw, _ := io.ReadAll(resp.Body)
				var st streamLine
				if err := json.Unmarshal(raw, &st); err != nil || resp.StatusCode != tc.code || st.Code == nil || st.Output != nil ||
					!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
					t.Fatalf("%s %s: HTTP %d %q %s, want %d with a bare Status", tc.tool, tc.body, resp.StatusCode, resp.Header.Get("Content-Type"), raw, tc.code)
				}
				if tc.reason != "" && (len(st.Details) == 0 || st.Details[0]["reason"] != tc.reason) {
					t.Fatalf("%s: details %v, want ErrorInfo reason %s", tc.tool, st.Details, tc.reason)
				}
			}
		})
	}
	t.Run("after chunks/ndjson", func(t *testing.T) {
		t.Parallel()
		resp := restStream(t, "echo", slow, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("HTTP %d", resp.StatusCode)
		}
		var lines []streamLine
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var l streamLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, l)
		}
		last := lines[len(lines)-1]
		if len(lines) < 2 || last.Code == nil || last.Output != nil || (*last.Code != 4 && *last.Code != 2) {
			t.Fatalf("%d lines, last %+v; want chunks then a DEADLINE_EXCEEDED Status", len(lines), last)
		}
		for i, l := range lines[:len(lines)-1] {
			if l.Output == nil || *l.Output != echoChunk(i, 50) {
				t.Fatalf("line %d = %+v", i, l)
			}
		}
	})
	t.Run("after chunks/sse", func(t *testing.T) {
		t.Parallel()
		resp := restStream(t, "echo", slow, "text/event-stream")
		events, _ := readSSE(t, resp.Body, time.Now())
		last := events[len(events)-1]
		var st streamLine
		if err := json.Unmarshal([]byte(last.data), &st); err != nil || last.event != "error" || st.Code == nil || len(events) < 2 {
			t.Fatalf("%d events, last %+v; want chunks then an error event with a Status", len(events), last)
		}
	})
}

// HTTP semantics: 404/405 with Allow, HEAD, CORS, request-body messages,
// and every error body JSON.
func TestRESTHTTPSemantics(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 70<<10)
	tests := []struct {
		name, method, path, body string
		headers                  map[string]string
		code                     int
		allow                    string
		msg                      string            // in the JSON error message
		want                     map[string]string // response headers
	}{
		{name: "PUT on a list", method: "PUT", path: "/v1/tools", code: 405, allow: "GET, HEAD"},
		{name: "DELETE on a tool", method: "DELETE", path: "/v1/tools/echo", code: 405, allow: "GET, HEAD"},
		{name: "GET on :invoke", method: "GET", path: "/v1/tools/echo:invoke", code: 405, allow: "POST", msg: "use POST"},
		{name: "GET on :stream", method: "GET", path: "/v1/tools/echo:stream", code: 405, allow: "POST"},
		{name: "TRACE on services", method: "TRACE", path: "/v1/tool-services", code: 405, allow: "GET, HEAD"},
		{name: "PATCH on a service", method: "PATCH", path: "/v1/tool-services/echo-service", code: 405, allow: "GET, HEAD"},
		{name: "OPTIONS without preflight", method: "OPTIONS", path: "/v1/tools", code: 405, allow: "GET, HEAD"},
		{name: "POST on healthz", method: "POST", path: "/healthz", code: 405, allow: "GET, HEAD"},
		{name: "HEAD on a list", method: "HEAD", path: "/v1/tools", code: 200},
		{name: "HEAD on a tool", method: "HEAD", path: "/v1/tools/echo", code: 200},
		{name: "HEAD on healthz", method: "HEAD", path: "/healthz", code: 200},
		{name: "unknown path", method: "GET", path: "/v2/nothing", code: 404, msg: "no such path"},
		{name: "unknown tool", method: "GET", path: "/v1/tools/nope", code: 404, msg: `tool "nope" not found`},
		{name: "Go duration", method: "POST", path: "/v1/tools/echo:invoke", body: `{"arguments": {"mode": "sleep", "ms": 1}, "timeout": "200ms"}`, code: 200},
		{name: "bad duration", method: "POST", path: "/v1/tools/echo:invoke", body: `{"arguments": {}, "timeout": "soon"}`, code: 400, msg: `"timeout" must be a duration such as "5s"`},
		{name: "numeric duration", method: "POST", path: "/v1/tools/echo:invoke", body: `{"arguments": {}, "timeout": 5}`, code: 400, msg: `"timeout" must be a duration`},
		{name: "arguments as an array", method: "POST", path: "/v1/tools/echo:invoke", body: `{"arguments": [1, 2]}`, code: 400, msg: `"arguments" must be a JSON object`},
		{name: "unknown field", method: "POST", path: "/v1/tools/echo:invoke", body: `{"args": {}}`, code: 400, msg: `unknown field "args"`},
		{name: "not JSON", method: "POST", path: "/v1/tools/echo:invoke", body: `{"arguments": `, code: 400, msg: "not valid JSON"},
		{name: "body too large", method: "POST", path: "/v1/tools/echo:invoke", body: `{"arguments": {"x": "` + strings.Repeat("y", 1100<<10) + `"}}`, code: 413},
		{name: "headers too large", method: "GET", path: "/v1/tools", headers: map[string]string{"X-Big": big}, code: 431, msg: "request headers"},
		{name: "stream Accept nobody serves", method: "POST", path: "/v1/tools/echo:stream", body: `{}`, headers: map[string]string{"Accept": "application/xml"}, code: 406, msg: "application/x-ndjson"},
		{name: "CORS preflight from an allowed origin", method: "OPTIONS", path: "/v1/tools/echo:invoke",
			headers: map[string]string{"Origin": "http://allowed.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization, content-type, idempotency-key"},
			code:    204, want: map[string]string{"Access-Control-Allow-Origin": "http://allowed.example", "Access-Control-Allow-Methods": "POST"}},
		{name: "CORS preflight from another origin", method: "OPTIONS", path: "/v1/tools/echo:invoke",
			headers: map[string]string{"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
			code:    204, want: map[string]string{"Access-Control-Allow-Origin": ""}},
		{name: "CORS simple request", method: "GET", path: "/v1/tools", headers: map[string]string{"Origin": "http://allowed.example"},
			code: 200, want: map[string]string{"Access-Control-Allow-Origin": "http://allowed.example", "Access-Control-Expose-Headers": "X-Request-Id"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, err := http.NewRequestWithContext(t.Context(), tc.method, env.httpBase+tc.path, body)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.code {
				t.Fatalf("HTTP %d %s, want %d", resp.StatusCode, raw, tc.code)
			}
			if got := resp.Header.Get("Allow"); got != tc.allow {
				t.Errorf("Allow %q, want %q", got, tc.allow)
			}
			for k, v := range tc.want {
				if got := resp.Header.Get(k); !strings.Contains(got, v) || (v == "" && got != "") {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
			if tc.method == http.MethodHead && len(raw) != 0 {
				t.Errorf("HEAD answered a body of %d bytes", len(raw))
			}
			if tc.code >= 400 {
				var st struct {
					Code    *int   `json:"code"`
					Message string `json:"message"`
				}
				if err := json.Unmarshal(raw, &st); err != nil || st.Code == nil || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
					t.Fatalf("error body %q (%s) is not a JSON Status", raw, resp.Header.Get("Content-Type"))
				}
				if !strings.Contains(st.Message, tc.msg) {
					t.Errorf("message %q, want it to say %q", st.Message, tc.msg)
				}
			}
		})
	}
}
