package toolcall

import (
	"context"
	"errors"

	"github.com/toolgate/toolgate/wire"
)

// HeaderIdempotencyKey is the metadata key (gRPC metadata, an HTTP
// header: Idempotency-Key) of a call's idempotency key
// (internal/idempotency).
const HeaderIdempotencyKey = "idempotency-key"

// Outcome is what the core learnt of how a call ended, for a middleware
// that must tell an answer of the tool service from a failure of the
// gateway or the bus: WithOutcome gives the middleware one to read once
// the call is over.
type Outcome struct {
	serviceError bool
}

// ServiceError reports whether the call failed with an error the tool
// service itself sent (its Error.type), not one of the gateway's.
func (o *Outcome) ServiceError() bool { return o.serviceError }

type outcomeKey struct{}

// WithOutcome returns ctx carrying an Outcome the core fills in for the
// call served under it.
func WithOutcome(ctx context.Context) (context.Context, *Outcome) {
	o := &Outcome{}
	return context.WithValue(ctx, outcomeKey{}, o), o
}

// noteFailure records in ctx's Outcome, if it has one, whether err is the
// tool service's own error. Called on the failure path only.
func noteFailure(ctx context.Context, err error) {
	o, ok := ctx.Value(outcomeKey{}).(*Outcome)
	if !ok {
		return
	}
	var se *wire.Error
	o.serviceError = errors.As(err, &se)
}
