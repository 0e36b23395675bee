package httpapi

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The verbs of POST /v1/operations/{id}:{verb}, and :start of a tool.
const (
	verbStart  = "start"
	verbCancel = "cancel"
	verbWait   = "wait"
)

// splitOpVerb splits "id:verb" when verb is cancel or wait.
func splitOpVerb(s string) (id, verb string) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 {
		return s, ""
	}
	switch v := s[i+1:]; v {
	case verbCancel, verbWait:
		return s[:i], v
	}
	return s, ""
}

// serveStart serves POST /v1/tools/{name}:start (the body of :invoke):
// the Operation, at once.
func (a *API) serveStart(w http.ResponseWriter, r *http.Request, name string) {
	if !acceptJSON(w, r) {
		return
	}
	c := newCall(r, toolcall.OpStartTool)
	c.Name = name
	if err := toolSet(r, c); err != nil {
		a.httpError(r.Context(), w, r, err)
		return
	}
	if !a.readCall(w, r, c) {
		return
	}
	if res, err := a.run(w, r, c); err == nil {
		a.writeOperation(w, r, res.Details().Operation)
	}
}

func (a *API) getOperation(w http.ResponseWriter, r *http.Request) {
	if err := noToolSet(r); err != nil {
		a.httpError(r.Context(), w, r, err)
		return
	}
	id := r.PathValue("id")
	if id, ok := strings.CutSuffix(id, ":"+verbStream); ok {
		a.serveOperationStream(w, r, id)
		return
	}
	if !acceptJSON(w, r) {
		return
	}
	if _, verb := splitOpVerb(id); verb != "" {
		notAllowed(w, r, http.MethodPost)
		return
	}
	c := newCall(r, toolcall.OpGetOperation)
	c.Name = id
	if res, err := a.run(w, r, c); err == nil {
		a.writeOperation(w, r, res.Details().Operation)
	}
}

func (a *API) deleteOperation(w http.ResponseWriter, r *http.Request) {
	if !acceptJSON(w, r) {
		return
	}
	if err := noToolSet(r); err != nil {
		a.httpError(r.Context(), w, r, err)
		return
	}
	c := newCall(r, toolcall.OpDeleteOperation)
	c.Name = r.PathValue("id")
	if _, err := a.run(w, r, c); err == nil {
		writeJSONBytes(w, []byte("{}"))
	}
}

func (a *API) listOperations(w http.ResponseWriter, r *http.Request) {
	if !acceptJSON(w, r) {
		return
	}
	if err := noToolSet(r); err != nil {
		a.httpError(r.Context(), w, r, err)
		return
	}
	c := newCall(r, toolcall.OpListOperations)
	if err := pageParams(r, c); err != nil {
		a.httpError(r.Context(), w, r, err)
		return
	}
	if fs := r.URL.Query()["filter"]; len(fs) > 1 {
		a.httpError(r.Context(), w, r, status.Error(codes.InvalidArgument, "filter is given more than once; give it once"))
		return
	} else if len(fs) == 1 {
		c.Filter = fs[0]
	}
	res, err := a.run(w, r, c)
	if err != nil {
		return
	}
	b := []byte(`{"operations":[`)
	for i, op := range res.Details().Operations {
		if i > 0 {
			b = append(b, ',')
		}
		b = a.appendOperation(b, op)
	}
	b = append(b, ']')
	if res.Details().NextPageToken != "" {
		b = append(b, `,"next_page_token":`...)
		b = wire.AppendJSONString(b, res.Details().NextPageToken)
	}
	writeJSONBytes(w, append(b, '}'))
}

// operationVerb serves POST /v1/operations/{id}:cancel and :wait.
func (a *API) operationVerb(w http.ResponseWriter, r *http.Request) {
	call := r.PathValue("call")
	id, verb := splitOpVerb(call)
	if verb == "" {
		if strings.HasSuffix(call, ":"+verbStream) {
			notAllowed(w, r, "GET, HEAD")
			return
		}
		if strings.IndexByte(call, ':') >= 0 {
			writeStatus(w, http.StatusNotFound, codes.NotFound, "ROUTE_NOT_FOUND",
				"no such path: "+r.URL.Path+" (POST /v1/operations/{id}:cancel or :wait, GET /v1/operations/{id}:stream; see /openapi.json)", nil)
			return
		}
		notAllowed(w, r, "GET, HEAD, DELETE")
		return
	}
	if !acceptJSON(w, r) {
		return
	}
	if err := noToolSet(r); err != nil {
		a.httpError(r.Context(), w, r, err)
		return
	}
	op := toolcall.OpCancelOperation
	if verb == verbWait {
		op = toolcall.OpWaitOperation
	}
	c := newCall(r, op)
	c.Name = id
	data, err := io.ReadAll(r.Body)
	if err != nil {
		a.httpError(r.Context(), w, r, httpcall.BodyError(err))
		return
	}
	if !checkBodyType(w, r, data) {
		return
	}
	if err := decodeOpBody(data, c); err != nil {
		a.httpError(r.Context(), w, r, err)
		return
	}
	res, err := a.run(w, r, c)
	if err != nil {
		return
	}
	if op == toolcall.OpCancelOperation {
		writeJSONBytes(w, []byte("{}")) // google.longrunning: Empty
		return
	}
	a.writeOperation(w, r, res.Details().Operation)
}

// decodeOpBody reads {} or {"timeout": "10s"} (wait only).
func decodeOpBody(data []byte, c *toolcall.Call) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	var body struct {
		Timeout *string `json:"timeout"`
		Name    *string `json:"name"` // the path names it; allowed and ignored
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return status.Errorf(codes.InvalidArgument, "the request body could not be read (%v); send {} or, to :wait, {\"timeout\": \"10s\"}", err)
	}
	if body.Timeout != nil {
		if c.Op != toolcall.OpWaitOperation {
			return status.Error(codes.InvalidArgument, "timeout is a field of :wait only")
		}
		d, err := parseDuration(*body.Timeout)
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "timeout: %v", err)
		}
		c.Timeout, c.TimeoutSet = d, true
	}
	return nil
}

func (a *API) writeOperation(w http.ResponseWriter, r *http.Request, op *toolcall.Operation) {
	if op == nil {
		a.httpError(r.Context(), w, r, status.Error(codes.Internal, "no operation to answer"))
		return
	}
	writeJSONBytes(w, a.appendOperation(nil, op))
}

// appendOperation writes op as a google.longrunning.Operation in JSON:
// name, done, metadata, and response ({"output", "output_json"}) or error
// (a google.rpc.Status) once done.
func (a *API) appendOperation(b []byte, op *toolcall.Operation) []byte {
	b = append(b, `{"name":`...)
	b = wire.AppendJSONString(b, "operations/"+op.ID)
	b = append(b, `,"done":`...)
	if op.Done {
		b = append(b, "true"...)
	} else {
		b = append(b, "false"...)
	}
	b = append(b, `,"metadata":{"@type":"type.googleapis.com/toolgate.v1.ToolOperationMetadata","tool":`...)
	b = wire.AppendJSONString(b, op.Tool)
	b = append(b, `,"state":`...)
	b = wire.AppendJSONString(b, strings.ToUpper(op.State))
	b = append(b, `,"create_time":`...)
	b = wire.AppendJSONString(b, op.Created.UTC().Format(time.RFC3339Nano))
	b = append(b, `,"deadline":`...)
	b = wire.AppendJSONString(b, op.Deadline.UTC().Format(time.RFC3339Nano))
	if !op.Ended.IsZero() {
		b = append(b, `,"end_time":`...)
		b = wire.AppendJSONString(b, op.Ended.UTC().Format(time.RFC3339Nano))
	}
	b = append(b, '}')
	switch {
	case !op.Done:
	case op.Err != nil:
		js, err := a.m.Marshal(toolcall.EnsureErrorInfo(status.Convert(op.Err)).Proto())
		if err != nil {
			js = []byte(`{"code":13,"message":"internal error"}`)
		}
		b = append(b, `,"error":`...)
		b = append(b, js...)
	default:
		// protobuf's JSON mapping of an Any: the message's fields and its "@type".
		r := appendInvokeResponse(nil, op.Output)
		b = append(b, `,"response":{"@type":"type.googleapis.com/toolgate.v1.InvokeToolResponse",`...)
		b = append(b, r[1:]...)
	}
	return append(b, '}')
}

func writeJSONBytes(w http.ResponseWriter, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// serveOperationStream serves GET /v1/operations/{id}:stream: the
// operation's answer chunk by chunk, as NDJSON or Server-Sent Events like
// :stream of a tool, from the chunk the query's from_chunk names, or the one
// after an SSE client's Last-Event-ID; SSE events carry the chunk's index
// as their id, so a client that lost its connection resumes where it was,
// on any gateway.
func (a *API) serveOperationStream(w http.ResponseWriter, r *http.Request, id string) {
	ctx := r.Context()
	sse, ok := streamFormat(r.Header.Get("Accept"))
	if !ok {
		notAcceptable(w, r, ContentTypeNDJSON, ContentTypeSSE)
		return
	}
	c := newCall(r, toolcall.OpStreamOperation)
	c.Name = id
	from, err := streamFrom(r)
	if err != nil {
		a.httpError(ctx, w, r, err)
		return
	}
	c.From = from
	s := &httpStream{ctx: ctx, w: w, rc: http.NewResponseController(w), sse: sse, ids: true, call: c,
		heartbeat: a.opts.SSEHeartbeat, log: a.opts.Logger}
	_, err = a.opts.Handler(ctx, c, s.Send)
	s.finish(err, func(err error) { setRequestID(w, c); a.httpError(ctx, w, r, err) }, a.m)
}

// streamFrom reads where an operation's stream starts: the query's
// from_chunk (a chunk index), else the chunk after the Last-Event-ID header's.
func streamFrom(r *http.Request) (int, error) {
	q := r.URL.Query()["from_chunk"]
	last := r.Header.Values("Last-Event-ID")
	switch {
	case len(q) > 1:
		return 0, status.Error(codes.InvalidArgument, "from_chunk is given more than once; give it once")
	case len(q) == 1:
		n, err := strconv.Atoi(q[0])
		if err != nil || n < 0 {
			return 0, status.Errorf(codes.InvalidArgument, "from_chunk %q: want the index of the first chunk wanted, 0 or more", q[0])
		}
		return n, nil
	case len(last) > 0 && strings.TrimSpace(last[0]) != "":
		n, err := strconv.Atoi(strings.TrimSpace(last[0]))
		if err != nil || n < 0 {
			return 0, status.Errorf(codes.InvalidArgument, "Last-Event-ID %q: want the index of the last chunk received", last[0])
		}
		return n + 1, nil
	}
	return 0, nil
}
