package mcp

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/toolcall"
)

// The SDK-parity test sends each request over HTTP to two endpoints, one
// with the fast path and one without (Options.NoFastPath), and wants the
// same answer on the wire: the status, every response header, and the
// body — an event stream's framing (its event, id and data lines and the
// blank line ending each event) byte for byte, the JSON-RPC message of a
// data line or of a JSON body decoded (numbers kept as written).
//
// Two header values are normalised, because they must differ between any
// two responses: Date (the time of the answer) and Mcp-Session-Id (a new
// random id per session; the endpoint is stateless and sends none, so
// this only keeps a future session id from failing the test for its
// value — its presence on one side alone still fails it).

// localAddrHeader is a request header the test servers turn into the
// request's http.LocalAddrContextKey (the address of the listener the
// request came in on), then remove: "" leaves the real one, 127.0.0.1.
const localAddrHeader = "X-Test-Local-Addr"

// transportCase is a request whose HTTP framing — Host, the listener's
// address, Accept, Content-Type, Last-Event-ID — decides whether the SDK
// takes it at all.
type transportCase struct {
	name   string
	host   string   // the request's Host; "": the server's own address
	local  net.Addr // the listener's address; nil: the server's own (loopback)
	header map[string]string
	fast   bool // the fast path answers it
}

var plainCall = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"json","arguments":{"msg":"x"}}}`

func tcpAddr(s string) net.Addr { return net.TCPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

var transportCases = []transportCase{
	// DNS rebinding: a request to a loopback listener must name a
	// loopback host, or the SDK refuses it (403).
	{"loopback listener, loopback Host", "", nil, nil, true},
	{"loopback listener, localhost", "localhost:8080", nil, nil, true},
	{"loopback listener, localhost without port", "localhost", nil, nil, true},
	{"loopback listener, another loopback address", "127.0.0.2:80", nil, nil, true},
	{"loopback listener, IPv6 loopback Host", "[::1]:8080", nil, nil, true},
	{"loopback listener, foreign Host", "evil.example", nil, nil, false},
	{"loopback listener, foreign Host with port", "evil.example:8080", nil, nil, false},
	{"loopback listener, foreign IP Host", "10.0.0.1:80", nil, nil, false},
	{"loopback listener, localhost suffix", "localhost.evil.example", nil, nil, false},
	{"IPv6 loopback listener, foreign Host", "evil.example", tcpAddr("[::1]:8080"), nil, false},
	{"IPv6 loopback listener, loopback Host", "[::1]:8080", tcpAddr("[::1]:8080"), nil, true},
	{"IPv4-mapped loopback listener, foreign Host", "evil.example", tcpAddr("[::ffff:127.0.0.1]:8080"), nil, false},
	{"public listener, foreign Host", "gateway.example.com", tcpAddr("10.1.2.3:443"), nil, true},
	{"public listener, loopback Host", "127.0.0.1:8080", tcpAddr("10.1.2.3:443"), nil, true},
	{"unix listener, foreign Host", "evil.example", &net.UnixAddr{Name: "/run/toolgate.sock", Net: "unix"}, nil, true},
	{"loopback named listener, foreign Host", "evil.example", &net.UnixAddr{Name: "localhost:1", Net: "unix"}, nil, false},
	// Accept: JSON and an event stream must both be acceptable.
	{"Accept */*", "", nil, map[string]string{"Accept": "*/*"}, true},
	{"Accept wildcards", "", nil, map[string]string{"Accept": "application/*, text/*"}, true},
	{"Accept with parameters and case", "", nil, map[string]string{"Accept": " APPLICATION/JSON ;q=0.9,Text/Event-Stream;q=1"}, true},
	{"Accept in two fields", "", nil, map[string]string{"Accept": "application/json\ntext/event-stream"}, true},
	{"Accept only an event stream", "", nil, map[string]string{"Accept": "text/event-stream"}, false},
	{"Accept only JSON", "", nil, map[string]string{"Accept": "application/json"}, false},
	{"no Accept", "", nil, map[string]string{"Accept": ""}, false},
	{"Accept of something else", "", nil, map[string]string{"Accept": "text/html"}, false},
	// Content-Type: JSON, parameters allowed.
	{"Content-Type with charset", "", nil, map[string]string{"Content-Type": "application/json; charset=utf-8"}, true},
	{"Content-Type in capitals", "", nil, map[string]string{"Content-Type": "Application/JSON"}, true},
	{"Content-Type text", "", nil, map[string]string{"Content-Type": "text/plain"}, false},
	{"Content-Type malformed", "", nil, map[string]string{"Content-Type": "application/json;;"}, false},
	{"no Content-Type", "", nil, map[string]string{"Content-Type": ""}, false},
	// Last-Event-ID on a POST: the SDK refuses it.
	{"Last-Event-ID", "", nil, map[string]string{"Last-Event-Id": "1_1"}, false},
}

// wireAnswer is a response as it arrives.
type wireAnswer struct {
	status int
	header http.Header
	body   []byte
	// flushed: the handler flushed the response (a recorded answer:
	// over the wire, Transfer-Encoding and Content-Length tell it).
	flushed bool
}

// record is roundTrip's answer from h itself, recorded: the header the
// handler set (without what the HTTP server adds: Date, Content-Length,
// Transfer-Encoding) and whether it flushed.
func record(h http.Handler, body string, header map[string]string, host string, local net.Addr) wireAnswer {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, parityRequest(body, header, host, local))
	a := wireAnswer{status: w.Code, header: w.Header().Clone(), body: w.Body.Bytes(), flushed: w.Flushed}
	if a.header.Get("Transfer-Encoding") == "chunked" {
		// Chunked framing asked for, the answer written in one go: on the
		// wire the same as a flushed answer (roundTrip compares those).
		a.header.Del("Transfer-Encoding")
		a.flushed = true
	}
	return a
}

func (a wireAnswer) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d\n", a.status)
	_ = a.header.Write(&b)
	fmt.Fprintf(&b, "\n%q", a.body)
	return b.String()
}

// parityServer serves h over HTTP on 127.0.0.1, with localAddrHeader
// honoured.
func parityServer(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get(localAddrHeader); v != "" {
			r.Header.Del(localAddrHeader)
			r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, parseLocalAddr(v)))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// parseLocalAddr is the listener's address localAddrValue wrote: a TCP
// address when it reads as one, else a Unix socket's (nil for "").
func parseLocalAddr(v string) net.Addr {
	if v == "" {
		return nil
	}
	if name, ok := strings.CutPrefix(v, "unix:"); ok {
		return &net.UnixAddr{Name: name, Net: "unix"}
	}
	if ap, err := netip.ParseAddrPort(v); err == nil {
		return net.TCPAddrFromAddrPort(ap)
	}
	return &net.UnixAddr{Name: v, Net: "unix"}
}

// localAddrValue is a in localAddrHeader's form.
func localAddrValue(a net.Addr) string {
	if u, ok := a.(*net.UnixAddr); ok {
		return "unix:" + u.Name
	}
	return a.String()
}

// roundTrip posts body with header (setHeader's form) to srv, with host as
// the Host ("": the server's own) and local as the listener's address.
func roundTrip(t testing.TB, srv *httptest.Server, body string, header map[string]string, host string, local net.Addr) wireAnswer {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/mcp", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	setHeader(req.Header, header)
	if host != "" {
		req.Host = host
	}
	if local != nil {
		req.Header.Set(localAddrHeader, localAddrValue(local))
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
	h := resp.Header.Clone()
	if len(resp.TransferEncoding) > 0 {
		// The client takes Transfer-Encoding out of the header: put it
		// back, as the framing the server chose.
		h["Transfer-Encoding"] = resp.TransferEncoding
	}
	return wireAnswer{status: resp.StatusCode, header: h, body: raw}
}

// normalised are the header fields whose values must differ from one
// response to another (see the comment at the top of this file).
var normalised = []string{"Date", "Mcp-Session-Id"}

// answerDiff says how got differs from want ("" when it does not).
func answerDiff(got, want wireAnswer) string {
	var diffs []string
	if got.status != want.status {
		diffs = append(diffs, fmt.Sprintf("status %d, SDK %d", got.status, want.status))
	}
	if got.flushed != want.flushed {
		diffs = append(diffs, fmt.Sprintf("flushed %v, SDK %v", got.flushed, want.flushed))
	}
	g, w := got.header.Clone(), want.header.Clone()
	for _, k := range normalised {
		if _, ok := g[k]; ok {
			g[k] = []string{"(normalised)"}
		}
		if _, ok := w[k]; ok {
			w[k] = []string{"(normalised)"}
		}
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range g {
			if !yield(k) {
				return
			}
		}
		for k := range w {
			if _, ok := g[k]; !ok && !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		if !slices.Equal(g[k], w[k]) {
			diffs = append(diffs, fmt.Sprintf("header %s: %q, SDK %q", k, g[k], w[k]))
		}
	}
	if d := bodyDiff(got, want); d != "" {
		diffs = append(diffs, d)
	}
	return strings.Join(diffs, "\n")
}

// bodyDiff compares the bodies: an event stream line by line (data lines
// by their message, every other line and the line breaks byte for byte),
// a JSON body by its message and the white space around it.
func bodyDiff(got, want wireAnswer) string {
	if !strings.HasPrefix(want.header.Get("Content-Type"), "text/event-stream") {
		gm, gframe, gerr := splitJSON(got.body)
		wm, wframe, werr := splitJSON(want.body)
		switch {
		case (gerr == nil) != (werr == nil):
			return fmt.Sprintf("body %q, SDK %q", got.body, want.body)
		case gerr != nil:
			if !bytes.Equal(got.body, want.body) {
				return fmt.Sprintf("body %q, SDK %q", got.body, want.body)
			}
		case gframe != wframe || !reflect.DeepEqual(gm, wm):
			return fmt.Sprintf("body %q, SDK %q", got.body, want.body)
		}
		return ""
	}
	gl, wl := strings.Split(string(got.body), "\n"), strings.Split(string(want.body), "\n")
	if len(gl) != len(wl) {
		return fmt.Sprintf("event stream of %d lines, SDK %d:\n %q\n %q", len(gl), len(wl), got.body, want.body)
	}
	for i := range gl {
		gd, gok := strings.CutPrefix(gl[i], "data: ")
		wd, wok := strings.CutPrefix(wl[i], "data: ")
		if gok != wok {
			return fmt.Sprintf("event stream line %d %q, SDK %q", i+1, gl[i], wl[i])
		}
		if !gok {
			if gl[i] != wl[i] {
				return fmt.Sprintf("event stream line %d %q, SDK %q", i+1, gl[i], wl[i])
			}
			continue
		}
		gm, gframe, gerr := splitJSON([]byte(gd))
		wm, wframe, werr := splitJSON([]byte(wd))
		if gerr != nil || werr != nil || gframe != wframe || !reflect.DeepEqual(gm, wm) {
			return fmt.Sprintf("event stream line %d data %s, SDK %s", i+1, gd, wd)
		}
	}
	return ""
}

// splitJSON decodes the one JSON value in b (numbers as written) and
// returns the white space around it ("before|after").
func splitJSON(b []byte) (any, string, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, "", err
	}
	end := int(d.InputOffset())
	if rest := bytes.TrimLeft(b[end:], " \t\r\n"); len(rest) > 0 {
		return nil, "", fmt.Errorf("more after the value: %q", rest)
	}
	start := len(b) - len(bytes.TrimLeft(b, " \t\r\n"))
	return v, string(b[:start]) + "|" + string(b[end:]), nil
}

// parityServers are the endpoint with and without the fast path, over
// HTTP.
func parityServers(t testing.TB) (fast, sdkOnly *httptest.Server, fastSrv *Server) {
	fastSrv = New(fixedHandler, Options{Result: fixedResult})
	return parityServer(t, fastSrv), parityServer(t, New(fixedHandler, Options{NoFastPath: true, Result: fixedResult})), fastSrv
}

// parityRequest is the request roundTrip sends, as the handler gets it:
// Host host ("": the parity servers' address), arriving on a listener
// of address local (nil: the parity servers').
func parityRequest(body string, header map[string]string, host string, local net.Addr) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	setHeader(req.Header, header)
	req.Host = cmp.Or(host, "127.0.0.1:80")
	if local == nil {
		local = tcpAddr("127.0.0.1:80")
	}
	return req.WithContext(context.WithValue(req.Context(), http.LocalAddrContextKey, local))
}

// takenFast reports whether the fast path answers the request.
func takenFast(s *Server, body string, header map[string]string, host string, local net.Addr) bool {
	req := parityRequest(body, header, host, local)
	x := &exchange{w: httptest.NewRecorder(), r: req, body: []byte(body)}
	x.req.ctx, x.req.base = req.Context(), toolcall.Call{Header: httpcall.Header(req.Header)}
	return s.serveFast(x)
}

// The comparison itself must fail on what it is there to catch.
func TestAnswerDiffSees(t *testing.T) {
	t.Parallel()
	stream := func(body string, kv ...string) wireAnswer {
		h := http.Header{"Content-Type": {"text/event-stream"}, "Date": {"Mon, 01 Jan 2026 00:00:00 GMT"}}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return wireAnswer{status: 200, header: h, body: []byte(body)}
	}
	base := stream("event: message\ndata: {\"id\":1,\"x\":2.50}\n\n")
	for _, c := range []struct {
		name string
		a    wireAnswer
		same bool
	}{
		{"itself", base, true},
		{"another Date", stream("event: message\ndata: {\"id\":1,\"x\":2.50}\n\n", "Date", "Tue, 02 Jan 2026 00:00:00 GMT"), true},
		{"members reordered", stream("event: message\ndata: {\"x\":2.50,\"id\":1}\n\n"), true},
		{"a header more", stream("event: message\ndata: {\"id\":1,\"x\":2.50}\n\n", "Connection", "keep-alive"), false},
		{"a header value", stream("event: message\ndata: {\"id\":1,\"x\":2.50}\n\n", "Content-Type", "text/event-stream; charset=utf-8"), false},
		{"a number written otherwise", stream("event: message\ndata: {\"id\":1,\"x\":2.5}\n\n"), false},
		{"an id line", stream("event: message\nid: 1\ndata: {\"id\":1,\"x\":2.50}\n\n"), false},
		{"no event line", stream("data: {\"id\":1,\"x\":2.50}\n\n"), false},
		{"one line break less", stream("event: message\ndata: {\"id\":1,\"x\":2.50}\n"), false},
		{"flushed", func() wireAnswer {
			a := stream("event: message\ndata: {\"id\":1,\"x\":2.50}\n\n")
			a.flushed = true
			return a
		}(), false},
		{"a space after the data", stream("event: message\ndata: {\"id\":1,\"x\":2.50} \n\n"), false},
	} {
		if same := answerDiff(c.a, base) == ""; same != c.same {
			t.Errorf("%s: same %v, want %v (%s)", c.name, same, c.same, answerDiff(c.a, base))
		}
	}
}

// The pipeline's order is its contract: refusals of the HTTP request
// first (before the body is read, those that need none), then the caller,
// then the checks of the MCP request, then what the endpoint answers
// itself, and the SDK last, which answers everything.
func TestPipelineOrder(t *testing.T) {
	t.Parallel()
	var names []string
	for _, st := range pipeline {
		names = append(names, st.name)
	}
	want := []string{"header size", "origin", "body", "authenticate", "protocol version", "Mcp-Param headers",
		"notifications/cancelled", "tasks", "fast path", "SDK"}
	if !slices.Equal(names, want) {
		t.Errorf("pipeline %q, want %q", names, want)
	}
	// The last step answers whatever reaches it: a GET, which no step
	// before it answers, is the SDK's (405 as a JSON-RPC error).
	s := New(fixedHandler, Options{})
	w := httptest.NewRecorder()
	x := &exchange{w: w, r: httptest.NewRequest(http.MethodGet, "/mcp", nil)}
	x.req.ctx, x.req.srv = x.r.Context(), s
	for _, st := range pipeline[:len(pipeline)-1] {
		if st.run(s, x) {
			t.Fatalf("step %q answered a GET", st.name)
		}
	}
	if !pipeline[len(pipeline)-1].run(s, x) || w.Code != http.StatusMethodNotAllowed || w.Header().Get("Content-Type") != "application/json" {
		t.Errorf("the SDK's step: HTTP %d %s %q", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
}
