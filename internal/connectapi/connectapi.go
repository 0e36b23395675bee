// Package connectapi is the Connect door: the toolgate.v1 ToolService for
// browsers and Connect clients, served on the HTTP listener by connect-go,
// which speaks the Connect protocol, gRPC-Web and gRPC over one handler.
// Each method turns its request into a toolcall.Call (apiproto.Request),
// runs the call handler — the middleware every door shares, then the core
// — and answers the result, the chunks or the status as a Connect error
// with its details. The request id goes back as the X-Request-Id header.
// The commonest call, a unary InvokeTool with a JSON or binary body, is
// read and answered here without connect-go, with the same result
// (fast.go).
package connectapi

import (
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"connectrpc.com/connect"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/gen/toolgate/v1/toolgatev1connect"
	"github.com/toolgate/toolgate/internal/apiproto"
	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
)

// Options are the Connect door's request limits; the gateway gives every
// door the same (limits.Requests).
type Options struct {
	// MaxMessageBytes bounds a request message, counted after
	// decompression (connect.WithReadMaxBytes): a larger one is refused
	// with RESOURCE_EXHAUSTED, and a compressed one is inflated up to the
	// bound, no further. <= 0: no bound.
	MaxMessageBytes int64
	// MaxHeaderBytes bounds a request's header lines: larger ones are
	// refused with RESOURCE_EXHAUSTED before anything else is done. <= 0:
	// no bound.
	MaxHeaderBytes int
}

// New returns the path prefix the ToolService is served under
// ("/toolgate.v1.ToolService/") and its handler.
func New(h toolcall.Handler, opts Options) (string, http.Handler) {
	return newDoor(h, opts, true)
}

// newDoor is New; fast false leaves every call to connect-go.
func newDoor(h toolcall.Handler, opts Options, fast bool) (string, http.Handler) {
	// A small answer goes out as it is: gzip costs more CPU than the few
	// bytes it saves (connect-go compresses every answer for a client that
	// accepts gzip by default).
	hopts := []connect.HandlerOption{connect.WithCompressMinBytes(compressMinBytes)}
	if opts.MaxMessageBytes > 0 {
		hopts = append(hopts, connect.WithReadMaxBytes(int(opts.MaxMessageBytes)),
			connect.WithCompression("gzip", func() connect.Decompressor { return &boundedGzip{limit: opts.MaxMessageBytes} },
				func() connect.Compressor { return gzip.NewWriter(io.Discard) }))
	}
	svc := &service{h: h, errs: connect.NewErrorWriter(hopts...), maxMessage: opts.MaxMessageBytes, fast: fast}
	path, handler := toolgatev1connect.NewToolServiceHandler(svc, hopts...)
	known := map[string]bool{}
	methods := toolgatev1.File_toolgate_v1_toolgate_proto.Services().ByName("ToolService").Methods()
	for i := range methods.Len() {
		known[path+string(methods.Get(i).Name())] = true
	}
	errs := svc.errs
	// connect-go hands methods no *http.Request: the connection's TLS
	// state (for client certificates) rides in the context.
	return path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := httpcall.HeaderBytes(r); opts.MaxHeaderBytes > 0 && n > opts.MaxHeaderBytes {
			w.Header().Set("Connection", "close")
			_ = errs.Write(w, r, connectError(toolcall.HeadersTooLarge(n, opts.MaxHeaderBytes)))
			return
		}
		if !known[r.URL.Path] && errs.IsSupported(r) {
			// A method the service does not have, answered in the
			// client's protocol (connect-go itself answers a bare 404).
			ce := connectError(toolcall.GatewayError(codes.Unimplemented, ReasonMethodNotFound, "unknown method "+r.URL.Path,
				map[string]string{"method": r.URL.Path}))
			_ = errs.Write(w, r, ce)
			return
		}
		if r.URL.Path == invokePath && svc.fast && svc.serveInvoke(w, r) {
			return
		}
		if r.TLS != nil {
			r = r.WithContext(context.WithValue(r.Context(), tlsKey{}, r.TLS))
		}
		handler.ServeHTTP(w, r)
	})
}

// compressMinBytes is the smallest answer a Connect or gRPC-Web client
// that accepts gzip gets compressed.
const compressMinBytes = 1024

// errInflated ends the inflating of a message that passed the limit.
var errInflated = errors.New("the message inflates past it and was not inflated further")

// boundedGzip is connect-go's gzip decompressor, stopped one byte past
// the message limit: connect-go refuses what passes the limit, then reads
// the rest to count it, which for a decompression bomb would inflate it
// whole.
type boundedGzip struct {
	zr    gzip.Reader
	limit int64
	left  int64
}

func (d *boundedGzip) Reset(r io.Reader) error {
	d.left = d.limit + 1
	return d.zr.Reset(r)
}

func (d *boundedGzip) Read(p []byte) (int, error) {
	if d.left <= 0 {
		return 0, errInflated
	}
	if int64(len(p)) > d.left {
		p = p[:d.left]
	}
	n, err := d.zr.Read(p)
	d.left -= int64(n)
	return n, err
}

func (d *boundedGzip) Close() error { return d.zr.Close() }

type tlsKey struct{}

// ReasonMethodNotFound is the ErrorInfo reason of a call to a method the
// ToolService does not have.
const ReasonMethodNotFound = "METHOD_NOT_FOUND"

type service struct {
	toolgatev1connect.UnimplementedToolServiceHandler
	h          toolcall.Handler
	errs       *connect.ErrorWriter
	maxMessage int64 // Options.MaxMessageBytes
	// fast: unary InvokeTool calls with JSON or binary bodies take serveInvoke
	// (fast.go); off, connect-go serves every call (the tests compare).
	fast bool
}

// request is what every Connect request tells a call.
type request interface {
	Header() http.Header
	Peer() connect.Peer
}

func newCall(ctx context.Context, op toolcall.Op, r request) *toolcall.Call {
	c := &toolcall.Call{Op: op, Header: httpcall.Header(r.Header()), Peer: r.Peer().Addr}
	c.TLS, _ = ctx.Value(tlsKey{}).(*tls.ConnectionState)
	return c
}

// connectError is err (a gRPC status from the core) as a Connect error
// with the same code, message and details.
func connectError(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		var ce *connect.Error
		if errors.As(err, &ce) {
			return ce
		}
	}
	st = toolcall.EnsureErrorInfo(st)
	ce := connect.NewError(connect.Code(st.Code()), errors.New(st.Message()))
	for _, d := range st.Details() {
		if m, ok := d.(protoadapt.MessageV1); ok {
			if detail, derr := connect.NewErrorDetail(protoadapt.MessageV2Of(m)); derr == nil {
				ce.AddDetail(detail)
			}
		}
	}
	return ce
}

// answer runs c; the request id goes into header.
func (s *service) answer(ctx context.Context, c *toolcall.Call, header http.Header) (toolcall.Result, error) {
	res, err := s.h(ctx, c, nil)
	if c.RequestID != "" {
		header.Set("X-Request-Id", c.RequestID)
	}
	if err != nil {
		ce := connectError(err)
		var e *connect.Error
		if errors.As(ce, &e) && c.RequestID != "" {
			e.Meta().Set("X-Request-Id", c.RequestID)
		}
		return res, ce
	}
	return res, nil
}

func (s *service) InvokeTool(ctx context.Context, req *connect.Request[toolgatev1.InvokeToolRequest]) (*connect.Response[toolgatev1.InvokeToolResponse], error) {
	c := newCall(ctx, toolcall.OpInvoke, req)
	c.Name = req.Msg.GetName()
	if err := apiproto.Request(c, req.Msg.GetArguments(), req.Msg.GetArgumentsJson(), req.Msg.GetTimeout()); err != nil {
		return nil, connectError(err)
	}
	out := connect.NewResponse(&toolgatev1.InvokeToolResponse{})
	res, err := s.answer(ctx, c, out.Header())
	if err != nil {
		return nil, err
	}
	out.Msg.Output, out.Msg.OutputJson = res.Output, apiproto.JSONValue(res.Output)
	return out, nil
}

func (s *service) StreamTool(ctx context.Context, req *connect.Request[toolgatev1.StreamToolRequest], ss *connect.ServerStream[toolgatev1.StreamToolResponse]) error {
	c := newCall(ctx, toolcall.OpStream, req)
	c.Name = req.Msg.GetName()
	if err := apiproto.Request(c, req.Msg.GetArguments(), req.Msg.GetArgumentsJson(), req.Msg.GetTimeout()); err != nil {
		return connectError(err)
	}
	var msg toolgatev1.StreamToolResponse
	_, err := s.h(ctx, c, func(ch toolcall.Chunk) error {
		if c.RequestID != "" && ss.ResponseHeader().Get("X-Request-Id") == "" {
			ss.ResponseHeader().Set("X-Request-Id", c.RequestID)
		}
		msg.Output, msg.Index, msg.Last = ch.Text, ch.Index, ch.Last
		return ss.Send(&msg)
	})
	if c.RequestID != "" && ss.ResponseHeader().Get("X-Request-Id") == "" {
		ss.ResponseHeader().Set("X-Request-Id", c.RequestID)
	}
	if err != nil {
		return connectError(err)
	}
	return nil
}

func (s *service) ListTools(ctx context.Context, req *connect.Request[toolgatev1.ListToolsRequest]) (*connect.Response[toolgatev1.ListToolsResponse], error) {
	c := newCall(ctx, toolcall.OpListTools, req)
	c.PageSize, c.PageToken = req.Msg.GetPageSize(), req.Msg.GetPageToken()
	out := connect.NewResponse(&toolgatev1.ListToolsResponse{})
	res, err := s.answer(ctx, c, out.Header())
	if err != nil {
		return nil, err
	}
	out.Msg = apiproto.Tools(res.Details().Tools, res.Details().RegistryVersion, res.Details().NextPageToken)
	return out, nil
}

func (s *service) GetTool(ctx context.Context, req *connect.Request[toolgatev1.GetToolRequest]) (*connect.Response[toolgatev1.GetToolResponse], error) {
	c := newCall(ctx, toolcall.OpGetTool, req)
	c.Name = req.Msg.GetName()
	out := connect.NewResponse(&toolgatev1.GetToolResponse{})
	res, err := s.answer(ctx, c, out.Header())
	if err != nil {
		return nil, err
	}
	out.Msg.Tool = apiproto.Tool(res.Details().Tool, res.Details().RegistryVersion)
	return out, nil
}

func (s *service) ListToolServices(ctx context.Context, req *connect.Request[toolgatev1.ListToolServicesRequest]) (*connect.Response[toolgatev1.ListToolServicesResponse], error) {
	c := newCall(ctx, toolcall.OpListServices, req)
	c.PageSize, c.PageToken = req.Msg.GetPageSize(), req.Msg.GetPageToken()
	out := connect.NewResponse(&toolgatev1.ListToolServicesResponse{})
	res, err := s.answer(ctx, c, out.Header())
	if err != nil {
		return nil, err
	}
	out.Msg = apiproto.Services(res.Details().Services, res.Details().NextPageToken)
	return out, nil
}

func (s *service) GetToolService(ctx context.Context, req *connect.Request[toolgatev1.GetToolServiceRequest]) (*connect.Response[toolgatev1.GetToolServiceResponse], error) {
	c := newCall(ctx, toolcall.OpGetService, req)
	c.Name = req.Msg.GetId()
	out := connect.NewResponse(&toolgatev1.GetToolServiceResponse{})
	res, err := s.answer(ctx, c, out.Header())
	if err != nil {
		return nil, err
	}
	out.Msg.ToolService = apiproto.Service(res.Details().Service)
	return out, nil
}

func (s *service) StartTool(ctx context.Context, req *connect.Request[toolgatev1.StartToolRequest]) (*connect.Response[longrunningpb.Operation], error) {
	c := newCall(ctx, toolcall.OpStartTool, req)
	c.Name = req.Msg.GetName()
	if err := apiproto.Request(c, req.Msg.GetArguments(), req.Msg.GetArgumentsJson(), req.Msg.GetTimeout()); err != nil {
		return nil, connectError(err)
	}
	out := connect.NewResponse(&longrunningpb.Operation{})
	res, err := s.answer(ctx, c, out.Header())
	if err != nil {
		return nil, err
	}
	if res.Details().Operation == nil {
		return nil, connect.NewError(connect.CodeInternal, errors.New("no operation to answer"))
	}
	if out.Msg, err = apiproto.Operation(res.Details().Operation); err != nil {
		return nil, connectError(err)
	}
	return out, nil
}
