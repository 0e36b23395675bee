// Package grpcapi is the gRPC door: the generated toolgate.v1.ToolService
// served over the core's call handler. Each method turns its request into
// a toolcall.Call (the arguments' google.protobuf.Struct written as JSON
// object text), runs the handler — the middleware every door shares, then
// the core — and answers the result, the chunks or the status. The request
// id goes back as the x-request-id header.
package grpcapi

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"

	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/apiproto"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
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
		if p.Addr != nil {
			c.Peer = p.Addr.String()
		}
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
		_ = grpc.SetHeader(ctx, metadata.MD{RequestIDHeader: []string{c.RequestID}})
	}
}

// timeout is the call's requested deadline.
func timeout(c *toolcall.Call, d *durationpb.Duration) error {
	if d == nil {
		return nil
	}
	c.TimeoutSet = true
	if err := d.CheckValid(); err != nil {
		return status.Error(codes.InvalidArgument, "timeout must be a positive duration such as \"5s\"")
	}
	c.Timeout = d.AsDuration()
	return nil
}

// InvokeTool implements toolgatev1.ToolServiceServer.
func (s *Service) InvokeTool(ctx context.Context, req *toolgatev1.InvokeToolRequest) (*toolgatev1.InvokeToolResponse, error) {
	c := newCall(ctx, toolcall.OpInvoke)
	c.Name = req.GetName()
	if err := timeout(c, req.GetTimeout()); err != nil {
		return nil, err
	}
	args, err := Arguments(req.GetArguments())
	if err != nil {
		return nil, err
	}
	c.Args = args
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
	if err := timeout(c, req.GetTimeout()); err != nil {
		return err
	}
	args, err := Arguments(req.GetArguments())
	if err != nil {
		return err
	}
	c.Args = args
	sent := false
	var msg toolgatev1.StreamToolResponse
	_, err = s.h(ctx, c, func(ch toolcall.Chunk) error {
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
	return apiproto.Tools(res.Tools, res.RegistryVersion, res.NextPageToken), nil
}

// GetTool implements toolgatev1.ToolServiceServer.
func (s *Service) GetTool(ctx context.Context, req *toolgatev1.GetToolRequest) (*toolgatev1.GetToolResponse, error) {
	c := newCall(ctx, toolcall.OpGetTool)
	c.Name = req.GetName()
	res, err := s.answer(ctx, c)
	if err != nil {
		return nil, err
	}
	return &toolgatev1.GetToolResponse{Tool: apiproto.Tool(res.Tool, res.RegistryVersion)}, nil
}

// ListToolServices implements toolgatev1.ToolServiceServer.
func (s *Service) ListToolServices(ctx context.Context, req *toolgatev1.ListToolServicesRequest) (*toolgatev1.ListToolServicesResponse, error) {
	c := newCall(ctx, toolcall.OpListServices)
	c.PageSize, c.PageToken = req.GetPageSize(), req.GetPageToken()
	res, err := s.answer(ctx, c)
	if err != nil {
		return nil, err
	}
	return apiproto.Services(res.Services, res.NextPageToken), nil
}

// GetToolService implements toolgatev1.ToolServiceServer.
func (s *Service) GetToolService(ctx context.Context, req *toolgatev1.GetToolServiceRequest) (*toolgatev1.GetToolServiceResponse, error) {
	c := newCall(ctx, toolcall.OpGetService)
	c.Name = req.GetId()
	res, err := s.answer(ctx, c)
	if err != nil {
		return nil, err
	}
	return &toolgatev1.GetToolServiceResponse{ToolService: apiproto.Service(res.Service)}, nil
}

// maxDepth bounds the nesting of argument values.
const maxDepth = 64

// Arguments writes a request's arguments as the JSON object text a Call
// carries, keys sorted; nil is an empty object. Numbers are what the
// google.protobuf.Struct holds: doubles, integers written without a
// fraction.
func Arguments(args *structpb.Struct) ([]byte, error) {
	fields := args.GetFields()
	if len(fields) == 0 {
		return []byte("{}"), nil
	}
	b, err := appendStruct(make([]byte, 0, 64), fields, 0)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "arguments: %v", err)
	}
	return b, nil
}

// appendStruct writes fields as a JSON object with sorted keys.
func appendStruct(b []byte, fields map[string]*structpb.Value, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("arguments nest deeper than %d levels", maxDepth)
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b = append(b, '{')
	var err error
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = wire.AppendJSONString(b, k)
		b = append(b, ':')
		if b, err = appendValue(b, fields[k], depth+1); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

func appendValue(b []byte, v *structpb.Value, depth int) ([]byte, error) {
	switch x := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return wire.AppendJSONString(b, x.StringValue), nil
	case *structpb.Value_NumberValue:
		f := x.NumberValue
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("numbers must be finite")
		}
		if f == math.Trunc(f) && math.Abs(f) < 1e15 {
			return strconv.AppendInt(b, int64(f), 10), nil
		}
		return strconv.AppendFloat(b, f, 'g', -1, 64), nil
	case *structpb.Value_BoolValue:
		return strconv.AppendBool(b, x.BoolValue), nil
	case *structpb.Value_StructValue:
		return appendStruct(b, x.StructValue.GetFields(), depth)
	case *structpb.Value_ListValue:
		if depth > maxDepth {
			return nil, fmt.Errorf("arguments nest deeper than %d levels", maxDepth)
		}
		b = append(b, '[')
		var err error
		for i, e := range x.ListValue.GetValues() {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendValue(b, e, depth+1); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	default:
		return append(b, "null"...), nil
	}
}
