// Command check calls a toolgate gateway through the Go client that
// openapi-generator makes of its OpenAPI document (package toolgate, built
// beside this file by test/e2e's TestOpenAPIGeneratorGo): an invoke, a
// stream of several chunks read line by line into the generated StreamLine,
// a stream read live as docs/api.md ("Streaming from generated clients")
// shows, and a typed error. It exits non-zero on the first thing that is not as
// the document says; TOOLGATE_HTTP_BASE is the gateway's base URL.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"

	toolgate "github.com/toolgate/oagclient"
)

func main() {
	if err := run(context.Background(), os.Getenv("TOOLGATE_HTTP_BASE")); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("PASS")
}

func run(ctx context.Context, base string) error {
	cfg := toolgate.NewConfiguration()
	cfg.Servers = toolgate.ServerConfigurations{{URL: base}}
	api := toolgate.NewAPIClient(cfg).ToolServiceAPI

	// Invoke: a typed answer.
	timeout := "5s"
	out, resp, err := api.InvokeTool(ctx, "echo").InvokeToolBody(toolgate.InvokeToolBody{
		Arguments: map[string]any{"msg": "hello"},
		Timeout:   *toolgate.NewNullableString(&timeout),
	}).Execute()
	if err != nil {
		return fmt.Errorf("invoke: %w", err)
	}
	if resp.StatusCode != http.StatusOK || out.GetOutput() != "hello" {
		return fmt.Errorf("invoke: %d %+v", resp.StatusCode, out)
	}
	fmt.Printf("invoke: %s\n", out.GetOutput())

	// Stream: the generated Execute reads the whole answer and cannot decode
	// NDJSON as one value; the response it returns has the body, one
	// StreamLine per line.
	const n = 5
	_, resp, err = api.StreamTool(ctx, "echo").StreamToolBody(toolgate.StreamToolBody{
		Arguments: map[string]any{"mode": "stream", "n": n},
	}).Execute()
	if resp == nil {
		return fmt.Errorf("stream: no response: %w", err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		return fmt.Errorf("stream: %d %q (%v)", resp.StatusCode, resp.Header.Get("Content-Type"), err)
	}
	sc := bufio.NewScanner(resp.Body)
	var chunks []*toolgate.StreamToolResponse
	for sc.Scan() {
		var line toolgate.StreamLine
		if err := line.UnmarshalJSON(sc.Bytes()); err != nil {
			return fmt.Errorf("stream line %d: %w: %s", len(chunks), err, sc.Text())
		}
		if line.StreamToolResponse == nil || line.Status != nil {
			return fmt.Errorf("stream line %d is not a chunk: %s", len(chunks), sc.Text())
		}
		chunks = append(chunks, line.StreamToolResponse)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("stream: %w", err)
	}
	if len(chunks) != n {
		return fmt.Errorf("stream: %d chunks, want %d", len(chunks), n)
	}
	for i, c := range chunks {
		if c.Index != strconv.Itoa(i) || c.Last != (i == n-1) {
			return fmt.Errorf("stream: chunk %d is %+v", i, c)
		}
	}
	fmt.Printf("stream: %d chunks\n", len(chunks))

	// Live: a stream of 1000 chunks 50 ms apart, its first three taken as
	// they arrive, long before its end; leaving it then ends the call.
	var live []string
	err = streamTool(ctx, cfg, "echo", toolgate.StreamToolBody{
		Arguments: map[string]any{"mode": "stream", "n": 1000, "gap_ms": 50},
	}, func(c *toolgate.StreamToolResponse) bool {
		live = append(live, c.Output)
		return len(live) < 3
	})
	if err != nil || len(live) != 3 {
		return fmt.Errorf("live stream: %v after %q", err, live)
	}
	fmt.Printf("live stream: %d chunks %q\n", len(live), live)
	n2 := 0
	err = streamTool(ctx, cfg, "echo", toolgate.StreamToolBody{
		Arguments: map[string]any{"mode": "stream", "n": 50, "gap_ms": 50},
		Timeout:   *toolgate.NewNullableString(toolgate.PtrString("300ms")),
	}, func(*toolgate.StreamToolResponse) bool { n2++; return true })
	if err == nil {
		return errors.New("live failing stream: no error")
	}
	fmt.Printf("live failing stream: %d chunks, then %v\n", n2, err)

	// A stream that fails after its first chunk ends in a Status line.
	_, resp, _ = api.StreamTool(ctx, "echo").StreamToolBody(toolgate.StreamToolBody{
		Arguments: map[string]any{"mode": "stream", "n": 50, "gap_ms": 50},
		Timeout:   *toolgate.NewNullableString(toolgate.PtrString("500ms")),
	}).Execute()
	if resp == nil || resp.StatusCode != http.StatusOK {
		return errors.New("failing stream: no 200 answer")
	}
	var last toolgate.StreamLine
	sc = bufio.NewScanner(resp.Body)
	lines := 0
	for sc.Scan() {
		lines++
		if err := last.UnmarshalJSON(sc.Bytes()); err != nil {
			return fmt.Errorf("failing stream, line %d: %w: %s", lines, err, sc.Text())
		}
	}
	if lines < 2 || last.Status == nil || last.StreamToolResponse != nil || last.Status.GetCode() == 0 {
		return fmt.Errorf("failing stream: %d lines, last %+v", lines, last)
	}
	fmt.Printf("failing stream: %d lines, then code %d\n", lines-1, last.Status.GetCode())

	// A typed error: 404 with a Status whose ErrorInfo names the reason.
	_, resp, err = api.InvokeTool(ctx, "no-such-tool").InvokeToolBody(toolgate.InvokeToolBody{}).Execute()
	var apiErr *toolgate.GenericOpenAPIError
	if !errors.As(err, &apiErr) || resp == nil || resp.StatusCode != http.StatusNotFound {
		return fmt.Errorf("unknown tool: %v (%v)", err, resp)
	}
	st, ok := apiErr.Model().(toolgate.Status)
	if !ok || st.GetCode() != 5 {
		return fmt.Errorf("unknown tool: model %#v", apiErr.Model())
	}
	reason := ""
	for _, d := range st.GetDetails() {
		if d.ErrorInfo != nil {
			reason = d.ErrorInfo.GetReason()
		}
	}
	if reason != "TOOL_NOT_FOUND" {
		return fmt.Errorf("unknown tool: details %+v", st.GetDetails())
	}
	fmt.Printf("unknown tool: %d %s\n", st.GetCode(), reason)
	return nil
}

// streamTool calls the tool name's StreamTool with the client's
// configuration and hands each chunk to each as it arrives, until each
// returns false. The generated Execute reads the whole answer before it
// returns; this reads it line by line, each line the generated StreamLine.
// A Status line (the stream failed after its first chunk) or an error
// answer is the error.
func streamTool(ctx context.Context, cfg *toolgate.Configuration, name string, body toolgate.StreamToolBody,
	each func(*toolgate.StreamToolResponse) bool) error {
	base, err := cfg.ServerURLWithContext(ctx, "ToolServiceAPIService.StreamTool")
	if err != nil {
		return err
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/tools/"+url.PathEscape(name)+":stream", bytes.NewReader(b))
	if err != nil {
		return err
	}
	for k, v := range cfg.DefaultHeader {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/x-ndjson")
	client := cfg.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var st toolgate.Status
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		return fmt.Errorf("HTTP %d: %d %s", resp.StatusCode, st.GetCode(), st.GetMessage())
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20) // a line is one chunk: as long as the tool service's longest
	for sc.Scan() {
		var line toolgate.StreamLine
		if err := line.UnmarshalJSON(sc.Bytes()); err != nil {
			return err
		}
		if line.Status != nil {
			return fmt.Errorf("the stream failed: %d %s", line.Status.GetCode(), line.Status.GetMessage())
		}
		if !each(line.StreamToolResponse) {
			return nil
		}
	}
	return sc.Err()
}
