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
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"
	"github.com/toolgate/toolgate/internal/jsontext"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/wire"
)

// The fast path answers the commonest request, a stateless tools/call
// that streams nothing, without the SDK's per-request session (which
// decodes the message several times and allocates ~300 KB per call). It
// takes only what it answers exactly as the SDK path would — the same
// status, every header, the same event framing and JSON-RPC message;
// TestFastPathMatchesSDK, FuzzFastPath and FuzzFastPathTransport hold the
// two to that (parity_test.go) — and hands everything else to the SDK
// untouched: other methods, batches, notifications, progress tokens, and
// anything the SDK would refuse. What the SDK checks of the HTTP request
// before it reads the body (Accept, Content-Type, Last-Event-ID, DNS
// rebinding) the fast path checks as the SDK does (fastEligible): the
// SDK exports none of it.
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
// common request. It is jsontext's bound, which readFast's Compact keeps.
const fastMaxDepth = jsontext.MaxDepth

// fastRequest is a tools/call request as the fast path reads it: the
// members of the request and its params, as written (compact), and _meta
// decoded.
type fastRequest struct {
	id        json.RawMessage
	name      string
	arguments json.RawMessage
	meta      map[string]any
}

// readFast reads body, a tools/call request the fast path may take, in one
// pass: ok is false for anything else — not a JSON-RPC 2.0 tools/call
// that jsontext reads (valid, no key repeated within an object, not nested
// too deeply), members of the request or its params other than those it
// reads (or written with escapes), params or _meta not an object, a name
// that is not a string — which the SDK answers, whatever it makes of it.
func readFast(body []byte) (in fastRequest, ok bool) {
	compact, err := jsontext.Compact(body)
	if err != nil {
		return in, false
	}
	var buf [8]jsontext.Member
	top, ok := jsontext.Members(compact, buf[:0])
	if !ok {
		return in, false
	}
	var version, method, params []byte
	for _, m := range top {
		switch string(m.Key) {
		case "jsonrpc":
			version = m.Value
		case "id":
			in.id = m.Value
		case "method":
			method = m.Value
		case "params":
			params = m.Value
		default:
			return in, false
		}
	}
	if string(version) != `"2.0"` || string(method) != `"tools/call"` || len(params) == 0 || params[0] != '{' {
		return in, false
	}
	members, ok := jsontext.Members(params, buf[:0])
	if !ok {
		return in, false
	}
	var name, meta []byte
	for _, m := range members {
		switch string(m.Key) {
		case "name":
			name = m.Value
		case "arguments":
			in.arguments = m.Value
		case "_meta":
			meta = m.Value
		default:
			return in, false
		}
	}
	switch {
	case name == nil: // the call's to refuse
	case len(name) < 2 || name[0] != '"' || !utf8.Valid(name):
		return in, false
	case bytes.IndexByte(name, '\\') >= 0:
		if json.Unmarshal(name, &in.name) != nil {
			return in, false
		}
	default:
		in.name = string(name[1 : len(name)-1])
	}
	if meta != nil {
		if in.meta, ok = decodeMeta(meta); !ok {
			return in, false
		}
	}
	return in, true
}

// decodeMeta decodes _meta, compact JSON text from jsontext, as
// encoding/json decodes it into a map[string]any (FuzzDecodeMeta): ok is
// false when it is not an object. Plain strings, numbers and literals,
// the common members, are read here; the rest by encoding/json.
func decodeMeta(meta []byte) (map[string]any, bool) {
	var buf [8]jsontext.Member
	members, ok := jsontext.Members(meta, buf[:0])
	if !ok {
		return nil, false
	}
	out := make(map[string]any, len(members))
	for _, m := range members {
		if bytes.IndexByte(m.Key, '\\') >= 0 || !utf8.Valid(m.Key) {
			out = nil
			return out, json.Unmarshal(meta, &out) == nil
		}
		var v any
		switch c := m.Value[0]; {
		case c == '"' && bytes.IndexByte(m.Value, '\\') < 0 && utf8.Valid(m.Value):
			v = string(m.Value[1 : len(m.Value)-1])
		case c == '-' || ('0' <= c && c <= '9'):
			f, err := strconv.ParseFloat(string(m.Value), 64)
			if err != nil {
				return nil, false // out of range: encoding/json refuses it too
			}
			v = f
		case string(m.Value) == "true", string(m.Value) == "false":
			v = c == 't'
		case string(m.Value) == "null":
		case string(m.Value) == "{}":
			v = map[string]any{}
		default:
			if json.Unmarshal(m.Value, &v) != nil {
				return nil, false
			}
		}
		out[string(m.Key)] = v
	}
	return out, true
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
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return false
		}
	}
	if jsonOK, streamOK := accepts(r.Header.Values("Accept")); !jsonOK || !streamOK {
		return false
	}
	// DNS rebinding: a request to a loopback listener must name a
	// loopback host (the SDK answers 403 otherwise).
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && local != nil && loopbackAddr(local) && !loopback(r.Host) {
		return false
	}
	return true
}

// loopbackAddr is loopback of the address's text, without writing it for
// a TCP address.
func loopbackAddr(a net.Addr) bool {
	if tcp, ok := a.(*net.TCPAddr); ok {
		return tcp.IP.IsLoopback()
	}
	return loopback(a.String())
}

// accepts reads Accept as the Streamable HTTP transport does: both JSON
// and an event stream must be acceptable.
func accepts(values []string) (jsonOK, streamOK bool) {
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
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

// loopback reports whether an address (host and port, or host alone)
// names a loopback host, as the SDK reads a listener's address and a Host.
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

// serveFast answers the request when the fast path takes it, and reports
// whether it did.
func (s *Server) serveFast(x *exchange) bool {
	r, body, req := x.r, x.body, &x.req
	// (A body nested deeper than fastMaxDepth is one readFast refuses.)
	if s.opts.NoFastPath || !fastEligible(r) || len(body) == 0 || body[0] != '{' || len(body) > sdk.DefaultMaxRequestBodyBytes {
		return false
	}
	in, ok := readFast(body)
	if !ok || !echoable(in.id) {
		return false
	}
	if _, ok := in.meta["progressToken"]; ok {
		return false
	}
	modern := r.Header.Get("Mcp-Protocol-Version") == modernVersion
	if modern && !s.modernCertain(r, in.name, in.meta) {
		return false
	}
	if modern && s.taskSupport(in.name) == registry.TaskRequired {
		return false // the SDK's, to be refused without the tasks extension (callTool)
	}
	if _, ok := in.meta[sdk.MetaKeyProtocolVersion]; ok && !modern {
		return false // a 2026-07-28 request without that header: the SDK's to refuse
	}
	if s.resultFormat(in.name) == registry.ResultMCPContent && logThreshold(in.meta, modern) != "" {
		return false // its log records go out while it runs, as notifications of the SDK's session
	}
	ctx := context.WithValue(r.Context(), requestKey{}, req)
	req.id, req.within = in.id, true
	// The arguments are a member of the body readFast compacted: the core
	// need not read them again.
	req.base.ArgsCompact = true
	call := &sdk.CallToolRequest{Params: &sdk.CallToolParamsRaw{Name: in.name, Arguments: in.arguments, Meta: in.meta}}
	text, res, err := s.callText(ctx, call, "")
	if req.cancelled.Load() {
		// The client cancelled the call: its event stream ends without
		// an answer, as the protocol asks.
		writeAnswer(x.w, http.StatusOK, nil, likeSDK)
		return true
	}
	msg := startAnswer(in.id, len(text)*2+192)
	if err == nil && res == nil {
		// The commonest answer, written here as the SDK would encode it.
		msg = appendResultWith(msg, func(b []byte) []byte { return s.appendTextResult(b, text, modern) })
	} else if err == nil {
		if modern {
			// What the SDK's session adds to a result of protocol 2026-07-28.
			res = complete(res)
			if res.Meta == nil {
				res.Meta = sdk.Meta{}
			}
			if _, ok := res.Meta[sdk.MetaKeyServerInfo]; !ok {
				res.Meta[sdk.MetaKeyServerInfo] = s.impl
			}
		}
		var out []byte
		if out, err = json.Marshal(res); err == nil {
			msg = appendResult(msg, out)
		}
	}
	httpStatus := http.StatusOK
	if err != nil {
		e := asRPCError(err)
		msg = appendError(msg, e)
		if modern {
			httpStatus = modernErrorStatus(e.Code)
		}
	}
	writeAnswer(x.w, httpStatus, msg, likeSDK)
	return true
}

// asRPCError is err as the JSON-RPC error the SDK answers it with: itself
// when it is one, else an internal error with its text.
func asRPCError(err error) *jsonrpc.Error {
	var e *jsonrpc.Error
	if !errors.As(err, &e) {
		e = &jsonrpc.Error{Code: codeInternal, Message: err.Error()}
	}
	return e
}

// appendTextResult appends the tools/call result of a tool's text output
// as the SDK encodes result(text) (TestFastTextResultAsTheSDKWritesIt): one
// text content, the text itself as structuredContent when it is a JSON
// object not nested too deeply (structured), and for protocol 2026-07-28 (modern) the mark of a complete
// result and the server's identity in _meta.
func (s *Server) appendTextResult(b []byte, text string, modern bool) []byte {
	if modern {
		b = append(b, `{"_meta":{"`+sdk.MetaKeyServerInfo+`":`...)
		b = append(append(b, s.implJSON...), `},"content":[{"type":"text","text":`...)
	} else {
		b = append(b, `{"content":[{"type":"text","text":`...)
	}
	b = append(wire.AppendJSONString(b, text), "}]"...)
	if t := strings.TrimSpace(text); structured(t) {
		b = append(append(b, `,"structuredContent":`...), t...)
	}
	if modern {
		b = append(b, `,"resultType":"complete"`...)
	}
	return append(b, '}')
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
func tooDeep(body []byte) bool { return nestsDeeper(body, fastMaxDepth) }

// nestsDeeper reports whether text nests objects and arrays deeper than
// limit (strings skipped).
func nestsDeeper[T string | []byte](body T, limit int) bool {
	depth, inString, escaped := 0, false, false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
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
			if depth++; depth > limit {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
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
