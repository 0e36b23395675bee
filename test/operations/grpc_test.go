package operations_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"connectrpc.com/connect"
	toolgatev1 "github.com/toolgate/toolgate/gen/toolgate/v1"
	"github.com/toolgate/toolgate/gen/toolgate/v1/toolgatev1connect"
	"github.com/toolgate/toolgate/internal/app/apptest"
	"github.com/toolgate/toolgate/internal/brokertest"
	"github.com/toolgate/toolgate/internal/eventually"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// grpcGateway is a gateway's two gRPC services, as one client.
type grpcGateway struct {
	tools  toolgatev1.ToolServiceClient
	ops    longrunningpb.OperationsClient
	health healthpb.HealthClient
}

func dialGRPC(t *testing.T, gw *apptest.Gateway) grpcGateway {
	t.Helper()
	conn, err := grpc.NewClient(gw.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return grpcGateway{tools: toolgatev1.NewToolServiceClient(conn), ops: longrunningpb.NewOperationsClient(conn), health: healthpb.NewHealthClient(conn)}
}

// as is ctx with key's credentials.
func as(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
}

func startEcho(t *testing.T, ctx context.Context, g grpcGateway, args map[string]any) *longrunningpb.Operation {
	t.Helper()
	s, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	op, err := g.tools.StartTool(ctx, &toolgatev1.StartToolRequest{Name: "echo", Arguments: s, Timeout: durationpb.New(60 * time.Second)})
	if err != nil {
		t.Fatalf("StartTool: %v", err)
	}
	if !strings.HasPrefix(op.GetName(), "operations/") || op.GetDone() {
		t.Fatalf("StartTool answered %v", op)
	}
	return op
}

func metadataOf(t *testing.T, op *longrunningpb.Operation) *toolgatev1.ToolOperationMetadata {
	t.Helper()
	var md toolgatev1.ToolOperationMetadata
	if err := op.GetMetadata().UnmarshalTo(&md); err != nil {
		t.Fatalf("metadata of %v: %v", op, err)
	}
	return &md
}

func outputOf(t *testing.T, op *longrunningpb.Operation) string {
	t.Helper()
	var resp toolgatev1.InvokeToolResponse
	if op.GetResponse() == nil || op.GetResponse().UnmarshalTo(&resp) != nil {
		t.Fatalf("no InvokeToolResponse in %v", op)
	}
	return resp.GetOutput()
}

// TestOperationOverGRPC: StartTool on gateway A; gateway B's Operations
// service reports it, waits for it and gives the output, to the caller who
// started it; another caller gets NOT_FOUND from every method.
func TestOperationOverGRPC(t *testing.T) {
	flags := setup(t)
	a, b := apptest.Start(t, nil, flags...), apptest.Start(t, nil, flags...)
	a.WaitReady(t, 60*time.Second)
	b.WaitReady(t, 60*time.Second)
	ga, gb := dialGRPC(t, a), dialGRPC(t, b)
	alice, bob := as(t.Context(), aliceKey), as(t.Context(), bobKey)
	// gRPC health follows readiness, the operations table's included.
	for _, g := range []grpcGateway{ga, gb} {
		eventually.True(t, 30*time.Second, "gRPC health SERVING", func() bool {
			h, err := g.health.Check(t.Context(), &healthpb.HealthCheckRequest{})
			return err == nil && h.GetStatus() == healthpb.HealthCheckResponse_SERVING
		})
	}

	msg := "grpc-" + brokertest.UniqueTopic("m")
	op := startEcho(t, alice, ga, map[string]any{"mode": "sleep", "ms": 2500, "msg": msg})
	if md := metadataOf(t, op); md.GetTool() != "echo" || md.GetState() != "RUNNING" || md.GetEndTime() != nil ||
		!md.GetDeadline().AsTime().After(md.GetCreateTime().AsTime().Add(50*time.Second)) {
		t.Fatalf("metadata of the started operation %v", md)
	}
	name := op.GetName()
	eventually.True(t, 5*time.Second, "B to show alice's running operation", func() bool {
		got, err := gb.ops.GetOperation(alice, &longrunningpb.GetOperationRequest{Name: name})
		return err == nil && !got.GetDone() && got.GetName() == name
	})

	// Not bob's, on either gateway, by any method.
	for _, g := range []grpcGateway{ga, gb} {
		_, err := g.ops.GetOperation(bob, &longrunningpb.GetOperationRequest{Name: name})
		wantNotFound(t, "bob's GetOperation", err)
		_, err = g.ops.WaitOperation(bob, &longrunningpb.WaitOperationRequest{Name: name, Timeout: durationpb.New(time.Second)})
		wantNotFound(t, "bob's WaitOperation", err)
		_, err = g.ops.CancelOperation(bob, &longrunningpb.CancelOperationRequest{Name: name})
		wantNotFound(t, "bob's CancelOperation", err)
		_, err = g.ops.DeleteOperation(bob, &longrunningpb.DeleteOperationRequest{Name: name})
		wantNotFound(t, "bob's DeleteOperation", err)
		list, err := g.ops.ListOperations(bob, &longrunningpb.ListOperationsRequest{})
		if err != nil || len(list.GetOperations()) != 0 {
			t.Fatalf("bob's list: %v, %v", list, err)
		}
	}
	_, err := gb.ops.GetOperation(alice, &longrunningpb.GetOperationRequest{Name: "operations/0123456789abcdef0123456789abcdef"})
	wantNotFound(t, "an id that does not exist", err)

	// A wait that times out answers the operation as it is, at its
	// timeout: still running (the operation takes 2.5 s, the wait 300 ms).
	got, err := gb.ops.WaitOperation(alice, &longrunningpb.WaitOperationRequest{Name: name, Timeout: durationpb.New(300 * time.Millisecond)})
	if err != nil || got.GetDone() {
		t.Fatalf("short wait: %v, %v", got, err)
	}
	// B answers the wait once the reply is recorded.
	eventually.True(t, 30*time.Second, "B to report the operation done", func() bool {
		got, err = gb.ops.WaitOperation(alice, &longrunningpb.WaitOperationRequest{Name: name, Timeout: durationpb.New(5 * time.Second)})
		return err == nil && got.GetDone()
	})
	if out := outputOf(t, got); out != msg {
		t.Fatalf("B reports the output %q, want %q", out, msg)
	}
	if md := metadataOf(t, got); md.GetState() != "DONE" || md.GetEndTime() == nil {
		t.Fatalf("metadata of the done operation %v", md)
	}
	// A says the same once its table has it (within milliseconds: B may
	// have recorded it).
	eventually.True(t, 5*time.Second, "A to report the operation done", func() bool {
		got, err = ga.ops.GetOperation(alice, &longrunningpb.GetOperationRequest{Name: name})
		return err == nil && got.GetDone()
	})
	if err != nil || !got.GetDone() || outputOf(t, got) != msg {
		t.Fatalf("A reports %v, %v", got, err)
	}

	// A tool's error is the operation's error, through the one mapping.
	failed := startEcho(t, alice, ga, map[string]any{"mode": "fail", "type": "not-found", "message": "no such thing"})
	eventually.True(t, 30*time.Second, "the failing operation done", func() bool {
		got, err = gb.ops.WaitOperation(alice, &longrunningpb.WaitOperationRequest{Name: failed.GetName()})
		return err == nil && got.GetDone()
	})
	if e := got.GetError(); e.GetCode() != int32(codes.NotFound) || !strings.Contains(e.GetMessage(), "no such thing") || got.GetResponse() != nil {
		t.Fatalf("failed operation %v", got)
	}
	if md := metadataOf(t, got); md.GetState() != "FAILED" {
		t.Fatalf("metadata of the failed operation %v", md)
	}
}

func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if status.Code(err) != codes.NotFound || !strings.Contains(status.Convert(err).Message(), "not found") {
		t.Fatalf("%s: %v, want NOT_FOUND", what, err)
	}
}

// TestOperationCancelDeleteListOverGRPC: CancelOperation on one gateway
// makes the operation CANCELLED on both; DeleteOperation removes it; the
// list pages through the caller's operations and filters them by done.
func TestOperationCancelDeleteListOverGRPC(t *testing.T) {
	flags := setup(t)
	a, b := apptest.Start(t, nil, flags...), apptest.Start(t, nil, flags...)
	a.WaitReady(t, 60*time.Second)
	b.WaitReady(t, 60*time.Second)
	ga, gb := dialGRPC(t, a), dialGRPC(t, b)
	alice := as(t.Context(), aliceKey)

	slow := startEcho(t, alice, ga, map[string]any{"mode": "sleep", "ms": 20000, "msg": "slow"})
	var quick []string
	for i := range 4 {
		quick = append(quick, startEcho(t, alice, ga, map[string]any{"msg": fmt.Sprint("quick ", i)}).GetName())
	}
	for _, n := range quick {
		eventually.True(t, 30*time.Second, n+" done on B", func() bool {
			got, err := gb.ops.WaitOperation(alice, &longrunningpb.WaitOperationRequest{Name: n})
			return err == nil && got.GetDone()
		})
	}

	// Pages of 2 on B: every operation once, none of another caller.
	var names []string
	token := ""
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatalf("more pages than 5 operations need: %v", names)
		}
		list, err := gb.ops.ListOperations(alice, &longrunningpb.ListOperationsRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.GetOperations()) > 2 {
			t.Fatalf("a page of %d operations, asked for 2", len(list.GetOperations()))
		}
		for _, op := range list.GetOperations() {
			names = append(names, op.GetName())
		}
		if token = list.GetNextPageToken(); token == "" {
			break
		}
	}
	want := append([]string{slow.GetName()}, quick...)
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("the pages list %v, want %v", names, want)
	}
	list, err := gb.ops.ListOperations(alice, &longrunningpb.ListOperationsRequest{Filter: "done=false"})
	if err != nil || len(list.GetOperations()) != 1 || list.GetOperations()[0].GetName() != slow.GetName() {
		t.Fatalf("done=false: %v, %v", list, err)
	}
	list, err = gb.ops.ListOperations(alice, &longrunningpb.ListOperationsRequest{Filter: "done=true"})
	if err != nil || len(list.GetOperations()) != len(quick) {
		t.Fatalf("done=true: %v, %v", list, err)
	}
	if _, err := gb.ops.ListOperations(alice, &longrunningpb.ListOperationsRequest{Filter: "state=RUNNING"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an unknown filter: %v", err)
	}
	if _, err := gb.ops.ListOperations(alice, &longrunningpb.ListOperationsRequest{PageToken: "not a token!"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a bad page token: %v", err)
	}

	// Cancel on B: CANCELLED on A too, and a wait answers at once.
	if _, err := gb.ops.CancelOperation(alice, &longrunningpb.CancelOperationRequest{Name: slow.GetName()}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 5*time.Second, "the operation cancelled on A", func() bool {
		got, err := ga.ops.GetOperation(alice, &longrunningpb.GetOperationRequest{Name: slow.GetName()})
		return err == nil && got.GetDone() && got.GetError().GetCode() == int32(codes.Canceled) && metadataOf(t, got).GetState() == "CANCELLED"
	})

	// Delete on A: gone from B.
	if _, err := ga.ops.DeleteOperation(alice, &longrunningpb.DeleteOperationRequest{Name: slow.GetName()}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 5*time.Second, "the deleted operation gone from B", func() bool {
		_, err := gb.ops.GetOperation(alice, &longrunningpb.GetOperationRequest{Name: slow.GetName()})
		return status.Code(err) == codes.NotFound
	})
	list, err = gb.ops.ListOperations(alice, &longrunningpb.ListOperationsRequest{})
	if err != nil || len(list.GetOperations()) != len(quick) {
		t.Fatalf("the list after the delete: %v, %v", list, err)
	}
}

// TestOperationStartOverConnect: the Connect door's StartTool starts an
// operation that the gRPC Operations service of another gateway reports.
func TestOperationStartOverConnect(t *testing.T) {
	flags := setup(t)
	a, b := apptest.Start(t, nil, flags...), apptest.Start(t, nil, flags...)
	a.WaitReady(t, 60*time.Second)
	b.WaitReady(t, 60*time.Second)
	gb := dialGRPC(t, b)

	cli := toolgatev1connect.NewToolServiceClient(http.DefaultClient, "http://"+a.HTTPAddr())
	msg := "connect-" + brokertest.UniqueTopic("m")
	req := connect.NewRequest(&toolgatev1.StartToolRequest{Name: "echo", ArgumentsJson: fmt.Sprintf(`{"msg": %q}`, msg)})
	req.Header().Set("X-Api-Key", aliceKey)
	resp, err := cli.StartTool(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	op := resp.Msg
	if !strings.HasPrefix(op.GetName(), "operations/") || metadataOf(t, op).GetTool() != "echo" || resp.Header().Get("X-Request-Id") == "" {
		t.Fatalf("Connect StartTool answered %v (header %v)", op, resp.Header())
	}
	var got *longrunningpb.Operation
	eventually.True(t, 30*time.Second, "B to report the operation done", func() bool {
		got, err = gb.ops.WaitOperation(as(t.Context(), aliceKey), &longrunningpb.WaitOperationRequest{Name: op.GetName()})
		return err == nil && got.GetDone()
	})
	if out := outputOf(t, got); out != msg {
		t.Fatalf("output %q, want %q", out, msg)
	}
	_, err = gb.ops.GetOperation(as(t.Context(), bobKey), &longrunningpb.GetOperationRequest{Name: op.GetName()})
	wantNotFound(t, "bob's GetOperation", err)

	// Without credentials: refused as any call.
	req = connect.NewRequest(&toolgatev1.StartToolRequest{Name: "echo"})
	if _, err := cli.StartTool(t.Context(), req); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Fatalf("Connect StartTool without a key: %v", err)
	}
}

// TestOperationsOffOverGRPC: without --operations, StartTool and every
// Operations method answer UNIMPLEMENTED naming the flag, as REST does.
func TestOperationsOffOverGRPC(t *testing.T) {
	flags := slices.DeleteFunc(setup(t), func(f string) bool { return f == "--operations" })
	gw := apptest.Start(t, nil, flags...)
	gw.WaitReady(t, 60*time.Second)
	g := dialGRPC(t, gw)
	alice := as(t.Context(), aliceKey)
	name := "operations/0123456789abcdef0123456789abcdef"
	_, startErr := g.tools.StartTool(alice, &toolgatev1.StartToolRequest{Name: "echo"})
	_, getErr := g.ops.GetOperation(alice, &longrunningpb.GetOperationRequest{Name: name})
	_, listErr := g.ops.ListOperations(alice, &longrunningpb.ListOperationsRequest{})
	_, cancelErr := g.ops.CancelOperation(alice, &longrunningpb.CancelOperationRequest{Name: name})
	_, deleteErr := g.ops.DeleteOperation(alice, &longrunningpb.DeleteOperationRequest{Name: name})
	_, waitErr := g.ops.WaitOperation(alice, &longrunningpb.WaitOperationRequest{Name: name})
	for i, err := range []error{startErr, getErr, listErr, cancelErr, deleteErr, waitErr} {
		if status.Code(err) != codes.Unimplemented || !strings.Contains(status.Convert(err).Message(), "--operations") {
			t.Errorf("method %d: %v, want UNIMPLEMENTED naming --operations", i, err)
		}
	}
	// The credentials are checked first, as for any call.
	_, err := g.ops.GetOperation(t.Context(), &longrunningpb.GetOperationRequest{Name: name})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("no key: %v", err)
	}
	// And REST says the same.
	code, body := do(t, http.MethodGet, "http://"+gw.HTTPAddr()+"/v1/operations/0123456789abcdef0123456789abcdef", aliceKey, "")
	if code != http.StatusNotImplemented || !strings.Contains(fmt.Sprint(body), "--operations") {
		t.Errorf("REST: %d %v", code, body)
	}
}
