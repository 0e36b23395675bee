package toolcall

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/wire"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Operations keeps durable operations (operations.Manager, adapted by
// internal/corebackend). Every method but Start answers only for the
// operations of owner; its errors are of the core's kinds (Failure): the
// operations' own (FailOperationNotFound, FailTooManyOperations, …) and,
// from Start, a call's.
type Operations interface {
	Start(ctx context.Context, s OperationStart) (OperationRecord, error)
	Get(owner, id string) (OperationRecord, error)
	List(owner string, done *bool) []OperationRecord
	Cancel(ctx context.Context, owner, id string) (OperationRecord, error)
	Delete(ctx context.Context, owner, id string) error
	Wait(ctx context.Context, owner, id string, timeout time.Duration) (OperationRecord, error)
	Stream(ctx context.Context, owner, id string, from int, emit func(i int, text string, last bool) error) (OperationRecord, error)
}

// Bounds of OpWaitOperation's timeout.
const (
	DefaultWaitTimeout = 10 * time.Second
	MaxWaitTimeout     = 60 * time.Second
)

// ReasonOperationNotFound is the reason of an operation that is not the
// caller's (or does not exist: the two are not told apart).
const ReasonOperationNotFound = "OPERATION_NOT_FOUND"

// ReasonOperationNotSeen is the reason of an operation the deployment
// started a moment ago that this gateway has not read yet: UNAVAILABLE,
// with a RetryInfo.
const ReasonOperationNotSeen = "OPERATION_NOT_SEEN_YET"

// retryable is the status err with a RetryInfo of a second.
func retryable(err error) error {
	st := status.Convert(err)
	if ds, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)}); derr == nil {
		st = ds
	}
	return st.Err()
}

func (s *Core) operation(ctx context.Context, c *Call, emit Emit) (Result, error) {
	ops := s.opts.Operations
	if ops == nil {
		return Result{}, gatewayError(codes.Unimplemented, ReasonOperationsDisabled, "durable operations are not enabled on this gateway (--operations)", nil)
	}
	owner := s.owner(c)
	var (
		rec OperationRecord
		err error
	)
	switch c.Op {
	case OpStartTool:
		tool, env, deadline, perr := s.prepare(ctx, c)
		if perr != nil {
			return Result{}, s.status(ctx, perr, c.ShownName(), tool, deadline)
		}
		// The operation names its tool as the caller did: in a tool set,
		// the set's name for it.
		rec, err = ops.Start(ctx, OperationStart{Owner: owner, Tool: c.ShownName(), Request: env, Deadline: deadline, Target: target(tool),
			Assert: s.assertOperation(c, tool, deadline)})
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			// The operation's own deadline, not the caller's: the
			// broker did not take its record or its request in time.
			s.log.Warn("call failed", "tool", tool.Name, "code", codes.DeadlineExceeded.String(), "cause", err)
			return Result{}, gatewayError(codes.DeadlineExceeded, "DEADLINE_EXCEEDED",
				"the operation of tool "+quote(c.ShownName())+" could not be started before its deadline: the message broker did not take it in time",
				map[string]string{"tool": c.ShownName(), "service": tool.Service.ID})
		}
		if err != nil && !errors.Is(err, FailTooManyOperations) && !errors.Is(err, FailOperationsNotReady) && !errors.Is(err, FailOperationTooLong) {
			return Result{}, s.status(ctx, err, c.ShownName(), tool, deadline)
		}
	case OpListOperations:
		var done *bool
		switch c.Filter {
		case "":
		case "done=true", "done = true":
			t := true
			done = &t
		case "done=false", "done = false":
			f := false
			done = &f
		default:
			return Result{}, gatewayError(codes.InvalidArgument, ReasonInvalidFilter, fmt.Sprintf("filter %q: want \"done=true\" or \"done=false\"", c.Filter), nil)
		}
		recs := ops.List(owner, done)
		start, end, next, perr := page(len(recs), func(i int) string { return recs[i].ID }, c.PageSize, c.PageToken)
		if perr != nil {
			return Result{}, perr
		}
		res := Result{Detail: &Detail{NextPageToken: next, Operations: make([]*Operation, 0, end-start)}}
		for _, r := range recs[start:end] {
			res.Operations = append(res.Operations, s.present(ctx, r))
		}
		return res, nil
	case OpGetOperation:
		rec, err = ops.Get(owner, c.Name)
	case OpCancelOperation:
		rec, err = ops.Cancel(ctx, owner, c.Name)
	case OpDeleteOperation:
		return Result{}, opError(ops.Delete(ctx, owner, c.Name), c.Name)
	case OpWaitOperation:
		timeout := DefaultWaitTimeout
		if c.TimeoutSet {
			if c.Timeout <= 0 {
				return Result{}, gatewayError(codes.InvalidArgument, ReasonInvalidTimeout, "timeout must be a positive duration such as \"5s\"", nil)
			}
			timeout = min(c.Timeout, MaxWaitTimeout)
		}
		rec, err = ops.Wait(ctx, owner, c.Name, timeout)
	case OpStreamOperation:
		if emit == nil {
			return Result{}, status.Error(codes.Internal, "a stream of an operation without a receiver")
		}
		if c.From < 0 {
			return Result{}, status.Errorf(codes.InvalidArgument, "from %d: the first chunk wanted is 0 or more", c.From)
		}
		var emitErr error
		rec, err = ops.Stream(ctx, owner, c.Name, c.From, func(i int, text string, last bool) error {
			emitErr = emit(Chunk{Text: text, Index: int64(i), Last: last})
			return emitErr
		})
		switch {
		case err != nil && ((emitErr != nil && errors.Is(err, emitErr)) || ctx.Err() != nil):
			return Result{}, err // the door's client went away
		case err == nil && rec.Done && rec.State != OperationDone:
			return Result{}, s.present(ctx, rec).Err
		case err == nil:
			return Result{}, nil
		}
	}
	if err != nil {
		return Result{}, opError(err, c.Name)
	}
	return Result{Detail: &Detail{Operation: s.present(ctx, rec)}}, nil
}

// opError maps the failures of Operations.
func opError(err error, id string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, FailOperationNotFound):
		return gatewayError(codes.NotFound, ReasonOperationNotFound, fmt.Sprintf("operation %q not found", id), map[string]string{"operation": id})
	case errors.Is(err, FailTooManyOperations):
		return gatewayError(codes.ResourceExhausted, "TOO_MANY_OPERATIONS", err.Error()+"; wait for some to finish", nil)
	case errors.Is(err, FailOperationTooLong):
		return gatewayError(codes.InvalidArgument, "OPERATION_TOO_LONG", err.Error(), nil)
	case errors.Is(err, FailOperationNotSeen):
		// Not NOT_FOUND: the operation may exist, this gateway's copy of
		// the table lagging behind (a broker restart).
		return retryable(gatewayError(codes.Unavailable, ReasonOperationNotSeen,
			fmt.Sprintf("operation %q was started a moment ago and this gateway has not read it yet; retry shortly", id), map[string]string{"operation": id}))
	case errors.Is(err, FailOperationsNotReady):
		return gatewayError(codes.Unavailable, "OPERATIONS_NOT_READY", "the gateway has not read the operations table yet; retry shortly", nil)
	case errors.Is(err, FailChunksLost):
		return gatewayError(codes.DataLoss, "CHUNKS_LOST", err.Error(), map[string]string{"operation": id})
	case errors.Is(err, FailChunksUnavailable):
		return gatewayError(codes.Unavailable, "BROKER_UNAVAILABLE", "the operation's answer cannot be read: the message broker cannot be reached; retry from the last chunk received", map[string]string{"operation": id})
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return gatewayError(codes.Unavailable, "BROKER_UNAVAILABLE", "the operation could not be recorded: the message broker cannot be reached", nil)
}

// present is r as a door shows it; its failure goes through the one
// mapping of failures onto statuses.
func (s *Core) present(_ context.Context, r OperationRecord) *Operation {
	op := &Operation{ID: r.ID, Tool: r.Tool, State: r.State, Done: r.Done,
		Created: r.Created, Deadline: r.Deadline, Ended: r.Ended, Output: r.Output}
	if f := r.Failure; f != nil && r.State != OperationDone {
		cause := f.Cause
		switch {
		case cause != nil:
		case f.Reason == "":
			cause = &wire.Error{Type: f.Type, Message: f.Message}
		default:
			cause = gatewayError(codes.ResourceExhausted, f.Reason, f.Message, map[string]string{"tool": r.Tool})
		}
		op.Err = toStatus(cause, r.Tool, nil).Err()
	}
	return op
}
