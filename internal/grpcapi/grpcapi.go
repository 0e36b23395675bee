// Package grpcapi is the gRPC door: the generated toolgate.v1.ToolService
// served over the core's call handler. Each method turns its request into
// a toolcall.Call (apiproto.Request: the arguments' google.protobuf.Struct
// written as JSON object text), runs the handler — the middleware every door shares, then
// the core — and answers the result, the chunks or the status. The request
// id goes back as the x-request-id header.
package grpcapi

import (
	"context"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/apiproto"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// RequestIDHeader is the response header that carries a call's request id.
const RequestIDHeader = "x-request-id"

// Service implements toolgatev1.ToolServiceServer over a call handler.
type Service struct {
	toolgatev1.UnimplementedToolServiceServer
	h toolcall.Handler
}

// New returns the ToolService serving calls through h.
func New(h toolcall.Handler) *Service { return &Service{h: h} }

// header reads a call's incoming metadata.
type header struct{ ctx context.Context }

func (h header) Values(key string) []string { return metadata.ValueFromIncomingContext(h.ctx, key) }

// newCall is the call of a request with ctx's metadata and connection.
func newCall(ctx context.Context, op toolcall.Op) *toolcall.Call {
	c := &toolcall.Call{Op: op, Header: header{ctx}}
	if p, ok := peer.FromContext(ctx); ok {
		c.PeerAddr = p.Addr // formatted only if a log line names it
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			c.TLS = &ti.State
		}
	}
	return c
}

// answer runs c and sends its request id as a header.
func (s *Service) answer(ctx context.Context, c *toolcall.Call) (toolcall.Result, error) {
	res, err := s.h(ctx, c, nil)
	setRequestID(ctx, c)
	return res, err
}

func setRequestID(ctx context.Context, c *toolcall.Call) {
	if c.RequestID != "" {
		// Sent now rather than set for later: the stream then takes the
		// metadata as it is instead of joining it into a copy. The answer
		// follows it in the same flush.
		_ = grpc.SendHeader(ctx, metadata.MD{RequestIDHeader: []string{c.RequestID}})
	}
}

// InvokeTool implements toolgatev1.ToolServiceServer.
func (s *Service) InvokeTool(ctx context.Context, req *toolgatev1.InvokeToolRequest) (*toolgatev1.InvokeToolResponse, error) {
	c := newCall(ctx, toolcall.OpInvoke)
	c.Name = req.GetName()
	if err := apiproto.Request(c, req.GetArguments(), req.GetArgumentsJson(), req.GetTimeout()); err != nil {
		return nil, err
	}
	res, err := s.answer(ctx, c)
	if err != nil {
		return nil, err
	}
	return &toolgatev1.InvokeToolResponse{Output: res.Output, OutputJson: apiproto.JSONValue(res.Output)}, nil
}

// StreamTool implements toolgatev1.ToolServiceServer.
func (s *Service) StreamTool(req *toolgatev1.StreamToolRequest, ss grpc.ServerStreamingServer[toolgatev1.StreamToolResponse]) error {
	ctx := ss.Context()
	c := newCall(ctx, toolcall.OpStream)
	c.Name = req.GetName()
	if err := apiproto.Request(c, req.GetArguments(), req.GetArgumentsJson(), req.GetTimeout()); err != nil {
		return err
	}
	sent := false
	var msg toolgatev1.StreamToolResponse
	_, err := s.h(ctx, c, func(ch toolcall.Chunk) error {
		if !sent {
			sent = true
			if c.RequestID != "" {
				_ = ss.SendHeader(metadata.MD{RequestIDHeader: []string{c.RequestID}})
			}
		}
		msg.Output, msg.Index, msg.Last = ch.Text, ch.Index, ch.Last
		return ss.Send(&msg)
	})
	if !sent && c.RequestID != "" {
		_ = ss.SetHeader(metadata.MD{RequestIDHeader: []string{c.RequestID}})
	}
	return err
}

// ListTools implements toolgatev1.ToolServiceServer.
func (s *Service) ListTools(ctx context.Context, req *toolgatev1.ListToolsRequest) (*toolgatev1.ListToolsResponse, error) {
	c := newCall(ctx, toolcall.OpListTools)
	c.PageSize, c.PageToken = req.GetPageSize(), req.GetPageToken()
	res, err := s.answer(ctx, c)
	if err != nil {
		return nil, err
	}
	return apiproto.Tools(res.Details().Tools, res.Details().RegistryVersion, res.Details().NextPageToken), nil
}

// GetTool implements toolgatev1.ToolServiceServer.
func (s *Service) GetTool(ctx context.Context, req *toolgatev1.GetToolRequest) (*toolgatev1.GetToolResponse, error) {
	c := newCall(ctx, toolcall.OpGetTool)
	c.Name = req.GetName()
	res, err := s.answer(ctx, c)
	if err != nil {
		return nil, err
	}
	return &toolgatev1.GetToolResponse{Tool: apiproto.Tool(res.Details().Tool, res.Details().RegistryVersion)}, nil
}

// ListToolServices implements toolgatev1.ToolServiceServer.
func (s *Service) ListToolServices(ctx context.Context, req *toolgatev1.ListToolServicesRequest) (*toolgatev1.ListToolServicesResponse, error) {
	c := newCall(ctx, toolcall.OpListServices)
	c.PageSize, c.PageToken = req.GetPageSize(), req.GetPageToken()
	res, err := s.answer(ctx, c)
	if err != nil {
		return nil, err
	}
	return apiproto.Services(res.Details().Services, res.Details().NextPageToken), nil
}

// GetToolService implements toolgatev1.ToolServiceServer.
func (s *Service) GetToolService(ctx context.Context, req *toolgatev1.GetToolServiceRequest) (*toolgatev1.GetToolServiceResponse, error) {
	c := newCall(ctx, toolcall.OpGetService)
	c.Name = req.GetId()
	res, err := s.answer(ctx, c)
	if err != nil {
		return nil, err
	}
	return &toolgatev1.GetToolServiceResponse{ToolService: apiproto.Service(res.Details().Service)}, nil
}
