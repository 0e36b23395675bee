package toolcall

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestToStatus(t *testing.T) {
	t.Parallel()
	tool := &registry.Tool{Name: "t", Service: &registry.Service{ID: "svc"}}
	cases := []struct {
		name   string
		err    error
		code   codes.Code
		reason string
		msg    string
	}{
		{"service invalid-argument", &wire.Error{Type: "invalid-argument", Message: "bad"}, codes.InvalidArgument, "invalid-argument", "bad"},
		{"service bad-request", &wire.Error{Type: "bad-request", Message: "m"}, codes.InvalidArgument, "bad-request", "m"},
		{"service not-found", &wire.Error{Type: "not-found", Message: "m"}, codes.NotFound, "not-found", "m"},
		{"service permission-denied", &wire.Error{Type: "permission-denied", Message: "m"}, codes.PermissionDenied, "permission-denied", "m"},
		{"service too-many-requests", &wire.Error{Type: "too-many-requests", Message: "m"}, codes.ResourceExhausted, "too-many-requests", "m"},
		{"service timeout", &wire.Error{Type: "timeout", Message: "m"}, codes.DeadlineExceeded, "timeout", "m"},
		{"service unavailable", &wire.Error{Type: "unavailable", Message: "m"}, codes.Unavailable, "unavailable", "m"},
		{"python catch-all", &wire.Error{Type: "tool-service-error", Message: "boom"}, codes.Unknown, "tool-service-error", "boom"},
		{"unknown type", &wire.Error{Type: "weird"}, codes.Unknown, "weird", "tool service reported weird"},
		{"deadline", fmt.Errorf("wait: %w", context.DeadlineExceeded), codes.DeadlineExceeded, "DEADLINE_EXCEEDED", `tool "t" did not answer before the deadline`},
		{"stream idle", errStreamIdle, codes.DeadlineExceeded, "STREAM_IDLE", `tool "t" sent no chunk within the stream idle timeout`},
		{"cancelled", context.Canceled, codes.Canceled, "CANCELLED", "call cancelled"},
		{"overloaded", Fail(errors.New("gateway overloaded: 5 calls"), FailOverloaded), codes.ResourceExhausted, "OVERLOADED", "the gateway is overloaded; retry shortly"},
		{"service busy", Fail(errors.New("busy"), FailServiceBusy, FailOverloaded), codes.ResourceExhausted, "SERVICE_BUSY", `tool "t" has too many calls in flight from this gateway; retry shortly`},
		{"slow reader", Fail(errors.New("slow"), FailSlowReader), codes.ResourceExhausted, "SLOW_READER", "the reply stream was not read fast enough"},
		{"lost replies", Fail(errors.New("2 reply message(s) of this call were lost in transit (dropped by the broker)"), FailRepliesLost), codes.Unavailable, "REPLY_LOST", `tool "t": 2 reply message(s) of this call were lost in transit (dropped by the broker); the reply is incomplete, retry the call`},
		{"bad reply", fmt.Errorf("reading: %w", Fail(errors.New("x"), FailBadReply)), codes.Internal, "BAD_REPLY", `tool "t" sent a malformed reply`},
		{"no listener", Fail(errors.New("no tool service is listening on topic-x"), FailNoListener), codes.Unavailable, "NO_LISTENER", `tool "t" is unavailable: no tool service is listening on topic-x`},
		{"service gone", &Failure{Err: errors.New("gone"), ServiceGone: &ServiceGone{Topic: "topic-x", Why: "no consumer is left"}, kinds: 1 << FailServiceGone}, codes.Unavailable, "SERVICE_GONE",
			`tool service "svc" stopped listening before answering tool "t"; the call was lost with it (no consumer is left on topic-x)`},
		{"service gone, nothing known", Fail(errors.New("gone"), FailServiceGone), codes.Unavailable, "SERVICE_GONE",
			`tool service "svc" stopped listening before answering tool "t"; the call was lost with it`},
		{"instance lost", &Failure{Err: errors.New("lost"), InstanceLost: &InstanceLost{Instance: "i-1", Why: "its lease ran out"}, kinds: 1<<FailInstanceLost | 1<<FailServiceGone}, codes.Unavailable, "INSTANCE_LOST",
			`the instance of tool service "svc" that had taken the call to tool "t" is gone; the call may have run, in part or whole: retry it only if running it twice is harmless (instance i-1: its lease ran out)`},
		{"no instance left", errNoInstance, codes.Unavailable, "SERVICE_GONE",
			`tool "t" is unavailable: no instance of tool service "svc" renewed its announcement in time`},
		{"closed", Fail(errors.New("closed"), FailClosed), codes.Unavailable, "SHUTTING_DOWN", "the gateway is shutting down; retry the call"},
		{"broker down", Fail(errors.New("dial"), FailBrokerUnavailable), codes.Unavailable, "BROKER_UNAVAILABLE", `tool "t" is unavailable: the message broker cannot be reached`},
		{"a failure of the deadline", Fail(fmt.Errorf("x: %w", context.DeadlineExceeded), FailBrokerUnavailable), codes.DeadlineExceeded, "DEADLINE_EXCEEDED", `tool "t" did not answer before the deadline`},
		{"a kind of operations only", Fail(errors.New("operation not found"), FailOperationNotFound), codes.Internal, "INTERNAL", "internal error"},
		{"anything else", errors.New("secret internals"), codes.Internal, "INTERNAL", "internal error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st := toStatus(c.err, "t", tool)
			if st.Code() != c.code || st.Message() != c.msg {
				t.Fatalf("got %v %q, want %v %q", st.Code(), st.Message(), c.code, c.msg)
			}
			var info *errdetails.ErrorInfo
			var retry *errdetails.RetryInfo
			for _, d := range st.Details() {
				switch x := d.(type) {
				case *errdetails.ErrorInfo:
					info = x
				case *errdetails.RetryInfo:
					retry = x
				}
			}
			if info == nil || info.Reason != c.reason || info.Domain != ErrorDomain || info.Metadata["tool"] != "t" || info.Metadata["service"] != "svc" {
				t.Fatalf("ErrorInfo %v, want reason %s with tool and service", info, c.reason)
			}
			if (c.reason == "OVERLOADED" || c.reason == "SERVICE_BUSY" || c.reason == "REPLY_LOST" || c.reason == "SHUTTING_DOWN" || c.reason == "BROKER_UNAVAILABLE") != (retry != nil) {
				t.Fatalf("RetryInfo %v only on overload, lost replies, shutdown and an unreachable broker", retry)
			}
		})
	}
	// A status passes through unchanged.
	in := status.Error(codes.NotFound, "tool x not found")
	if st := toStatus(in, "x", nil); st.Code() != codes.NotFound || st.Message() != "tool x not found" {
		t.Fatalf("status changed: %v", st)
	}
}

func TestOwnDeadlineWinsOverServiceReply(t *testing.T) {
	t.Parallel()
	s := New(nil, nil, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	tool := &registry.Tool{Service: &registry.Service{ID: "svc"}}
	err := s.status(ctx, &wire.Error{Type: "tool-service-error", Message: "context deadline exceeded"}, "t", tool, time.Time{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DEADLINE_EXCEEDED once the caller's deadline passed", err)
	}
	err = s.status(context.Background(), &wire.Error{Type: "tool-service-error", Message: "boom"}, "t", tool, time.Now().Add(time.Minute))
	if status.Code(err) != codes.Unknown {
		t.Fatalf("got %v, want UNKNOWN while the deadline has not passed", err)
	}
	// The call's own deadline (a timeout the caller asked for, which lives
	// in the bridge call, not in ctx) decides the same way, whether the
	// service's "timeout" came just before (within the deadline's
	// millisecond rounding) or after it.
	for _, dl := range []time.Time{time.Now().Add(time.Millisecond), time.Now().Add(-time.Second)} {
		err = s.status(context.Background(), &wire.Error{Type: "timeout", Message: "deadline passed while sleeping"}, "t", tool, dl)
		if status.Code(err) != codes.DeadlineExceeded || reasonOf(err) != "DEADLINE_EXCEEDED" {
			t.Fatalf("deadline %v: got %v (%s), want the gateway's DEADLINE_EXCEEDED", time.Until(dl), err, reasonOf(err))
		}
	}
}
