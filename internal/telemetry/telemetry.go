// Package telemetry makes the gateway observable: Prometheus metrics per
// call and for the bridge and registry, OpenTelemetry traces whose W3C
// trace context rides along in the Pulsar message properties, and one
// structured log line per call. It offers middleware over the core's
// calls (toolcall.Middleware), which every door runs, a /metrics handler,
// and small helpers the bridge and the Go SDK call to pass the trace
// context on. It imports none of the gateway's other
// packages: what it reports about them comes through functions it is given.
package telemetry

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// codeOf is the gRPC code a handler's error becomes, as grpc-go decides
// it: a status keeps its code, context errors become Canceled or
// DeadlineExceeded, anything else Unknown.
func codeOf(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if st, ok := status.FromError(err); ok {
		return st.Code()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Code()
	}
	return codes.Unknown
}
