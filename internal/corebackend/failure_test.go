package corebackend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/bridge"
	"github.com/toolgate/toolgate/internal/operations"
	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/internal/toolcall"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const testRegistry = `
tool-service:
  svc: {id: svc, topic: svc, config-params: []}
tool:
  t: {type: tool-service, name: t, description: d, service: svc, arguments: []}
`

// failing is a bridge whose calls fail with err, as the adapter hands
// the bridge's errors to the core.
type failing struct{ err error }

func (f failing) Call(context.Context, toolcall.Target, wire.Request, time.Time, bool, toolcall.Assertion) (toolcall.Reply, error) {
	return nil, fail(f.err)
}

// failingOps is an operations keeper whose every answer is rec and err,
// as the adapter hands them to the core.
type failingOps struct {
	rec operations.Record
	err error
}

func (f failingOps) Start(context.Context, toolcall.OperationStart) (toolcall.OperationRecord, error) {
	return record(f.rec), fail(f.err)
}
func (f failingOps) Get(string, string) (toolcall.OperationRecord, error) {
	return record(f.rec), fail(f.err)
}
func (f failingOps) List(string, *bool) []toolcall.OperationRecord { return nil }
func (f failingOps) Cancel(context.Context, string, string) (toolcall.OperationRecord, error) {
	return record(f.rec), fail(f.err)
}
func (f failingOps) Delete(context.Context, string, string) error { return fail(f.err) }
func (f failingOps) Wait(context.Context, string, string, time.Duration) (toolcall.OperationRecord, error) {
	return record(f.rec), fail(f.err)
}
func (f failingOps) Stream(context.Context, string, string, int, func(int, string, bool) error) (toolcall.OperationRecord, error) {
	return record(f.rec), fail(f.err)
}

func newCore(t *testing.T, b toolcall.Bridge, ops toolcall.Operations) *toolcall.Core {
	t.Helper()
	snap, err := registry.Parse("t.yaml", []byte(testRegistry), nil)
	if err != nil {
		t.Fatal(err)
	}
	return toolcall.New(registry.New(snap), b, toolcall.Options{Operations: ops})
}

// checkStatus fails t unless err is a status of code, message and
// ErrorInfo reason, with a RetryInfo when retry.
func checkStatus(t *testing.T, err error, code codes.Code, reason, msg string, retry bool) {
	t.Helper()
	st := status.Convert(err)
	var info *errdetails.ErrorInfo
	var hasRetry bool
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.RetryInfo:
			hasRetry = true
		}
	}
	if st.Code() != code || st.Message() != msg || info.GetReason() != reason || info.GetDomain() != toolcall.ErrorDomain || hasRetry != retry {
		t.Errorf("got %v %q, %v, retry %v;\nwant %v %q, reason %s, retry %v", st.Code(), st.Message(), info, hasRetry, code, msg, reason, retry)
	}
}

// The bridge's errors, through the adapter and the core, are the statuses
// callers get: code, ErrorInfo reason, message and RetryInfo.
func TestBridgeFailures(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		err    error
		code   codes.Code
		reason string
		msg    string
		retry  bool
	}{
		{"service busy", fmt.Errorf("%w: 8 in flight", bridge.ErrServiceBusy), codes.ResourceExhausted, "SERVICE_BUSY", `tool "t" has too many calls in flight from this gateway; retry shortly`, true},
		{"overloaded", fmt.Errorf("%w: 5 calls", bridge.ErrOverloaded), codes.ResourceExhausted, "OVERLOADED", "the gateway is overloaded; retry shortly", true},
		{"slow reader", bridge.ErrSlowReader, codes.ResourceExhausted, "SLOW_READER", "the reply stream was not read fast enough", false},
		{"lost replies", &bridge.LostRepliesError{Lost: 2}, codes.Unavailable, "REPLY_LOST", `tool "t": 2 reply message(s) of this call were lost in transit (dropped by the broker); the reply is incomplete, retry the call`, true},
		{"bad reply", fmt.Errorf("%w: x", bridge.ErrBadReply), codes.Internal, "BAD_REPLY", `tool "t" sent a malformed reply`, false},
		{"no listener", fmt.Errorf("%w on topic-x", bridge.ErrNoListener), codes.Unavailable, "NO_LISTENER", `tool "t" is unavailable: no tool service is listening on topic-x`, false},
		{"service gone", &bridge.ServiceGoneError{Topic: "topic-x", Why: "no consumer is left"}, codes.Unavailable, "SERVICE_GONE",
			`tool service "svc" stopped listening before answering tool "t"; the call was lost with it (no consumer is left on topic-x)`, false},
		{"service gone, bare", bridge.ErrServiceGone, codes.Unavailable, "SERVICE_GONE",
			`tool service "svc" stopped listening before answering tool "t"; the call was lost with it`, false},
		{"instance lost", &bridge.InstanceLostError{Topic: "topic-x", Instance: "i-1", Why: "its lease ran out"}, codes.Unavailable, "INSTANCE_LOST",
			`the instance of tool service "svc" that had taken the call to tool "t" is gone; the call may have run, in part or whole: retry it only if running it twice is harmless (instance i-1: its lease ran out)`, false},
		{"closed", bridge.ErrClosed, codes.Unavailable, "SHUTTING_DOWN", "the gateway is shutting down; retry the call", true},
		{"broker down", fmt.Errorf("%w: dial", bridge.ErrUnavailable), codes.Unavailable, "BROKER_UNAVAILABLE", `tool "t" is unavailable: the message broker cannot be reached`, true},
		{"broker found down", fmt.Errorf("%w (no receipt)", bridge.ErrBrokerDown), codes.Unavailable, "BROKER_UNAVAILABLE", `tool "t" is unavailable: the message broker cannot be reached`, true},
		{"deadline", fmt.Errorf("wait: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "DEADLINE_EXCEEDED", `tool "t" did not answer before the deadline`, false},
		{"a tool service's error", &wire.Error{Type: "not-found", Message: "no such row"}, codes.NotFound, "not-found", "no such row", false},
		{"anything else", errors.New("secret internals"), codes.Internal, "INTERNAL", "internal error", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			core := newCore(t, failing{c.err}, nil)
			_, err := core.Handle(t.Context(), &toolcall.Call{Op: toolcall.OpInvoke, Name: "t", Header: toolcall.NoHeader}, nil)
			checkStatus(t, err, c.code, c.reason, c.msg, c.retry)
		})
	}
}

// The operations keeper's errors, and the failures of the operations it
// reports, through the adapter and the core.
func TestOperationFailures(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		op     toolcall.Op
		err    error
		code   codes.Code
		reason string
		msg    string
		retry  bool
	}{
		{"not found", toolcall.OpGetOperation, operations.ErrNotFound, codes.NotFound, "OPERATION_NOT_FOUND", `operation "op-1" not found`, false},
		{"not found, deleting", toolcall.OpDeleteOperation, fmt.Errorf("deleting: %w", operations.ErrNotFound), codes.NotFound, "OPERATION_NOT_FOUND", `operation "op-1" not found`, false},
		{"chunks lost", toolcall.OpStreamOperation, fmt.Errorf("%w: chunk 3 came after 1", operations.ErrChunksLost), codes.DataLoss, "CHUNKS_LOST",
			"chunks of the operation's answer are missing: chunk 3 came after 1", false},
		{"chunks unavailable", toolcall.OpWaitOperation, fmt.Errorf("%w: %w", operations.ErrUnavailable, bridge.ErrBrokerDown), codes.Unavailable, "BROKER_UNAVAILABLE",
			"the operation's answer cannot be read: the message broker cannot be reached; retry from the last chunk received", false},
		{"not seen yet", toolcall.OpGetOperation, operations.ErrNotSeen, codes.Unavailable, "OPERATION_NOT_SEEN_YET",
			`operation "op-1" was started a moment ago and this gateway has not read it yet; retry shortly`, true},
		{"not seen yet, waiting", toolcall.OpWaitOperation, operations.ErrNotSeen, codes.Unavailable, "OPERATION_NOT_SEEN_YET",
			`operation "op-1" was started a moment ago and this gateway has not read it yet; retry shortly`, true},
		{"not ready", toolcall.OpCancelOperation, operations.ErrNotReady, codes.Unavailable, "OPERATIONS_NOT_READY", "the gateway has not read the operations table yet; retry shortly", false},
		{"not recorded", toolcall.OpCancelOperation, errors.New("recording operation op-1: timeout"), codes.Unavailable, "BROKER_UNAVAILABLE",
			"the operation could not be recorded: the message broker cannot be reached", false},
		{"too many starts", toolcall.OpStartTool, fmt.Errorf("%w: 3 of at most 3", operations.ErrTooMany), codes.ResourceExhausted, "TOO_MANY_OPERATIONS",
			"too many operations running: 3 of at most 3; wait for some to finish", false},
		{"too long a start", toolcall.OpStartTool, fmt.Errorf("%w: too long", operations.ErrTooLong), codes.InvalidArgument, "OPERATION_TOO_LONG",
			"the operation cannot be recorded: too long", false},
		{"start before the table is read", toolcall.OpStartTool, operations.ErrNotReady, codes.Unavailable, "OPERATIONS_NOT_READY",
			"the gateway has not read the operations table yet; retry shortly", false},
		{"start, broker down", toolcall.OpStartTool, fmt.Errorf("%w (%w)", bridge.ErrBrokerDown, errors.New("no receipt")), codes.Unavailable, "BROKER_UNAVAILABLE",
			`tool "t" is unavailable: the message broker cannot be reached`, true},
		{"start, not found", toolcall.OpStartTool, fmt.Errorf("%w: %w", operations.ErrNotFound, bridge.ErrUnavailable), codes.Unavailable, "BROKER_UNAVAILABLE",
			`tool "t" is unavailable: the message broker cannot be reached`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			core := newCore(t, failing{errors.New("unused")}, failingOps{err: c.err})
			call := &toolcall.Call{Op: c.op, Name: "op-1", Header: toolcall.NoHeader}
			if c.op == toolcall.OpStartTool {
				call.Name = "t"
			}
			emit := func(toolcall.Chunk) error { return nil }
			_, err := core.Handle(t.Context(), call, emit)
			checkStatus(t, err, c.code, c.reason, c.msg, c.retry)
		})
	}
	for _, c := range []struct {
		name    string
		failure operations.Failure
		state   operations.State
		code    codes.Code
		reason  string
		msg     string
		retry   bool
	}{
		{"deadline", operations.Failure{Reason: operations.ReasonDeadline, Message: "m"}, operations.Failed, codes.DeadlineExceeded, "DEADLINE_EXCEEDED", `tool "t" did not answer before the deadline`, false},
		{"cancelled", operations.Failure{Reason: operations.ReasonCancelled, Message: "m"}, operations.Cancelled, codes.Canceled, "CANCELLED", "call cancelled", false},
		{"replies lost", operations.Failure{Reason: operations.ReasonLost, Message: "2 reply message(s) of this operation were lost"}, operations.Failed, codes.Unavailable, "REPLY_LOST",
			`tool "t": reply messages lost in transit: 2 reply message(s) of this operation were lost; the reply is incomplete, retry the call`, true},
		{"bad reply", operations.Failure{Reason: operations.ReasonBadReply, Message: "m"}, operations.Failed, codes.Internal, "BAD_REPLY", `tool "t" sent a malformed reply`, false},
		{"too large", operations.Failure{Reason: operations.ReasonTooLarge, Message: "the output is larger"}, operations.Failed, codes.ResourceExhausted, operations.ReasonTooLarge, "the output is larger", false},
		{"a tool service's error", operations.Failure{Type: "not-found", Message: "no such row"}, operations.Failed, codes.NotFound, "not-found", "no such row", false},
	} {
		t.Run("record "+c.name, func(t *testing.T) {
			t.Parallel()
			rec := operations.Record{ID: "op-1", Tool: "t", State: c.state, Failure: &c.failure, CreateMS: 1, DeadlineMS: 2, EndMS: 2}
			core := newCore(t, failing{errors.New("unused")}, failingOps{rec: rec})
			res, err := core.Handle(t.Context(), &toolcall.Call{Op: toolcall.OpGetOperation, Name: "op-1", Header: toolcall.NoHeader}, nil)
			if err != nil || res.Detail == nil || res.Operation == nil {
				t.Fatalf("%v %+v", err, res)
			}
			checkStatus(t, res.Operation.Err, c.code, c.reason, c.msg, c.retry)
		})
	}
}

// Every kind of failure the core tells apart is matched by an error of
// the bridge or the operations keeper, once; an error of no kind is
// handed on as it is.
func TestKinds(t *testing.T) {
	t.Parallel()
	seen := map[toolcall.FailureKind]int{}
	for _, k := range kinds {
		seen[k.kind]++
		if f := fail(k.err); !errors.Is(f, k.kind) || !errors.Is(f, k.err) || f.Error() != k.err.Error() {
			t.Errorf("%v: %v, want of kind %v, wrapping it, its text", k.err, f, k.kind)
		}
	}
	for _, k := range toolcall.FailureKinds() {
		if seen[k] != 1 {
			t.Errorf("kind %v is matched by %d errors, want 1", k, seen[k])
		}
	}
	for _, err := range []error{io.EOF, context.Canceled, &wire.Error{Type: "x"}, status.Error(codes.NotFound, "x")} {
		if got := fail(err); got != err { //nolint:errorlint // the very error, not one wrapping it
			t.Errorf("%v became %v", err, got)
		}
	}
	if fail(nil) != nil {
		t.Error("fail(nil) is not nil")
	}
	// An error of several kinds is of each.
	f := fail(&bridge.InstanceLostError{Instance: "i"})
	if !errors.Is(f, toolcall.FailInstanceLost) || !errors.Is(f, toolcall.FailServiceGone) || errors.Is(f, toolcall.FailClosed) {
		t.Errorf("an instance lost: %v", f)
	}
}
