package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/toolgate/toolgate/internal/docs"
	"github.com/toolgate/toolgate/internal/eventually"
	"github.com/toolgate/toolgate/internal/jokes"
)

// The browser tests drive the /docs pages in a real headless Chromium (from
// $TOOLGATE_CHROMIUM, or chromium on PATH; scripts/chromium.sh installs it)
// against the in-process gateway and the real tool services behind it.

// TestDocsBrowser loads the try-it page, invokes tell-joke, streams echo
// and watches its chunks appear one by one, shows a service error, and
// renders the API reference; no request leaves the gateway's origin.
func TestDocsBrowser(t *testing.T) {
	base := docsBase(t)
	ctx := newBrowser(t)
	page := watchPage(t, ctx, base)

	// The page lists the tools the caller may see.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/docs"),
		chromedp.WaitVisible(chromedp.CSS(tool("tell-joke"))),
		chromedp.WaitVisible(chromedp.CSS(tool("echo"))),
	); err != nil {
		t.Fatalf("try-it page: %v", err)
	}
	if st := text(t, ctx, "#tools-status"); !strings.HasSuffix(st, "tools.") {
		t.Errorf("tools status = %q, want a tool count", st)
	}
	if ok := must(t, ctx, chromedp.Evaluate[bool](`document.querySelector('#tool-index a[href="#tool-tell-joke"]') !== null`)); !ok {
		t.Error("the tool index has no link to tell-joke")
	}
	if n := must(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('article[data-tool="knowledge"]').length`)); n != 0 {
		t.Error("the page lists knowledge, a tool of a type the gateway skips")
	}

	t.Run("invoke tell-joke", func(t *testing.T) {
		card := tool("tell-joke")
		if err := chromedp.Do(ctx,
			chromedp.SendKeys(chromedp.CSS(card+` [data-arg="topic"]`), "programming"),
			chromedp.Click(chromedp.CSS(card+` [data-action="invoke"]`)),
		); err != nil {
			t.Fatal(err)
		}
		if st := waitDone(t, ctx, "tell-joke"); st != "ok" {
			t.Fatalf("call state %q: %s", st, text(t, ctx, card+` [data-role="result"]`))
		}
		want, err := jokes.Pick("pun", "programming")
		if err != nil {
			t.Fatal(err)
		}
		if got := text(t, ctx, card+` [data-role="output"]`); !strings.Contains(got, want) {
			t.Errorf("output = %q, want the joke %q", got, want)
		}
		if st := text(t, ctx, card+` [data-role="status"]`); !strings.HasPrefix(st, "HTTP 200") {
			t.Errorf("status line = %q, want HTTP 200 …", st)
		}
		if curl := textContent(t, ctx, card+` [data-role="curl"]`); !strings.Contains(curl, `/v1/tools/tell-joke:invoke`) || !strings.Contains(curl, `"topic":"programming"`) {
			t.Errorf("curl line = %q", curl)
		}
	})

	t.Run("service error", func(t *testing.T) {
		card := tool("echo")
		if err := chromedp.Do(ctx,
			chromedp.SetValue(chromedp.CSS(card+` [data-arg-extra]`), `{"mode": "fail", "type": "not-found", "message": "no such record"}`),
			chromedp.Click(chromedp.CSS(card+` [data-action="invoke"]`)),
		); err != nil {
			t.Fatal(err)
		}
		if st := waitDone(t, ctx, "echo"); st != "error" {
			t.Fatalf("call state %q, want error", st)
		}
		for sel, want := range map[string]string{
			` [data-role="error-status"]`:  "HTTP 404",
			` [data-role="error-message"]`: "no such record",
			` [data-role="error-reason"]`:  "not-found",
		} {
			if got := text(t, ctx, card+sel); !strings.Contains(got, want) {
				t.Errorf("%s = %q, want it to contain %q", sel, got, want)
			}
		}
	})

	t.Run("stream echo", func(t *testing.T) {
		const n, gapMS = 6, 300
		card := tool("echo")
		// Record every change of the chunk list, with its time, to see the
		// chunks arrive one by one rather than all at the end.
		must(t, ctx, chromedp.Evaluate[bool](`(() => {
			const card = document.querySelector('article[data-tool="echo"]');
			const list = card.querySelector('[data-role="chunks"]');
			const status = card.querySelector('[data-role="status"]');
			window.chunkLog = [];
			new MutationObserver(() => window.chunkLog.push({
				t: performance.now(), n: list.children.length, state: status.dataset.state,
			})).observe(list, {childList: true});
			new MutationObserver(() => {
				if (status.dataset.state === "ok") window.doneAt = performance.now();
			}).observe(status, {attributes: true});
			return true;
		})()`))
		if err := chromedp.Do(ctx,
			chromedp.SetValue(chromedp.CSS(card+` [data-arg-extra]`), fmt.Sprintf(`{"mode": "stream", "n": %d, "gap_ms": %d}`, n, gapMS)),
			chromedp.Click(chromedp.CSS(card+` [data-action="stream"]`)),
		); err != nil {
			t.Fatal(err)
		}
		if st := waitDone(t, ctx, "echo"); st != "ok" {
			t.Fatalf("stream state %q: %s", st, text(t, ctx, card+` [data-role="result"]`))
		}
		chunks := must(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('article[data-tool="echo"] [data-role="chunks"] li')].map((li) => li.textContent)`))
		want := []string{"0,", "1,", "2,", "3,", "4,", "5"}
		if !slices.Equal(chunks, want) {
			t.Fatalf("chunks = %q, want %q", chunks, want)
		}
		if got := text(t, ctx, card+` [data-role="output"]`); got != "0,1,2,3,4,5" {
			t.Errorf("output = %q, want the chunks joined", got)
		}
		type change struct {
			T     float64 `json:"t"`
			N     int     `json:"n"`
			State string  `json:"state"`
		}
		changes := must(t, ctx, chromedp.Evaluate[[]change](`window.chunkLog.filter((c) => c.n > 0)`))
		doneAt := must(t, ctx, chromedp.Evaluate[float64](`window.doneAt`))
		t.Logf("chunk list changes (ms, chunks): %v; done at %.0f ms", changes, doneAt)
		if len(changes) < n-2 {
			t.Fatalf("the chunk list changed %d times for %d chunks %d ms apart: chunks were not shown as they arrived", len(changes), n, gapMS)
		}
		for i, c := range changes {
			if i > 0 && c.N <= changes[i-1].N {
				t.Errorf("change %d: %d chunks after %d", i, c.N, changes[i-1].N)
			}
			if c.N < n && c.State != "streaming" {
				t.Errorf("with %d of %d chunks shown the state was %q, want streaming", c.N, n, c.State)
			}
		}
		if doneAt < changes[len(changes)-1].T {
			t.Errorf("done shown at %.0f ms, before the last chunk at %.0f ms", doneAt, changes[len(changes)-1].T)
		}
	})

	t.Run("stop a stream", func(t *testing.T) {
		card := tool("echo")
		if err := chromedp.Do(ctx,
			chromedp.SetValue(chromedp.CSS(card+` [data-arg-extra]`), `{"mode": "stream", "n": 1000, "gap_ms": 50}`),
			chromedp.Click(chromedp.CSS(card+` [data-action="stream"]`)),
		); err != nil {
			t.Fatal(err)
		}
		must(t, ctx, chromedp.Poll[bool](`document.querySelectorAll('article[data-tool="echo"] [data-role="chunks"] li').length >= 2`,
			chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(card+` [data-action="stop"]`))); err != nil {
			t.Fatal(err)
		}
		state := must(t, ctx, chromedp.Poll[string](`(() => {
			const s = document.querySelector('article[data-tool="echo"] [data-role="status"]').dataset.state;
			return s === "streaming" || s === "pending" ? false : s;
		})()`, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
		// A stop is not a failure: no error, and what arrived stays.
		if st := text(t, ctx, card+` [data-role="status"]`); state != "stopped" || !strings.HasPrefix(st, "Stopped after ") {
			t.Errorf("after Stop: state %q, status line %q; want stopped, Stopped after …", state, st)
		}
		if hidden := must(t, ctx, chromedp.Evaluate[bool](`document.querySelector('article[data-tool="echo"] [data-role="error"]').hidden`)); !hidden {
			t.Errorf("after Stop the page shows an error: %s", text(t, ctx, card+` [data-role="error"]`))
		}
		if out := text(t, ctx, card+` [data-role="output"]`); !strings.HasPrefix(out, "0,1,") {
			t.Errorf("after Stop the output is %q, want the chunks that arrived", out)
		}
	})

	if err := chromedp.Do(ctx, chromedp.ScrollIntoView(chromedp.CSS(tool("echo")))); err != nil {
		t.Fatal(err)
	}
	screenshot(t, ctx, "docs-try-it.png")

	t.Run("reference", func(t *testing.T) {
		if err := chromedp.Do(ctx,
			chromedp.Navigate(base+"/docs/reference"),
			chromedp.WaitVisible(chromedp.CSS(".swagger-ui .opblock")),
		); err != nil {
			t.Fatalf("reference page: %v", err)
		}
		ops := must(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('.opblock-summary-path')].map((e) => e.textContent.replace(/\u200b/g, ""))`))
		if !slices.ContainsFunc(ops, func(p string) bool { return strings.HasPrefix(p, "/v1/tools") }) {
			t.Errorf("the reference shows no /v1/tools operation; operations: %q", ops)
		}
		// StreamTool's NDJSON example is a line's JSON, shown as JSON (a
		// string example was shown escaped, "{\"output\"…").
		const streamOp = "#operations-ToolService-StreamTool"
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(streamOp+" .opblock-summary-control"))); err != nil {
			t.Fatal(err)
		}
		example := must(t, ctx, chromedp.Poll[string](`(() => {
			const ex = document.querySelector('#operations-ToolService-StreamTool .responses-wrapper tr.response[data-code="200"] .example, #operations-ToolService-StreamTool .responses-wrapper tr.response[data-code="200"] pre');
			return ex ? ex.textContent : false;
		})()`, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(10*time.Second)))
		t.Logf("StreamTool's 200 example: %s", example)
		if strings.Contains(example, `\"`) || !strings.Contains(example, `"output"`) {
			t.Errorf("StreamTool's 200 example reads %q, want a chunk's JSON", example)
		}
		screenshot(t, ctx, "docs-reference.png")
	})

	page.check(t)
}

// TestDocsBrowserSSE runs the try-it page against a stand-in gateway that
// answers :stream with Server-Sent Events split awkwardly across writes
// (CRLF line ends, keep-alive comments, an event cut in the middle), and
// then an error event: the page must show every chunk and the error.
func TestDocsBrowserSSE(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("/docs", docs.New(docs.Options{}))
	mux.Handle("/docs/", docs.New(docs.Options{}))
	mux.HandleFunc("GET /v1/tools", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret-key" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"code": 16, "message": "no credentials", "details": []}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"tools": [{"name": "count", "description": "Counts", "service": "s",
			"arguments": [{"name": "n", "type": "integer", "required": true}, {"name": "loud", "type": "boolean"}],
			"arguments_schema": {"type": "object", "properties": {"n": {"type": "integer"}, "loud": {"type": "boolean"}}, "required": ["n"], "additionalProperties": false},
			"strict": true}], "next_page_token": ""}`)
	})
	mux.HandleFunc("GET /openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"openapi": "3.1.0", "info": {"title": "stand-in", "version": "1"},
			"paths": {"/v1/tools/{name}:stream": {"post": {"summary": "Stream a tool's answer",
				"parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
				"responses": {"200": {"description": "chunks", "content": {"text/event-stream": {"schema": {"type": ["string", "null"]}}}}}}}}}`)
	})
	var gotBody string
	var mu sync.Mutex
	mux.HandleFunc("POST /v1/tools/count:stream", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		gotBody = string(body)
		mu.Unlock()
		if r.Header.Get("Accept") != "text/event-stream" {
			http.Error(w, "want Accept: text/event-stream", http.StatusNotAcceptable)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		end := "event: error\ndata: {\"code\":14,\"message\":\"broker went away\",\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.ErrorInfo\",\"reason\":\"UNAVAILABLE\",\"domain\":\"toolgate\"}]}\n\n"
		if strings.Contains(string(body), `"n":3`) {
			end = "event: done\ndata: {}\n\n"
		}
		for _, part := range []string{
			": keep-alive\r\n\r\n",
			"event: chunk\r\ndata: {\"output\":\"one\",\"index\":\"0\",\"last\":false}\r\n\r\n",
			"event: chunk\r\nda",
			"ta: {\"output\":\"two\",\"index\":\"1\",\"last\":false}\r",
			"\n\r\n: keep-alive\n\n",
			end,
		} {
			fmt.Fprint(w, part)
			f.Flush()
			time.Sleep(150 * time.Millisecond) //nolint:forbidigo // a slow network: each part reaches the page on its own, split frames included
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	ctx := newBrowser(t)
	page := watchPage(t, ctx, srv.URL)

	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/docs")); err != nil {
		t.Fatalf("try-it page: %v", err)
	}
	must(t, ctx, chromedp.Poll[bool](`document.querySelector("#tools-status").dataset.state === "error"`, chromedp.WithPollingTimeout(10*time.Second)))
	if st := text(t, ctx, "#tools-status"); !strings.Contains(st, "401") || !strings.Contains(st, "no credentials") {
		t.Errorf("tools status without a key = %q, want the 401 and its message", st)
	}
	card := tool("count")
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("api-key"), "secret-key"),
		chromedp.Click(chromedp.ID("load-tools")),
		chromedp.WaitVisible(chromedp.CSS(card)),
	); err != nil {
		t.Fatalf("with a key: %v", err)
	}
	// The form follows the schema: a required integer, an optional
	// boolean, and no free-form JSON for a strict tool.
	attrs := must(t, ctx, chromedp.Evaluate[map[string]string](`(() => {
		const c = document.querySelector('article[data-tool="count"]');
		const n = c.querySelector('[data-arg="n"]'), loud = c.querySelector('[data-arg="loud"]');
		return {nType: n.type, nRequired: n.getAttribute("aria-required") || "", nLabel: c.querySelector('label[for="' + n.id + '"]').textContent,
			loudTag: loud.tagName, extra: String(c.querySelector('[data-arg-extra]') !== null)};
	})()`))
	for k, want := range map[string]string{"nType": "number", "nRequired": "true", "loudTag": "SELECT", "extra": "false"} {
		if attrs[k] != want {
			t.Errorf("form: %s = %q, want %q (all: %v)", k, attrs[k], want, attrs)
		}
	}
	if !strings.Contains(attrs["nLabel"], "required") {
		t.Errorf("the label of a required argument does not say so: %q", attrs["nLabel"])
	}
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(card+` [data-arg="n"]`), "2"),
		chromedp.SetValue(chromedp.CSS(card+` [data-arg="loud"]`), "true"),
		chromedp.Click(chromedp.CSS(card+` [data-action="stream"]`)),
	); err != nil {
		t.Fatal(err)
	}
	if st := waitDone(t, ctx, "count"); st != "error" {
		t.Fatalf("stream state %q, want error", st)
	}
	mu.Lock()
	body := gotBody
	mu.Unlock()
	if body != `{"arguments":{"n":2,"loud":true}}` {
		t.Errorf("request body = %s", body)
	}
	chunks := must(t, ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('article[data-tool="count"] [data-role="chunks"] li')].map((li) => li.textContent)`))
	if !slices.Equal(chunks, []string{"one", "two"}) {
		t.Errorf("chunks = %q, want [one two]", chunks)
	}
	if got := text(t, ctx, card+` [data-role="error-message"]`); got != "broker went away" {
		t.Errorf("error message = %q", got)
	}
	if got := text(t, ctx, card+` [data-role="error-status"]`); !strings.Contains(got, "UNAVAILABLE (14)") {
		t.Errorf("error status = %q, want the gRPC code", got)
	}
	if got := text(t, ctx, card+` [data-role="status"]`); !strings.HasPrefix(got, "Failed after 2 chunks") {
		t.Errorf("status = %q", got)
	}

	// The same stream ending with a done event.
	if err := chromedp.Do(ctx,
		chromedp.SetValue(chromedp.CSS(card+` [data-arg="n"]`), "3"),
		chromedp.Click(chromedp.CSS(card+` [data-action="stream"]`)),
	); err != nil {
		t.Fatal(err)
	}
	if st := waitDone(t, ctx, "count"); st != "ok" {
		t.Fatalf("stream state %q, want ok: %s", st, text(t, ctx, card+` [data-role="result"]`))
	}
	if got := text(t, ctx, card+` [data-role="status"]`); !strings.HasPrefix(got, "Done · 2 chunks") {
		t.Errorf("status = %q, want Done · 2 chunks …", got)
	}
	if n := must(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('article[data-tool="count"] [data-role="error"]:not([hidden])').length`)); n != 0 {
		t.Error("the error of the previous call is still shown")
	}

	// The reference renders an OpenAPI 3.1 document.
	if err := chromedp.Do(ctx,
		chromedp.Navigate(srv.URL+"/docs/reference/"),
		chromedp.WaitVisible(chromedp.CSS(".swagger-ui .opblock")),
	); err != nil {
		t.Fatalf("reference page: %v", err)
	}
	if got := text(t, ctx, ".swagger-ui .info"); !strings.Contains(got, "OAS 3.1") {
		t.Errorf("reference header = %q, want the OAS 3.1 badge", got)
	}
	page.check(t)
}

// tool is the CSS selector of a tool's card.
func tool(name string) string { return `article[data-tool="` + name + `"]` }

// docsBase is the origin the pages are loaded from: the gateway itself,
// which must serve /docs.
func docsBase(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(env.httpBase + "/docs")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the gateway answers GET /docs with %d, want 200", resp.StatusCode)
	}
	return env.httpBase
}

// chromiumPath finds the browser: $TOOLGATE_CHROMIUM, else a Chromium or
// Chrome on PATH. Its absence fails the test.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TOOLGATE_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("TOOLGATE_CHROMIUM=%s: %v", p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium: install it with scripts/chromium.sh (Debian's chromium package) or set TOOLGATE_CHROMIUM to a Chromium or Chrome executable")
	return ""
}

// newBrowser starts a headless Chromium for the test and returns the
// context of its tab; the browser stops when the test ends.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	exe := chromiumPath(t)
	dir, err := os.MkdirTemp("", "toolgate-chromium")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Chromium's helper processes may still write there for a moment.
		eventually.Holds(5*time.Second, func() bool { return os.RemoveAll(dir) == nil })
	})
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(dir),
		chromedp.NoSandbox, // tests may run as root, where the sandbox cannot start
		chromedp.DisableGPU,
		chromedp.WindowSize(1200, 900),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	tabCtx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelTab)
	if err := chromedp.Do(tabCtx); err != nil { // starts the browser
		t.Fatalf("starting %s: %v", exe, err)
	}
	return tabCtx
}

// pageWatch collects what a page does that a test must not see: requests
// to another origin, uncaught exceptions, console and log errors.
type pageWatch struct {
	mu       sync.Mutex
	problems []string
	requests int
}

func watchPage(t *testing.T, ctx context.Context, origin string) *pageWatch {
	t.Helper()
	w := &pageWatch{}
	add := func(format string, args ...any) {
		w.mu.Lock()
		w.problems = append(w.problems, fmt.Sprintf(format, args...))
		w.mu.Unlock()
	}
	err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *network.EventRequestWillBeSent:
			u := ev.Request.URL
			w.mu.Lock()
			w.requests++
			w.mu.Unlock()
			if u != origin && !strings.HasPrefix(u, origin+"/") && !strings.HasPrefix(u, "data:") {
				add("request to another origin: %s", u)
			}
		case *network.EventResponseReceived:
			// Browsers ask for the site's icon on every load.
			if strings.HasSuffix(ev.Response.URL, "/favicon.ico") && ev.Response.Status >= 400 {
				add("%s answered %d", ev.Response.URL, ev.Response.Status)
			}
		case *runtime.EventExceptionThrown:
			add("uncaught exception: %s", (&chromedp.ExceptionError{ExceptionDetails: ev.ExceptionDetails}).Error())
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				parts := make([]string, 0, len(ev.Args))
				for _, a := range ev.Args {
					parts = append(parts, string(a.Value)+a.Description)
				}
				add("console.error: %s", strings.Join(parts, " "))
			}
		case *log.EventEntryAdded:
			// Failed requests the page handles itself (the 401 and 404 the
			// tests provoke) are logged as network errors; anything else
			// at error level, such as a blocked resource, is a problem.
			if ev.Entry.Level == log.EntryLevelError && ev.Entry.Source != log.EntrySourceNetwork {
				add("browser log: %s %s", ev.Entry.Text, ev.Entry.URL)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *pageWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.requests == 0 {
		t.Error("saw no request at all: the page watch is not working")
	}
	for _, p := range w.problems {
		t.Error(p)
	}
}

// waitDone waits until a tool card's call has finished and returns its
// state, "ok" or "error".
func waitDone(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	return must(t, ctx, chromedp.Poll[string](fmt.Sprintf(`(() => {
		const s = document.querySelector('article[data-tool=%q] [data-role="status"]').dataset.state;
		return s === "ok" || s === "error" ? s : false;
	})()`, name), chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
}

func must[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return must(t, ctx, chromedp.Text(chromedp.CSS(sel)))
}

func textContent(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return must(t, ctx, chromedp.TextContent(chromedp.CSS(sel)))
}

// screenshot saves a PNG of the whole page into the artifacts folder
// ($TOOLGATE_ARTIFACTS, else .cache/artifacts in the repository).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png := must(t, ctx, chromedp.FullScreenshot(100))
	dir := os.Getenv("TOOLGATE_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(repoRoot(t), ".cache", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(path)
	t.Logf("screenshot: %s (%d bytes)", abs, len(png))
}

// TestDocsReferenceTryIt runs "Try it out" of the API reference (Swagger
// UI) against the gateway serving it, on a port of its own rather than
// the default one: the document's first server is the gateway it came
// from, so the call goes there and answers 200, and nothing is asked of
// another origin. The page is set for the device's width.
func TestDocsReferenceTryIt(t *testing.T) {
	base := docsBase(t)
	ctx := newBrowser(t)
	page := watchPage(t, ctx, base)
	const op = "#operations-ToolService-ListTools"
	if err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/docs/reference"),
		chromedp.WaitVisible(chromedp.CSS(op)),
	); err != nil {
		t.Fatalf("reference page: %v", err)
	}
	if vp := must(t, ctx, chromedp.Evaluate[string](`(document.querySelector('meta[name="viewport"]') || {}).content || ""`)); !strings.Contains(vp, "width=device-width") {
		t.Errorf("viewport meta = %q, want width=device-width", vp)
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(op+" .opblock-summary-control")),
		chromedp.WaitVisible(chromedp.CSS(op+" .try-out__btn")),
		chromedp.Click(chromedp.CSS(op+" .try-out__btn")),
		chromedp.WaitVisible(chromedp.CSS(op+" .execute")),
		chromedp.Click(chromedp.CSS(op+" .execute")),
	); err != nil {
		t.Fatalf("try it out: %v", err)
	}
	got := must(t, ctx, chromedp.Poll[map[string]string](`(() => {
		const st = document.querySelector('#operations-ToolService-ListTools .live-responses-table tr.response .response-col_status');
		const url = document.querySelector('#operations-ToolService-ListTools .request-url pre');
		const body = document.querySelector('#operations-ToolService-ListTools .live-responses-table .response-col_description pre');
		return st && url ? {status: st.textContent.trim(), url: url.textContent.trim(), body: body ? body.textContent : ""} : false;
	})()`, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
	t.Logf("try it out: %v", got)
	if got["url"] != base+"/v1/tools" {
		t.Errorf("the reference called %q, want %s/v1/tools", got["url"], base)
	}
	if !strings.HasPrefix(got["status"], "200") || !strings.Contains(got["body"], `"tell-joke"`) {
		t.Errorf("the call answered %q %q, want 200 with the tools", got["status"], got["body"])
	}
	page.check(t)
}
