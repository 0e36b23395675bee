package connectapi

import (
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// A status from the core becomes a Connect error with the same code,
// message and details (ErrorInfo, RetryInfo), which Connect and gRPC-Web
// clients read as they are.
func TestConnectError(t *testing.T) {
	st, err := status.New(codes.ResourceExhausted, "rate limit exceeded").WithDetails(
		&errdetails.ErrorInfo{Reason: "RATE_LIMITED", Domain: "toolgate"},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	var ce *connect.Error
	if !errors.As(connectError(st.Err()), &ce) {
		t.Fatal("not a Connect error")
	}
	if ce.Code() != connect.CodeResourceExhausted || ce.Message() != "rate limit exceeded" || len(ce.Details()) != 2 {
		t.Fatalf("%v %q %d details", ce.Code(), ce.Message(), len(ce.Details()))
	}
	v, err := ce.Details()[0].Value()
	if ei, ok := v.(*errdetails.ErrorInfo); err != nil || !ok || ei.GetReason() != "RATE_LIMITED" {
		t.Fatalf("first detail %v, %v", v, err)
	}
	for code := codes.Canceled; code <= codes.Unauthenticated; code++ {
		var ce *connect.Error
		if !errors.As(connectError(status.Error(code, "x")), &ce) || codes.Code(ce.Code()) != code {
			t.Errorf("%v became %v", code, ce.Code())
		}
	}
	if connect.CodeOf(connectError(errors.New("plain"))) != connect.CodeUnknown {
		t.Error("a plain error is not Unknown")
	}
}
