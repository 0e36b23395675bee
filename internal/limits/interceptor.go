package limits

import (
	"context"
	"fmt"
	"path"
	"strconv"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrorDomain and ReasonRateLimited name the ErrorInfo of a refused call.
const (
	ErrorDomain       = "toolgate"
	ReasonRateLimited = "RATE_LIMITED"
)

// UnaryInterceptor refuses unary calls over the limit with
// ResourceExhausted and a RetryInfo. Install it after authentication, so
// that the key function sees the caller's identity.
func (l *Limiter) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := l.check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamInterceptor refuses streams over the limit when they open; a
// stream costs one token however long it runs.
func (l *Limiter) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := l.check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

func (l *Limiter) check(ctx context.Context, method string) error {
	if l.limit == rate.Inf || l.isExempt(method) {
		return nil
	}
	key := l.key(ctx)
	ok, wait := l.Allow(key)
	if ok {
		return nil
	}
	l.log.DebugContext(ctx, "call refused: rate limit", "rpc", method, "key", key, "retry_after", wait)
	return exceeded(l.limit, l.burst, wait)
}

func (l *Limiter) isExempt(method string) bool {
	for _, p := range l.exempt {
		if ok, _ := path.Match(p, method); ok {
			return true
		}
	}
	return false
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
