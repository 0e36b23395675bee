package mcp

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Every refusal of a request to /mcp carries a JSON-RPC error body, the
// ones the SDK answers in text (405, 415, a malformed body, a foreign
// Host) included: rpcErrors rewrites those on their way out.

// writeRPCErrorID answers with a JSON-RPC error for request id.
func writeRPCErrorID(w http.ResponseWriter, id json.RawMessage, httpCode int, e map[string]any) {
	msg, err := json.Marshal(e)
	if err != nil {
		msg = []byte(`{"code":-32603,"message":"internal error"}`)
	}
	body := append(append(append(append([]byte(`{"jsonrpc":"2.0","id":`), id...), `,"error":`...), msg...), '}')
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	_, _ = w.Write(body)
}

// checkVersion refuses a request whose MCP-Protocol-Version header names a
// revision the SDK does not speak, saying which it does. (The SDK would
// take an unknown version for a newer one and ask for _meta fields the
// client never meant to send.) It reports whether it answered.
func checkVersion(w http.ResponseWriter, r *http.Request, body []byte) bool {
	v, ok := r.Header["Mcp-Protocol-Version"]
	if !ok {
		return false
	}
	supported := sdk.SupportedProtocolVersions()
	if len(v) == 1 && slices.Contains(supported, v[0]) {
		return false
	}
	requested := strings.Join(v, ", ")
	writeRPCErrorID(w, requestID(body), http.StatusBadRequest, map[string]any{
		"code": sdk.CodeUnsupportedProtocolVersion,
		"message": "MCP-Protocol-Version " + strconv.Quote(requested) + " is not a protocol revision this server speaks: it speaks " +
			strings.Join(supported, ", "),
		"data": sdk.UnsupportedProtocolVersionData{Supported: supported, Requested: requested},
	})
	return true
}

// rpcErrors passes a response through unless it is a refusal (status ≥ 400)
// that is not JSON: that one it keeps, to send as a JSON-RPC error with the
// same status, headers and message (finish).
//
// Once drop is set (the client cancelled the request) nothing more of the
// body is written: the SDK's answer to a cancelled request is not sent.
type rpcErrors struct {
	http.ResponseWriter
	id     json.RawMessage
	drop   *atomic.Bool
	status int // of the refusal kept; 0: passing through
	msg    bytes.Buffer
}

func (w *rpcErrors) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	if mt, _, _ := mime.ParseMediaType(w.Header().Get("Content-Type")); code >= 400 && mt != "application/json" {
		w.status = code
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *rpcErrors) Write(b []byte) (int, error) {
	if w.drop != nil && w.drop.Load() {
		return len(b), nil
	}
	if w.status != 0 {
		return w.msg.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes a response passing through (the SDK's event streams).
func (w *rpcErrors) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && w.status == 0 {
		f.Flush()
	}
}

// finish sends the refusal kept, if any.
func (w *rpcErrors) finish() {
	if w.status == 0 {
		return
	}
	msg := strings.TrimSpace(w.msg.String())
	code := codeInvalidRequest
	if w.status == http.StatusBadRequest && strings.HasPrefix(msg, "malformed payload") {
		code = codeParseError
	}
	if msg == "" {
		msg = http.StatusText(w.status)
	}
	w.Header().Del("X-Content-Type-Options")
	writeRPCErrorID(w.ResponseWriter, w.id, w.status, map[string]any{"code": code, "message": msg})
}
