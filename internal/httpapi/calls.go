package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/apiproto"
	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/jsontext"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The verbs of POST /v1/tools/{name}:{verb}.
const (
	verbInvoke = "invoke"
	verbStream = "stream"
)

// splitVerb splits "name:verb" at its last colon when verb is one of the
// API's; verb is "" otherwise.
func splitVerb(s string) (name, verb string) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s, ""
	}
	switch v := s[i+1:]; v {
	case verbInvoke, verbStream, verbStart:
		return s[:i], v
	}
	return s, ""
}

// newCall is the call of an HTTP request: its header and connection.
func newCall(r *http.Request, op toolcall.Op) *toolcall.Call {
	return &toolcall.Call{Op: op, Header: httpcall.Header(r.Header), TLS: r.TLS, Peer: r.RemoteAddr}
}

// querySet is the query parameter that names the tool set of a call on
// /v1/tools, as the Tool-Set header does.
const querySet = "set"

// toolSet reads the tool set a request on /v1/tools names in its query
// (?set=) into c: given once, not empty, and the same as the Tool-Set
// header's when it has one. Without ?set=, the header alone names it (the
// core reads it).
func toolSet(r *http.Request, c *toolcall.Call) error {
	if r.URL.RawQuery == "" {
		return nil
	}
	v, ok := r.URL.Query()[querySet]
	switch {
	case !ok:
		return nil
	case len(v) > 1:
		return toolcall.GatewayError(codes.InvalidArgument, toolcall.ReasonToolSetConflict,
			fmt.Sprintf("?set= is given %d times; name one tool set", len(v)), nil)
	case v[0] == "":
		return status.Error(codes.InvalidArgument, "?set= is empty: name a tool set (?set=<set>), or leave set out for the whole registry")
	}
	for _, h := range r.Header.Values(toolcall.HeaderToolSet) {
		if h != "" && h != v[0] {
			return toolcall.ToolSetConflict(fmt.Sprintf("the query's set %q and the Tool-Set header's %q are different tool sets: name one, or the same in both", v[0], h), v[0], h)
		}
	}
	c.Set = v[0]
	return nil
}

// noToolSet refuses ?set= on a route no tool set applies to, rather than
// ignore it: sets hold tools, not tool services or operations.
func noToolSet(r *http.Request) error {
	if r.URL.RawQuery == "" || !r.URL.Query().Has(querySet) {
		return nil
	}
	return toolcall.GatewayError(codes.InvalidArgument, toolcall.ReasonToolSetNotApplicable,
		"?set= names a tool set, and "+r.Method+" "+r.URL.Path+" takes none: tool sets apply to /v1/tools "+
			"(ListTools, GetTool, :invoke, :stream, :start); leave set out", map[string]string{"tool_set": r.URL.Query().Get(querySet)})
}

// toolVerb serves POST /v1/tools/{name}:invoke and :stream.
func (a *API) toolVerb(w http.ResponseWriter, r *http.Request) {
	call := r.PathValue("call")
	name, verb := splitVerb(call)
	switch {
	case verb == verbInvoke:
		a.serveInvoke(w, r, name)
	case verb == verbStream:
		a.serveStream(w, r, name)
	case verb == verbStart:
		a.serveStart(w, r, name)
	case strings.IndexByte(call, ':') >= 0:
		writeStatus(w, http.StatusNotFound, codes.NotFound, "ROUTE_NOT_FOUND",
			"no such path: "+r.URL.Path+" (POST /v1/tools/{name}:invoke or :stream; see /openapi.json)", nil)
	default:
		notAllowed(w, r, "GET, HEAD")
	}
}

// serveInvoke serves InvokeTool: the output answered as
// {"output": "...", "output_json": ...}.
func (a *API) serveInvoke(w http.ResponseWriter, r *http.Request, name string) {
	if !acceptJSON(w, r) {
		return
	}
	c := newCall(r, toolcall.OpInvoke)
	c.Name = name
	if err := toolSet(r, c); err != nil {
		a.httpError(r.Context(), w, r, err)
		return
	}
	if !a.readCall(w, r, c) {
		return
	}
	res, err := a.opts.Handler(r.Context(), c, nil)
	setRequestID(w, c)
	if err != nil {
		a.httpError(r.Context(), w, r, err)
		return
	}
	w.Header()["Content-Type"] = jsonContentType
	_, _ = w.Write(appendInvokeResponse(make([]byte, 0, len(res.Output)*2+32), res.Output))
}

// jsonContentType is the Content-Type of a JSON answer, one slice for
// every response (net/http only reads a header's values).
var jsonContentType = []string{"application/json"}

func setRequestID(w http.ResponseWriter, c *toolcall.Call) {
	if c.RequestID != "" {
		w.Header()["X-Request-Id"] = []string{c.RequestID}
	}
}

// appendInvokeResponse writes an invoke's answer: output always,
// output_json when the output is valid JSON — the output text itself,
// exactly as the tool service wrote it.
func appendInvokeResponse(b []byte, output string) []byte {
	b = append(b, `{"output":`...)
	b = wire.AppendJSONString(b, output)
	if raw := strings.TrimSpace(output); apiproto.IsJSON(raw) && jsonValid(raw) {
		b = append(b, `,"output_json":`...)
		b = append(b, raw...)
	}
	return append(b, '}')
}

func (a *API) listTools(w http.ResponseWriter, r *http.Request) {
	if !acceptJSON(w, r) {
		return
	}
	c := newCall(r, toolcall.OpListTools)
	if err := pageParams(r, c); err != nil {
		a.httpError(r.Context(), w, r, err)
		return
	}
	if err := toolSet(r, c); err != nil { // the tools of one tool set, as it shows them
		a.httpError(r.Context(), w, r, err)
		return
	}
	res, err := a.run(w, r, c)
	if err == nil {
		a.writeMessage(w, r, apiproto.Tools(res.Details().Tools, res.Details().RegistryVersion, res.Details().NextPageToken))
	}
}

func (a *API) getTool(w http.ResponseWriter, r *http.Request) {
	if !acceptJSON(w, r) {
		return
	}
	name := r.PathValue("name")
	if _, verb := splitVerb(name); verb != "" {
		notAllowed(w, r, http.MethodPost)
		return
	}
	c := newCall(r, toolcall.OpGetTool)
	c.Name = name
	if err := toolSet(r, c); err != nil {
		a.httpError(r.Context(), w, r, err)
		return
	}
	res, err := a.run(w, r, c)
	if err == nil {
		a.writeMessage(w, r, apiproto.Tool(res.Details().Tool, res.Details().RegistryVersion)) // response_body: "tool"
	}
}

func (a *API) listServices(w http.ResponseWriter, r *http.Request) {
	if !acceptJSON(w, r) {
		return
	}
	c := newCall(r, toolcall.OpListServices)
	if err := noToolSet(r); err != nil {
		a.httpError(r.Context(), w, r, err)
		return
	}
	if err := pageParams(r, c); err != nil {
		a.httpError(r.Context(), w, r, err)
		return
	}
	res, err := a.run(w, r, c)
	if err == nil {
		a.writeMessage(w, r, apiproto.Services(res.Details().Services, res.Details().NextPageToken))
	}
}

func (a *API) getService(w http.ResponseWriter, r *http.Request) {
	if !acceptJSON(w, r) {
		return
	}
	if err := noToolSet(r); err != nil {
		a.httpError(r.Context(), w, r, err)
		return
	}
	c := newCall(r, toolcall.OpGetService)
	c.Name = r.PathValue("id")
	res, err := a.run(w, r, c)
	if err == nil {
		a.writeMessage(w, r, apiproto.Service(res.Details().Service)) // response_body: "tool_service"
	}
}

// run serves a unary call, answering its error itself.
func (a *API) run(w http.ResponseWriter, r *http.Request, c *toolcall.Call) (toolcall.Result, error) {
	res, err := a.opts.Handler(r.Context(), c, nil)
	setRequestID(w, c)
	if err != nil {
		a.httpError(r.Context(), w, r, err)
	}
	return res, err
}

func (a *API) writeMessage(w http.ResponseWriter, r *http.Request, m proto.Message) {
	body, err := a.m.Marshal(m)
	if err != nil {
		a.httpError(r.Context(), w, r, status.Error(codes.Internal, "the answer could not be written"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// pageParams reads page_size and page_token (or their JSON names) from
// the query. Each may be given once; page_size is a whole number.
func pageParams(r *http.Request, c *toolcall.Call) error {
	q := r.URL.Query()
	get := func(name, jsonName string) (string, bool, error) {
		vs := slices.Concat(q[name], q[jsonName])
		switch len(vs) {
		case 0:
			return "", false, nil
		case 1:
			return vs[0], true, nil
		}
		return "", false, status.Errorf(codes.InvalidArgument, "%s is given %d times; give it once", name, len(vs))
	}
	size, ok, err := get("page_size", "pageSize")
	if err != nil {
		return err
	}
	if ok {
		n, err := strconv.ParseInt(size, 10, 32)
		if err != nil {
			return toolcall.GatewayError(codes.InvalidArgument, toolcall.ReasonInvalidPageSize, fmt.Sprintf("page_size %q is not a whole number", size), nil)
		}
		c.PageSize = int32(n)
	}
	token, _, err := get("page_token", "pageToken")
	c.PageToken = token
	return err
}

func (a *API) httpError(ctx context.Context, w http.ResponseWriter, r *http.Request, err error) {
	runtime.HTTPError(ctx, a.gw, a.m, w, r, toolcall.WithErrorInfo(err))
}

// readCall reads the body of an invoke or stream request into c; when it
// cannot, it answers the error and returns false.
func (a *API) readCall(w http.ResponseWriter, r *http.Request, c *toolcall.Call) bool {
	data, err := httpcall.ReadBody(r)
	if err != nil {
		a.httpError(r.Context(), w, r, httpcall.BodyError(err))
		return false
	}
	if !checkBodyType(w, r, data) {
		return false
	}
	if err := decodeCall(data, c); err != nil {
		a.httpError(r.Context(), w, r, err)
		return false
	}
	return true
}

// decodeCall reads an invoke or stream body into c: the arguments as they
// are, the timeout. The common body takes one pass over the text; a body
// it cannot read is decoded in full to say what is wrong with it.
func decodeCall(data []byte, c *toolcall.Call) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil // an empty body is an empty request
	}
	ok, err := callBody(data, c)
	if err != nil {
		return err
	}
	if ok {
		return nil
	}
	req := &toolgatev1.InvokeToolRequest{}
	if err := decodeRequest(data, req); err != nil {
		return toolcall.GatewayError(codes.InvalidArgument, toolcall.ReasonInvalidBody, err.Error(), nil)
	}
	// The full decoder took what the one pass did not (escapes in the
	// body's own keys).
	return toolcall.GatewayError(codes.InvalidArgument, toolcall.ReasonInvalidBody, "the request body could not be read; send {\"arguments\": {...}, \"timeout\": \"5s\"}", nil)
}

func jsonValid(s string) bool { return jsontext.ValidString(s) }
