package operations_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/eventually"
)

// opChunk is one chunk of an operation's stream as a client reads it.
type opChunk struct {
	id     string // the SSE event's id ("" on NDJSON)
	index  int
	output string
	last   bool
}

// openOpStream sends GET base/v1/operations/{id}:stream (with query, e.g.
// "?from_chunk=5") as alice, with the Accept and Last-Event-ID headers given.
func openOpStream(t *testing.T, base, id, query, accept, lastEventID string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/v1/operations/"+id+":stream"+query, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Api-Key", aliceKey)
	req.Header.Set("Accept", accept)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func decodeChunk(t *testing.T, data string) opChunk {
	t.Helper()
	var c struct {
		Output string `json:"output"`
		Index  string `json:"index"`
		Last   bool   `json:"last"`
	}
	if err := json.Unmarshal([]byte(data), &c); err != nil {
		t.Fatalf("a chunk that is not JSON: %q: %v", data, err)
	}
	i, err := strconv.Atoi(c.Index)
	if err != nil {
		t.Fatalf("a chunk with index %q", c.Index)
	}
	return opChunk{index: i, output: c.Output, last: c.Last}
}

// readSSE reads server-sent events from r: each chunk event goes to each
// (false stops reading); it returns the name of the event that ended the
// stream ("done", "error" with its data, or "" at the end of the body).
func readSSE(t *testing.T, r io.Reader, each func(opChunk) bool) (string, string) {
	t.Helper()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var id, event, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			switch event {
			case "chunk":
				c := decodeChunk(t, data)
				c.id = id
				if !each(c) {
					return "", ""
				}
			case "done", "error":
				return event, data
			}
			id, event, data = "", "", ""
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
	return "", ""
}

// known waits until the gateway at base has read alice's operation id
// from the state table (another gateway wrote it a moment ago).
func known(t *testing.T, base, id string) {
	t.Helper()
	eventually.True(t, 5*time.Second, "operation "+id+" known at "+base, func() bool {
		code, _ := do(t, http.MethodGet, base+"/v1/operations/"+id, aliceKey, "")
		return code == http.StatusOK
	})
}

// wantChunk checks chunk c of an echo stream of n chunks: "i," but for the
// last, "n-1", flagged last.
func wantChunk(t *testing.T, c opChunk, i, n int) {
	t.Helper()
	want := strconv.Itoa(i) + ","
	if i == n-1 {
		want = strconv.Itoa(i)
	}
	if c.index != i || c.output != want || c.last != (i == n-1) {
		t.Fatalf("chunk %+v, want index %d, output %q, last %v", c, i, want, i == n-1)
	}
}

// TestOperationStreamResumesOnAnotherGateway: a streaming operation of
// 1,000 chunks; a client reads the first 100 from gateway A as server-sent
// events and disconnects, then reattaches on gateway B with Last-Event-ID
// and receives chunks 100 to 999 exactly once, in order — the first of
// them kept, the rest as the service sends them. NDJSON from an index, a
// one-message answer, a failed operation and another caller's stream are
// checked too.
func TestOperationStreamResumesOnAnotherGateway(t *testing.T) {
	flags := setup(t)
	a := apptest.Start(t, nil, flags...)
	b := apptest.Start(t, nil, flags...)
	a.WaitReady(t, 60*time.Second)
	b.WaitReady(t, 60*time.Second)
	aBase, bBase := "http://"+a.HTTPAddr(), "http://"+b.HTTPAddr()

	const n = 1000
	// 3 ms between chunks: the stream runs for 3 s, so B follows most of
	// it live.
	code, op := do(t, http.MethodPost, aBase+"/v1/tools/echo:start", aliceKey,
		fmt.Sprintf(`{"arguments": {"mode": "stream", "n": %d, "gap_ms": 3}, "timeout": "60s"}`, n))
	if code != http.StatusOK {
		t.Fatalf("start: %d %v", code, op)
	}
	id := strings.TrimPrefix(op["name"].(string), "operations/")

	// Bob's stream of it is NOT_FOUND.
	req, _ := http.NewRequest(http.MethodGet, bBase+"/v1/operations/"+id+":stream", nil)
	req.Header.Set("X-Api-Key", bobKey)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("bob's stream: %v %v, want 404", resp.StatusCode, err)
	} else {
		_ = resp.Body.Close()
	}

	// The first 100 chunks from A, then the client goes away.
	resp := openOpStream(t, aBase, id, "", "text/event-stream", "")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream from A: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	got := 0
	readSSE(t, resp.Body, func(c opChunk) bool {
		wantChunk(t, c, got, n)
		if c.id != strconv.Itoa(c.index) {
			t.Fatalf("chunk %d has the event id %q", c.index, c.id)
		}
		got++
		return got < 100
	})
	_ = resp.Body.Close()
	if got != 100 {
		t.Fatalf("A's stream ended after %d chunks", got)
	}

	// B, from the one after the last event received.
	resp = openOpStream(t, bBase, id, "", "text/event-stream", "99")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream from B: %d", resp.StatusCode)
	}
	next := 100
	end, data := readSSE(t, resp.Body, func(c opChunk) bool {
		wantChunk(t, c, next, n)
		next++
		return true
	})
	_ = resp.Body.Close()
	if end != "done" || next != n {
		t.Fatalf("B's stream ended with %q %s after chunk %d, want done after %d", end, data, next-1, n-1)
	}

	// The operation is done with the chunks joined; NDJSON from 995 on.
	code, doneOp := do(t, http.MethodPost, bBase+"/v1/operations/"+id+":wait", aliceKey, `{"timeout": "10s"}`)
	out, _ := doneOp["response"].(map[string]any)
	if code != http.StatusOK || out == nil || !strings.HasPrefix(out["output"].(string), "0,1,2,") || !strings.HasSuffix(out["output"].(string), ",998,999") {
		t.Fatalf("the operation after its stream: %d %v", code, doneOp)
	}
	resp = openOpStream(t, aBase, id, "?from_chunk=995", "application/x-ndjson", "")
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if resp.StatusCode != http.StatusOK || len(lines) != 5 {
		t.Fatalf("NDJSON from 995: %d %q", resp.StatusCode, body)
	}
	for i, l := range lines {
		wantChunk(t, decodeChunk(t, l), 995+i, n)
	}

	// An answer in one message is one chunk, index 0.
	_, one := do(t, http.MethodPost, aBase+"/v1/tools/echo:start", aliceKey, `{"arguments": {"mode": "sleep", "ms": 200, "msg": "whole"}}`)
	oneID := strings.TrimPrefix(one["name"].(string), "operations/")
	known(t, bBase, oneID)
	resp = openOpStream(t, bBase, oneID, "", "text/event-stream", "")
	var chunks []opChunk
	end, _ = readSSE(t, resp.Body, func(c opChunk) bool { chunks = append(chunks, c); return true })
	_ = resp.Body.Close()
	if end != "done" || len(chunks) != 1 || chunks[0] != (opChunk{id: "0", index: 0, output: "whole", last: true}) {
		t.Fatalf("a one-message answer streamed as %+v, ending %q", chunks, end)
	}

	// A failed operation: its error, as an HTTP status before any chunk.
	_, failed := do(t, http.MethodPost, aBase+"/v1/tools/echo:start", aliceKey, `{"arguments": {"mode": "fail", "type": "not-found", "message": "nothing here"}}`)
	failedID := strings.TrimPrefix(failed["name"].(string), "operations/")
	known(t, bBase, failedID)
	resp = openOpStream(t, bBase, failedID, "", "application/x-ndjson", "")
	body, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "nothing here") {
		t.Fatalf("the stream of a failed operation: %d %s", resp.StatusCode, body)
	}
	// A bad from is INVALID_ARGUMENT.
	resp = openOpStream(t, bBase, id, "?from_chunk=-1", "application/x-ndjson", "")
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("from_chunk=-1: %d, want 400", resp.StatusCode)
	}
}
