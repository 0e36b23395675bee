package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// mcpCaller calls the gateway's MCP endpoint: one stateless JSON-RPC
// tools/call per call, the answer read from the response's SSE "message"
// event (or a JSON body), as an MCP client over Streamable HTTP does.
// Protocol 2025-11-25 by default (mode mcp); with modern set, 2026-07-28
// (mode mcp-2026): the version, method and tool name in headers and the
// version and client capabilities in the request's _meta.
type mcpCaller struct {
	client *http.Client
	url    string
	auth   string
	body   []byte
	header []string // extra header, name and value pairs
	want   string
}

// mcpModern is the protocol revision of mode mcp-2026.
const mcpModern = "2026-07-28"

func newMCP(o Options, msg string, modern bool) *mcpCaller {
	m := &mcpCaller{client: newHTTPClient(o), url: "http://" + o.HTTPAddr + "/mcp", want: msg}
	if o.APIKey != "" {
		m.auth = "Bearer " + o.APIKey
	}
	params := map[string]any{"name": o.Tool, "arguments": map[string]any{"msg": msg}}
	if modern {
		params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": mcpModern, "io.modelcontextprotocol/clientCapabilities": map[string]any{}}
		m.header = []string{"Mcp-Protocol-Version", mcpModern, "Mcp-Method", "tools/call", "Mcp-Name", o.Tool}
	}
	m.body, _ = json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
	return m
}

type mcpAnswer struct {
	Result *struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		IsError bool `json:"isError"`
	} `json:"result"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

func (m *mcpCaller) Call(ctx context.Context, _ int) (int, error) {
	accept := "application/json, text/event-stream"
	resp, err := postJSON(ctx, m.client, m.url, m.body, accept, m.auth, m.header...)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var payload []byte
	if bytes.HasPrefix([]byte(resp.Header.Get("Content-Type")), []byte("text/event-stream")) {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			if d, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok {
				payload = append(payload[:0], d...)
				break
			}
		}
		if err := sc.Err(); err != nil {
			return 0, err
		}
	} else if payload, err = io.ReadAll(resp.Body); err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body) // keep the connection reusable
	var a mcpAnswer
	if err := json.Unmarshal(payload, &a); err != nil {
		return 0, fmt.Errorf("MCP answer %.200q: %v", payload, err)
	}
	switch {
	case a.Error != nil:
		return 0, fmt.Errorf("MCP error: %s", a.Error.Message)
	case a.Result == nil || len(a.Result.Content) == 0:
		return 0, fmt.Errorf("MCP answer without content: %.200s", payload)
	case a.Result.IsError:
		return 0, fmt.Errorf("MCP tool error: %s", a.Result.Content[0].Text)
	case a.Result.Content[0].Text != m.want:
		return 1, errors.New("reply differs from the message sent")
	}
	return 1, nil
}

func (m *mcpCaller) Close() { m.client.CloseIdleConnections() }
