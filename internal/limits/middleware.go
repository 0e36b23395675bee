package limits

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/toolgate/toolgate/internal/toolcall"
	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrorDomain and ReasonRateLimited name the ErrorInfo of a refused call.
const (
	ErrorDomain       = "toolgate"
	ReasonRateLimited = "RATE_LIMITED"
)

// Middleware refuses calls over the limit with ResourceExhausted and a
// RetryInfo. Run it after authentication, so that the key function sees
// the caller. A stream costs one token however long it runs.
func (l *Limiter) Middleware() toolcall.Middleware {
	return func(next toolcall.Handler) toolcall.Handler {
		if l.limit == rate.Inf {
			return next
		}
		return func(ctx context.Context, c *toolcall.Call, emit toolcall.Emit) (toolcall.Result, error) {
			key := l.key(c)
			if ok, wait := l.Allow(key); !ok {
				l.log.DebugContext(ctx, "call refused: rate limit", "rpc", c.MethodName(), "key", key, "retry_after", wait)
				return toolcall.Result{}, exceeded(l.limit, l.burst, wait)
			}
			return next(ctx, c, emit)
		}
	}
}

// exceeded is the status of a refused call: ResourceExhausted with a
// RetryInfo holding the wait and an ErrorInfo naming the limit.
func exceeded(limit rate.Limit, burst int, wait time.Duration) error {
	st := status.New(codes.ResourceExhausted, fmt.Sprintf("rate limit exceeded: retry in %s", roundUp(wait, time.Millisecond)))
	ds, err := st.WithDetails(
		&errdetails.RetryInfo{RetryDelay: durationpb.New(wait)},
		&errdetails.ErrorInfo{Reason: ReasonRateLimited, Domain: ErrorDomain, Metadata: map[string]string{
			"per_second": strconv.FormatFloat(float64(limit), 'g', -1, 64),
			"burst":      strconv.Itoa(burst),
		}},
	)
	if err != nil {
		return st.Err()
	}
	return ds.Err()
}

func roundUp(d, unit time.Duration) time.Duration {
	if r := d % unit; r != 0 {
		return d + unit - r
	}
	return d
}
