package toolcall

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// failingStarts is an operations table whose starts fail with err.
type failingStarts struct {
	ownedOps
	err error
}

func (f *failingStarts) Start(context.Context, OperationStart) (OperationRecord, error) {
	return OperationRecord{}, f.err
}

// A start that fails because the broker is found away is UNAVAILABLE
// (BROKER_UNAVAILABLE, with a RetryInfo), as a call is; one the broker did
// not take before the operation's own deadline is DEADLINE_EXCEEDED,
// saying that the operation was not started.
func TestStartFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err    error
		code   codes.Code
		reason string
		msg    string
		retry  bool
	}{
		{Fail(errors.New("the message broker does not take messages (no receipt)"), FailBrokerUnavailable), codes.Unavailable, "BROKER_UNAVAILABLE", "the message broker cannot be reached", true},
		{context.DeadlineExceeded, codes.DeadlineExceeded, "DEADLINE_EXCEEDED", `the operation of tool "plain" could not be started before its deadline`, false},
	} {
		core := newCore(t, answering(), Options{Operations: &failingStarts{err: tc.err}})
		_, err := core.Handle(t.Context(), &Call{Op: OpStartTool, Name: "plain", Timeout: 5e9, TimeoutSet: true}, nil)
		st := status.Convert(err)
		var info *errdetails.ErrorInfo
		var retry bool
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.ErrorInfo:
				info = d
			case *errdetails.RetryInfo:
				retry = true
			}
		}
		if st.Code() != tc.code || info == nil || info.GetReason() != tc.reason || info.GetMetadata()["tool"] != "plain" ||
			!strings.Contains(st.Message(), tc.msg) || retry != tc.retry {
			t.Errorf("a start failing with %v: %v %q %v, retry %v; want %v %s %q, retry %v",
				tc.err, st.Code(), st.Message(), info, retry, tc.code, tc.reason, tc.msg, tc.retry)
		}
		if errors.Is(tc.err, context.DeadlineExceeded) && info.GetMetadata()["service"] != "plain" {
			t.Errorf("the deadline's ErrorInfo names no service: %v", info)
		}
	}
}
