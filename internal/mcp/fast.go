package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The fast path answers the commonest request, a stateless tools/call
// that streams nothing, without the SDK's per-request session (which
// decodes the message several times and allocates ~300 KB per call). It
// takes only what it answers exactly as the SDK path would — the same
// status, headers and JSON-RPC message; TestFastPathMatchesSDK holds the
// two to that — and hands everything else to the SDK untouched: other
// methods, batches, notifications, progress tokens, protocol revisions
// whose results are shaped otherwise (2026-07-28), and anything the SDK
// would refuse.

// fastVersions are the MCP-Protocol-Version values whose tools/call result
// the fast path writes ("" when the header is absent).
var fastVersions = map[string]bool{"": true, "2025-11-25": true, "2025-06-18": true, "2025-03-26": true, "2024-11-05": true}

// fastRequest is a tools/call request as the fast path reads it.
type fastRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  *struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
		Meta      map[string]any  `json:"_meta"`
	} `json:"params"`
}

// fastEligible reports whether the SDK would take r as it stands, up to
// reading its body.
func fastEligible(r *http.Request) bool {
	if r.Method != http.MethodPost || !fastVersions[r.Header.Get("Mcp-Protocol-Version")] {
		return false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return false
	}
	if jsonOK, streamOK := accepts(r.Header.Values("Accept")); !jsonOK || !streamOK {
		return false
	}
	// DNS rebinding: a request to a loopback listener must name a
	// loopback host (the SDK answers 403 otherwise).
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && local != nil && loopback(local.String()) && !loopback(r.Host) {
		return false
	}
	return true
}

// accepts reads Accept as the Streamable HTTP transport does: both JSON
// and an event stream must be acceptable.
func accepts(values []string) (jsonOK, streamOK bool) {
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			base, _, _ := strings.Cut(strings.TrimSpace(part), ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK, streamOK
}

func loopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = strings.Trim(hostport, "[]")
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// serveFast answers r, whose body is body, when the fast path takes it,
// and reports whether it did.
func (s *Server) serveFast(w http.ResponseWriter, r *http.Request, body []byte, req *request) bool {
	if !fastEligible(r) || len(body) == 0 || body[0] != '{' {
		return false
	}
	var in fastRequest
	if json.Unmarshal(body, &in) != nil || in.JSONRPC != "2.0" || in.Method != "tools/call" || in.Params == nil || !plainID(in.ID) {
		return false
	}
	if _, ok := in.Params.Meta["progressToken"]; ok || hasUnknownKeys(body) {
		return false
	}
	if _, ok := in.Params.Meta[sdk.MetaKeyProtocolVersion]; ok {
		return false // a stateless request of 2026-07-28 or later
	}
	ctx := r.Context()
	req.id = in.ID
	call := &sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{Name: in.Params.Name, Arguments: in.Params.Arguments, Meta: in.Params.Meta}}
	res, err := s.callTool(context.WithValue(ctx, requestKey{}, req), call)
	msg := append(append([]byte(`{"jsonrpc":"2.0","id":`), in.ID...), ',')
	var out []byte
	if err == nil {
		if out, err = json.Marshal(res); err == nil {
			msg = append(append(append(msg, `"result":`...), out...), '}')
		}
	}
	if err != nil {
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) {
			rpc = &jsonrpc.Error{Code: codeInternal, Message: err.Error()}
		}
		if out, err = json.Marshal(rpc); err != nil {
			return false // cannot happen: the SDK path answers
		}
		msg = append(append(append(msg, `"error":`...), out...), '}')
	}
	h := w.Header()
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("Connection", "keep-alive")
	h.Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	b := make([]byte, 0, len(msg)+24)
	b = append(append(append(b, "event: message\ndata: "...), msg...), "\n\n"...)
	_, _ = w.Write(b)
	return true
}

// plainID: a JSON-RPC request id the fast path echoes as the SDK does: a
// string, or an integer written plainly that a float64 holds exactly (the
// SDK reads numeric ids as float64). Null, a missing id and other numbers
// are the SDK's to answer.
func plainID(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	if id[0] == '"' {
		return true
	}
	n, err := strconv.ParseInt(string(id), 10, 64)
	return err == nil && n >= -1<<53 && n <= 1<<53 && strconv.FormatInt(n, 10) == string(id)
}

// hasUnknownKeys reports whether the request object or its params have a
// member other than those fastRequest reads: such requests go the SDK's
// way, whatever it makes of them.
func hasUnknownKeys(body []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return true
	}
	for k := range top {
		switch k {
		case "jsonrpc", "id", "method", "params":
		default:
			return true
		}
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(top["params"], &params) != nil {
		return true
	}
	for k := range params {
		switch k {
		case "name", "arguments", "_meta":
		default:
			return true
		}
	}
	return false
}
