package grpcapi

import (
	"context"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/apiproto"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// StartTool implements toolgatev1.ToolServiceServer: the operation, at
// once, not yet done (docs/operations.md).
func (s *Service) StartTool(ctx context.Context, req *toolgatev1.StartToolRequest) (*longrunningpb.Operation, error) {
	c := newCall(ctx, toolcall.OpStartTool)
	c.Name = req.GetName()
	if err := apiproto.Request(c, req.GetArguments(), req.GetArgumentsJson(), req.GetTimeout()); err != nil {
		return nil, err
	}
	res, err := s.answer(ctx, c)
	if err != nil {
		return nil, err
	}
	return operation(res)
}

// Operations implements the google.longrunning.Operations service over a
// call handler: the operations StartTool started, each to the caller who
// started it.
type Operations struct {
	longrunningpb.UnimplementedOperationsServer
	svc *Service
}

// NewOperations returns the Operations service serving calls through h.
func NewOperations(h toolcall.Handler) *Operations { return &Operations{svc: New(h)} }

// byName runs the call of op on the operation req names.
func (o *Operations) byName(ctx context.Context, op toolcall.Op, name string, set func(*toolcall.Call) error) (toolcall.Result, error) {
	c := newCall(ctx, op)
	id, err := apiproto.OperationID(name)
	if err != nil {
		return toolcall.Result{}, err
	}
	c.Name = id
	if set != nil {
		if err := set(c); err != nil {
			return toolcall.Result{}, err
		}
	}
	return o.svc.answer(ctx, c)
}

// GetOperation implements longrunningpb.OperationsServer.
func (o *Operations) GetOperation(ctx context.Context, req *longrunningpb.GetOperationRequest) (*longrunningpb.Operation, error) {
	res, err := o.byName(ctx, toolcall.OpGetOperation, req.GetName(), nil)
	if err != nil {
		return nil, err
	}
	return operation(res)
}

// ListOperations implements longrunningpb.OperationsServer: a page of the
// caller's operations, filter "", "done=true" or "done=false".
func (o *Operations) ListOperations(ctx context.Context, req *longrunningpb.ListOperationsRequest) (*longrunningpb.ListOperationsResponse, error) {
	if n := req.GetName(); n != "" && n != "operations" {
		return nil, status.Errorf(codes.InvalidArgument, "name %q: leave it empty or give \"operations\"", n)
	}
	c := newCall(ctx, toolcall.OpListOperations)
	c.PageSize, c.PageToken, c.Filter = req.GetPageSize(), req.GetPageToken(), req.GetFilter()
	res, err := o.svc.answer(ctx, c)
	if err != nil {
		return nil, err
	}
	out := &longrunningpb.ListOperationsResponse{NextPageToken: res.Details().NextPageToken,
		Operations: make([]*longrunningpb.Operation, 0, len(res.Details().Operations))}
	for _, op := range res.Details().Operations {
		p, err := apiproto.Operation(op)
		if err != nil {
			return nil, err
		}
		out.Operations = append(out.Operations, p)
	}
	return out, nil
}

// CancelOperation implements longrunningpb.OperationsServer.
func (o *Operations) CancelOperation(ctx context.Context, req *longrunningpb.CancelOperationRequest) (*emptypb.Empty, error) {
	if _, err := o.byName(ctx, toolcall.OpCancelOperation, req.GetName(), nil); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

// DeleteOperation implements longrunningpb.OperationsServer.
func (o *Operations) DeleteOperation(ctx context.Context, req *longrunningpb.DeleteOperationRequest) (*emptypb.Empty, error) {
	if _, err := o.byName(ctx, toolcall.OpDeleteOperation, req.GetName(), nil); err != nil {
		return nil, err
	}
	return &emptypb.Empty{}, nil
}

// WaitOperation implements longrunningpb.OperationsServer: the operation
// once done, or as it is when the timeout (default 10 s, at most 60 s) or
// the call's deadline passes.
func (o *Operations) WaitOperation(ctx context.Context, req *longrunningpb.WaitOperationRequest) (*longrunningpb.Operation, error) {
	res, err := o.byName(ctx, toolcall.OpWaitOperation, req.GetName(), func(c *toolcall.Call) error {
		if t := req.GetTimeout(); t != nil {
			if err := t.CheckValid(); err != nil {
				return status.Error(codes.InvalidArgument, "timeout must be a positive duration such as \"5s\"")
			}
			c.Timeout, c.TimeoutSet = t.AsDuration(), true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return operation(res)
}

// operation is a result's Operation in protobuf.
func operation(res toolcall.Result) (*longrunningpb.Operation, error) {
	if res.Details().Operation == nil {
		return nil, status.Error(codes.Internal, "no operation to answer")
	}
	return apiproto.Operation(res.Details().Operation)
}
