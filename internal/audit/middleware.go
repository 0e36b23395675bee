package audit

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/internal/httpcall"
	"github.com/toolgate/toolgate/internal/limits"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// The doors, as the lines name them.
const (
	DoorGRPC    = "grpc"
	DoorREST    = "rest"
	DoorMCP     = "mcp"
	DoorConnect = "connect"
	DoorGRPCWeb = "grpc-web"
	// DoorHTTP is a request to the HTTP listener that is no door's (a
	// page, the OpenAPI document), refused by the request limits.
	DoorHTTP = "http"
)

// requestIDHeader is the request id's header and metadata key.
const requestIDHeader = "x-request-id"

// pending is one request (HTTP) or RPC (the gRPC listener) while it is
// served: which door it came by, whether it became a call (the call
// chain wrote its line), and what refused it before it did. It rides in
// the request's context under limits' key, so that the request limits
// tell it of their refusals (limits.Refusals).
type pending struct {
	door   string
	method string // gRPC: the RPC's full method
	start  time.Time
	calls  atomic.Int32
	// refusal is the first refusal heard of before a call was made.
	refusal atomic.Pointer[error]
	// w keeps the HTTP answer's status, for the refusals no hook
	// reported.
	w statusWriter
}

// Refused notes err as the request's refusal (the first one counts).
func (p *pending) Refused(err error) { p.refusal.CompareAndSwap(nil, &err) }

// pendingOf is ctx's request or RPC, nil when none.
func pendingOf(ctx context.Context) *pending {
	p, _ := limits.RefusalsOf(ctx).(*pending)
	return p
}

// Middleware is the call chain's: one line per call when it ends,
// whatever its outcome. Put it first, before the call log, so that it
// sees every call, the refused ones too (the call log gives the call its
// request id on the way in; this reads it on the way out). A nil *Log's
// is nil: no middleware.
func (l *Log) Middleware() toolcall.Middleware {
	if l == nil {
		return nil
	}
	return func(next toolcall.Handler) toolcall.Handler {
		return func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
			start := time.Now()
			var out *outBytes
			if emit != nil {
				out = &outBytes{emit: emit}
				emit = out.count
			}
			res, err := next(ctx, c, emit)
			l.call(ctx, c, res, err, start, out)
			return res, err
		}
	}
}

// outBytes counts the bytes a call emits.
type outBytes struct {
	emit toolcall.Emit
	n    int64
}

func (o *outBytes) count(ch toolcall.Chunk) error {
	o.n += int64(len(ch.Text))
	return o.emit(ch)
}

// call hands the line of call c, which ended with res and err, to the
// writer.
func (l *Log) call(ctx context.Context, c *toolcall.Call, res toolcall.Result, err error, start time.Time, out *outBytes) {
	r := l.get()
	r.kind, r.start, r.dur = kindCall, start, time.Since(start)
	if p := pendingOf(ctx); p != nil {
		p.calls.Add(1)
		r.door = p.door
	}
	r.requestID, r.method, r.tool, r.set = c.RequestID, c.MethodName(), c.Name, c.Set
	if c.Authenticated {
		r.authenticated, r.subject, r.as = true, c.Caller.Subject(), c.Caller.As
	}
	r.peer, r.peerAddr, r.err = c.Peer, c.PeerAddr, err
	r.bytesOut = int64(len(res.Output))
	if res.Detail != nil && res.Operation != nil {
		r.bytesOut += int64(len(res.Operation.Output))
	}
	if out != nil {
		r.bytesOut += out.n
	}
	switch c.Op {
	case toolcall.OpInvoke, toolcall.OpStream, toolcall.OpStartTool:
		r.bytesIn = int64(len(c.Args))
		r.digest, r.hasDigest = argumentsDigest(c.Args, c.ArgsCompact), true
		if l.opts.Arguments {
			l.takeArguments(r, c.Args)
		}
	}
	l.record(r)
}

// refusal hands the line of a request refused before it became a call.
func (l *Log) refusal(door, method, requestID, source string, start time.Time, err error) {
	r := l.get()
	r.kind, r.start, r.dur = kindCall, start, time.Since(start)
	r.door, r.method, r.peer, r.err = door, method, source, err
	if saneRequestID(requestID) {
		r.requestID = requestID
	}
	l.record(r)
}

// HTTP is the HTTP listener's handler h, audited: each request rides
// with its pending in its context (the chain's lines name its door, and
// the request limits tell it of their refusals, limits.WithRefusals),
// and a request refused before it became a call gets a line of its own
// once answered — refused by the request limits (headers over
// maxHeaderBytes, a body too large, too slow, in an encoding not
// decoded), by MCP's authentication (Authenticate), or answered 401,
// 403, 408, 413, 415, 429 or 431 by whatever refused it. Other requests
// that made no call (a page, a 404) get none. Put it outermost.
func (l *Log) HTTP(h http.Handler, maxHeaderBytes int) http.Handler {
	if l == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := &pending{door: doorOf(r), start: time.Now()}
		if n := httpcall.HeaderBytes(r); maxHeaderBytes > 0 && n > maxHeaderBytes {
			p.Refused(toolcall.HeadersTooLarge(n, maxHeaderBytes))
		}
		p.w.ResponseWriter = w
		h.ServeHTTP(&p.w, r.WithContext(limits.WithRefusals(r.Context(), p)))
		if p.calls.Load() > 0 {
			return
		}
		err := p.refused()
		if err == nil {
			return
		}
		l.refusal(p.door, r.Method+" "+r.URL.Path, r.Header.Get(requestIDHeader), r.RemoteAddr, p.start, err)
	})
}

// refused is the request's refusal: the one a hook reported, else the
// one its answer's status says, nil when it was not refused so.
func (p *pending) refused() error {
	if e := p.refusal.Load(); e != nil {
		return *e
	}
	code := codes.OK
	switch p.w.status {
	case http.StatusUnauthorized:
		code = codes.Unauthenticated
	case http.StatusForbidden:
		code = codes.PermissionDenied
	case http.StatusRequestTimeout:
		code = codes.DeadlineExceeded
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests, http.StatusRequestHeaderFieldsTooLarge:
		code = codes.ResourceExhausted
	case http.StatusUnsupportedMediaType:
		code = codes.Unimplemented
	case http.StatusOK:
		// gRPC over the HTTP listener answers its refusals in trailers.
		code = grpcStatus(p.w.Header())
	}
	if code == codes.OK {
		return nil
	}
	return status.Error(code, http.StatusText(p.w.status))
}

// grpcStatus is a gRPC answer's refusal code from its trailers (or
// headers: a trailers-only answer): OK for other answers and codes.
func grpcStatus(h http.Header) codes.Code {
	v := h.Get("Grpc-Status")
	if v == "" {
		v = h.Get(http.TrailerPrefix + "Grpc-Status")
	}
	switch v {
	case "16":
		return codes.Unauthenticated
	case "7":
		return codes.PermissionDenied
	case "8":
		return codes.ResourceExhausted
	}
	return codes.OK
}

// doorOf is the door r is for, by its path (and, on the Connect door's
// paths, its protocol).
func doorOf(r *http.Request) string {
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, "/v1/"):
		return DoorREST
	case path == "/mcp" || strings.HasPrefix(path, "/mcp/"):
		return DoorMCP
	case strings.HasPrefix(path, "/toolgate.v1.ToolService/"):
		ct := r.Header.Get("Content-Type")
		switch {
		case strings.HasPrefix(ct, "application/grpc-web"):
			return DoorGRPCWeb
		case strings.HasPrefix(ct, "application/grpc"):
			return DoorGRPC
		}
		return DoorConnect
	}
	return DoorHTTP
}

// Authenticate is authenticate, telling the request's pending of its
// refusals: for a door that authenticates a request before any call
// (MCP), so that a refused request gets its line with the refusal's
// code and reason.
func (l *Log) Authenticate(authenticate func(context.Context, *toolcall.Call) error) func(context.Context, *toolcall.Call) error {
	if l == nil {
		return authenticate
	}
	return func(ctx context.Context, c *toolcall.Call) error {
		err := authenticate(ctx, c)
		if err != nil {
			if p := pendingOf(ctx); p != nil {
				p.Refused(err)
			}
		}
		return err
	}
}

// statusWriter is a ResponseWriter that keeps the status of its answer.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush flushes, for the streams (NDJSON, Server-Sent Events, gRPC).
func (w *statusWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap is the ResponseWriter under w, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Tap is the gRPC server's tap handle next, audited: a call it refuses
// (metadata too large, metadata reserved for the gateway) gets its line.
// It runs as grpc-go accepts the stream, under the transport's lock: it
// only hands the record over.
func (l *Log) Tap(next tap.ServerInHandle) tap.ServerInHandle {
	if l == nil || next == nil {
		return next
	}
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		start := time.Now()
		ctx2, err := next(ctx, info)
		if err != nil {
			l.refusal(DoorGRPC, info.FullMethodName, first(info.Header, requestIDHeader), peerOf(ctx), start, err)
		}
		return ctx2, err
	}
}

func first(md metadata.MD, key string) string {
	if v := md[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Registrar is s, registering each service with its methods audited:
// a call whose request message the server refuses before the door's
// method runs — over the size bound (grpc-go's own refusal), not in time
// (the body clock), or refused by what reads it — gets its line, and the
// calls each RPC makes are known as the gRPC door's. A nil *Log's is s.
func (l *Log) Registrar(s grpc.ServiceRegistrar) grpc.ServiceRegistrar {
	if l == nil {
		return s
	}
	return registrar{l: l, s: s}
}

type registrar struct {
	l *Log
	s grpc.ServiceRegistrar
}

func (r registrar) RegisterService(desc *grpc.ServiceDesc, impl any) {
	d := *desc
	d.Methods = slices.Clone(desc.Methods)
	for i, m := range d.Methods {
		d.Methods[i].Handler = r.l.unary("/"+desc.ServiceName+"/"+m.MethodName, m.Handler)
	}
	d.Streams = slices.Clone(desc.Streams)
	for i, st := range d.Streams {
		d.Streams[i].Handler = r.l.stream("/"+desc.ServiceName+"/"+st.StreamName, st.Handler)
	}
	r.s.RegisterService(&d, impl)
}

// rpc is one RPC of the gRPC listener: its pending, and how its request
// message is read.
type rpc struct {
	pending
	l   *Log
	ctx context.Context
	dec func(any) error
	grpc.ServerStream
	received bool
}

// unary is a unary method's handler h, audited.
func (l *Log) unary(method string, h grpc.MethodHandler) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
		r := &rpc{pending: pending{door: DoorGRPC, method: method, start: time.Now()}, l: l, dec: dec}
		r.ctx = limits.WithRefusals(ctx, &r.pending)
		return h(srv, r.ctx, r.decode, in)
	}
}

// stream is a streaming method's handler h, audited.
func (l *Log) stream(method string, h grpc.StreamHandler) grpc.StreamHandler {
	return func(srv any, ss grpc.ServerStream) error {
		r := &rpc{pending: pending{door: DoorGRPC, method: method, start: time.Now()}, l: l, ServerStream: ss}
		r.ctx = limits.WithRefusals(ss.Context(), &r.pending)
		return h(srv, r)
	}
}

// decode reads a unary call's request message.
func (r *rpc) decode(m any) error {
	err := r.dec(m)
	r.read(err)
	return err
}

// Context is the stream's context, with the RPC's pending.
func (r *rpc) Context() context.Context { return r.ctx }

// RecvMsg reads a stream's message.
func (r *rpc) RecvMsg(m any) error {
	err := r.ServerStream.RecvMsg(m)
	r.read(err)
	return err
}

// read notes how reading the request message went: a refusal of the
// first message, before the door's method could make a call, gets its
// line (a client that went away, or a message that is no message, none).
func (r *rpc) read(err error) {
	if r.received {
		return
	}
	r.received = true
	if err == nil {
		return
	}
	switch status.Code(err) {
	case codes.ResourceExhausted, codes.DeadlineExceeded, codes.Unauthenticated, codes.PermissionDenied:
		id := ""
		if v := metadata.ValueFromIncomingContext(r.ctx, requestIDHeader); len(v) > 0 {
			id = v[0]
		}
		r.l.refusal(DoorGRPC, r.method, id, peerOf(r.ctx), r.start, err)
	}
}

// peerOf is the address of ctx's peer, "" when unknown.
func peerOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// saneRequestID accepts 1 to 64 characters of [A-Za-z0-9._-], as the
// call log does.
func saneRequestID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}
