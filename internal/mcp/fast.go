package mcp

import (
	"bytes"
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
	segjson "github.com/segmentio/encoding/json"
	"github.com/toolgate/toolgate/internal/registry"
)

// The fast path answers the commonest request, a stateless tools/call
// that streams nothing, without the SDK's per-request session (which
// decodes the message several times and allocates ~300 KB per call). It
// takes only what it answers exactly as the SDK path would — the same
// status, headers and JSON-RPC message; TestFastPathMatchesSDK holds the
// two to that — and hands everything else to the SDK untouched: other
// methods, batches, notifications, progress tokens, and anything the SDK
// would refuse.
//
// Protocol 2026-07-28 requests are taken when everything the SDK checks of
// them is certain to pass (modernCertain): the MCP-Protocol-Version,
// Mcp-Method and Mcp-Name headers agree with the body, _meta names the same
// version and client capabilities (and client info, if any) the SDK can
// read. The answer then is what the SDK makes of such a request: the result
// marked complete (resultType) with the server's identity in its _meta, and
// refusals of the request (-32602) as a plain JSON-RPC error with HTTP 400.

// fastVersions are the MCP-Protocol-Version values whose tools/call result
// the fast path writes ("" when the header is absent).
var fastVersions = map[string]bool{"": true, modernVersion: true, "2025-11-25": true, "2025-06-18": true, "2025-03-26": true, "2024-11-05": true}

// fastMaxDepth bounds the nesting of the bodies the fast path reads: the
// SDK refuses bodies nested deeper than 1000, and deep ones are no
// common request.
const fastMaxDepth = 64

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
	if len(r.Header.Values("Last-Event-Id")) > 0 {
		return false // the SDK refuses it on a POST
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
	if !fastEligible(r) || len(body) == 0 || body[0] != '{' || len(body) > sdk.DefaultMaxRequestBodyBytes || tooDeep(body) {
		return false
	}
	var in fastRequest
	if json.Unmarshal(body, &in) != nil || in.JSONRPC != "2.0" || in.Method != "tools/call" || in.Params == nil || !plainID(in.ID) {
		return false
	}
	if _, ok := in.Params.Meta["progressToken"]; ok || hasUnknownKeys(body) {
		return false
	}
	modern := r.Header.Get("Mcp-Protocol-Version") == modernVersion
	if modern && !s.modernCertain(r, in.Params.Name, in.Params.Meta) {
		return false
	}
	if modern && s.taskSupport(in.Params.Name) == registry.TaskRequired {
		return false // the SDK's, to be refused without the tasks extension (callTool)
	}
	if _, ok := in.Params.Meta[sdk.MetaKeyProtocolVersion]; ok && !modern {
		return false // a 2026-07-28 request without that header: the SDK's to refuse
	}
	if s.resultFormat(in.Params.Name) == registry.ResultMCPContent && logThreshold(in.Params.Meta, modern) != "" {
		return false // its log records go out while it runs, as notifications of the SDK's session
	}
	ctx := context.WithValue(r.Context(), requestKey{}, req)
	req.id = in.ID
	call := &sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{Name: in.Params.Name, Arguments: in.Params.Arguments, Meta: in.Params.Meta}}
	res, err := s.call(ctx, call, "")
	if err == nil && modern {
		// What the SDK's session adds to a result of protocol 2026-07-28.
		res = complete(res)
		if res.Meta == nil {
			res.Meta = sdk.Meta{}
		}
		if _, ok := res.Meta[sdk.MetaKeyServerInfo]; !ok {
			res.Meta[sdk.MetaKeyServerInfo] = s.impl
		}
	}
	msg := append(append([]byte(`{"jsonrpc":"2.0","id":`), in.ID...), ',')
	var out []byte
	if err == nil {
		if out, err = json.Marshal(res); err == nil {
			msg = append(append(append(msg, `"result":`...), out...), '}')
		}
	}
	httpStatus := http.StatusOK
	if err != nil {
		var rpc *jsonrpc.Error
		if !errors.As(err, &rpc) {
			rpc = &jsonrpc.Error{Code: codeInternal, Message: err.Error()}
		}
		if out, err = json.Marshal(rpc); err != nil {
			return false // cannot happen: the SDK path answers
		}
		msg = append(append(append(msg, `"error":`...), out...), '}')
		if modern {
			httpStatus = modernErrorStatus(rpc.Code)
		}
	}
	h := w.Header()
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("Connection", "keep-alive")
	if httpStatus != http.StatusOK {
		// SEP-2575: a refusal of the request is a plain JSON-RPC error
		// with an HTTP status of its own.
		h.Set("Content-Type", "application/json")
		w.WriteHeader(httpStatus)
		_, _ = w.Write(msg)
		return true
	}
	h.Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	b := make([]byte, 0, len(msg)+24)
	b = append(append(append(b, "event: message\ndata: "...), msg...), "\n\n"...)
	_, _ = w.Write(b)
	return true
}

// modernErrorStatus is the HTTP status the SDK gives a JSON-RPC error of
// protocol 2026-07-28 (SEP-2575): 404 for an unknown method, 400 for bad
// parameters, an unsupported version or missing capabilities; otherwise
// the error is an event of a 200 stream.
func modernErrorStatus(code int64) int {
	switch code {
	case jsonrpc.CodeMethodNotFound:
		return http.StatusNotFound
	case jsonrpc.CodeInvalidParams, sdk.CodeUnsupportedProtocolVersion, sdk.CodeMissingRequiredClientCapabilities:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// modernCertain reports whether the SDK would take a 2026-07-28 tools/call
// of the tool name with this _meta and r's header as it stands: the
// headers name the same version, method and tool as the body (one value
// each), _meta names that version, and the client's capabilities and
// identity decode as the SDK decodes them. Anything else the SDK answers,
// with its own refusal.
func (s *Server) modernCertain(r *http.Request, name string, meta map[string]any) bool {
	if v, ok := meta[sdk.MetaKeyProtocolVersion].(string); !ok || v != modernVersion {
		return false
	}
	if !oneValue(r.Header, "Mcp-Protocol-Version", modernVersion) || !oneValue(r.Header, "Mcp-Method", "tools/call") ||
		name == "" || !oneValue(r.Header, "Mcp-Name", name) {
		return false
	}
	caps, ok := meta[sdk.MetaKeyClientCapabilities]
	if m, isMap := caps.(map[string]any); !ok || !isMap {
		return false
	} else if len(m) > 0 && !decodesAs[clientCapabilities](caps) {
		return false
	}
	if info, ok := meta[sdk.MetaKeyClientInfo]; ok && (info == nil || !decodesAs[*sdk.Implementation](info)) {
		return false
	}
	return true
}

// clientCapabilities is the SDK's reading of _meta's client capabilities
// in protocol 2026-07-28 (its clientCapabilitiesV2): roots as a pointer.
type clientCapabilities struct {
	sdk.ClientCapabilities
	Roots *sdk.RootCapabilities `json:"roots,omitempty"` //nolint:staticcheck // deprecated, but the SDK still decodes it: so must this
}

// decodesAs reports whether v, a value decoded from JSON, decodes as a T
// the way the SDK reads _meta values: encoded again, then decoded by the
// SDK's own JSON package (segmentio/encoding, field names matched
// exactly).
func decodesAs[T any](v any) bool {
	b, err := json.Marshal(v)
	if err != nil {
		return false
	}
	var t T
	d := segjson.NewDecoder(bytes.NewReader(b))
	d.DontMatchCaseInsensitiveStructFields()
	return d.Decode(&t) == nil
}

// oneValue reports whether header has exactly one key field, equal to want.
func oneValue(header http.Header, key, want string) bool {
	v := header.Values(key)
	return len(v) == 1 && v[0] == want
}

// tooDeep reports whether body nests objects and arrays deeper than
// fastMaxDepth (strings skipped).
func tooDeep(body []byte) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range body {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > fastMaxDepth {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
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
