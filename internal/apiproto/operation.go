package apiproto

import (
	"strings"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// OperationPrefix starts every operation's resource name: "operations/<id>".
const OperationPrefix = "operations/"

// OperationID is the id an operation's name ("operations/<id>") names, the
// Name of the call that reads, cancels or deletes it.
func OperationID(name string) (string, error) {
	id, ok := strings.CutPrefix(name, OperationPrefix)
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", status.Errorf(codes.InvalidArgument, "name %q: want \"operations/<id>\", the name StartTool answered", name)
	}
	return id, nil
}

// Operation is op as a google.longrunning.Operation: its metadata a
// ToolOperationMetadata and, once done, its response an InvokeToolResponse
// or its error the call's status (the core's one mapping of failures).
func Operation(op *toolcall.Operation) (*longrunningpb.Operation, error) {
	md := &toolgatev1.ToolOperationMetadata{Tool: op.Tool, State: strings.ToUpper(op.State),
		CreateTime: timestamppb.New(op.Created), Deadline: timestamppb.New(op.Deadline)}
	if !op.Ended.IsZero() {
		md.EndTime = timestamppb.New(op.Ended)
	}
	mdAny, err := anypb.New(md)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "operation metadata: %v", err)
	}
	out := &longrunningpb.Operation{Name: OperationPrefix + op.ID, Done: op.Done, Metadata: mdAny}
	switch {
	case !op.Done:
	case op.Err != nil:
		out.Result = &longrunningpb.Operation_Error{Error: status.Convert(op.Err).Proto()}
	default:
		resp, err := anypb.New(&toolgatev1.InvokeToolResponse{Output: op.Output, OutputJson: JSONValue(op.Output)})
		if err != nil {
			return nil, status.Errorf(codes.Internal, "operation response: %v", err)
		}
		out.Result = &longrunningpb.Operation_Response{Response: resp}
	}
	return out, nil
}
