package grpcapi_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/internal/grpcapi"
	"github.com/toolgate/toolgate/internal/grpctest"
	"github.com/toolgate/toolgate/internal/toolcall"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// opRecorder answers the operation ops and notes each call.
type opRecorder struct {
	mu    sync.Mutex
	calls []toolcall.Call
}

var (
	created  = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	deadline = created.Add(30 * time.Second)
	ended    = created.Add(2 * time.Second)
)

func (r *opRecorder) handle(_ context.Context, c *toolcall.Call, _ toolcall.Emit) (toolcall.Result, error) {
	r.mu.Lock()
	r.calls = append(r.calls, *c)
	r.mu.Unlock()
	c.RequestID = "rid-op"
	op := func(id string) *toolcall.Operation {
		o := &toolcall.Operation{ID: id, Tool: "echo", State: "running", Created: created, Deadline: deadline}
		switch id {
		case "done":
			o.State, o.Done, o.Ended, o.Output = "done", true, ended, `{"a": 1}`
		case "failed":
			st, _ := status.New(codes.InvalidArgument, "bad msg").WithDetails(&errdetails.ErrorInfo{Reason: "TOOL_ERROR", Domain: "toolgate"})
			o.State, o.Done, o.Ended, o.Err = "failed", true, ended, st.Err()
		}
		return o
	}
	switch c.Op {
	case toolcall.OpStartTool:
		return toolcall.Result{Detail: &toolcall.Detail{Operation: op("new-" + c.Name)}}, nil
	case toolcall.OpGetOperation, toolcall.OpWaitOperation, toolcall.OpCancelOperation, toolcall.OpDeleteOperation:
		if c.Name == "missing" {
			return toolcall.Result{}, status.Error(codes.NotFound, `operation "missing" not found`)
		}
		if c.Op == toolcall.OpDeleteOperation {
			return toolcall.Result{}, nil
		}
		return toolcall.Result{Detail: &toolcall.Detail{Operation: op(c.Name)}}, nil
	case toolcall.OpListOperations:
		return toolcall.Result{Detail: &toolcall.Detail{Operations: []*toolcall.Operation{op("done"), op("running")}, NextPageToken: "tok"}}, nil
	}
	return toolcall.Result{}, status.Error(codes.Unimplemented, "not here")
}

func (r *opRecorder) last() toolcall.Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[len(r.calls)-1]
}

func (r *opRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.calls)
}

// serveBoth serves the ToolService and the Operations service over h.
func serveBoth(t *testing.T, h toolcall.Handler) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	toolgatev1.RegisterToolServiceServer(srv, grpcapi.New(h))
	longrunningpb.RegisterOperationsServer(srv, grpcapi.NewOperations(h))
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return grpctest.Dial(t, lis)
}

// StartTool and the Operations methods become the operation ops' calls,
// and answer google.longrunning.Operations: metadata, response or error.
func TestOperations(t *testing.T) {
	t.Parallel()
	rec := &opRecorder{}
	conn := serveBoth(t, rec.handle)
	tools, ops := toolgatev1.NewToolServiceClient(conn), longrunningpb.NewOperationsClient(conn)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "x-api-key", "k")

	args, _ := structpb.NewStruct(map[string]any{"msg": "hi"})
	var hdr metadata.MD
	op, err := tools.StartTool(ctx, &toolgatev1.StartToolRequest{Name: "echo", Arguments: args, Timeout: durationpb.New(time.Minute)}, grpc.Header(&hdr))
	if err != nil {
		t.Fatal(err)
	}
	if c := rec.last(); c.Op != toolcall.OpStartTool || c.Name != "echo" || string(c.Args) != `{"msg":"hi"}` ||
		!c.TimeoutSet || c.Timeout != time.Minute || c.Header.Values("x-api-key")[0] != "k" {
		t.Errorf("start call %+v", c)
	}
	if got := hdr.Get("x-request-id"); len(got) != 1 || got[0] != "rid-op" {
		t.Errorf("x-request-id %v", got)
	}
	if op.GetName() != "operations/new-echo" || op.GetDone() || op.GetResult() != nil {
		t.Errorf("started %v", op)
	}
	var md toolgatev1.ToolOperationMetadata
	if err := op.GetMetadata().UnmarshalTo(&md); err != nil {
		t.Fatal(err)
	}
	if md.GetTool() != "echo" || md.GetState() != "RUNNING" || !md.GetCreateTime().AsTime().Equal(created) ||
		!md.GetDeadline().AsTime().Equal(deadline) || md.GetEndTime() != nil {
		t.Errorf("metadata %v", &md)
	}
	if _, err := tools.StartTool(ctx, &toolgatev1.StartToolRequest{Name: "echo", Arguments: args, ArgumentsJson: "{}"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("both kinds of arguments: %v", err)
	}

	done, err := ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: "operations/done"})
	if err != nil {
		t.Fatal(err)
	}
	if c := rec.last(); c.Op != toolcall.OpGetOperation || c.Name != "done" {
		t.Errorf("get call %+v", c)
	}
	var resp toolgatev1.InvokeToolResponse
	if !done.GetDone() || done.GetResponse().UnmarshalTo(&resp) != nil || resp.GetOutput() != `{"a": 1}` ||
		resp.GetOutputJson().GetStructValue().GetFields()["a"].GetNumberValue() != 1 {
		t.Errorf("done operation %v", done)
	}
	if err := done.GetMetadata().UnmarshalTo(&md); err != nil || md.GetState() != "DONE" || !md.GetEndTime().AsTime().Equal(ended) {
		t.Errorf("done metadata %v, %v", &md, err)
	}

	failed, err := ops.WaitOperation(ctx, &longrunningpb.WaitOperationRequest{Name: "operations/failed", Timeout: durationpb.New(3 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if c := rec.last(); c.Op != toolcall.OpWaitOperation || c.Name != "failed" || !c.TimeoutSet || c.Timeout != 3*time.Second {
		t.Errorf("wait call %+v", c)
	}
	if e := failed.GetError(); !failed.GetDone() || e.GetCode() != int32(codes.InvalidArgument) || e.GetMessage() != "bad msg" || len(e.GetDetails()) != 1 {
		t.Errorf("failed operation %v", failed)
	}
	if _, err := ops.WaitOperation(ctx, &longrunningpb.WaitOperationRequest{Name: "operations/done"}); err != nil {
		t.Fatal(err)
	}
	if c := rec.last(); c.TimeoutSet {
		t.Errorf("a wait without timeout set one: %+v", c)
	}

	list, err := ops.ListOperations(ctx, &longrunningpb.ListOperationsRequest{Filter: "done=true", PageSize: 2, PageToken: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if c := rec.last(); c.Op != toolcall.OpListOperations || c.Filter != "done=true" || c.PageSize != 2 || c.PageToken != "p" {
		t.Errorf("list call %+v", c)
	}
	if len(list.GetOperations()) != 2 || list.GetNextPageToken() != "tok" || list.GetOperations()[0].GetName() != "operations/done" ||
		list.GetOperations()[1].GetDone() {
		t.Errorf("list %v", list)
	}

	if _, err := ops.CancelOperation(ctx, &longrunningpb.CancelOperationRequest{Name: "operations/x"}); err != nil {
		t.Fatal(err)
	}
	if c := rec.last(); c.Op != toolcall.OpCancelOperation || c.Name != "x" {
		t.Errorf("cancel call %+v", c)
	}
	if _, err := ops.DeleteOperation(ctx, &longrunningpb.DeleteOperationRequest{Name: "operations/y"}); err != nil {
		t.Fatal(err)
	}
	if c := rec.last(); c.Op != toolcall.OpDeleteOperation || c.Name != "y" {
		t.Errorf("delete call %+v", c)
	}
	if _, err := ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: "operations/missing"}); status.Code(err) != codes.NotFound {
		t.Errorf("missing: %v", err)
	}

	// A name that is not "operations/<id>" is refused before any call.
	n := rec.count()
	for _, name := range []string{"", "done", "operations/", "operations/a/b", "ops/done"} {
		if _, err := ops.GetOperation(ctx, &longrunningpb.GetOperationRequest{Name: name}); status.Code(err) != codes.InvalidArgument ||
			!strings.Contains(status.Convert(err).Message(), "operations/<id>") {
			t.Errorf("name %q: %v", name, err)
		}
	}
	if _, err := ops.ListOperations(ctx, &longrunningpb.ListOperationsRequest{Name: "elsewhere"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("list of another collection: %v", err)
	}
	if _, err := ops.WaitOperation(ctx, &longrunningpb.WaitOperationRequest{Name: "operations/done", Timeout: &durationpb.Duration{Seconds: 1, Nanos: -1}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("malformed wait timeout: %v", err)
	}
	if rec.count() != n {
		t.Errorf("%d refused requests became calls", rec.count()-n)
	}
}
