// Package server implements the generated toolgate.v1.ToolService: it looks
// tools up in the current registry snapshot, checks and encodes a call's
// arguments, hands the envelope to the bridge, and turns the outcome into
// responses or gRPC statuses. It knows nothing of Pulsar or HTTP.
package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// Bridge sends envelopes and returns the call to read replies from.
type Bridge interface {
	CallUntil(ctx context.Context, t bridge.Target, req wire.Request, deadline time.Time) (*bridge.Call, error)
}

// Snapshots gives the current registry snapshot.
type Snapshots interface {
	Snapshot() *registry.Snapshot
}

// Options tune the server.
type Options struct {
	// DefaultTimeout applies when neither the caller nor the tool service
	// sets one (default 30 s).
	DefaultTimeout time.Duration
	// MaxTimeout caps any deadline a caller asks for (default 10 min).
	MaxTimeout time.Duration
	// StreamIdleTimeout ends a stream whose next chunk takes longer than
	// this (0: only the call's deadline applies).
	StreamIdleTimeout time.Duration
	// DefaultUser is the envelope's user when the call carries no
	// authenticated identity (default "anonymous").
	DefaultUser string
	// User names the authenticated caller of a call from its context, ""
	// for none (default: the name WithUser put there).
	User func(context.Context) string
	// Logger (default: discard).
	Logger *slog.Logger
	// Allowed, when set, hides from the lists the tools a caller may not
	// use (action "list" or "invoke"); the authorization interceptor
	// enforces calls.
	Allowed func(ctx context.Context, action, tool string) bool
}

// Server implements toolgatev1.ToolServiceServer.
type Server struct {
	toolgatev1.UnimplementedToolServiceServer
	reg    Snapshots
	bridge Bridge
	opts   Options
	log    *slog.Logger
}

// New returns a Server.
func New(reg Snapshots, b Bridge, opts Options) *Server {
	if opts.DefaultTimeout <= 0 {
		opts.DefaultTimeout = 30 * time.Second
	}
	if opts.MaxTimeout <= 0 {
		opts.MaxTimeout = 10 * time.Minute
	}
	if opts.DefaultUser == "" {
		opts.DefaultUser = "anonymous"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{reg: reg, bridge: b, opts: opts, log: opts.Logger}
}

type userKey struct{}

// WithUser returns a context carrying the authenticated caller, which
// becomes the envelope's user.
func WithUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

func (s *Server) user(ctx context.Context) string {
	if s.opts.User != nil {
		if u := s.opts.User(ctx); u != "" {
			return u
		}
	} else if u, ok := ctx.Value(userKey{}).(string); ok && u != "" {
		return u
	}
	return s.opts.DefaultUser
}

// start resolves the tool, checks the arguments, works out the call's
// deadline and publishes the envelope. The deadline is the bridge call's
// own (bridge.CallUntil) unless the caller's is the earlier: no context and
// timer per call for it.
func (s *Server) start(ctx context.Context, name string, args argsSource, timeout durationSource) (*registry.Tool, *bridge.Call, error) {
	tool, ok := s.reg.Snapshot().Tool(name)
	if !ok {
		return nil, nil, toolNotFound(name)
	}
	argJSON, err := s.arguments(ctx, tool, args)
	if err != nil {
		return tool, nil, err
	}
	var limit time.Duration
	switch d := timeout.GetTimeout(); {
	case d != nil:
		if err := d.CheckValid(); err != nil || d.AsDuration() <= 0 {
			return tool, nil, status.Error(codes.InvalidArgument, "timeout must be a positive duration such as \"5s\"")
		}
		limit = min(d.AsDuration(), s.opts.MaxTimeout)
	case hasDeadline(ctx):
		limit = s.opts.MaxTimeout // the caller's deadline applies when earlier
	case tool.Service.Timeout > 0:
		limit = min(tool.Service.Timeout, s.opts.MaxTimeout)
	default:
		limit = s.opts.DefaultTimeout
	}
	env := wire.Request{User: s.user(ctx), Config: tool.ConfigJSON, Arguments: argJSON}
	call, err := s.bridge.CallUntil(ctx, bridge.Target{RequestTopic: tool.Service.RequestTopic, ResponseTopic: tool.Service.ResponseTopic}, env, time.Now().Add(limit))
	if err != nil {
		return tool, nil, err
	}
	return tool, call, nil
}

func hasDeadline(ctx context.Context) bool {
	_, ok := ctx.Deadline()
	return ok
}

type argsSource interface {
	GetArguments() *structpb.Struct
}

type durationSource interface {
	GetTimeout() *durationpb.Duration
}

// InvokeTool implements toolgatev1.ToolServiceServer.
func (s *Server) InvokeTool(ctx context.Context, req *toolgatev1.InvokeToolRequest) (*toolgatev1.InvokeToolResponse, error) {
	tool, call, err := s.start(ctx, req.GetName(), req, req)
	if err != nil {
		return nil, s.status(ctx, err, req.GetName(), tool)
	}
	defer call.Close()
	text, err := call.Wait(ctx)
	if err != nil {
		return nil, s.status(ctx, err, req.GetName(), tool)
	}
	return &toolgatev1.InvokeToolResponse{Output: text, OutputJson: parseJSONValue(text)}, nil
}

// StreamTool implements toolgatev1.ToolServiceServer.
func (s *Server) StreamTool(req *toolgatev1.StreamToolRequest, stream toolgatev1.ToolService_StreamToolServer) error {
	ctx := stream.Context()
	tool, call, err := s.start(ctx, req.GetName(), req, req)
	if err != nil {
		return s.status(ctx, err, req.GetName(), tool)
	}
	defer call.Close()
	for i := int64(0); ; i++ {
		ch, err := s.recv(ctx, call)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return s.status(ctx, err, req.GetName(), tool)
		}
		if err := stream.Send(&toolgatev1.StreamToolResponse{Output: ch.Text, Index: i, Last: ch.Last}); err != nil {
			return err
		}
	}
}

// errStreamIdle ends a stream whose next chunk is late.
var errStreamIdle = fmt.Errorf("%w: stream idle", context.DeadlineExceeded)

// recv reads the next chunk, bounded by the stream idle timeout.
func (s *Server) recv(ctx context.Context, call *bridge.Call) (bridge.Chunk, error) {
	if s.opts.StreamIdleTimeout <= 0 {
		return call.Recv(ctx)
	}
	ictx, cancel := context.WithTimeoutCause(ctx, s.opts.StreamIdleTimeout, errStreamIdle)
	defer cancel()
	return call.Recv(ictx)
}

// GetTool implements toolgatev1.ToolServiceServer.
func (s *Server) GetTool(_ context.Context, req *toolgatev1.GetToolRequest) (*toolgatev1.GetToolResponse, error) {
	snap := s.reg.Snapshot()
	t, ok := snap.Tool(req.GetName())
	if !ok {
		return nil, toolNotFound(req.GetName())
	}
	return &toolgatev1.GetToolResponse{Tool: toolProto(t, snap.Version)}, nil
}

// ListTools implements toolgatev1.ToolServiceServer.
func (s *Server) ListTools(ctx context.Context, req *toolgatev1.ListToolsRequest) (*toolgatev1.ListToolsResponse, error) {
	snap := s.reg.Snapshot()
	tools := snap.Tools()
	if s.opts.Allowed != nil {
		visible := make([]*registry.Tool, 0, len(tools))
		for _, t := range tools {
			if s.opts.Allowed(ctx, "list", t.Name) {
				visible = append(visible, t)
			}
		}
		tools = visible
	}
	start, end, next, err := page(len(tools), func(i int) string { return tools[i].Name }, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	out := &toolgatev1.ListToolsResponse{NextPageToken: next}
	for _, t := range tools[start:end] {
		out.Tools = append(out.Tools, toolProto(t, snap.Version))
	}
	return out, nil
}

// GetToolService implements toolgatev1.ToolServiceServer.
func (s *Server) GetToolService(_ context.Context, req *toolgatev1.GetToolServiceRequest) (*toolgatev1.GetToolServiceResponse, error) {
	sv, ok := s.reg.Snapshot().Service(req.GetId())
	if !ok {
		return nil, gatewayError(codes.NotFound, ReasonToolServiceMissing, fmt.Sprintf("tool service %q not found", req.GetId()), map[string]string{"service": req.GetId()})
	}
	return &toolgatev1.GetToolServiceResponse{ToolService: serviceProto(sv)}, nil
}

// ListToolServices implements toolgatev1.ToolServiceServer.
func (s *Server) ListToolServices(_ context.Context, req *toolgatev1.ListToolServicesRequest) (*toolgatev1.ListToolServicesResponse, error) {
	svcs := s.reg.Snapshot().Services()
	start, end, next, err := page(len(svcs), func(i int) string { return svcs[i].ID }, req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	out := &toolgatev1.ListToolServicesResponse{NextPageToken: next}
	for _, sv := range svcs[start:end] {
		out.ToolServices = append(out.ToolServices, serviceProto(sv))
	}
	return out, nil
}

// The reasons of the ErrorInfo (domain ErrorDomain) of errors the gateway
// itself raises, so callers can tell them from a tool service's own (whose
// reason is the service's error type, such as "not-found").
const (
	ReasonToolNotFound       = "TOOL_NOT_FOUND"
	ReasonToolServiceMissing = "TOOL_SERVICE_NOT_FOUND"
)

func toolNotFound(name string) error {
	return gatewayError(codes.NotFound, ReasonToolNotFound, fmt.Sprintf("tool %q not found", name), map[string]string{"tool": name})
}

// gatewayError is a status with an ErrorInfo in the gateway's domain.
func gatewayError(code codes.Code, reason, msg string, md map[string]string) error {
	st := status.New(code, msg)
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: md}); err == nil {
		st = ds
	}
	return st.Err()
}

// page picks the slice of a sorted list that a page request asks for. The
// token is the last key of the previous page, so pages stay consistent when
// the registry reloads between them.
func page(n int, key func(int) string, size int32, token string) (start, end int, next string, err error) {
	switch {
	case size < 0:
		return 0, 0, "", status.Error(codes.InvalidArgument, "page_size must not be negative")
	case size == 0:
		size = 50
	case size > 1000:
		size = 1000
	}
	if token != "" {
		raw, derr := base64.RawURLEncoding.DecodeString(token)
		if derr != nil {
			return 0, 0, "", status.Error(codes.InvalidArgument, "page_token is not one this server issued")
		}
		after := string(raw)
		lo, hi := 0, n
		for lo < hi { // first key > after
			m := (lo + hi) / 2
			if key(m) <= after {
				lo = m + 1
			} else {
				hi = m
			}
		}
		start = lo
	}
	end = min(start+int(size), n)
	if end < n && end > start {
		next = base64.RawURLEncoding.EncodeToString([]byte(key(end - 1)))
	}
	return start, end, next, nil
}
