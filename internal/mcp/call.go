package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/argsjson"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// timeoutMeta is the _meta key of a tools/call's deadline.
const timeoutMeta = "timeout"

func (s *Server) callTool(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
	p := req.Params
	if p == nil || p.Name == "" {
		return nil, rpcError(codeInvalidParams, "tools/call needs the name of a tool", nil)
	}
	// The common arguments go on as JSON text (argsjson); the rest are
	// decoded here, with its error.
	var args *structpb.Struct
	if raw, ok := argsjson.Compact(p.Arguments); ok {
		ctx = argsjson.NewContext(ctx, raw)
	} else {
		var err error
		if args, err = arguments(p.Arguments); err != nil {
			return nil, rpcError(codeInvalidParams, err.Error(), nil)
		}
	}
	timeout, err := s.timeout(p.GetMeta())
	if err != nil {
		return nil, rpcError(codeInvalidParams, err.Error(), nil)
	}
	ctx, done, err := callContext(ctx)
	if err != nil {
		return nil, err
	}
	defer done()

	if token := p.GetProgressToken(); token != nil {
		return s.stream(ctx, req.Session, token, &toolgatev1.StreamToolRequest{Name: p.Name, Arguments: args, Timeout: timeout})
	}
	resp, err := s.svc.InvokeTool(ctx, &toolgatev1.InvokeToolRequest{Name: p.Name, Arguments: args, Timeout: timeout})
	if err != nil {
		return callError(err)
	}
	res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: resp.GetOutput()}}}
	if obj := resp.GetOutputJson().GetStructValue(); obj != nil {
		res.StructuredContent = obj.AsMap()
	}
	return res, nil
}

// arguments decodes a tools/call's arguments: a JSON object, or nothing.
func arguments(raw []byte) (*structpb.Struct, error) {
	args := &structpb.Struct{}
	if len(raw) == 0 || string(raw) == "null" {
		return args, nil
	}
	if err := protojson.Unmarshal(raw, args); err != nil {
		return nil, errors.New("arguments must be a JSON object")
	}
	return args, nil
}

// timeout reads _meta.timeout: a duration string ("5s", "0.25s", "200ms",
// "1m30s") or a number of seconds. Without it the call gets
// Options.DefaultTimeout, or nil (the ToolService decides).
func (s *Server) timeout(meta map[string]any) (*durationpb.Duration, error) {
	v, ok := meta[timeoutMeta]
	if !ok || v == nil {
		if s.opts.DefaultTimeout > 0 {
			return durationpb.New(s.opts.DefaultTimeout), nil
		}
		return nil, nil
	}
	var d time.Duration
	switch t := v.(type) {
	case string:
		var err error
		if d, err = time.ParseDuration(strings.TrimSpace(t)); err != nil {
			return nil, fmt.Errorf("_meta.timeout %q is not a duration such as \"5s\" or \"200ms\"", t)
		}
	case float64:
		if math.IsNaN(t) || t > math.MaxInt64/float64(time.Second) {
			return nil, fmt.Errorf("_meta.timeout %v is out of range", t)
		}
		d = time.Duration(t * float64(time.Second))
	default:
		return nil, fmt.Errorf("_meta.timeout must be a duration string (\"5s\") or a number of seconds, not %T", v)
	}
	if d <= 0 {
		return nil, fmt.Errorf("_meta.timeout must be positive, got %v", v)
	}
	return durationpb.New(d), nil
}

// stream calls StreamTool, sending each chunk to the client as a progress
// notification, and answers with the chunks joined.
func (s *Server) stream(ctx context.Context, session *sdk.ServerSession, token any, in *toolgatev1.StreamToolRequest) (*sdk.CallToolResult, error) {
	var out strings.Builder
	send := func(c *toolgatev1.StreamToolResponse) error {
		out.WriteString(c.GetOutput())
		err := session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
			ProgressToken: token, Progress: float64(c.GetIndex() + 1), Message: c.GetOutput()})
		if err != nil {
			return fmt.Errorf("sending progress: %w", err)
		}
		return nil
	}
	if err := s.svc.StreamTool(in, &chunkStream{ctx: ctx, send: send}); err != nil {
		if _, isStatus := status.FromError(err); ctx.Err() == nil && !isStatus {
			// The client stopped taking notifications.
			s.log.DebugContext(ctx, "MCP stream ended", "tool", in.GetName(), "err", err)
		}
		return callError(err)
	}
	res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: out.String()}}}
	if obj := jsonObject(out.String()); obj != nil {
		res.StructuredContent = obj
	}
	return res, nil
}

// jsonObject is text as a JSON object, or nil when it is not one.
func jsonObject(text string) map[string]any {
	t := strings.TrimSpace(text)
	if !strings.HasPrefix(t, "{") {
		return nil
	}
	var obj structpb.Struct
	if protojson.Unmarshal([]byte(t), &obj) != nil {
		return nil
	}
	return obj.AsMap()
}

// chunkStream is the server side of a StreamTool call served in process:
// what the service sends goes to send.
type chunkStream struct {
	ctx  context.Context
	send func(*toolgatev1.StreamToolResponse) error
}

var _ grpc.ServerStreamingServer[toolgatev1.StreamToolResponse] = (*chunkStream)(nil)

func (c *chunkStream) Context() context.Context                    { return c.ctx }
func (c *chunkStream) Send(m *toolgatev1.StreamToolResponse) error { return c.send(m) }
func (c *chunkStream) SetHeader(metadata.MD) error                 { return nil }
func (c *chunkStream) SendHeader(metadata.MD) error                { return nil }
func (c *chunkStream) SetTrailer(metadata.MD)                      {}
func (c *chunkStream) RecvMsg(any) error                           { return io.EOF }

func (c *chunkStream) SendMsg(m any) error {
	r, ok := m.(*toolgatev1.StreamToolResponse)
	if !ok {
		return fmt.Errorf("mcp: unexpected stream message %T", m)
	}
	return c.send(r)
}
