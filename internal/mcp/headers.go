package mcp

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/toolgate/toolgate/internal/registry"
)

// Custom headers from tool arguments (SEP-2243, protocol 2026-07-28): a
// tool's input schema may mark top-level properties with x-mcp-header;
// a client then mirrors each such argument's value into the request
// header Mcp-Param-<name>, so that proxies and load balancers can route on
// it without reading the body. The value is the argument's text (a string
// as it is, an integer in decimal, a boolean as true or false), or
// "=?base64?<standard Base64 of its UTF-8>?=" when it is not plain header
// text. The server must check that the headers say what the body says:
// a header missing for an argument given, a header for an argument not
// given, malformed Base64, or a different value is refused with HTTP 400
// and the JSON-RPC error -32020 (codeHeaderMismatch).

const (
	paramHeaderPrefix = "Mcp-Param-"
	base64Prefix      = "=?base64?"
	base64Suffix      = "?="
)

// checkParamHeaders refuses a tools/call of protocol 2026-07-28 or later
// whose Mcp-Param headers do not match its arguments, and reports whether
// it answered. It reads the body only for a tool that has header
// parameters, named by the Mcp-Name header; a request whose body names
// another tool is refused for that by the check of Mcp-Name.
func (s *Server) checkParamHeaders(x *exchange) bool {
	r := x.r
	if s.opts.HeaderParams == nil || r.Header.Get("Mcp-Protocol-Version") < modernVersion || r.Header.Get("Mcp-Method") != "tools/call" {
		return false
	}
	name := r.Header.Get("Mcp-Name")
	params := s.opts.HeaderParams(name)
	if len(params) == 0 {
		return false
	}
	var in struct {
		Params struct {
			Name      string                     `json:"name"`
			Arguments map[string]json.RawMessage `json:"arguments"`
		} `json:"params"`
	}
	if json.Unmarshal(x.body, &in) != nil || in.Params.Name != name {
		return false // malformed, or another tool: refused further on
	}
	if err := paramHeadersMatch(r.Header, params, in.Params.Arguments); err != nil {
		s.log.DebugContext(r.Context(), "MCP request refused: Mcp-Param header mismatch", "tool", name, "err", err)
		writeRefusal(x.w, http.StatusBadRequest, requestID(x.body), &jsonrpc.Error{Code: codeHeaderMismatch, Message: err.Error()})
		return true
	}
	return false
}

// paramHeadersMatch checks the Mcp-Param headers of a call's header
// parameters against its arguments.
func paramHeadersMatch(h http.Header, params []registry.HeaderParam, args map[string]json.RawMessage) error {
	for _, p := range params {
		key := paramHeaderPrefix + p.Header
		values := h.Values(key)
		raw, given := args[p.Argument]
		if string(raw) == "null" {
			given = false // a null argument has no header
		}
		switch {
		case !given && len(values) == 0:
			continue
		case !given:
			return fmt.Errorf("header mismatch: the %s header is sent but argument %q is not given", key, p.Argument)
		case len(values) == 0:
			return fmt.Errorf("header mismatch: argument %q is given, so the %s header must carry its value", p.Argument, key)
		case len(values) > 1:
			return fmt.Errorf("header mismatch: the %s header is sent more than once", key)
		}
		text, err := decodeParamHeader(values[0])
		if err != nil {
			return fmt.Errorf("header mismatch: the %s header %w", key, err)
		}
		if !sameValue(text, raw, p.Type) {
			return fmt.Errorf("header mismatch: the %s header does not carry the value of argument %q", key, p.Argument)
		}
	}
	return nil
}

// decodeParamHeader is the text a header value carries: the value itself,
// or the decoded Base64 between "=?base64?" and "?=".
func decodeParamHeader(v string) (string, error) {
	if len(v) < len(base64Prefix)+len(base64Suffix) || !strings.HasPrefix(v, base64Prefix) || !strings.HasSuffix(v, base64Suffix) {
		return v, nil
	}
	b, err := base64.StdEncoding.Strict().DecodeString(v[len(base64Prefix) : len(v)-len(base64Suffix)])
	if err != nil {
		return "", errors.New("is not valid Base64 (standard alphabet, padded) between =?base64? and ?=")
	}
	if !utf8.Valid(b) {
		return "", errors.New("does not decode to UTF-8 text")
	}
	return string(b), nil
}

// sameValue reports whether header text says what the argument's JSON
// value raw says, for a property of type typ: a string as it is, a
// boolean as true or false, an integer as the same number.
func sameValue(text string, raw json.RawMessage, typ string) bool {
	switch typ {
	case "integer":
		var n json.Number
		if json.Unmarshal(raw, &n) != nil {
			return false
		}
		var h json.Number // a JSON number only: not 0x2A, Inf or " 42"
		if json.Unmarshal([]byte(text), &h) != nil {
			return false
		}
		want, err1 := strconv.ParseFloat(n.String(), 64)
		got, err2 := strconv.ParseFloat(h.String(), 64)
		return err1 == nil && err2 == nil && got == want
	case "boolean":
		var b bool
		return json.Unmarshal(raw, &b) == nil && text == strconv.FormatBool(b)
	default:
		var s string
		return json.Unmarshal(raw, &s) == nil && text == s
	}
}
