package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// exchange is one HTTP request to the endpoint on its way through the
// pipeline, and what the steps learned of it.
type exchange struct {
	w    http.ResponseWriter
	r    *http.Request
	body []byte  // the body of a POST, once read
	req  request // what the request's calls inherit from it (in the exchange: one allocation for both)
	// again reads body again, as the request's Body once it was read (for
	// the SDK); in the exchange, for the same reason.
	again bodyAgain
}

// bodyAgain is a request body read again from memory.
type bodyAgain struct{ bytes.Reader }

func (*bodyAgain) Close() error { return nil }

// step is one step of the pipeline: it answers the request, and reports
// that it did, or passes it on to the next.
type step struct {
	name string
	run  func(*Server, *exchange) bool
}

// pipeline is what the endpoint does with a request, in order. The first
// steps refuse what is not to be served at all; the next answer what the
// endpoint answers itself; the SDK answers the rest. Every answer the
// endpoint writes itself is a JSON-RPC message, written by writeAnswer
// (answer.go).
var pipeline = []step{
	{"header size", (*Server).limitHeader},               // 431 past Options.MaxHeaderBytes
	{"origin", (*Server).checkOrigin},                    // 403 for a browser page of a foreign origin
	{"body", (*Server).readBody},                         // read once; 413, 408, 400; batches refused
	{"authenticate", (*Server).authenticate},             // the caller, once per request (Options.Authenticate): 401, 403, 429
	{"protocol version", (*Server).checkVersion},         // 400 for an MCP-Protocol-Version the SDK does not speak
	{"Mcp-Param headers", (*Server).checkParamHeaders},   // 400 when they do not say what the arguments say (headers.go)
	{"notifications/cancelled", (*Server).cancelRequest}, // 202: a call of this replica's ended (cancel.go)
	{"tasks", (*Server).serveTask},                       // the tasks extension (tasks.go)
	{"fast path", (*Server).serveFast},                   // a stateless tools/call, as the SDK would answer it (fast.go)
	{"SDK", (*Server).serveSDK},                          // everything else
}

// ServeHTTP serves the MCP endpoint: the pipeline's steps, in order, until
// one answers (the last always does).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{w: w, r: r}
	x.req.ctx, x.req.srv = r.Context(), s
	x.req.base = toolcall.Call{Header: httpcall.Header(r.Header), TLS: r.TLS, Peer: r.RemoteAddr, Set: s.opts.Set}
	for _, st := range pipeline {
		if st.run(s, x) {
			return
		}
	}
}

// limitHeader refuses a request whose header lines are larger than
// Options.MaxHeaderBytes, before anything else is done.
func (s *Server) limitHeader(x *exchange) bool {
	n := httpcall.HeaderBytes(x.r)
	if s.opts.MaxHeaderBytes <= 0 || n <= s.opts.MaxHeaderBytes {
		return false
	}
	s.log.InfoContext(x.r.Context(), "MCP request refused: headers too large", "bytes", n, "limit", s.opts.MaxHeaderBytes, "peer", x.r.RemoteAddr)
	x.w.Header().Set("Connection", "close")
	writeRefusal(x.w, http.StatusRequestHeaderFieldsTooLarge, nullID, statusError(toolcall.HeadersTooLarge(n, s.opts.MaxHeaderBytes)))
	return true
}

// checkOrigin refuses a request from a browser page of an origin that may
// not call (originAllowed).
func (s *Server) checkOrigin(x *exchange) bool {
	origin := x.r.Header.Get("Origin")
	if origin == "" || s.originAllowed(origin, x.r) {
		return false
	}
	s.log.InfoContext(x.r.Context(), "MCP request refused: origin not allowed", "origin", origin, "host", x.r.Host, "peer", x.r.RemoteAddr)
	writeRefusal(x.w, http.StatusForbidden, nullID, reasonError(codeInvalidRequest, "ORIGIN_NOT_ALLOWED",
		"origin "+strconv.Quote(origin)+" may not call this MCP endpoint (allowed: the endpoint's own origin and --cors-origins)"))
	return true
}

// readBody reads the body of a POST, within the HTTP listener's limits
// (limits.HTTP), for the steps after it; the SDK is given it again. A body
// too large, too slow or unreadable is refused, and so is a batch.
func (s *Server) readBody(x *exchange) bool {
	if x.r.Method != http.MethodPost || x.r.Body == nil {
		return false
	}
	body, err := httpcall.ReadBody(x.r)
	if err != nil {
		s.log.InfoContext(x.r.Context(), "MCP request refused: the body could not be read", "err", err, "peer", x.r.RemoteAddr)
		st := httpcall.BodyError(err)
		switch status.Code(st) {
		case codes.ResourceExhausted:
			writeRefusal(x.w, http.StatusRequestEntityTooLarge, nullID, statusError(st))
		case codes.DeadlineExceeded:
			writeRefusal(x.w, http.StatusRequestTimeout, nullID, statusError(st))
		case codes.Unimplemented: // a Content-Encoding not decoded (RFC 9110: 415, naming those that are)
			x.w.Header().Set("Accept-Encoding", toolcall.AcceptedEncodings)
			writeRefusal(x.w, http.StatusUnsupportedMediaType, nullID, statusError(st))
		default:
			writeRefusal(x.w, http.StatusBadRequest, nullID, reasonError(codeParseError, "INVALID_BODY", "the request body could not be read"))
		}
		return true
	}
	x.body = body
	x.again.Reset(body)
	x.r.Body = &x.again
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '[' {
		writeRefusal(x.w, http.StatusBadRequest, nullID, reasonError(codeInvalidRequest, "BATCH_NOT_SUPPORTED",
			"JSON-RPC batches are not supported: send one request per POST"))
		return true
	}
	return false
}

// authenticate establishes the caller (Options.Authenticate), whom every
// call of the request then carries, or refuses the request: 401 (with
// WWW-Authenticate: Bearer), 403 or 429, as the MCP authorization rules
// ask of HTTP transports.
func (s *Server) authenticate(x *exchange) bool {
	if s.opts.Authenticate == nil {
		return false
	}
	c := x.req.base
	c.Op, c.Method = toolcall.OpListTools, "mcp"
	err := s.opts.Authenticate(x.r.Context(), &c)
	if err == nil {
		x.req.base.Caller, x.req.base.Authenticated = c.Caller, c.Authenticated
		return false
	}
	code := http.StatusInternalServerError
	switch status.Code(err) {
	case codes.Unauthenticated:
		code = http.StatusUnauthorized
		x.w.Header().Set("WWW-Authenticate", s.challenge(x.r))
	case codes.PermissionDenied:
		code = http.StatusForbidden
	case codes.ResourceExhausted:
		code = http.StatusTooManyRequests
	}
	e := statusError(err)
	e.Code = codeRefused
	writeRefusal(x.w, code, requestID(x.body), e)
	return true
}

// checkVersion refuses a request whose MCP-Protocol-Version header names a
// revision the SDK does not speak, saying which it does. (The SDK would
// take an unknown version for a newer one and ask for _meta fields the
// client never meant to send.)
func (s *Server) checkVersion(x *exchange) bool {
	v, ok := x.r.Header["Mcp-Protocol-Version"]
	if !ok {
		return false
	}
	supported := sdk.SupportedProtocolVersions()
	if len(v) == 1 && slices.Contains(supported, v[0]) {
		return false
	}
	requested := strings.Join(v, ", ")
	data, _ := json.Marshal(sdk.UnsupportedProtocolVersionData{Supported: supported, Requested: requested}) // strings only: cannot fail
	writeRefusal(x.w, http.StatusBadRequest, requestID(x.body), &jsonrpc.Error{Code: sdk.CodeUnsupportedProtocolVersion,
		Message: "MCP-Protocol-Version " + strconv.Quote(requested) + " is not a protocol revision this server speaks: it speaks " +
			strings.Join(supported, ", "),
		Data: data})
	return true
}

// cancelRequest answers notifications/cancelled: the call it names, if
// this replica serves it for the same sender, ends (cancel.go).
func (s *Server) cancelRequest(x *exchange) bool {
	m, ok := cancellation(x.body)
	if !ok {
		return false
	}
	key, valid := callKey(&x.req, m.Params.RequestID)
	ended := valid && s.inflight.cancel(key)
	s.log.DebugContext(x.r.Context(), "MCP notifications/cancelled", "request_id", string(m.Params.RequestID), "reason", m.Params.Reason, "ended", ended)
	x.w.WriteHeader(http.StatusAccepted)
	return true
}

// serveSDK hands the request to the SDK's Streamable HTTP handler, with
// the ids it would not echo exactly replaced (ids.go), its text refusals
// made JSON-RPC errors and its answer dropped once the client cancelled
// the request (rpcErrors).
func (s *Server) serveSDK(x *exchange) bool {
	ids, _ := idMembers(x.body)
	x.req.id, x.req.progressToken = lastID(ids), progressToken(x.body)
	ew := &rpcErrors{ResponseWriter: x.w, id: x.req.id, drop: &x.req.cancelled}
	s.handler.ServeHTTP(withSurrogates(ew, x.r, x.body, ids), x.r.WithContext(context.WithValue(x.r.Context(), requestKey{}, &x.req)))
	ew.finish()
	return true
}

// nullID is the id of an answer to a request whose id cannot be told.
var nullID = json.RawMessage("null")

// reasonError is a refusal of the HTTP request: a JSON-RPC error whose
// data name the reason, in the gateway's ErrorInfo domain.
func reasonError(code int64, reason, msg string) *jsonrpc.Error {
	return rpcErr(code, msg, map[string]any{"reason": reason, "domain": toolcall.ErrorDomain})
}

// statusError is the JSON-RPC error (-32600) of a refusal that has a gRPC
// status: its data hold the status's code and reason, as requestError's
// do.
func statusError(err error) *jsonrpc.Error {
	st := status.Convert(err)
	ei := errorInfo(toolcall.EnsureErrorInfo(st))
	return rpcErr(codeInvalidRequest, st.Message(), map[string]any{"code": st.Code().String(), "reason": ei.GetReason(), "domain": ei.GetDomain()})
}
