package toolcall

import (
	"context"
	"time"

	"github.com/toolgate/toolgate/wire"
)

// The types of what the Core is given: the bridge that carries a call to
// its tool service and back (Bridge, Target, Reply) and the keeper of
// durable operations (Operations, OperationStart, OperationRecord). The
// core owns them, so that its API names no type of the packages behind
// it; internal/corebackend adapts internal/bridge and internal/operations
// to them, and internal/app wires those in.

// Target is where a tool's service takes its requests (RequestTopic) and
// answers them (ResponseTopic).
type Target struct {
	RequestTopic  string
	ResponseTopic string
}

// Bridge publishes a call's envelope and returns the call in flight. The
// call has a deadline of its own, deadline (zero: ctx's only), besides
// ctx's; the earlier of the two applies. stream is true for a stream's
// call, which gets a stream's share of the reply credit with its request.
// a, when set, is the request's id and its caller assertion.
type Bridge interface {
	Call(ctx context.Context, t Target, req wire.Request, deadline time.Time, stream bool, a Assertion) (Reply, error)
}

// Assertion is a request's caller assertion (wire.PropCaller), Token, and
// the request id (wire.PropID) it was signed for, ID; the zero value:
// none, and an id of the bridge's choosing.
type Assertion struct{ ID, Token string }

// Reply is a call in flight: its answer read whole (Wait) or chunk by
// chunk (Recv). The caller closes it when done with it.
type Reply interface {
	// Wait returns the answer of a call answered in one message, or the
	// chunks of a stream joined.
	Wait(ctx context.Context) (string, error)
	// Recv returns the next chunk's text and whether it is the last; after
	// the last, io.EOF. idle > 0 bounds the wait for the chunk: when it
	// passes first, the call ends with idleErr.
	Recv(ctx context.Context, idle time.Duration, idleErr error) (text string, last bool, err error)
	// Close ends the call, telling its service when it has not answered.
	Close()
}

// OperationStart is a durable operation to start: whose (Owner), which
// tool, where its request goes, the request and its deadline.
type OperationStart struct {
	Owner    string
	Tool     string
	Target   Target
	Request  wire.Request
	Deadline time.Time
	// Assert, when set, signs the caller assertion of the operation's
	// request, given the request's id.
	Assert func(id string) (string, error)
}

// The states of a durable operation (OperationRecord.State).
const (
	OperationRunning   = "running"
	OperationDone      = "done" // answered: Output
	OperationFailed    = "failed"
	OperationCancelled = "cancelled"
)

// OperationRecord is a durable operation as its keeper reports it.
type OperationRecord struct {
	ID   string
	Tool string
	// State is OperationRunning, OperationDone, OperationFailed or
	// OperationCancelled; Done says it is no longer running.
	State string
	Done  bool
	// Created, Deadline and Ended (zero while running).
	Created, Deadline, Ended time.Time
	// Output when done without error.
	Output string
	// Failure, when failed or cancelled.
	Failure *OperationFailure
}

// OperationFailure is how an operation failed: a tool service's error
// (Type and Message, as it sent them) or one of the keeper's reasons
// (Reason, and Message). Cause, when set, is the failure as the error a
// call would have failed with (a context's error, a Failure), which the
// core maps onto a status as it maps a call's; a Reason without a Cause
// is a RESOURCE_EXHAUSTED with that reason.
type OperationFailure struct {
	Type, Message, Reason string
	Cause                 error
}
