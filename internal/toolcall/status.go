package toolcall

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"

	"github.com/toolgate/toolgate/internal/registry"
	"github.com/toolgate/toolgate/wire"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrorDomain is the ErrorInfo domain of every error toolgate reports.
const ErrorDomain = "toolgate"

// serviceErrorCodes maps a tool service's Error.type to a gRPC code.
// Types not listed, including TrustGraph's catch-all "tool-service-error",
// map to codes.Unknown (HTTP 500): the service failed and said no more.
var serviceErrorCodes = map[string]codes.Code{
	"invalid-argument":    codes.InvalidArgument,
	"bad-request":         codes.InvalidArgument,
	"not-found":           codes.NotFound,
	"already-exists":      codes.AlreadyExists,
	"permission-denied":   codes.PermissionDenied,
	"forbidden":           codes.PermissionDenied,
	"unauthenticated":     codes.Unauthenticated,
	"too-many-requests":   codes.ResourceExhausted,
	"resource-exhausted":  codes.ResourceExhausted,
	"timeout":             codes.DeadlineExceeded,
	"deadline-exceeded":   codes.DeadlineExceeded,
	"unavailable":         codes.Unavailable,
	"failed-precondition": codes.FailedPrecondition,
	"unimplemented":       codes.Unimplemented,
	"cancelled":           codes.Canceled,
}

// CodeForServiceError returns the gRPC code for a tool service's error type.
func CodeForServiceError(typ string) codes.Code {
	if c, ok := serviceErrorCodes[typ]; ok {
		return c
	}
	return codes.Unknown
}

// toStatus is the one place where failures become gRPC statuses. The
// message is safe to show a client; the cause is for the log. What
// serves the core fails with the core's kinds (FailureKind).
func toStatus(err error, toolName string, tool *registry.Tool) *status.Status {
	if st, ok := status.FromError(err); ok {
		return st
	}
	meta := map[string]string{"tool": toolName}
	if tool != nil {
		meta["service"] = tool.Service.ID
	}
	with := func(c codes.Code, msg, reason string, extra ...protoadapt.MessageV1) *status.Status {
		st := status.New(c, msg)
		details := append([]protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: meta}}, extra...)
		if ds, derr := st.WithDetails(details...); derr == nil {
			return ds
		}
		return st
	}
	var se *wire.Error
	switch {
	case errors.As(err, &se):
		msg := se.Message
		if msg == "" {
			msg = "tool service reported " + se.Type
		}
		return with(CodeForServiceError(se.Type), msg, se.Type)
	case errors.Is(err, errStreamIdle):
		return with(codes.DeadlineExceeded, "tool "+quote(toolName)+" sent no chunk within the stream idle timeout", "STREAM_IDLE")
	case errors.Is(err, context.DeadlineExceeded):
		return with(codes.DeadlineExceeded, "tool "+quote(toolName)+" did not answer before the deadline", "DEADLINE_EXCEEDED")
	case errors.Is(err, context.Canceled):
		return with(codes.Canceled, "call cancelled", "CANCELLED")
	case errors.Is(err, FailServiceBusy):
		return with(codes.ResourceExhausted, "tool "+quote(toolName)+" has too many calls in flight from this gateway; retry shortly", "SERVICE_BUSY",
			&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	case errors.Is(err, FailOverloaded):
		return with(codes.ResourceExhausted, "the gateway is overloaded; retry shortly", "OVERLOADED",
			&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	case errors.Is(err, FailSlowReader):
		return with(codes.ResourceExhausted, "the reply stream was not read fast enough", "SLOW_READER")
	case errors.Is(err, FailRepliesLost):
		return with(codes.Unavailable, "tool "+quote(toolName)+": "+err.Error()+"; the reply is incomplete, retry the call", "REPLY_LOST",
			&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	case errors.Is(err, FailBadReply):
		return with(codes.Internal, "tool "+quote(toolName)+" sent a malformed reply", "BAD_REPLY")
	case errors.Is(err, errNoInstance):
		svc := "its tool service"
		if tool != nil {
			svc = "tool service " + quote(tool.Service.ID)
		}
		return with(codes.Unavailable, "tool "+quote(toolName)+" is unavailable: no instance of "+svc+" renewed its announcement in time", "SERVICE_GONE")
	case errors.Is(err, FailInstanceLost):
		svc := "its tool service"
		if tool != nil {
			svc = "tool service " + quote(tool.Service.ID)
		}
		// No RetryInfo: the call may have run, so a retry is not known
		// to be safe.
		msg := "the instance of " + svc + " that had taken the call to tool " + quote(toolName) +
			" is gone; the call may have run, in part or whole: retry it only if running it twice is harmless"
		if f := failureOf(err); f != nil && f.InstanceLost != nil {
			msg += " (instance " + f.InstanceLost.Instance + ": " + f.InstanceLost.Why + ")"
		}
		return with(codes.Unavailable, msg, ReasonInstanceLost)
	case errors.Is(err, FailServiceGone):
		svc := "its tool service"
		if tool != nil {
			svc = "tool service " + quote(tool.Service.ID)
		}
		msg := svc + " stopped listening before answering tool " + quote(toolName) + "; the call was lost with it"
		if f := failureOf(err); f != nil && f.ServiceGone != nil {
			msg += " (" + f.ServiceGone.Why + " on " + f.ServiceGone.Topic + ")"
		}
		return with(codes.Unavailable, msg, "SERVICE_GONE")
	case errors.Is(err, FailNoListener):
		return with(codes.Unavailable, "tool "+quote(toolName)+" is unavailable: "+err.Error(), "NO_LISTENER")
	case errors.Is(err, FailClosed):
		return with(codes.Unavailable, shuttingDownMessage, ReasonShuttingDown, retryShuttingDown())
	case errors.Is(err, FailBrokerUnavailable):
		return with(codes.Unavailable, "tool "+quote(toolName)+" is unavailable: the message broker cannot be reached", "BROKER_UNAVAILABLE",
			&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	default:
		return with(codes.Internal, "internal error", "INTERNAL")
	}
}

// deadlineSlack is how early a reply may come and still count as after
// the deadline: the request carries the deadline in whole milliseconds,
// so a service that runs out of time answers up to 1 ms before it.
const deadlineSlack = 2 * time.Millisecond

// status converts err and logs its cause. toolName is the tool as the
// caller named it (Call.ShownName), which the answer names. Once the
// call's deadline has passed, that is what the caller hears about, even if
// the service's reply about running out of time won the race: the answer
// does not depend on which of the two came first.
func (s *Core) status(ctx context.Context, err error, toolName string, tool *registry.Tool, deadline time.Time) error {
	passed := !deadline.IsZero() && time.Until(deadline) <= deadlineSlack
	if cerr := context.Cause(ctx); cerr != nil && errors.Is(cerr, context.DeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("%w (the tool service answered: %v)", cerr, err) //nolint:errorlint // only the deadline may decide the status
	} else if passed && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		err = fmt.Errorf("%w (the tool service answered: %v)", context.DeadlineExceeded, err) //nolint:errorlint // only the deadline may decide the status
	}
	st := toStatus(err, toolName, tool)
	// The per-call log line reports the code; this one keeps the cause,
	// which clients never see.
	lvl := slog.LevelDebug
	if st.Code() == codes.Internal || st.Code() == codes.Unavailable {
		lvl = slog.LevelWarn
	}
	logged := toolName
	if tool != nil {
		logged = tool.Name // the registry's, as the call's log line names it
	}
	s.log.Log(ctx, lvl, "call failed", "tool", logged, "code", st.Code().String(), "cause", err)
	return st.Err()
}

func quote(s string) string { return `"` + s + `"` }

// The reasons of the ErrorInfo (domain ErrorDomain) of errors the gateway
// itself raises, so callers can tell them from a tool service's own (whose
// reason is the service's error type, such as "not-found").
const (
	ReasonToolNotFound       = "TOOL_NOT_FOUND"
	ReasonToolServiceMissing = "TOOL_SERVICE_NOT_FOUND"
)

// ReasonShuttingDown is the reason of calls refused or ended by a gateway
// that is shutting down: retry them, on another instance.
const ReasonShuttingDown = "SHUTTING_DOWN"

const shuttingDownMessage = "the gateway is shutting down; retry the call"

func retryShuttingDown() *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)}
}

// ShuttingDown is the status of a call that a gateway that is shutting
// down refuses: UNAVAILABLE, reason ReasonShuttingDown, with a RetryInfo
// (which HTTP doors turn into Retry-After).
func ShuttingDown() error {
	st := status.New(codes.Unavailable, shuttingDownMessage)
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{Reason: ReasonShuttingDown, Domain: ErrorDomain}, retryShuttingDown()); err == nil {
		st = ds
	}
	return st.Err()
}

// errNoInstance: the tool's announced service has no instance left, every
// one having let its lease run out (registry.Snapshot.Gone).
var errNoInstance = errors.New("no instance of the tool service is left")

func toolNotFound(name string) error {
	return gatewayError(codes.NotFound, ReasonToolNotFound, fmt.Sprintf("tool %q not found", name), map[string]string{"tool": name})
}

// gatewayError is a status with an ErrorInfo in the gateway's domain.
func gatewayError(code codes.Code, reason, msg string, md map[string]string) error {
	st := status.New(code, msg)
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: md}); err == nil {
		st = ds
	}
	return st.Err()
}

// WithErrorInfo returns err as a status that has an ErrorInfo: err itself
// when it has one, else with an ErrorInfo in ErrorDomain whose reason is
// the code's name (INVALID_ARGUMENT, UNIMPLEMENTED, …). An error that is
// not a status becomes one as gRPC makes it: a context's error its code,
// anything else UNKNOWN. Every door passes the errors it answers with
// through it, so every one carries an ErrorInfo. nil stays nil.
func WithErrorInfo(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	return EnsureErrorInfo(st).Err()
}

// EnsureErrorInfo is WithErrorInfo of a status: st when it has an
// ErrorInfo or is OK, else st with one.
func EnsureErrorInfo(st *status.Status) *status.Status {
	if st.Code() == codes.OK {
		return st
	}
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.ErrorInfo); ok {
			return st
		}
	}
	if ds, err := st.WithDetails(&errdetails.ErrorInfo{Reason: CodeReason(st.Code()), Domain: ErrorDomain}); err == nil {
		return ds
	}
	return st
}

// CodeReason is the ErrorInfo reason of a refusal with no more specific
// one: the code's name in upper snake case, as gRPC spells it
// (INVALID_ARGUMENT, DEADLINE_EXCEEDED).
func CodeReason(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if unicode.IsUpper(r) && i > 0 {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// GatewayError is a status error with an ErrorInfo in the gateway's
// domain: reason says why, for programs; msg, for people.
func GatewayError(code codes.Code, reason, msg string, md map[string]string) error {
	return gatewayError(code, reason, msg, md)
}

// The reasons of the gateway's own refusals of a request's form.
const (
	ReasonInvalidPageSize    = "INVALID_PAGE_SIZE"
	ReasonInvalidPageToken   = "INVALID_PAGE_TOKEN"
	ReasonInvalidTimeout     = "INVALID_TIMEOUT"
	ReasonInvalidArguments   = "INVALID_ARGUMENTS"
	ReasonArgumentsConflict  = "ARGUMENTS_CONFLICT"
	ReasonInvalidBody        = "INVALID_BODY"
	ReasonInvalidFilter      = "INVALID_FILTER"
	ReasonOperationsDisabled = "OPERATIONS_DISABLED"
)
