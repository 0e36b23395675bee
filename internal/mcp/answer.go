package mcp

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Every JSON-RPC answer the endpoint writes itself goes out through
// writeAnswer: the refusals of the pipeline's checks (pipeline.go), the
// fast path's answers (fast.go) and the tasks surface's (tasks.go). A
// message is built by startAnswer and then appendResult or appendError.
// The SDK writes its own answers; rpcErrors (below) turns those it writes
// in text — 405, 415, a malformed body, a foreign Host — into JSON-RPC
// errors on their way out, through writeAnswer too.

// eventPrefix begins an answer sent as the one event of an event stream,
// as the SDK frames it (no id: the endpoint keeps no event store).
const eventPrefix = "event: message\ndata: "

// framing is how writeAnswer sends a message.
type framing int

const (
	// plainJSON: a refusal of the HTTP request before it is served, as a
	// JSON body with the HTTP status given.
	plainJSON framing = iota
	// likeSDK: as the SDK's Streamable HTTP transport answers a request it
	// took — with its stream headers (Cache-Control, Connection); an
	// answer of HTTP 200 as the one "message" event of an event stream,
	// flushed; a refusal with a status of its own (SEP-2575) as a JSON
	// body.
	likeSDK
)

// startAnswer starts the answer to request id (JSON text, "null" when it
// cannot be told): eventPrefix, then the message up to its result or
// error; size is a guess of the whole answer's length, framing included.
func startAnswer(id json.RawMessage, size int) []byte {
	b := make([]byte, 0, max(size, len(eventPrefix)+len(`{"jsonrpc":"2.0","id":,"error":}`)+len(id)+64))
	b = append(b, eventPrefix+`{"jsonrpc":"2.0","id":`...)
	return append(append(b, id...), ',')
}

// appendResult ends an answer with result, JSON text written as it is.
func appendResult(b, result []byte) []byte {
	return append(append(append(b, `"result":`...), result...), '}')
}

// appendResultWith ends an answer with the result appendTo appends.
func appendResultWith(b []byte, appendTo func([]byte) []byte) []byte {
	return append(appendTo(append(b, `"result":`...)), '}')
}

// appendError ends an answer with the error e.
func appendError(b []byte, e *jsonrpc.Error) []byte {
	out, err := json.Marshal(e)
	if err != nil { // data that is not JSON: cannot be, rpcErr encodes it
		out = []byte(`{"code":-32603,"message":"internal error"}`)
	}
	return append(append(append(b, `"error":`...), out...), '}')
}

// writeAnswer sends msg (startAnswer's, complete) with HTTP status
// httpStatus, framed as f says. A nil msg, likeSDK, is an event stream
// that ends without an answer (the client cancelled the request).
func writeAnswer(w http.ResponseWriter, httpStatus int, msg []byte, f framing) {
	h := w.Header()
	if f == likeSDK {
		h["Cache-Control"] = noCache
		h["Connection"] = keepAlive
	}
	if f == likeSDK && msg == nil {
		h["Content-Type"] = eventStream
		w.WriteHeader(http.StatusOK)
		return
	}
	if f == plainJSON || httpStatus != http.StatusOK {
		h.Del("Content-Length")
		h.Set("Content-Type", "application/json")
		w.WriteHeader(httpStatus)
		_, _ = w.Write(msg[len(eventPrefix):])
		return
	}
	h["Content-Type"] = eventStream
	// Chunked, as the SDK's answer is (it flushes each event), but sent
	// when the handler returns, with the body's end, in one write: a
	// flush here had made it two.
	h["Transfer-Encoding"] = chunked
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(msg, "\n\n"...))
}

// chunked is the Transfer-Encoding of an event stream's answer: net/http
// frames the body so (over HTTP/1.1; HTTP/2 has no such header) instead of
// giving it a Content-Length, and only reads the value.
var chunked = []string{"chunked"}

// The other header values of an answer as the SDK gives it, set by their
// canonical names: one slice each for every answer (net/http only reads
// them), and no name to canonicalise per call.
var (
	noCache     = []string{"no-cache, no-transform"}
	keepAlive   = []string{"keep-alive"}
	eventStream = []string{"text/event-stream"}
)

// writeRefusal refuses request id (null when it cannot be told) with the
// error e, as a JSON body with HTTP status httpStatus.
func writeRefusal(w http.ResponseWriter, httpStatus int, id json.RawMessage, e *jsonrpc.Error) {
	writeAnswer(w, httpStatus, appendError(startAnswer(id, 0), e), plainJSON)
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
	code := int64(codeInvalidRequest)
	if w.status == http.StatusBadRequest && strings.HasPrefix(msg, "malformed payload") {
		code = codeParseError
	}
	if msg == "" {
		msg = http.StatusText(w.status)
	}
	w.Header().Del("X-Content-Type-Options")
	writeRefusal(w.ResponseWriter, w.status, w.id, &jsonrpc.Error{Code: code, Message: msg})
}
