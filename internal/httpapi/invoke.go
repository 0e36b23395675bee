package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// serveInvokePath serves POST /v1/tools/{name}:invoke, the route
// (api.route) having checked the path: the name is its last segment
// before ":invoke", as grpc-gateway's mux would read it (r.URL.Path,
// already unescaped).
func (a *api) serveInvokePath(w http.ResponseWriter, r *http.Request) {
	a.serveInvoke(w, r, strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/v1/tools/"), ":invoke"))
}

// serveInvoke serves an InvokeTool call in process. It is the busiest
// route, so it does itself what grpc-gateway's mux and generated handler
// would, with less: the call's metadata holds only the headers the
// interceptors read, and the answer is written without reflection.
func (a *api) serveInvoke(w http.ResponseWriter, r *http.Request, name string) {
	ctx := a.callContext(r)
	ctx = grpc.NewContextWithServerTransportStream(ctx, &headerStream{method: toolgatev1.ToolService_InvokeTool_FullMethodName, w: w, header: a.opts.ResponseHeader})
	req := &toolgatev1.InvokeToolRequest{}
	ctx, err := decodeInvoke(ctx, r.Body, req)
	if err != nil {
		a.httpError(ctx, w, r, status.Error(codes.InvalidArgument, err.Error()))
		return
	}
	req.Name = name
	resp, err := a.opts.Service.InvokeTool(ctx, req)
	if err != nil {
		a.httpError(ctx, w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(appendInvokeResponse(make([]byte, 0, len(resp.GetOutput())*2+32), resp))
}

// callContext is the context of a call served in process: r's, with the
// request headers the interceptors read (credentials, request id, trace
// context) as incoming gRPC metadata, mapped by the same matcher the
// grpc-gateway mux uses. grpc-gateway's "grpcgateway-" copies of the
// standard HTTP headers are left out: nothing on the call path reads them.
// The metadata shares the header's value slices: nothing on the call path
// writes to either.
func (a *api) callContext(r *http.Request) context.Context {
	md := make(metadata.MD, 4)
	for k, vs := range r.Header {
		key, ok := a.headerKey(k)
		if !ok {
			continue
		}
		if prev, dup := md[key]; dup {
			md[key] = append(slices.Clip(prev), vs...)
		} else {
			md[key] = vs
		}
	}
	return metadata.NewIncomingContext(r.Context(), md)
}

// maxHeaderKeys bounds the memory of headerKey's answers: header names
// come from clients.
const maxHeaderKeys = 256

// headerKey is the metadata key of request header k (canonical form), or
// false when the header is not passed on. Options.IncomingHeader answers
// each name once; the answers are kept.
func (a *api) headerKey(k string) (string, bool) {
	if v, ok := a.headerKeys.Load(k); ok {
		hk := v.(headerKeyAnswer)
		return hk.key, hk.ok
	}
	var hk headerKeyAnswer
	if k == "Authorization" {
		hk = headerKeyAnswer{"authorization", true}
	} else {
		match := a.opts.IncomingHeader
		if match == nil {
			match = runtime.DefaultHeaderMatcher
		}
		if key, ok := match(k); ok && !strings.HasPrefix(key, runtime.MetadataPrefix) {
			hk = headerKeyAnswer{strings.ToLower(key), true}
		}
	}
	if a.headerKeyN.Load() < maxHeaderKeys {
		if _, loaded := a.headerKeys.LoadOrStore(k, hk); !loaded {
			a.headerKeyN.Add(1)
		}
	}
	return hk.key, hk.ok
}

type headerKeyAnswer struct {
	key string
	ok  bool
}

// headerStream lets a unary call served in process set response headers
// (grpc.SetHeader), as a gRPC server transport would.
type headerStream struct {
	method string
	w      http.ResponseWriter
	header func(string) (string, bool)
}

func (s *headerStream) Method() string { return s.method }

func (s *headerStream) SetHeader(md metadata.MD) error {
	addHeaders(s.w.Header(), md, s.header)
	return nil
}

// addHeaders adds response metadata to h under the names header gives
// (default: Grpc-Metadata-<key>), as grpc-gateway does for its calls.
func addHeaders(h http.Header, md metadata.MD, header func(string) (string, bool)) {
	for k, vs := range md {
		name, ok := runtime.MetadataHeaderPrefix+k, true
		if header != nil {
			name, ok = header(k)
		}
		if !ok {
			continue
		}
		for _, v := range vs {
			h.Add(name, v)
		}
	}
}

func (s *headerStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *headerStream) SetTrailer(metadata.MD) error    { return nil }

// appendInvokeResponse writes r as the gateway's marshaler would: output
// always, output_json only when set. output_json is output parsed as JSON,
// so the output text itself is written (exactly the value, without a
// round trip through google.protobuf.Value).
func appendInvokeResponse(b []byte, r *toolgatev1.InvokeToolResponse) []byte {
	b = append(b, `{"output":`...)
	b = wire.AppendJSONString(b, r.GetOutput())
	if r.GetOutputJson() != nil {
		b = append(b, `,"output_json":`...)
		if raw := strings.TrimSpace(r.GetOutput()); json.Valid([]byte(raw)) {
			b = append(b, raw...)
		} else if v, err := protojson.Marshal(r.GetOutputJson()); err == nil {
			b = append(b, v...)
		} else {
			b = append(b, "null"...)
		}
	}
	return append(b, '}')
}
